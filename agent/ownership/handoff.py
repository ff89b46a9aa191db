"""HandOff: host states to and from other agents over the HandOver RPC (seed 001's REFRESH_TASK)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from agent.client import AgentPool
from agent.ownership.ledger import HostLedger, HostState
from agent.placement.directory import HostDirectory
from agent.placement.gate import Gate
from agent.state.commit import Durable
from agent.state.frontier import Item
from wancrawl import errors
from wancrawl.stats import Counters
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")

# Queued URLs (a fingerprint counts an eighth) per HandOver stream: the sender holds one
# stream's states in memory until the receiver answers.
STREAM_URLS = 200_000

# (sender, hosts) -> {host: why it is refused}: agent/ownership/guard.py's PeerGuard.handover.
Admit = Callable[[str, list[str]], Awaitable[dict[str, str]]]
# URLs to send on their way as if found here (the routing service's `route`).
Reroute = Callable[[list[Item]], None]
# URLs a dead owner may have stored in its last moments: checked at storage before they are
# fetched here (Ownership's `may_be_stored`, agent/crawl/refetch.py).
MayBeStored = Callable[[list[str]], None]
# Hosts whose whole state must go to their backups again (the Replicator's `sync`).
Replicate = Callable[[list[str]], None]


@dataclass
class Handed:
    hosts: int = 0
    urls: int = 0      # queued URLs handed over
    kept_urls: int = 0  # queued URLs of hosts no other agent could take (still here)
    kept_hosts: int = 0


@dataclass
class _Received:
    """What one HandOver stream brought in so far (HandOff.receive)."""
    sender: str = ""
    hosts: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)
    queued: int = 0
    seen: int = 0
    # Hosts this agent held something of before: their state is reconciled with the
    # sender's (the previous owner's) once all of its parts are in. A replica of a dead
    # owner (replica_of set) is always reconciled, and its queue checked at storage before
    # it is fetched, exactly as a promotion here would do (Ownership.promote).
    theirs: dict[str, tuple[set[str], set[int]]] = field(default_factory=dict)
    from_replica: list[str] = field(default_factory=list)
    replica_urls: list[str] = field(default_factory=list)
    # Hosts this stream closed at the gate (not held before it): reopened once it is all in.
    held: list[str] = field(default_factory=list)
    # Of `theirs`, the hosts this agent was taking over when the stream began (held for claims
    # or a promotion: their state was asked for): the sender's word drops done copies there.
    taking: set[str] = field(default_factory=set)


@dataclass(slots=True)
class HandOffCounters(Counters):
    """Hosts handed out and in, their bytes, failures and refusals (the metric names:
    agent/metrics.py HELP). SHARED, summed in status: Outgoing (outgoing.py) counts
    hosts_handed_out and handover_failures of the handovers it sends itself."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"handover_failures", "hosts_handed_out"})
    hosts_handed_out: int = 0
    hosts_handed_in: int = 0
    handover_failures: int = 0
    handover_bytes_out: int = 0
    handover_dropped_done: int = 0
    handover_deferred_done: int = 0
    handover_refused_out: int = 0
    replicas_handed_in: int = 0


class HandOff:
    """Sends hosts to their next owner and takes hosts in. A host leaves this agent only once
    the receiver answered, i.e. once its state is durable there; until then it stays whole here
    (a failed handover loses nothing: the host is simply still ours)."""

    def __init__(self, self_id: str, ledger: HostLedger, directory: HostDirectory, peers: AgentPool,
                 durable: Durable, admit: Admit | None = None, reroute: Reroute | None = None,
                 may_be_stored: MayBeStored | None = None, replicate: Replicate | None = None, gate: Gate | None = None,
                 clock: Callable[[], float] = time.time, defer_done: float = 10.0):
        self.self_id = self_id
        self.ledger = ledger
        self.directory = directory
        self.peers = peers
        self.durable = durable  # returns after the next group commit
        self.admit = admit      # None: every host taken (a test without placement rules)
        self.reroute = reroute  # None: a refused host stays here whole
        self.may_be_stored = may_be_stored
        # A handover merges history into a host this agent may already own and replicate (held
        # for a claim, its backups synced with what was pushed here meanwhile). Replication
        # deltas carry queued URLs and dones, not imported fingerprints: without a full copy the
        # backups never learn what the previous owner fetched, and if this agent dies the backup
        # that promotes fetches those pages again (issue 23, kill2 with a balance move off the
        # first victim: docs/balance.md "Stored twice after a move at a death").
        self.replicate = replicate
        # URLs a sender says it did, queued here too, wait this long and are checked at storage
        # before they are fetched (HostLedger.defer_done): replication's unshipped_grace.
        self.clock = clock
        self.defer_done = defer_done
        # A host arriving by HandOver is closed at the gate until its whole stream is in: its
        # first part is queued (and woken) before the copies the sender fetched are dropped
        # (reconcile) and before a dead owner's replica is watched at storage. A fetch in that
        # gap stored a page twice (chaos flap, session 13: a replica's URL fetched 20 ms before
        # the stream ended, the dead owner's capture of it already at storage).
        self.gate = gate
        self.stats = HandOffCounters()

    def attach(self, *, admit: Admit) -> None:
        """The node's second wiring phase: the peer guard, built after this (it asks ownership,
        which needs this), says which hosts of a HandOver are taken. Called once, before start."""
        self.admit = admit

    async def successors(self, hosts: list[str]) -> dict[str, tuple[str, str]]:
        """host -> (agent id, address) of the next agent of its preference list other than this
        one: the agent that owns the host once this one is gone. Hosts without one are absent."""
        out: dict[str, tuple[str, str]] = {}
        for h, r in (await self.directory.routes(hosts)).items():
            nxt = next((a for a in r.agents if a[0] != self.self_id), None)
            if nxt is not None:
                out[h] = nxt
        return out

    async def hand_over_all(self) -> Handed:
        """Every host held here to its successor, in streams of at most STREAM_URLS queued URLs
        (memory stays bounded by that, not by what the agent holds)."""
        hosts = self.ledger.owned_hosts()
        succ = await self.successors(hosts)
        by_agent: dict[tuple[str, str], list[str]] = {}
        for h in hosts:
            if h in succ:
                by_agent.setdefault(succ[h], []).append(h)
        res = Handed()
        for (agent_id, address), group in by_agent.items():
            states: list[HostState] = []
            size = 0
            for i, h in enumerate(group):
                st = self.ledger.export(h)
                states.append(st)
                size += len(st.queue) + len(st.seen) // 8
                if size >= STREAM_URLS or i == len(group) - 1:
                    await self._hand(agent_id, address, states, res)
                    states, size = [], 0
        left = [n for n in map(self.ledger.queued, self.ledger.owned_hosts()) if n]
        res.kept_hosts, res.kept_urls = len(left), sum(left)
        return res

    async def _hand(self, agent_id: str, address: str, states: list[HostState], res: Handed) -> None:
        try:
            resp = await self.send(address, states)
        except errors.WancrawlError as exc:
            self.stats.handover_failures += 1
            log.warning("handover of %d hosts to %s failed: %s", len(states), agent_id, exc)
            return
        states = self.taken(agent_id, states, resp)
        for st in states:
            self.ledger.release(st)
        urls = sum(len(st.queue) for st in states)
        res.hosts += len(states)
        res.urls += urls
        self.stats.hosts_handed_out += len(states)
        log.info("handed %d hosts (%d queued URLs) to %s", len(states), urls, agent_id)

    def taken(self, agent_id: str, states: Iterable[HostState], resp: agent_pb2.HandOverResponse) -> list[HostState]:
        """The states the receiver took. A host it refused (it does not own it, or does not take
        it from this agent now: agent/ownership/guard.py) leaves this agent anyway, its queued
        URLs routed to their owner as plain URLs (outbox, PushUrls: the owner's seen set decides),
        since this agent does not own it: kept here it would be fetched by nobody or by two."""
        refused = {n.host: n.reason for n in resp.refused}
        if refused:
            self.stats.handover_refused_out += len(refused)
            host, why = next(iter(refused.items()))
            log.warning("%s refused %d of the hosts handed to it (%s: %s); their URLs go to it as pushes",
                        agent_id, len(refused), host, why)
            if self.reroute is not None:
                for h in refused:
                    queue = self.ledger.export(h).queue
                    self.reroute([Item(i.url, h, i.depth, i.via) for i in queue])
                    self.ledger.drop(h)
        return [st for st in states if st.host not in refused]

    async def send(self, address: str, states: list[HostState],
                   replica_of: dict[str, str] | None = None) -> agent_pb2.HandOverResponse:
        """Stream the states; `replica_of` (host -> dead owner) marks states read from this
        agent's replicas (Outgoing.hand_replicas), which the receiver merges like a promotion."""
        epoch = self.directory.epoch
        marks = replica_of or {}

        async def parts() -> AsyncIterator[agent_pb2.HandOverRequest]:
            for st in states:
                for p in st.parts():
                    m = agent_pb2.HandOverRequest(sender_id=self.self_id, epoch=epoch, host=p.to_proto(),
                                                  replica_of=marks.get(st.host, ""))
                    self.stats.handover_bytes_out += m.ByteSize()
                    yield m

        return await self.peers.get(address).hand_over(parts())

    async def receive(self, parts: AsyncIterator[agent_pb2.HandOverRequest]) -> agent_pb2.HandOverResponse:
        """Import every part of the hosts `admit` takes, then answer once all of it is durable
        (the next group commit); the refused hosts are named in the answer."""
        got = _Received()
        try:
            async for req in parts:
                await self._take(req, got)
            return await self._settle(got)
        finally:
            if got.held and self.gate is not None:
                self.gate.release(got.held)

    async def _settle(self, got: _Received) -> agent_pb2.HandOverResponse:
        """The whole stream is in: drop (or defer: _reconcile) what the sender fetched, watch a
        dead owner's queue at storage, wait for the group commit, replicate; the answer."""
        dropped, deferred = self._reconcile(got)
        watch = got.replica_urls + deferred
        if watch and self.may_be_stored is not None:
            self.may_be_stored(watch)
        if got.held and self.gate is not None:
            self.gate.release(got.held)  # what is left may be fetched now: the durable wait need not hold it
            got.held = []
        if got.from_replica:
            self.stats.replicas_handed_in += len(got.from_replica)
            log.info("took the replicas of %d hosts of a dead owner from %s (%s)", len(got.from_replica),
                     got.sender or "?", ", ".join(got.from_replica[:3]))
        if got.hosts:
            log.info("took %d hosts from %s (%d URLs queued, %d seen; %d held here before, %d of their copies dropped "
                     "as done, %d deferred and checked at storage)", len(got.hosts), got.sender or "?", got.queued, got.seen,
                     len(got.theirs), dropped, len(deferred))
        await self.durable(got.hosts)  # raises if rows of these hosts could not be written: refused
        if got.hosts and self.replicate is not None:
            self.replicate(sorted(got.hosts))  # their backups get them whole (see __init__)
        self.stats.hosts_handed_in += len(got.hosts)
        if got.refused:
            log.warning("refused %d hosts of a handover (%s)", len(got.refused),
                        "; ".join(f"{h}: {r}" for h, r in list(got.refused.items())[:3]))
        return agent_pb2.HandOverResponse(hosts=len(got.hosts), queued=got.queued, seen=got.seen,
                                          refused=[agent_pb2.HostNote(host=h, reason=r) for h, r in got.refused.items()])

    def _reconcile(self, got: _Received) -> tuple[int, list[str]]:
        """Copies queued here of what the sender says it did (seen, not queued there). A host
        being taken over here (its state asked for: `taking`) drops them: the sender is the
        holder it was asked of, and they would be fetched twice. A host crawled here steadily
        keeps them (issue 36: a compromised backup's `seen` inside an epoch change's window
        erased such a host): they wait a grace and storage is asked before each is fetched.
        Returns (URLs dropped, URLs deferred)."""
        until = self.clock() + self.defer_done
        dropped, deferred = 0, []
        for h, (q_urls, fps) in got.theirs.items():
            if h in got.taking:
                dropped += self.ledger.reconcile(h, q_urls, fps)
            else:
                deferred += self.ledger.defer_done(h, q_urls, fps, until)
        self.stats.handover_dropped_done += dropped
        self.stats.handover_deferred_done += len(deferred)
        return dropped, deferred

    async def _take(self, req: agent_pb2.HandOverRequest, got: _Received) -> None:
        """Import one part of a HandOver stream, unless `admit` refuses its host (asked at the
        host's first part: a refused host's later parts are skipped)."""
        got.sender = req.sender_id
        self.directory.saw_epoch(req.epoch)
        h = req.host.host
        if not h:
            raise errors.InvalidArgument("HandOver: a part without a host")
        if h in got.refused:
            return
        first = h not in got.hosts
        if first and self.admit is not None:
            why = (await self.admit(req.sender_id, [h])).get(h)
            if why is not None:
                got.refused[h] = why
                return
        if first and self.gate is not None and not self.gate.held(h):
            self.gate.hold([h])
            got.held.append(h)
        if first and (self.ledger.holds(h) or req.replica_of):
            got.theirs[h] = (set(), set())
            if h not in got.held or not self.ledger.holds(h):  # held before this stream: a takeover
                got.taking.add(h)
        if first and req.replica_of:
            got.from_replica.append(h)
        st = HostState.from_proto(req.host, first=first)
        if req.replica_of:
            got.replica_urls += [i.url for i in st.queue]
        got.hosts.add(h)
        if h in got.theirs:
            got.theirs[h][0].update(i.url for i in st.queue)
            got.theirs[h][1].update(st.seen)
        q, s = self.ledger.import_(st)
        got.queued += q
        got.seen += s
