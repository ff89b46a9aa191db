"""The agent node: the composition root. It builds the components in dependency order and runs
start, stop, drain, idle and status; every decision and every piece of state lives in them.

The only module that knows every room of agent/ (docs/architecture.md). The path of one URL:
Dispatcher (fetch, outcome, links) -> RoutingService (router, outbox, pushes to owners; own
hosts ->) Intake (seen set, frontier) -> HostSignal -> Dispatcher. A page is done only after
CommitLog made its capture and its links durable (docs/agent.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from agent.client import AgentPool
from agent.crawl.dispatcher import Dispatcher
from agent.crawl.incidents import Incidents
from agent.crawl.outcome import RETRY_STATUSES
from agent.crawl.refetch import StoredCheck
from agent.crawl.scope import Scope
from agent.fetch import Fetcher, create_fetcher
from agent.ownership.guard import PeerGuard
from agent.ownership.handoff import Handed, HandOff
from agent.ownership.ledger import HostLedger
from agent.ownership.replica import ReplicaStore
from agent.ownership.replicator import Replicator
from agent.ownership.settle import Ownership
from agent.placement.consultant import consultant_placement
from agent.placement.directory import HostDirectory
from agent.placement.gate import Gate
from agent.placement.hostcache import HostCache
from agent.placement.kademlia.overlay import Overlay
from agent.placement.kademlia.placement import kademlia_placement
from agent.placement.load import IntervalMeter, LoadGauge, heaviest, probe_resources
from agent.placement.membership import Membership
from agent.placement.port import Placement
from agent.routing.intake import Intake, IntakeResult
from agent.routing.router import Router
from agent.routing.service import RoutingService
from agent.settings import AgentSettings, fetch_settings
from agent.state.changes import ChangeLog
from agent.state.commit import CommitLog
from agent.state.frontier import Frontier
from agent.state.outbox import Outbox
from agent.state.progress import ProgressWatch
from agent.state.seen import SeenSet
from agent.state.shipper import StorageShipper
from agent.state.spool import Spool
from agent.waker import HostSignal
from storage.client import StorageClient
from storage.client import storage_client as make_storage_client
from wancrawl import errors
from wancrawl.domains import registered_domain
from wancrawl.hostres import HostResolver, make_resolver, parse_hosts_file
from wancrawl.runtime.looplag import LoopLag
from wancrawl.stats import StatsRegistry
from wancrawl.v1 import agent_pb2, common_pb2

log = logging.getLogger("agent")

__all__ = ["AgentNode", "IntakeResult"]


def _report_end(t: asyncio.Task) -> None:
    """A loop of the node that fails is logged at once (stop() gathers the tasks with
    return_exceptions, which would hide it). Membership's returns after a drain: not an error."""
    if not t.cancelled() and t.exception() is not None:
        log.error("agent loop %s failed: %r", t.get_name(), t.exception(), exc_info=t.exception())


class AgentNode:
    """`start()`, then `stop()` (graceful: in-flight fetches finish, everything is committed, the
    agent deregisters) or `drain()` (graceful leave: every host handed to its next owner)."""

    def __init__(self, settings: AgentSettings, *, address: str = "", placement: Placement | None = None,
                 storage: StorageClient | None = None, fetcher: Fetcher | None = None, clock=time.time):
        self.s = settings
        self.id = settings.agent_id
        self.clock = clock
        self.address = address  # fixed for the node's life (the server binds first)
        # Phase one: every component, in dependency order, each handed what was built before it.
        resolver = self._build_disk()
        self._build_placement(placement, fetcher, resolver)
        self._build_commit(storage)
        self._build_crawl(resolver)
        self._build_ownership()
        # Phase two: the few links that close a cycle, as named calls (docs/architecture.md "Wiring").
        self._attach()
        self.tasks: list[asyncio.Task] = []
        self.drained = asyncio.Event()
        self.stats = self._stats_registry()

    def _build_disk(self) -> HostResolver:
        """The agent's disk (frontier, seen set, outbox, spool, replicas) and what wakes a host."""
        s = self.s
        data = Path(s.data_dir)
        data.mkdir(parents=True, exist_ok=True)
        self.signal = HostSignal()
        self.gate = Gate(self.signal.wake, fenced=s.replication.fence)
        self.changes = ChangeLog() if s.replication.enabled else None
        self.frontier = Frontier(data / "frontier.sqlite", changes=self.changes, revisit=s.revisit, clock=self.clock,
                                 wake=self.signal.wake, domain_of=registered_domain)
        self.seen = SeenSet(data / "seen.sqlite")
        self.outbox = Outbox(data / "outbox.sqlite")
        self.spool = Spool(data / "spool", fsync=s.storage_out.fsync)
        self.replicas = ReplicaStore(data / "replicas") if s.replication.enabled else None
        # One resolver and cache for the dispatcher's look-ups and the fetcher's (wancrawl/hostres.py).
        return make_resolver(s.dns, parse_hosts_file(s.hosts_file) if s.hosts_file else {}, dns=s.system_dns)

    def _build_placement(self, placement: Placement | None, fetcher: Fetcher | None, resolver: HostResolver) -> None:
        """Who owns a host: the consultant, or (mode = "kademlia") this agent's overlay node; the
        host directory over it; the fetcher and the peers' client."""
        s, clock = self.s, self.clock
        self.fetcher = fetcher or create_fetcher(s.fetcher, fetch_settings(s), resolver)
        self.overlay: Overlay | None = None
        if placement is None and s.mode == "kademlia":
            kad = kademlia_placement(s, self.address, clock=clock)
            self.overlay, placement = kad.overlay, kad
        self.placement: Placement = placement or consultant_placement(s)
        self.peers = AgentPool(tls=s.tls)
        self.directory = HostDirectory(self.id, self.placement, HostCache(s.routing.host_cache_size), beta=s.routing.beta,
                                       clock=clock)
        self.incidents = Incidents(clock)  # the hostile web by reason: dispatcher and intake note, status reads

    def _build_commit(self, storage: StorageClient | None) -> None:
        """The group commit, its stall watch and the way to storage (spool -> shipper)."""
        s, clock, rep = self.s, self.clock, self.s.replication
        # Fed by every commit; read by membership (no heartbeat while stalled) and the server's health.
        self.progress = ProgressWatch(s.commit_stall_seconds, clock)
        self.loop_lag = LoopLag(s.loop_lag_interval) if s.loop_lag_interval > 0 else None
        self.commit_log = CommitLog(self.frontier, self.seen, self.outbox, self.spool, batch_pages=s.storage_out.batch_pages,
                                    flush_interval=s.storage_out.flush_interval, clock=clock, progress=self.progress)
        storage_client = storage or (make_storage_client(s.storage, tls=s.tls) if s.storage else None)
        check = rep.enabled and rep.check_storage and storage_client is not None
        # Pages spooled before a lease lapse are checked at storage first: the agent that took
        # the hosts over meanwhile may have stored them already.
        self.shipper = StorageShipper(self.spool, storage_client, retry_seconds=s.storage_out.retry_seconds,
                                      lease_left=self.gate.lease_left if check else None,
                                      lapsed_at=self.gate.lapsed_at if check else None,
                                      transient=RETRY_STATUSES, not_placed_hold=s.storage_out.not_placed_hold, clock=clock)
        # A promoted replica's "unshipped" URLs are asked of storage before they are fetched again.
        self.stored_check = StoredCheck(storage_client.lookup, RETRY_STATUSES) if check and storage_client is not None else None

    def _build_crawl(self, resolver: HostResolver) -> None:
        """Membership, intake (the only way into the frontier), routing and the dispatcher, then
        the load figures that read the dispatcher's rate."""
        s, clock, r = self.s, self.clock, self.s.routing
        scope = Scope(s.scope)
        self.membership = Membership(s, self.placement, self.address, saw_epoch=self.directory.consultant_epoch,
                                     gate=self.gate, clock=clock, stalled=self.progress.stalled)
        # Ownership's hook and the replicator's barrier are attached in phase two (_attach).
        self.intake = Intake(self.seen, self.frontier, scope, owners=self.directory.owners, refusing=self.membership.has_left,
                             wake=self.signal.wake, durable=self.commit_log.barrier, sort_query=s.sort_query,
                             incidents=self.incidents)
        router = Router(self.id, self.directory.cache, alpha=r.alpha, beta=r.beta, flush_interval=r.flush_interval)
        self.routing = RoutingService(self.id, router, self.outbox, self.directory, self.peers, self.intake.accept_local,
                                      retry_seconds=r.retry_seconds, max_pushes_in_flight=r.max_pushes_in_flight, clock=clock)
        self.dispatcher = Dispatcher(s, self.frontier, self.fetcher, resolver, scope, self.signal, route=self.routing.route,
                                     finish=self.commit_log.finish, clock=clock, gate=self.gate, stored_check=self.stored_check,
                                     incidents=self.incidents,
                                     sitemap_hint=self.frontier.hint if s.revisit.enabled else None,
                                     epoch=self.directory.current_epoch)
        self.load = LoadGauge(s.load, self.dispatcher.pages_per_second, clock)
        self.interval = IntervalMeter(clock)
        self.resources = probe_resources()  # seed 003's node parameters, read once

    def _build_ownership(self) -> None:
        """Hosts moving between agents: the ledger (a host's whole state), the replicator (r
        backups), HandOver, the settle loop, and the peer guard that asks it."""
        s, clock, rep = self.s, self.clock, self.s.replication
        self.ledger = HostLedger(self.frontier, self.seen, self.dispatcher, wake=self.signal.wake)
        self.replicator = Replicator(
            self.id, self.changes, self.ledger, self.directory, self.peers, spooled=self.spool.last_seq,
            shipped=self.spool.shipped_through, interval=rep.interval, retry_seconds=rep.retry_seconds,
            max_pending=rep.max_pending, clock=clock, backups=rep.backups) if self.changes is not None else None
        may_be_stored = self.stored_check.watch if self.stored_check is not None else None
        # Handovers in are taken only as the peer guard says: attached in phase two (_attach).
        self.handoff = HandOff(self.id, self.ledger, self.directory, self.peers, durable=self.commit_log.barrier,
                               reroute=self.routing.route, may_be_stored=may_be_stored,
                               replicate=self.replicator.sync if self.replicator is not None else None, gate=self.gate,
                               clock=clock, defer_done=rep.unshipped_grace)
        address = self.address
        self.ownership = Ownership(
            self.id, lambda: address, self.ledger, self.replicas, self.directory, self.handoff, self.peers, self.gate,
            self.replicator, self.membership, in_flight=self.frontier.in_flight_of, durable=self.commit_log.barrier,
            settle_seconds=rep.settle_seconds, backups=rep.backups, wait_in_flight=s.fetch.total_timeout + 5,
            unshipped_grace=rep.unshipped_grace, clock=clock, may_be_stored=may_be_stored, view=self.overlay)
        replicas = self.replicas
        self.guard = PeerGuard(self.id, self.directory.routes, self.directory.forget, settling=self.ownership.settling,
                               replica_owner=replicas.owner if replicas is not None else (lambda h: None),
                               promoted_from=self.ownership.promoted_from)

    def _attach(self) -> None:
        """Phase two: the links that close the build order's cycles. Intake -> ownership (a host
        new here may be held until it settles) and -> the replicator (a push is answered once its
        URLs are at the host's backups); HandOff -> the peer guard (who may send a host's state);
        Membership -> load_report (each heartbeat's load reads the dispatcher and the load gauge).
        Each is a call down at run time the import contracts cannot see: docs/architecture.md
        draws them."""
        self.intake.attach(arriving=self.ownership.arriving,
                           replicated=self.replicator.barrier if self.replicator is not None else None)
        self.handoff.attach(admit=self.guard.handover)
        self.membership.attach(load=self.load_report)

    def _stats_registry(self) -> StatsRegistry:
        """Every component's counters, once, under its namespace, and the levels read at a snapshot:
        status, Prometheus (agent/metrics.py) and the chaos harness read this one registry."""
        reg = StatsRegistry()
        reg.register("routing", self.routing.stats)
        reg.gauges("routing.router", self.routing.counts)  # the router's own Counters, by their metric names
        reg.gauges("routing.levels", self.routing.gauges)
        reg.register("intake", self.intake.stats)
        reg.register("directory", self.directory.stats)
        reg.register("directory.cache", self.directory.cache.stats)
        reg.gauges("directory.levels", self.directory.gauges)
        reg.register("membership", self.membership.stats)
        reg.register("gate", self.gate.stats)
        reg.gauges("load.levels", self.load.gauges)
        reg.register("ownership.settle", self.ownership.stats)
        reg.gauges("ownership.levels", self.ownership.gauges)
        reg.register("ownership.handoff", self.handoff.stats)
        reg.register("ownership.guard", self.guard.stats)
        if self.replicator is not None:
            reg.register("ownership.replicator", self.replicator.stats)
            reg.gauges("ownership.replicator.levels", self.replicator.gauges)
        if self.replicas is not None:
            reg.register("ownership.replicas", self.replicas.stats)
        reg.register("commit", self.commit_log.stats)
        reg.register("progress", self.progress.stats)
        reg.gauges("progress.levels", self.progress.gauges)
        reg.register("shipper", self.shipper.stats)
        if self.overlay is not None:
            reg.register("overlay", self.overlay.stats)
            reg.gauges("overlay.levels", self.overlay.gauges)
        if self.loop_lag is not None:
            reg.register("loop_lag", self.loop_lag.stats)
            reg.gauges("loop_lag.levels", self.loop_lag.gauges)
        # The consultant's client reports its failovers between replicas (a Kademlia placement has none).
        placement_metrics = getattr(self.placement, "metrics", None)
        if callable(placement_metrics):
            reg.gauges("consultant", placement_metrics)
        if self.s.revisit.enabled:
            reg.gauges("frontier.levels", lambda: self.frontier.revisit_counts(self.clock()))
        reg.register("dispatch", self.dispatcher.stats)
        reg.register("dns", self.dispatcher.resolver.stats)  # the fetcher's look-ups too: one resolver
        reg.gauges("dns.levels", self.dispatcher.resolver.gauges)
        if self.stored_check is not None:
            reg.register("stored_check", self.stored_check.stats)
        return reg

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self.routing.restore()  # URLs still owed to peers
        for host in self.frontier.hosts_ready():
            self.signal.wake(host)
        try:
            await self.membership.register()
        except errors.WancrawlError as exc:
            log.warning("consultant unreachable at start (%s); crawling on cached routes, retrying", exc)
        loops = {
            "dispatch": self.dispatcher.run(), "routing": self.routing.run(self.s.routing.flush_interval),
            "commit": self.commit_log.run(self.s.commit_interval), "membership": self.membership.run(),
            "storage": self.shipper.run(), "ownership": self.ownership.run(),
        }
        if self.replicator is not None:
            loops["replication"] = self.replicator.run()
        if self.loop_lag is not None:
            loops["loop_lag"] = self.loop_lag.run()
        self.tasks = [asyncio.create_task(coro, name=name) for name, coro in loops.items()]
        for t in self.tasks:
            t.add_done_callback(_report_end)

    async def stop(self) -> None:
        """Graceful: no new fetches, in-flight ones finish, pushes flush, all is committed."""
        await self.dispatcher.stop()
        await self.routing.flush(force=True, deadline=self.clock() + 5)
        self.commit_log.commit(force=True)
        await self.shipper.send(max_batches=50)
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.membership.leave()
        await self.fetcher.close()
        await self.dispatcher.resolver.close()
        await self.peers.close()
        await self.shipper.close()
        await self.placement.close()
        self.frontier.close()
        self.seen.close()
        self.outbox.close()
        if self.replicas is not None:
            self.replicas.close()

    async def drain(self, timeout: float = 120.0) -> tuple[int, int]:
        """Graceful leave (seed 001 §2.4.2): stop fetching, bring the replicas up to date,
        deregister, then hand every host's whole state (queue, seen set, politeness, robots) to
        its new owner, the next agent of its preference list, which may have promoted its
        replica meanwhile (the handover merges into it). Deliver what is owed to peers.
        Returns (URLs handed over, URLs still here or owed)."""
        deadline = self.clock() + timeout
        await self.dispatcher.stop()
        self.commit_log.commit(force=True)
        if self.replicator is not None:
            # Pages go to storage first (a replica learns "done" only for stored pages), then
            # every host's changes to its backup: the backup that takes over is current.
            while len(self.spool) and self.clock() < deadline and await self.shipper.send(max_batches=50) > 0:
                pass
            self.commit_log.commit(force=True)
            await self.replicator.round()
            await self.replicator.round()
            self.replicator.stop()
        await self.membership.leave()
        total = Handed()
        last = Handed()
        while self.clock() < deadline:
            last = await self.handoff.hand_over_all()
            total.urls += last.urls
            if last.hosts == 0:
                break
        await self.routing.flush(force=True, deadline=deadline)
        self.commit_log.commit(force=True)
        remaining = self.routing.pending() + last.kept_urls
        log.info("drained: %d URLs handed over, %d still here or owed", total.urls, remaining)
        self.drained.set()
        return total.urls, remaining

    # -- intake from the network -----------------------------------------------------------------
    async def push(self, epoch: int, urls: Sequence[agent_pb2.UrlItem], route: bool) -> IntakeResult:
        """PushUrls: a peer's URLs for this agent, or (route) seeds this agent routes itself."""
        if not route:
            return await self.intake.accept_push(epoch, urls)
        items, errs = self.intake.screen(urls)
        self.routing.route(items)
        await self.commit_log.barrier()  # local ones queued, the rest in the outbox: durable
        if self.replicator is not None:
            await self.replicator.barrier({it.host for it in items})  # and the local ones at their backups
        return IntakeResult(len(items), [], errs)

    # -- status ---------------------------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing queued (or only parked hosts: none due within the park horizon), fetched,
        owed to peers or waiting for storage."""
        now = self.clock()
        # Hosts the gate keeps closed (settling, lease lapsed) are waiting, not parked.
        closed = self.gate.holding or self.gate.settling or not self.gate.lease_ok(now)
        return ((len(self.frontier) == 0 or (not closed and self.dispatcher.only_parked(now))) and self.dispatcher.idle()
                and self.routing.idle() and not self.commit_log.busy() and self.shipper.idle())

    def load_report(self) -> common_pb2.LoadReport:
        """Every heartbeat's load: seed 000's L and W (agent/placement/load.py), and the longest host
        queues, which are the hosts the consultant's balancer may move (docs/balance.md)."""
        outcome, wire = self.dispatcher.page.outcome.stats, self.dispatcher.requests.stats  # the counts' owners
        level = self.load.measure(len(self.frontier))
        heavy = heaviest(self.frontier.hosts_ready(), self.frontier.queue_len, self.s.load.report_hosts)
        sample = self.interval.sample(outcome.pages, wire.bytes, level.queue)
        resources = common_pb2.Resources(bandwidth_mbps=self.interval.bandwidth, disk_mbps=self.s.load.disk_mbps,
                                         **self.resources)
        return common_pb2.LoadReport(
            queue_length=level.queue, in_flight=self.dispatcher.in_flight,
            pages_per_second=self.dispatcher.pages_per_second(), errors=outcome.errors,
            hosts_owned=self.frontier.hosts_with_work(), capacity=self.s.capacity,
            pages_fetched=outcome.pages, spool_pages=self.spool.pages,
            load_level=level.level, work_area=level.work_area, peak_pages_per_second=level.peak_rate,
            heavy_hosts=[common_pb2.HostLoad(host=h, queue_length=n) for h, n in heavy],
            resources=resources, interval_pages=sample.pages, interval_seconds=sample.seconds,
        )

    def status_counters(self, parked: int | None = None) -> dict[str, float]:
        """The registry's snapshot (every component's counters, summed where two count the same
        thing, and their levels) and the node's own levels; `parked`: the parked-host count when
        the caller listed them already (one scan, not two)."""
        out = self.stats.snapshot()
        if self.s.revisit.enabled:
            seen_changed, seen_same = out.get("revisits_changed", 0.0), out.get("revisits_unchanged", 0.0)
            out["revisit_freshness"] = seen_same / (seen_changed + seen_same) if seen_changed + seen_same else 1.0
        out.update(frontier=len(self.frontier), in_flight=self.dispatcher.in_flight, hosts_with_work=self.frontier.hosts_with_work(),
                   seen=len(self.seen), spool_batches=len(self.spool), idle=float(self.idle()),
                   parked_hosts=len(self.dispatcher.parked(self.clock())) if parked is None else parked)
        return out
