"""Ownership: settles which agent holds each host after placement changes (issue 12; seed 001
§2.3-2.4 REFRESH_TASK, join, leave and crash; seed 000 §1.3).

A host may move for any reason: an agent died (its lease expired), joined, left, changed weight,
or an operator pinned the host. Whatever the reason, the consultant's preference list for the
host changes with a new epoch, and the agents settle it here in the same three moves:

* hand out: a host this agent holds but no longer owns goes whole to its new owner (HandOver),
  after this agent stopped fetching it and committed what was in flight;
* promote: a host this agent owns now and holds a replica of, whose replica's owner is not in
  the preference list any more (dead), becomes owned state here;
* hand the replica: a host another agent owns now, whose replica here is of an owner no longer in
  the preference list, goes to the owner as a HandOver built from the replica (marked as a
  replica, merged by the receiver like a promotion). This closes the race of a move (a balance
  or operator override, a join) that took the host off its owner in the moment the owner died:
  the new owner's claim to the dead agent is never answered, and no backup promotes (the host
  has a live owner). With r = 2 it also sends a dead owner's second backup's replica to the
  first backup that promoted its own (redundant, harmless: the receiver's merge keeps what it
  has and drops what either copy says the dead owner fetched);
* claim: a host this agent owns now but whose state may be elsewhere (a replica's owner still
  alive, URLs of a host new here shortly after an epoch change, or every host after this agent
  registered again) is held (not fetched) while the others are asked to hand it over.

The decision for one host is the pure function `settle_action`; this class runs it and the RPCs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from agent.client import AgentPool
from agent.ownership.handoff import HandOff
from agent.ownership.ledger import HostLedger
from agent.ownership.replica import ReplicaStore
from agent.ownership.replicator import Replicator
from agent.placement.directory import HostDirectory
from agent.placement.gate import Gate
from agent.placement.kademlia.overlay import ViewChanges
from agent.placement.membership import Membership
from agent.placement.port import HostRoute
from agent.state.commit import Durable
from agent.state.frontier import Item
from agent.state.storable import Unstorable
from agent.waker import Waker
from wancrawl import errors
from wancrawl.kademlia import xorspace
from wancrawl.stats import Counters
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")

Peer = tuple[str, str]  # (agent id, address)

CLAIM_BATCH = 5_000  # hosts per Claim RPC (well under gRPC's 4 MB and the receiver's limit)


@dataclass(frozen=True)
class Action:
    # "fetch", "promote", "claim", "hand_out", "hand_replica", "drop_replica", "keep"
    kind: str
    peers: tuple[Peer, ...] = ()  # claim: who to ask; hand_out, hand_replica: the new owner


def settle_action(self_id: str, route: HostRoute, *, holds: bool, replica_of: str | None, settling: bool,
                  backups: int = 1) -> Action:
    """What to do with one host given its current preference list (live agents, owner first).

    holds: this agent has state of the host (queue or history); replica_of: the agent whose
    replica of the host this agent keeps (None: none); settling: the host's state may be on
    another agent (shortly after an epoch change, or after this agent registered again);
    backups: r, how many agents after the owner keep a replica."""
    owner = route.agents[0]
    ids = [a[0] for a in route.agents]
    others = tuple(a for a in route.agents if a[0] != self_id)
    if owner[0] != self_id:
        if holds:
            return Action("hand_out", (owner,))
        if replica_of is not None and replica_of not in ids:
            # Its owner is gone and another agent owns the host now: nobody promotes this
            # replica, so it goes to the owner (the only copy of what the dead owner queued).
            return Action("hand_replica", (owner,))
        if replica_of is not None and replica_of != owner[0]:
            # The host moves away from its owner, which is still listed: it hands the host over
            # and then tells its backups to drop their copies. Until then this copy stays, even
            # off the list (a pin can push a second backup out of it): if that owner dies before
            # its handover, this may be the only replica left (the rule above hands it on).
            return Action("keep")
        if replica_of is not None and self_id not in ids[:1 + backups]:
            return Action("drop_replica")
        return Action("keep")
    if replica_of is not None:
        src = next((a for a in others if a[0] == replica_of), None)
        if src is None:
            return Action("promote")         # its owner is gone: the replica is the host's state
        return Action("claim", (src,))       # its owner lives: it hands the host over
    if settling and others:
        return Action("claim", others)
    return Action("fetch")


class ViewLog(Protocol):
    """What ownership asks of a placement that logs its view (the Kademlia overlay)."""

    seq: int

    def changes_since(self, seq: int) -> ViewChanges | None: ...


@dataclass(slots=True)
class OwnershipCounters(Counters):
    """Hosts promoted, claimed, moved out; replicas dropped or handed; reconcile passes (the metric
    names: agent/metrics.py HELP). SHARED, summed in status with HandOff's: hosts_handed_out (by
    hand_out) and handover_failures (hand_out, hand_replicas), of the handovers sent from here."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"handover_failures", "hosts_handed_out"})
    hosts_promoted: int = 0
    hosts_claimed: int = 0
    claims_sent: int = 0
    claim_failures: int = 0
    hosts_moved_out: int = 0
    replicas_dropped: int = 0
    replicas_handed_out: int = 0
    replicas_superseded_unhanded: int = 0
    claims_timed_out: int = 0
    promotions_refused: int = 0
    reconcile_full: int = 0
    reconcile_ranged: int = 0
    reconcile_hosts_read: int = 0
    hosts_handed_out: int = 0
    handover_failures: int = 0


class Ownership:
    """Owns the settling of hosts: the hosts held while their state is asked for (with the
    agents still to answer and a deadline), the epoch last settled, the settle window."""

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
        self.address = address
        self.ledger = ledger
        self.replicas = replicas
        self.directory = directory
        self.handoff = handoff
        self.peers = peers
        self.gate = gate
        self.replicator = replicator
        self.membership = membership
        self.in_flight = in_flight
        self.durable = durable
        self.settle_seconds = settle_seconds
        self.backups = backups  # r: agents after the owner that keep a replica
        self.wait_in_flight = wait_in_flight
        self.unshipped_grace = unshipped_grace
        self.clock = clock
        # Promoted URLs a dead owner fetched: checked at storage before they are fetched here.
        self.may_be_stored = may_be_stored
        self._epoch = -1                # the epoch last settled (-1: none yet)
        self._registrations = 0         # membership registrations seen
        self._settle_until = 0.0        # new hosts are claimed before their first fetch until then
        self._waiting: dict[str, set[str]] = {}   # held host -> agents still to answer its claim
        self._deadline: dict[str, float] = {}     # held host -> released after this anyway
        self._new: set[str] = set()               # held, not yet looked at
        self._moving: set[str] = set()            # being handed out now
        self._moving_replicas: set[str] = set()   # replicas of dead owners being handed to the owner now
        self._addresses: dict[str, str] = {}      # agent id -> address, from the routes seen
        self._claim_backoff: dict[str, float] = {}  # agent id -> no claim to it before
        self._claiming: dict[str, asyncio.Task] = {}  # agent id -> its claim under way
        # Promoted host -> (the dead or departed owner whose replica it was, when): that owner's
        # own handover of the host is still taken for a settle window (a drain promotes first).
        self._promoted: dict[str, tuple[str, float]] = {}
        self.waker = Waker()
        self.stats = OwnershipCounters()

    def gauges(self) -> dict[str, float]:
        return {"hosts_settling": self.gate.holding, "replica_hosts": len(self.replicas) if self.replicas else 0}

    def _window(self) -> float:
        return self.settle_seconds or 2 * self.membership.lease

    # -- what the peer guard asks (agent/ownership/guard.py) ----------------------------------------
    def settling(self, host: str) -> bool:
        """The host's state may be on its way here: it is held (claims, a promotion, a handover),
        or an epoch change or a registration of this agent is less than a settle window old (the
        previous owner hands its hosts over as soon as it learns the new epoch), or this agent has
        learnt an epoch it has not settled yet (the previous owner may learn it first: its
        handover then brings the news, through the guard's own look-up)."""
        return self.gate.held(host) or self._unsettled(self.clock())

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
                self._hold([h], now)
                self._new.add(h)
        if self._new:
            self.waker.set()

    def _hold(self, hosts: list[str], now: float) -> None:
        self.gate.hold(hosts)
        for h in hosts:
            self._deadline.setdefault(h, now + self._window())

    def _release(self, hosts: list[str]) -> None:
        for h in hosts:
            self._waiting.pop(h, None)
            self._deadline.pop(h, None)
            self._new.discard(h)
        self.gate.release(hosts)

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
        if self._new or self._waiting:
            await self.settle()
        if self._promoted:
            gone = now - self._window()
            self._promoted = {h: p for h, p in self._promoted.items() if p[1] > gone}
        late = [h for h, t in self._deadline.items() if t <= now]
        if late:
            self.stats.claims_timed_out += len(late)
            log.warning("%d hosts released unsettled after %.0fs (claims unanswered)", len(late), self._window())
            self._release(late)

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
            self.stats.reconcile_full += 1
            held = self.ledger.owned_hosts()
        else:
            self.stats.reconcile_ranged += 1
            held = list(dict.fromkeys(h for n in ch.joined for h in self.ledger.hosts_moving(ch.me, n)))
            if not ch.removed:
                rep = {h: o for h, o in rep.items()
                       if any(xorspace.moves_to(xorspace.host_key(h), ch.me, n) for n in ch.joined)}
            for h in (*held, *rep):
                self.directory.forget(h)  # an admission takes no epoch: cached routes may predate it
        self.stats.reconcile_hosts_read += len(held) + len(rep)
        return held, rep

    def _view_news(self) -> bool:
        """The overlay's view changed since the last pass (an admission takes no epoch of its
        own: it comes with the newcomer's; this catches one admitted after that epoch came)."""
        return self.view is not None and self.view.seq != self._view_seq

    async def reconcile(self, claim_all: bool) -> None:
        """One pass over the hosts held here and the replicas that may have moved (all of them
        after a registration, or without a view log), against fresh routes."""
        self._epoch = self.directory.epoch
        held, rep = self._candidates(claim_all)
        routes = await self.directory.routes(sorted(set(held) | set(rep)))
        out: dict[Peer, list[str]] = {}
        give: dict[Peer, list[str]] = {}
        drop: list[str] = []
        now = self.clock()
        for h, r in routes.items():
            a = settle_action(self.self_id, r, holds=h in held or self.ledger.holds(h), replica_of=rep.get(h),
                              settling=claim_all, backups=self.backups)
            if a.kind == "hand_out":
                out.setdefault(a.peers[0], []).append(h)
            elif a.kind == "hand_replica":
                give.setdefault(a.peers[0], []).append(h)
            elif a.kind == "drop_replica":
                drop.append(h)
            elif a.kind in ("promote", "claim"):
                self._hold([h], now)
                self._new.add(h)
        if drop and self.replicas is not None:
            self.stats.replicas_dropped += self.replicas.drop(drop)
        for peer, hosts in out.items():
            await self.hand_out(peer, hosts)
        for peer, hosts in give.items():
            await self.hand_replicas(peer, {h: rep[h] for h in hosts})

    async def settle(self) -> None:
        """Decide the held hosts: promote replicas of dead owners, claim the others."""
        new, self._new = sorted(self._new), set()
        routes = await self.directory.routes(new) if new else {}
        promote: list[str] = []
        fetch: list[str] = []
        out: dict[Peer, list[str]] = {}
        give: dict[Peer, dict[str, str]] = {}
        for h in new:
            r = routes.get(h)
            if r is None:
                self._new.add(h)  # placement cannot answer now: next step
                continue
            replica_of = self.replicas.owner(h) if self.replicas is not None else None
            a = settle_action(self.self_id, r, holds=self.ledger.holds(h), replica_of=replica_of, settling=True,
                              backups=self.backups)
            if a.kind == "hand_replica" and replica_of is not None:
                give.setdefault(a.peers[0], {})[h] = replica_of
                fetch.append(h)  # nothing of it is owned here: nothing to hold
            elif a.kind == "promote":
                promote.append(h)
            elif a.kind == "claim":
                self._waiting[h] = {p[0] for p in a.peers}
                for p in a.peers:
                    self._addresses[p[0]] = p[1]
            elif a.kind == "hand_out":
                out.setdefault(a.peers[0], []).append(h)  # taken in under an older answer: not ours
            else:
                fetch.append(h)
        if promote:
            self.promote(promote)
        if fetch:
            log.info("%d held hosts released to fetch (nobody else holds them: %s)", len(fetch), ", ".join(fetch[:3]))
        self._release(fetch)
        for peer, hs in out.items():
            await self.hand_out(peer, hs)
            self._release(hs)
        for peer, reps in give.items():
            await self.hand_replicas(peer, reps)
        await self._claim()

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
                self.stats.promotions_refused += 1
                log.error("the replica of %s cannot be promoted, kept in the replica store: %s", h, exc)
                continue
            self.replicas.drop([h])
            promoted.append(h)
            if owner is not None:
                self._promoted[h] = (owner, now)
            log.info("promoted the replica of %s (%d queued, %d seen)", h, len(st.queue), len(st.seen))
        self.stats.hosts_promoted += len(promoted)
        if self.replicator is not None:
            self.replicator.sync(promoted)
        self._release(hosts)

    async def _claim(self) -> None:
        by_peer: dict[str, list[str]] = {}
        for h, agents in self._waiting.items():
            for a in agents:
                by_peer.setdefault(a, []).append(h)
        if not by_peer:
            return
        epoch = self.directory.epoch
        # Each peer's claim runs beside this loop, one at a time per peer: a claim to an agent
        # that is stopped (SIGSTOP, a partition) hangs until the RPC's deadline (minutes), and
        # meanwhile this loop must go on settling epochs (a promotion when that agent's lease
        # runs out). A host settled meanwhile (promoted, released) ignores the late answer.
        for a, hosts in by_peer.items():
            t = self._claiming.get(a)
            if t is None or t.done():
                self._claiming[a] = asyncio.create_task(self._claim_one(a, hosts, epoch), name=f"claim {a}")

    async def _claim_one(self, agent_id: str, hosts: list[str], epoch: int) -> None:
        try:
            _, answered = await self._claim_from(agent_id, hosts, epoch)
            self._claimed_by(agent_id, answered)
        except Exception:
            log.exception("claim from %s failed", agent_id)

    def _claimed_by(self, agent_id: str, answered: list[str]) -> None:
        done: list[str] = []
        for h in answered:
            w = self._waiting.get(h)
            if w is not None:
                w.discard(agent_id)
                if not w:
                    done.append(h)
        if done:
            if self.replicas is not None:
                # The owner's handover superseded what this agent had as its backup.
                self.stats.replicas_dropped += self.replicas.drop([h for h in done if self.replicas.owner(h)])
            if self.replicator is not None:
                self.replicator.sync(done)
            self._release(done)

    async def _claim_from(self, agent_id: str, hosts: list[str], epoch: int) -> tuple[str, list[str]]:
        """Ask one agent; returns the hosts it settled (handed over or holds nothing of)."""
        addr = self._addresses.get(agent_id)
        if addr is None or self._claim_backoff.get(agent_id, 0.0) > self.clock():
            return agent_id, []
        self.stats.claims_sent += 1
        try:
            settled: list[str] = []
            for i in range(0, len(hosts), CLAIM_BATCH):  # a restarted agent may claim all it holds
                r = await self.peers.get(addr).claim(self.self_id, self.address(), epoch, hosts[i : i + CLAIM_BATCH])
                self.directory.saw_epoch(r.epoch)
                self.stats.hosts_claimed += len(r.handed)
                settled += list(r.handed) + list(r.not_held)
        except errors.WancrawlError as exc:
            self.stats.claim_failures += 1
            # Unreachable (dead, its lease not yet expired): ask again in a second, not every step.
            self._claim_backoff[agent_id] = self.clock() + 1.0
            log.warning("claim of %d hosts from %s failed: %s", len(hosts), agent_id, exc)
            return agent_id, []
        self._claim_backoff.pop(agent_id, None)
        return agent_id, settled

    # -- handing out -------------------------------------------------------------------------------
    async def hand_out(self, peer: Peer, hosts: list[str]) -> list[str]:
        """Hand hosts this agent no longer owns to their owner: stop fetching them, let what is
        in flight finish and commit, send their whole state, drop it here. Returns the hosts
        handed (acknowledged by the receiver)."""
        hosts = [h for h in hosts if h not in self._moving]
        if not hosts:
            return []
        self._moving.update(hosts)
        self.gate.hold(hosts)
        try:
            deadline = self.clock() + self.wait_in_flight
            while any(self.in_flight(h) for h in hosts) and self.clock() < deadline:
                await asyncio.sleep(0.05)
            await self.durable(hosts)
            states = [self.ledger.export(h) for h in hosts]
            try:
                # A host promoted here within the settle window goes on marked as the dead
                # owner's replica: the receiver watches its queue at storage as this agent did
                # (a balance move right after a promotion refetched the dead owner's last pages).
                marks = {h: p for h in hosts if (p := self.promoted_from(h)) is not None}
                resp = await self.handoff.send(peer[1], states, replica_of=marks)
            except errors.WancrawlError as exc:
                self.stats.handover_failures += 1
                log.warning("handover of %d hosts to %s failed: %s", len(hosts), peer[0], exc)
                return []
            # Refused hosts leave too, as plain URLs to their owner (HandOff.taken); either way
            # the replicator tells their backups to drop them.
            states = self.handoff.taken(peer[0], states, resp)
            for st in states:
                self.ledger.release(st)
            if self.replicator is not None:
                for h in hosts:
                    self.replicator.forget(h)
            self.stats.hosts_handed_out += len(states)
            self.stats.hosts_moved_out += len(states)
            log.info("handed %d hosts to %s (epoch %d)", len(states), peer[0], self.directory.epoch)
            return [st.host for st in states]
        finally:
            # Every host held above is opened again (the refused ones too: a host left held for
            # good would keep this agent from ever being idle).
            self._moving.difference_update(hosts)
            self.gate.release(hosts)

    async def hand_replicas(self, peer: Peer, owners: dict[str, str]) -> list[str]:
        """Hand replicas of dead owners (host -> that owner) to the host's owner now, an agent
        other than this one (settle_action's `hand_replica`): the move that took the host off
        its owner came as the owner died, so no backup promotes and the owner's own handover
        never comes. Sent as a HandOver marked `replica_of` (merged by the receiver like a
        promotion: its storage check of what the dead owner may have stored, its reconcile);
        unshipped entries deferred by the grace, as a promotion here would. A replica is
        dropped after the receiver answered, and only if it is still the dead owner's (with
        r = 2 the backup that promoted may have replaced it by its own meanwhile). A host the
        receiver refuses goes to its owner as plain URLs (pushes: its seen set decides), as a
        refused handover does. Returns the hosts handed (taken or pushed)."""
        if self.replicas is None:
            return []
        owners = {h: o for h, o in owners.items() if h not in self._moving_replicas and self.replicas.owner(h) == o}
        if not owners:
            return []
        moving = list(owners)
        self._moving_replicas.update(moving)
        try:
            defer = self.clock() + self.unshipped_grace
            states = [self.replicas.export(h, defer_unshipped=defer) for h in owners]
            try:
                resp = await self.handoff.send(peer[1], states, replica_of=owners)
            except errors.WancrawlError as exc:
                self.stats.handover_failures += 1
                log.warning("handover of %d replicas of dead owners to %s failed: %s", len(owners), peer[0], exc)
                return []
            refused = {n.host: n.reason for n in resp.refused}
            if refused:
                host, why = next(iter(refused.items()))
                log.warning("%s refused %d replicas of dead owners (%s: %s); their URLs go to it as pushes",
                            peer[0], len(refused), host, why)
                if self.handoff.reroute is None:
                    owners = {h: o for h, o in owners.items() if h not in refused}  # kept: decided again later
                else:
                    for st in states:
                        if st.host in refused:
                            self.handoff.reroute([Item(i.url, st.host, i.depth, i.via) for i in st.queue])
            gone = 0
            for o in set(owners.values()):
                gone += self.replicas.drop([h for h, x in owners.items() if x == o], owner=o)
            taken = [h for h in owners if h not in refused]
            self.stats.replicas_handed_out += len(taken)
            self.stats.replicas_dropped += gone
            if taken:
                log.info("handed the replicas of %d hosts of dead owners to %s (%s)", len(taken), peer[0],
                         ", ".join(taken[:3]))
            return list(owners)
        finally:
            self._moving_replicas.difference_update(moving)

    async def superseded(self, sender: str, owners: dict[str, str]) -> None:
        """The host's owner now (`sender`, checked by the peer guard) replicates hosts whose
        replica here is another agent's (host -> that agent): the host moved. That agent hands
        the host over itself if it lives; if it died as the host moved (a balance or operator
        override a moment after a crash, before its lease ran out), this replica is all that is
        left of what it queued, and the new owner's first replication would erase it. So it is
        handed to the new owner first (hand_replicas: merged like a promotion, dropped here only
        if still that agent's). Redundant when the old owner lives (the merge keeps what the
        receiver has). A replica not handed (a failed handover) is replaced anyway, counted."""
        routes = await self.directory.routes(sorted(owners))
        by_peer: dict[Peer, dict[str, str]] = {}
        for h, old in owners.items():
            r = routes.get(h)
            if r is not None and r.agents and r.agents[0][0] == sender:
                by_peer.setdefault(r.agents[0], {})[h] = old
        for peer, reps in by_peer.items():
            await self.hand_replicas(peer, reps)
        if self.replicas is not None:
            left = [h for h, old in owners.items() if self.replicas.owner(h) == old]
            if left:
                # Not handed (the handover failed, or placement named another owner): the
                # owner's replication is applied anyway; refusing it stalled every host's
                # replication to this backup (tests/test_agent_replication.py two failures).
                self.stats.replicas_superseded_unhanded += len(left)
                log.warning("%d replicas of other owners replaced by %s's before they were handed to it (%s)",
                            len(left), sender, left[0])

    async def claimed(self, claimer: Peer, epoch: int, hosts: list[str]) -> agent_pb2.ClaimResponse:
        """Claim RPC: the claimer says it owns hosts at `epoch`. Hand over those this agent holds
        and, by a route at least that new, the claimer owns; refuse the others."""
        self.directory.saw_epoch(epoch)
        routes = await self.directory.routes(hosts)
        give: list[str] = []
        not_held: list[str] = []
        refused: list[str] = []
        for h in hosts:
            while h in self._moving:
                await asyncio.sleep(0.05)  # a handover of it is under way: its outcome answers
            if not self.ledger.holds(h):
                not_held.append(h)
            elif (r := routes.get(h)) is not None and r.agents[0][0] == claimer[0]:
                give.append(h)
            else:
                refused.append(h)
        handed = await self.hand_out(claimer, give) if give else []
        refused += [h for h in give if h not in handed]
        return agent_pb2.ClaimResponse(handed=handed, not_held=not_held, refused=refused, epoch=self.directory.epoch)
