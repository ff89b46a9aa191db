"""Outgoing: hosts and replicas leaving this agent for their owner (issue 12; seed 001 §2.3
REFRESH_TASK): a host held here but owned elsewhere (hand out), a replica of a dead owner whose
host another agent owns now (hand the replica), the replicas another owner's replication
supersedes, and the answer to a peer's Claim.

What it may do: hold a host at the gate while it is being handed out, wait for its fetches in
flight and a commit, send it with HandOff (agent/ownership/handoff.py), then drop it here (the
ledger) or drop the replica (the replica store), and tell the replicator. It decides nothing
about a host's route (settle.py's `settle_action` does; the Claim's answer and `superseded` ask
the directory) and calls nothing above it: the settle loop and the server call it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from agent.ownership.handoff import HandOff
from agent.ownership.ledger import HostLedger
from agent.ownership.replica import ReplicaStore
from agent.ownership.replicator import Replicator
from agent.placement.directory import HostDirectory
from agent.placement.gate import Gate
from agent.state.commit import Durable
from agent.state.frontier import Item
from wancrawl import errors
from wancrawl.stats import Counters
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")

Peer = tuple[str, str]  # (agent id, address)


@dataclass(slots=True)
class OutgoingCounters(Counters):
    """Hosts moved out, replicas of dead owners handed, replicas superseded unhanded (the metric
    names: agent/metrics.py HELP). SHARED, summed in status: hosts_handed_out (by hand_out) and
    handover_failures (hand_out, hand_replicas) with HandOff's, of the handovers sent from here;
    replicas_dropped (hand_replicas) with the settle loop's and Claims'."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"handover_failures", "hosts_handed_out", "replicas_dropped"})
    hosts_moved_out: int = 0
    replicas_dropped: int = 0
    replicas_handed_out: int = 0
    replicas_superseded_unhanded: int = 0
    hosts_handed_out: int = 0
    handover_failures: int = 0


class Outgoing:
    """Owns the hosts and the replicas being handed out now. Invariants: a host is in `_moving`
    only while one hand_out of it runs (held at the gate meanwhile, opened again when it ends,
    handed or not), and a Claim of it waits until it is out of `_moving`; a replica is in
    `_moving_replicas` only while one hand_replicas of it runs."""

    def __init__(self, ledger: HostLedger, replicas: ReplicaStore | None, directory: HostDirectory, handoff: HandOff,
                 gate: Gate, replicator: Replicator | None, *, in_flight: Callable[[str], int], durable: Durable,
                 promoted_from: Callable[[str], str | None], wait_in_flight: float, unshipped_grace: float,
                 clock: Callable[[], float]):
        self.ledger = ledger
        self.replicas = replicas
        self.directory = directory
        self.handoff = handoff
        self.gate = gate
        self.replicator = replicator
        self.in_flight = in_flight
        self.durable = durable
        # The settle loop's promotions (Ownership.promoted_from): a host promoted here within the
        # settle window leaves marked as the dead owner's replica.
        self.promoted_from = promoted_from
        self.wait_in_flight = wait_in_flight
        self.unshipped_grace = unshipped_grace
        self.clock = clock
        self._moving: set[str] = set()            # being handed out now
        self._moving_replicas: set[str] = set()   # replicas of dead owners being handed to the owner now
        self.stats = OutgoingCounters()

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
        and, by a route at least that new, the claimer owns; refuse the others. (Here, not with
        the claims this agent sends (claims.py): the answer is a hand-out, and waits for one.)"""
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
