"""Ownership: settles which agent holds each host after placement changes (issue 12; seed 001
§2.3-2.4 REFRESH_TASK, join, leave and crash; seed 000 §1.3).

A host may move for any reason: an agent died (its lease expired), joined, left, changed weight,
or an operator pinned the host. Whatever the reason, the consultant's preference list for the
host changes with a new epoch, and the agents settle it here in the same three moves:

* hand out: a host this agent holds but no longer owns goes whole to its new owner (HandOver),
  after this agent stopped fetching it and committed what was in flight;
* promote: a host this agent owns now and holds a replica of, whose replica's owner is dead (not
  in the preference list, nor alive by placement), becomes owned state here;
* hand the replica: a host another agent owns now, whose replica here is of a dead owner (not in
  the preference list, nor alive by placement), goes to the owner as a HandOver built from the
  replica (marked as a replica, merged by the receiver like a promotion). This closes the race
  of a move (a balance or operator override, a join) that took the host off its owner in the
  moment the owner died:
  the new owner's claim to the dead agent is never answered, and no backup promotes (the host
  has a live owner). With r = 2 it also sends a dead owner's second backup's replica to the
  first backup that promoted its own (redundant, harmless: the receiver's merge keeps what it
  has and drops what either copy says the dead owner fetched);
* claim: a host this agent owns now but whose state may be elsewhere (a replica's owner still
  alive, URLs of a host new here shortly after an epoch change, or every host after this agent
  registered again) is held (not fetched) while the others are asked to hand it over.

Absent from a list is not dead: a list names the owner and r backups, so a move (a balance or
operator pin, a join) can take a host off an owner that lives, and leave it off the new list.
Placement's `LiveAgents` (HostDirectory.live_agents, once per epoch) tells the two apart: a live
owner's replica is kept (or claimed from it, when this agent is the new owner) while it hands the
host over itself. Taking it for dead handed a lagging replica on, and the new owner fetched what
the owner had fetched a second before (chaos, consultant mode, a balance epoch: 5 pages stored
twice). Placement unreachable: taken for dead, as before (counted).

The decision for one host is the pure function `settle_action`; `Ownership` runs it (the settle
loop, promotions here) over two parts it builds and calls, each the only writer of its state:
`Claims` (agent/ownership/claims.py: the hosts held while their state is asked for, and the
claims) and `Outgoing` (agent/ownership/outgoing.py: hand out, hand replicas, the answer to a
peer's claim).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from agent.client import AgentPool
from agent.ownership.claims import Claims
from agent.ownership.handoff import HandOff
from agent.ownership.ledger import HostLedger
from agent.ownership.outgoing import Outgoing
from agent.ownership.replica import ReplicaStore
from agent.ownership.replicator import Replicator
from agent.placement.directory import HostDirectory
from agent.placement.gate import Gate
from agent.placement.kademlia.overlay import ViewChanges
from agent.placement.membership import Membership
from agent.placement.port import HostRoute
from agent.state.commit import Durable
from agent.state.storable import Unstorable
from agent.waker import Waker
from wancrawl.kademlia import xorspace
from wancrawl.stats import Counters
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")

Peer = tuple[str, str]  # (agent id, address)


@dataclass(frozen=True)
class Action:
    # "fetch", "promote", "claim", "hand_out", "hand_replica", "drop_replica", "keep"
    kind: str
    peers: tuple[Peer, ...] = ()  # claim: who to ask; hand_out, hand_replica: the new owner


def settle_action(self_id: str, route: HostRoute, *, holds: bool, replica_of: str | None, settling: bool,
                  backups: int = 1, live_owner: Peer | None = None) -> Action:
    """What to do with one host given its current preference list (live agents, owner first).

    holds: this agent has state of the host (queue or history); replica_of: the agent whose
    replica of the host this agent keeps (None: none); settling: the host's state may be on
    another agent (shortly after an epoch change, or after this agent registered again);
    backups: r, how many agents after the owner keep a replica; live_owner: the replica's owner
    (id, address) when placement says it is alive though the list does not name it (the host
    moved off it); None when it is dead, or when liveness could not be learnt (taken for dead)."""
    owner = route.agents[0]
    ids = [a[0] for a in route.agents]
    others = tuple(a for a in route.agents if a[0] != self_id)
    if live_owner is not None and live_owner[0] != replica_of:
        live_owner = None
    if owner[0] != self_id:
        if holds:
            return Action("hand_out", (owner,))
        if replica_of is not None and replica_of not in ids and live_owner is None:
            # Its owner is gone and another agent owns the host now: nobody promotes this
            # replica, so it goes to the owner (the only copy of what the dead owner queued).
            # Not when the owner lives off the list (below): its own handover is authoritative,
            # and this copy lags it (the new owner would fetch again what it fetched lately).
            return Action("hand_replica", (owner,))
        if replica_of is not None and replica_of != owner[0]:
            # The host moves away from its owner, which lives (listed, or alive by placement): it
            # hands the host over and then tells its backups to drop their copies. Until then
            # this copy stays, even off the list (a pin can push a second backup out of it): if
            # that owner dies before its handover, this may be the only replica left (the rule
            # above hands it on at the epoch of its death).
            return Action("keep")
        if replica_of is not None and self_id not in ids[:1 + backups]:
            return Action("drop_replica")
        return Action("keep")
    if replica_of is not None:
        src = next((a for a in others if a[0] == replica_of), live_owner)
        if src is None:
            return Action("promote")         # its owner is gone: the replica is the host's state
        return Action("claim", (src,))       # its owner lives (listed or not): it hands the host over
    if settling and others:
        return Action("claim", others)
    return Action("fetch")


class ViewLog(Protocol):
    """What ownership asks of a placement that logs its view (the Kademlia overlay)."""

    seq: int

    def changes_since(self, seq: int) -> ViewChanges | None: ...


@dataclass(slots=True)
class OwnershipCounters(Counters):
    """The settle loop's: hosts promoted, promotions refused, replicas dropped off their first r,
    replicas of a live owner off their host's list kept (or claimed from it), replicas whose
    owner off the list was taken for dead because placement could not say who lives, reconcile
    passes (the metric names: agent/metrics.py HELP). SHARED, summed in status with
    Claims' and Outgoing's: replicas_dropped. Claims and Outgoing count the rest of the
    ownership names (ClaimCounters, OutgoingCounters): `Ownership.stats` holds all three."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"replicas_dropped"})
    hosts_promoted: int = 0
    replicas_dropped: int = 0
    replicas_kept_owner_alive: int = 0
    replica_owner_liveness_unknown: int = 0
    promotions_refused: int = 0
    reconcile_full: int = 0
    reconcile_ranged: int = 0
    reconcile_hosts_read: int = 0


class Ownership:
    """Owns the settling of hosts: the epoch and the registration last settled, the settle
    window, the view log's mark, the hosts promoted lately. The hosts held while their state is
    asked for (with the agents still to answer and a deadline) are its `claims`' (claims.py),
    the hosts and replicas being handed out its `outgoing`'s (outgoing.py): this loop calls
    both, and they call nothing back (Claims reads the settle window, Outgoing
    `promoted_from`: both passed down as readers of this loop's state)."""

    def __init__(self, self_id: str, address: Callable[[], str], ledger: HostLedger, replicas: ReplicaStore | None,
                 directory: HostDirectory, handoff: HandOff, peers: AgentPool, gate: Gate, replicator: Replicator | None,
                 membership: Membership, *, in_flight: Callable[[str], int], durable: Durable,
                 settle_seconds: float, wait_in_flight: float, unshipped_grace: float, clock: Callable[[], float],
                 backups: int = 1,
                 may_be_stored: Callable[[list[str]], None] | None = None,
                 view: ViewLog | None = None):
        self.self_id = self_id
        # Kademlia mode: the overlay's log of view changes, so an epoch change looks only at the
        # hosts a newcomer can take (seed 000's firstdiff). None (consultant mode): every host.
        self.view = view
        self._view_seq = 0
        self.ledger = ledger
        self.replicas = replicas
        self.directory = directory
        self.gate = gate
        self.replicator = replicator
        self.membership = membership
        self.settle_seconds = settle_seconds
        self.backups = backups  # r: agents after the owner that keep a replica
        self.unshipped_grace = unshipped_grace
        self.clock = clock
        # Promoted URLs a dead owner fetched: checked at storage before they are fetched here.
        self.may_be_stored = may_be_stored
        self._epoch = -1                # the epoch last settled (-1: none yet)
        self._epoch_done = -1           # the epoch whose reconcile pass has made all its moves
        self._registrations = 0         # membership registrations seen
        self._settle_until = 0.0        # new hosts are claimed before their first fetch until then
        # Promoted host -> (the dead or departed owner whose replica it was, when): that owner's
        # own handover of the host is still taken for a settle window (a drain promotes first).
        self._promoted: dict[str, tuple[str, float]] = {}
        # Host -> when it was last held here for a takeover: a previous holder's handover of it
        # is taken for a settle window (settling()); other hosts crawled here are steady.
        self._moved_in: dict[str, float] = {}
        self.waker = Waker()
        self.claims = Claims(self_id, address, directory, peers, gate, replicas, replicator, window=self._window,
                             clock=clock)
        self.outgoing = Outgoing(ledger, replicas, directory, handoff, gate, replicator, in_flight=in_flight,
                                 durable=durable, promoted_from=self.promoted_from, wait_in_flight=wait_in_flight,
                                 unshipped_grace=unshipped_grace, clock=clock)
        self.loop_stats = OwnershipCounters()
        # A composite's counters, one part each (agent/node.py registers them as
        # ownership.settle.loop, .claims, .outgoing; the flat names are the parts' fields).
        self.stats: dict[str, Counters] = {
            "loop": self.loop_stats, "claims": self.claims.stats, "outgoing": self.outgoing.stats}

    def gauges(self) -> dict[str, float]:
        # epoch_settled: the epoch whose reconcile pass has made every move it decided (hosts
        # handed out, replicas handed to their new owners); below `epoch` while they are to come.
        return {"hosts_settling": self.gate.holding, "replica_hosts": len(self.replicas) if self.replicas else 0,
                "epoch_settled": self._epoch_done}

    def _window(self) -> float:
        return self.settle_seconds or 2 * self.membership.lease

    # -- what the peer guard asks (agent/ownership/guard.py) ----------------------------------------
    def settling(self, host: str) -> bool:
        """The host's state may be on its way here: it is held (claims, a promotion, a handover),
        or this agent has learnt an epoch it has not settled yet (the previous owner may learn it
        first: its handover then brings the news, through the guard's own look-up), or an epoch
        change or a registration of this agent is less than a settle window old (the previous
        owner hands its hosts over as soon as it learns the new epoch) and the host moved here
        in it: this agent held it for a takeover since, or holds nothing of it (it is new here).

        Per host, not per agent (issue 36): a host crawled here since before the change, which
        the change did not move, is not taking anything over. Before, every host was "settling"
        for 2 x lease after any epoch change (a balancer's move anywhere), and a compromised
        backup's HandOver erased, parked or held such a host."""
        if self.gate.held(host) or self.directory.epoch != self._epoch:
            return True
        now = self.clock()
        return now < self._settle_until and (host in self._moved_in or not self.ledger.holds(host))

    def _moving_in(self, hosts: list[str], now: float) -> None:
        """Hosts held for a takeover (claim or promotion): settling for the window."""
        for h in hosts:
            self._moved_in[h] = now

    def _unsettled(self, now: float) -> bool:
        # An epoch change or a registration is less than a settle window old, or an epoch is
        # learnt that this loop has not settled yet: one reading for the guard and for intake.
        return now < self._settle_until or self.directory.epoch != self._epoch

    def promoted_from(self, host: str) -> str | None:
        """The owner whose replica of the host this agent promoted within the settle window."""
        p = self._promoted.get(host)
        return p[0] if p is not None and p[1] > self.clock() - self._window() else None

    # -- intake's hook -----------------------------------------------------------------------------
    def arriving(self, hosts: list[str]) -> None:
        """URLs of these hosts are about to be queued here. A host this agent holds nothing of,
        but that has a replica here or may have state elsewhere (settle window), is held before
        its first fetch; the loop decides promote or claim."""
        now = self.clock()
        # As settling() reads it (an unsettled epoch included: the push that brings a dead
        # owner's host here may have taught the directory the new epoch itself, before the loop
        # opened its window; a chaos flap run fetched such a root page 10 ms before taking its
        # replica), and also before this loop has seen a registration: a Kademlia node is visible
        # to its peers (who push to it) while it is still joining.
        settling = (self._unsettled(now) or not self.membership.registered
                    or self.membership.registrations != self._registrations)
        for h in hosts:
            if self.gate.held(h) or self.ledger.holds(h):
                continue
            if settling or (self.replicas is not None and self.replicas.owner(h) is not None):
                self.claims.hold([h], now)
                self._moving_in([h], now)
        if self.claims.has_new():
            self.waker.set()

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await self.waker.wait(0.25)
            try:
                await self.step()
            except Exception:
                log.exception("ownership step failed")

    async def step(self) -> None:
        now = self.clock()
        regs = self.membership.registrations
        if regs != self._registrations:
            # Registered (again): while this agent was away, others may have taken its hosts.
            self._registrations = regs
            self._settle_until = now + self._window()
            try:
                await self.reconcile(claim_all=True)
            finally:
                self.gate.settled()  # what must wait is held now; never leave every host closed
        elif (self.directory.epoch != self._epoch or self._view_news()) and self.membership.registered:
            self._settle_until = now + self._window()
            await self.reconcile(claim_all=False)
        if self.claims.pending():
            await self.settle()
        if self._promoted:
            gone = now - self._window()
            self._promoted = {h: p for h, p in self._promoted.items() if p[1] > gone}
        if self._moved_in:
            gone = now - self._window()
            self._moved_in = {h: t for h, t in self._moved_in.items() if t > gone}
        self.claims.expire(now)

    def _candidates(self, claim_all: bool) -> tuple[list[str], dict[str, str]]:
        """The hosts held here and the replicas whose place may have changed: all of them, or
        (Kademlia mode, after joins and departures only) the held hosts a newcomer is closer to,
        read from the host-key indexes, and the replicas a newcomer is closer to, or all
        replicas when a node went (a promotion, a new backup)."""
        rep = self.replicas.hosts() if self.replicas is not None else {}
        ch = self.view.changes_since(self._view_seq) if self.view is not None and not claim_all else None
        if self.view is not None:
            self._view_seq = ch.seq if ch is not None else self.view.seq
        if ch is None:
            self.loop_stats.reconcile_full += 1
            held = self.ledger.owned_hosts()
        else:
            self.loop_stats.reconcile_ranged += 1
            held = list(dict.fromkeys(h for n in ch.joined for h in self.ledger.hosts_moving(ch.me, n)))
            if not ch.removed:
                rep = {h: o for h, o in rep.items()
                       if any(xorspace.moves_to(xorspace.host_key(h), ch.me, n) for n in ch.joined)}
            for h in (*held, *rep):
                self.directory.forget(h)  # an admission takes no epoch: cached routes may predate it
        self.loop_stats.reconcile_hosts_read += len(held) + len(rep)
        return held, rep

    def _view_news(self) -> bool:
        """The overlay's view changed since the last pass (an admission takes no epoch of its
        own: it comes with the newcomer's; this catches one admitted after that epoch came)."""
        return self.view is not None and self.view.seq != self._view_seq

    async def reconcile(self, claim_all: bool) -> None:
        """One pass over the hosts held here and the replicas that may have moved (all of them
        after a registration, or without a view log), against fresh routes."""
        self._epoch = epoch = self.directory.epoch
        held, rep = self._candidates(claim_all)
        routes = await self.directory.routes(sorted(set(held) | set(rep)))
        live = await self._live_owners(routes, rep)
        out: dict[Peer, list[str]] = {}
        give: dict[Peer, list[str]] = {}
        drop: list[str] = []
        now = self.clock()
        for h, r in routes.items():
            a = settle_action(self.self_id, r, holds=h in held or self.ledger.holds(h), replica_of=rep.get(h),
                              settling=claim_all, backups=self.backups, live_owner=live.get(h))
            if a.kind == "hand_out":
                out.setdefault(a.peers[0], []).append(h)
            elif a.kind == "hand_replica":
                give.setdefault(a.peers[0], []).append(h)
            elif a.kind == "drop_replica":
                drop.append(h)
            elif a.kind in ("promote", "claim"):
                self.claims.hold([h], now)
                self._moving_in([h], now)
        if drop and self.replicas is not None:
            self.loop_stats.replicas_dropped += self.replicas.drop(drop)
        for peer, hosts in out.items():
            await self.outgoing.hand_out(peer, hosts)
        for peer, hosts in give.items():
            await self.outgoing.hand_replicas(peer, {h: rep[h] for h in hosts})
        self._epoch_done = epoch

    async def _live_owners(self, routes: dict[str, HostRoute], owners: dict[str, str]) -> dict[str, Peer]:
        """host -> its replica's owner (id, address), for the replicas whose owner is missing from
        the host's list but alive by placement (asked only when some owner is missing: once per
        epoch, HostDirectory.live_agents). When placement cannot say, none: taken for dead, as
        before liveness was asked (counted)."""
        off = {h: o for h, o in owners.items() if h in routes and o not in routes[h].agent_ids}
        if not off:
            return {}
        alive = await self.directory.live_agents()
        if alive is None:
            self.loop_stats.replica_owner_liveness_unknown += len(off)
            return {}
        found = {h: (o, alive[o]) for h, o in off.items() if o in alive}
        self.loop_stats.replicas_kept_owner_alive += len(found)
        return found

    async def settle(self) -> None:
        """Decide the held hosts: promote replicas of dead owners, claim the others."""
        new = self.claims.take_new()
        routes = await self.directory.routes(new) if new else {}
        promote: list[str] = []
        fetch: list[str] = []
        out: dict[Peer, list[str]] = {}
        give: dict[Peer, dict[str, str]] = {}
        store = self.replicas
        live = await self._live_owners(routes, {h: o for h in new if store and (o := store.owner(h)) is not None})
        for h in new:
            r = routes.get(h)
            if r is None:
                self.claims.look_again(h)  # placement cannot answer now: next step
                continue
            replica_of = self.replicas.owner(h) if self.replicas is not None else None
            a = settle_action(self.self_id, r, holds=self.ledger.holds(h), replica_of=replica_of, settling=True,
                              backups=self.backups, live_owner=live.get(h))
            if a.kind == "hand_replica" and replica_of is not None:
                give.setdefault(a.peers[0], {})[h] = replica_of
                fetch.append(h)  # nothing of it is owned here: nothing to hold
            elif a.kind == "promote":
                promote.append(h)
            elif a.kind == "claim":
                self.claims.ask(h, a.peers)
            elif a.kind == "hand_out":
                out.setdefault(a.peers[0], []).append(h)  # taken in under an older answer: not ours
            else:
                fetch.append(h)
        if promote:
            self.promote(promote)
        if fetch:
            log.info("%d held hosts released to fetch (nobody else holds them: %s)", len(fetch), ", ".join(fetch[:3]))
        self.claims.release(fetch)
        for peer, hs in out.items():
            await self.outgoing.hand_out(peer, hs)
            self.claims.release(hs)
        for peer, reps in give.items():
            await self.outgoing.hand_replicas(peer, reps)
        await self.claims.claim()

    def promote(self, hosts: list[str]) -> None:
        """The replicas of hosts whose owner is dead become this agent's state."""
        assert self.replicas is not None
        # Pages the dead owner fetched but had not stored wait a grace: if it was only paused,
        # it stores them and takes the host back before they are due here.
        now = self.clock()
        defer = now + self.unshipped_grace
        promoted: list[str] = []
        for h in hosts:
            owner = self.replicas.owner(h)
            st = self.replicas.export(h, defer_unshipped=defer)
            if self.may_be_stored is not None:
                # The dead owner may have stored any of them in its last moments: those it had
                # not told this replica about at all (no "unshipped" mark yet) as well as the
                # unshipped ones. Storage is asked before each is fetched (agent/crawl/refetch.py).
                self.may_be_stored([i.url for i in st.queue])
            try:
                self.ledger.merge(st)
            except Unstorable as exc:
                # A replica this agent cannot take in (a value its disk cannot hold) must not stop
                # the promotion of the others; it stays in the replica store for an operator.
                self.loop_stats.promotions_refused += 1
                log.error("the replica of %s cannot be promoted, kept in the replica store: %s", h, exc)
                continue
            self.replicas.drop([h])
            promoted.append(h)
            if owner is not None:
                self._promoted[h] = (owner, now)
            log.info("promoted the replica of %s (%d queued, %d seen)", h, len(st.queue), len(st.seen))
        self.loop_stats.hosts_promoted += len(promoted)
        if self.replicator is not None:
            self.replicator.sync(promoted)
        self.claims.release(hosts)

    # -- Outgoing's, where the server (Claim, Replicate) and the tests have always called them -------
    async def hand_out(self, peer: Peer, hosts: list[str]) -> list[str]:
        return await self.outgoing.hand_out(peer, hosts)

    async def superseded(self, sender: str, owners: dict[str, str]) -> dict[str, str]:
        """The host's owner now (`sender`) replicates hosts whose replica here is another agent's
        (host -> that agent). Within a settle window, a replica whose agent lives though the
        host's list does not name it is kept and the sender's message refused (host -> reason):
        the sender claims only from its list, so it fetches what it holds at once, and that
        copy handed to it now would be fetched from before the live agent's own handover (the
        same race as `hand_replica`'s; that agent's DELETE_BACKUP then frees the way, and the
        sender's retry is taken). The others are handed to the sender first (Outgoing)."""
        keep: dict[str, str] = {}
        if self._unsettled(self.clock()):
            routes = await self.directory.routes(sorted(owners))
            keep = {h: p[0] for h, p in (await self._live_owners(routes, owners)).items()}
        await self.outgoing.superseded(sender, {h: o for h, o in owners.items() if h not in keep})
        return {h: f"the replica here is {o}'s, which lives: it hands the host over itself" for h, o in keep.items()}

    async def claimed(self, claimer: Peer, epoch: int, hosts: list[str]) -> agent_pb2.ClaimResponse:
        return await self.outgoing.claimed(claimer, epoch, hosts)
