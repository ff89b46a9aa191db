"""Ingest only from a host's owner or backups (issue 21): storage asks the consultant who is placed
on each capture's host, and refuses a capture whose sender is not on that host's preference list.

Authentication (storage/server.py AUTH_RULES) already makes every capture's `agent_id` the
caller's own; this check adds *which hosts* it may store pages for. The rule: the capture's
agent is in the preference list the consultant answers for the capture's host (owner first, then
every backup it names). The consultant lists only agents whose lease holds, so "owner or backup
within the lease" is exactly that list. The whole list, not the first 1 + r agents: storage does
not know the agents' r, and the consultant names no more agents than it would hand the host to.

Moving hosts. Routes are cached (TTL and epoch from the answer, like the agent's HostCache), but a
cached route is only ever trusted to *accept*: a capture its cached route does not place is asked
again (one batched Resolve per ingest batch for every such host and every miss) before it is
refused, so a stale cache never refuses a new owner (right after a failover, a handover or a
re-registration). The old owner of a moved host is usually still on the list (a backup now) and
its late captures are accepted by the rule itself; one that fell off the list entirely (a dead
agent, or one the placement no longer names) is refused, and its host's new owner fetches again
whatever was not stored (docs/replication.md).

The consultant unreachable (or with no live agent): a host with a cached route, however old, is
decided by it if it places the sender (nothing moves while the consultant is down: cached
assignments carry on, as they do at the agents); any other capture cannot be decided, and the
whole Ingest call is answered UNAVAILABLE. That loses nothing (the agent keeps the batch in its
spool and sends it again after its retry delay; ingest is idempotent) and stores nothing
unchecked, where failing open would let a compromised agent store pages for anyone's hosts just
by sending while the consultant is down or slow. The cost: while the consultant is away, pages
of hosts storage has never seen wait in the agents' spools (and agents stop fetching once their
lease lapses anyway).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from wancrawl import errors
from wancrawl.checks import shown
from wancrawl.placement import HostRoute
from wancrawl.stats import Counters
from wancrawl.v1 import storage_pb2

from storage import validate

log = logging.getLogger(__name__)

RESOLVE_CHUNK = 1_000  # hosts per Resolve (the consultant takes up to its max_batch, 10,000 by default)


# The consultant's Resolve, or the overlay's (agent/peers.py), which answers alike: hosts -> one
# route each, in the order asked. Storage compares the agent ids alone (HostRoute.agent_ids).
Resolve = Callable[[list[str]], Awaitable[list[HostRoute]]]


def placed(route: HostRoute, agent_id: str) -> bool:
    """May `agent_id` store pages of the route's host: is it the owner or a backup?"""
    return agent_id in route.agent_ids


def refusal(route: HostRoute, agent_id: str) -> str:
    """The Rejection reason for a capture `route` does not place its sender."""
    if route.error:
        return f"the consultant cannot place host {shown(route.host)}: {route.error}"
    return (f"agent {shown(agent_id)} is neither owner nor backup of host {shown(route.host)} "
            f"(consultant epoch {route.epoch}: {', '.join(route.agent_ids) or 'no agent'})")


class RouteCache:
    """LRU of consultant answers. Invariant: `fresh` returns a route only while its TTL holds and
    no newer epoch is known (a newer epoch means membership or assignment changed); `stale`
    returns whatever is held, for when the consultant cannot be asked."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.routes: OrderedDict[str, tuple[HostRoute, float]] = OrderedDict()  # host -> (route, expires)
        self.epoch = 0  # the newest epoch of any answer

    def fresh(self, host: str, now: float) -> HostRoute | None:
        e = self.routes.get(host)
        if e is not None and e[1] > now and e[0].epoch >= self.epoch:
            self.routes.move_to_end(host)
            return e[0]
        return None

    def stale(self, host: str) -> HostRoute | None:
        e = self.routes.get(host)
        return None if e is None else e[0]

    def put(self, route: HostRoute, now: float) -> None:
        self.epoch = max(self.epoch, route.epoch)
        self.routes[route.host] = (route, now + route.ttl)
        self.routes.move_to_end(route.host)
        while len(self.routes) > self.capacity:
            self.routes.popitem(last=False)

    def __len__(self) -> int:
        return len(self.routes)


@dataclass(slots=True)
class PlacementCounters(Counters):
    """Since start, for Prometheus (storage/metrics.py)."""
    placement_resolves: int = 0
    placement_resolve_failures: int = 0
    placement_stale_routes: int = 0
    placement_unavailable: int = 0
    placement_contested: int = 0  # captures held because the overlay's lookups disagreed (issue 36)


class PlacementCheck:
    """Decides, per ingest batch, which captures come from an agent not placed on their host.
    Receives `resolve` (hosts -> HostRoutes in the same order; raises a WancrawlError when the
    consultant cannot answer) and a clock; owns the route cache and its counters."""

    def __init__(self, resolve: Resolve, cache: RouteCache, clock: Callable[[], float]):
        self.resolve = resolve
        self.cache = cache
        self.clock = clock
        self.stats = PlacementCounters()
        self._failing = False  # the last Resolve failed: warned once, until one succeeds

    async def refused(self, captures: Sequence[storage_pb2.Capture]) -> dict[int, str]:
        """Index -> reason for each capture whose agent is not placed on its host. Captures with
        a malformed URL are left to storage.validate. Raises Unavailable when the consultant
        cannot be asked and some capture cannot be decided without it."""
        now = self.clock()
        ask: dict[str, list[int]] = {}  # host -> captures its cached route does not accept
        for i, c in enumerate(captures):
            host = validate.host(c)
            if host is None:
                continue
            route = self.cache.fresh(host, now)
            if route is None or not placed(route, c.agent_id):
                ask.setdefault(host, []).append(i)
        if not ask:
            return {}
        answers = await self._ask(list(ask))
        out: dict[int, str] = {}
        held: list[tuple[str, HostRoute]] = []
        for host, idxs in ask.items():
            route = answers.get(host)
            if route is None:  # the consultant did not answer: the last route it gave, if any
                last = self.cache.stale(host)
                if last is None or not all(placed(last, captures[i].agent_id) for i in idxs):
                    self.stats.placement_unavailable += 1
                    raise errors.Unavailable(
                        f"cannot check that {shown(captures[idxs[0]].agent_id)} may store pages of host {shown(host)}: "
                        "the consultant does not answer; send again later")
                self.stats.placement_stale_routes += 1
                continue
            for i in idxs:
                if placed(route, captures[i].agent_id):
                    continue
                if route.contested:
                    held.append((host, route))  # not known yet: never a refusal
                else:
                    out[i] = refusal(route, captures[i].agent_id)
        if held:
            self.hold(held)
        return out

    def hold(self, held: list[tuple[str, HostRoute]]) -> None:
        """Captures whose senders a contested answer leaves out (the overlay's disjoint lookups
        disagreed): neither stored nor refused. The whole call is answered UNAVAILABLE, as when
        nobody can say, and the agent sends the batch again later (nothing lost, nothing stored
        unchecked); counted and logged, an operator's alarm: some agent may be lying."""
        self.stats.placement_contested += len(held)
        host, route = held[0]
        log.warning("placement check: %d hosts not known yet (%s: %s); the batch is held", len(held), host, route.contested)
        raise errors.Unavailable(f"cannot check who may store pages of host {shown(host)} yet: {route.contested}; "
                                 "send again later")

    async def _ask(self, hosts: list[str]) -> dict[str, HostRoute]:
        """Asked host -> the consultant's route (now cached when it names agents); the hosts it
        could not be asked about are absent."""
        got: dict[str, HostRoute] = {}
        for k in range(0, len(hosts), RESOLVE_CHUNK):
            chunk = hosts[k:k + RESOLVE_CHUNK]
            self.stats.placement_resolves += 1
            try:
                routes = await self.resolve(chunk)
            except errors.WancrawlError as exc:
                self.stats.placement_resolve_failures += 1
                if not self._failing:
                    log.warning("placement check: the consultant does not answer (%s); deciding by cached routes, "
                                "answering UNAVAILABLE for the rest until it does", exc)
                self._failing = True
                break
            if self._failing:
                log.info("placement check: the consultant answers again")
                self._failing = False
            now = self.clock()
            for asked, route in zip(chunk, routes):
                got[asked] = route
                if route.agents and not route.error:
                    self.cache.put(replace(route, host=asked), now)  # cached under the name asked
        return got
