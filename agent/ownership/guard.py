"""PeerGuard: a peer's state-moving message is taken only from whom placement says may send it
(issue 21; the rules are docs/security.md's "Ownership on every state-moving RPC" table).

Mutual TLS proves who a peer is; these rules bound what one compromised or buggy agent can do
with its own certificate. The decisions are the pure functions below; PeerGuard asks placement
for the host's current preference list (once more, fresh, before a refusal: a cached answer may
be older than the sender's) and feeds them what this agent knows locally.

* Replicate of host h from S: S is h's owner now and this agent one of its backups (while
  placement cannot answer, only the agent whose replica it already is). A drop (DELETE_BACKUP)
  only from the agent whose replica this is. Otherwise a non-owner could
  replace or erase the replica a backup promotes when the owner dies.
* HandOver of h from S: this agent owns h now, and S is a holder it expects state from:
  - S is in h's preference list below this agent (the owner before a join, or before a
    balancer's or operator's move, moves down the list), while this agent is still taking h
    over: h is held here (claims under way), or this agent has not settled the epoch it learnt,
    or its last epoch change or registration is less than a settle window old (2 x lease by
    default) and h moved here in it (held for a takeover since, or nothing of it here): per
    host, Ownership.settling (issue 36);
  - or S is gone from the list (a drain, a crash) and this agent keeps, or promoted within the
    settle window, S's replica of h: it was S's backup, so S owned h.
  A HandOver of a host this agent crawls steadily, or from an agent that holds no such place,
  is refused, and the sender keeps the host.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.placement.port import HostRoute
from wancrawl.stats import Counters


def handover_refusal(self_id: str, sender: str, route: HostRoute | None, *, settling: bool,
                     replica_owner: str | None, promoted_from: str | None) -> str | None:
    """Why a HandOver of route.host from `sender` is refused, or None to take it."""
    if route is None or not route.agents:
        return "placement cannot say who owns it now"
    ids = [a[0] for a in route.agents]
    if ids[0] != self_id:
        return f"this agent does not own it (owner {ids[0]} at epoch {route.epoch})"
    if sender == self_id:
        return "a handover from this agent itself"
    if sender in ids:
        if settling:
            return None
        return (f"{sender} may not hand it over now: this agent is not taking it over (it crawls it since "
                "before the last epoch change, or there was none lately)")
    if sender in (replica_owner, promoted_from):
        return None
    return f"{sender} is not in its preference list and this agent was not its backup"


def replicate_refusal(self_id: str, sender: str, route: HostRoute | None, *, drop: bool,
                      replica_owner: str | None) -> str | None:
    """Why a Replicate message of route.host from `sender` is refused, or None to apply it."""
    if drop:
        return None if replica_owner in (None, sender) else f"the replica here is {replica_owner}'s, not {sender}'s"
    if route is None or not route.agents:
        # Placement unreachable: the agent whose replica this is goes on replicating it (no one
        # else may replace it); a new sender waits until placement answers.
        return None if replica_owner == sender else "placement cannot say who owns it now"
    ids = [a[0] for a in route.agents]
    if ids[0] != sender:
        return f"{sender} does not own it (owner {ids[0]} at epoch {route.epoch})"
    if self_id not in ids[1:]:
        return f"this agent is not one of its backups at epoch {route.epoch}"
    return None


Routes = Callable[[list[str]], Awaitable[dict[str, HostRoute]]]


@dataclass(slots=True)
class GuardCounters(Counters):
    """Hosts of a peer's handover or Replicate refused (the metric names: agent/metrics.py HELP)."""
    handover_hosts_refused: int = 0
    replicate_hosts_refused: int = 0


class PeerGuard:
    """Applies the rules with fresh routes. Owns nothing but its counters; what it knows of a
    host locally comes through the callables (ownership's settling, the replicas)."""

    def __init__(self, self_id: str, routes: Routes, forget: Callable[[str], None], *,
                 settling: Callable[[str], bool], replica_owner: Callable[[str], str | None],
                 promoted_from: Callable[[str], str | None]):
        self.self_id = self_id
        self.routes = routes      # HostDirectory.routes: cached, asked in batches
        self.forget = forget      # HostDirectory.forget: drop a cached answer
        self.settling = settling
        self.replica_owner = replica_owner
        self.promoted_from = promoted_from
        self.stats = GuardCounters()

    async def _decide(self, hosts: list[str], why: Callable[[str, HostRoute | None], str | None]) -> dict[str, str]:
        routes = await self.routes(hosts)
        refused = {h: r for h in hosts if (r := why(h, routes.get(h))) is not None}
        if refused:
            # A cached answer may predate the sender's: ask placement again before refusing.
            for h in refused:
                self.forget(h)
            routes = await self.routes(list(refused))
            refused = {h: r for h in refused if (r := why(h, routes.get(h))) is not None}
        return refused

    async def handover(self, sender: str, hosts: list[str]) -> dict[str, str]:
        """host -> reason, for the hosts of a HandOver from `sender` that are refused."""
        out = await self._decide(hosts, lambda h, r: handover_refusal(
            self.self_id, sender, r, settling=self.settling(h),
            replica_owner=self.replica_owner(h), promoted_from=self.promoted_from(h)))
        self.stats.handover_hosts_refused += len(out)
        return out

    async def replicate(self, sender: str, hosts: list[str], drops: set[str]) -> dict[str, str]:
        """host -> reason, for the hosts of a Replicate batch from `sender` that are refused
        (`drops`: the hosts whose message is a drop)."""
        out = await self._decide(hosts, lambda h, r: replicate_refusal(
            self.self_id, sender, r, drop=h in drops, replica_owner=self.replica_owner(h)))
        self.stats.replicate_hosts_refused += len(out)
        return out
