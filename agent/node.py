"""The agent node: its state, its tasks, start/stop/drain and its counters.

The decisions live in plain objects (Router, Politeness/Scheduler, Frontier, SeenSet, Scope,
RobotsCache); AgentNode wires them to the network (fetcher, consultant, peers, storage) and to
the clock through the parts it is made of: membership.py, intake.py, routing.py, crawling.py
and commit.py. Crash safety rests on one rule, kept by `Commit._commit`: a page counts as done
only after its capture is in the spool and its links are durable (local frontier, or outbox).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from pathlib import Path

from agent.commit import Commit
from agent.crawling import Crawling
from agent.fetch import create_fetcher
from agent.frontier import Frontier, Item
from agent.hostcache import HostCache
from agent.intake import Intake, IntakeResult
from agent.membership import Membership
from agent.outbox import Outbox
from agent.politeness import Politeness, Scheduler
from agent.robots import RobotsCache
from agent.router import Router, UrlItem
from agent.routing import Routing
from agent.scope import Scope
from agent.seen import SeenSet
from agent.settings import AgentSettings, fetch_settings
from agent.spool import Spool
from consultant.client import Consultant, ConsultantClient
from storage.client import GrpcStorageClient, StorageClient
from wancrawl import errors, grpcutil
from wancrawl.hostres import HostResolver, parse_hosts_file
from wancrawl.v1 import agent_pb2_grpc

log = logging.getLogger("agent")

__all__ = ["AgentNode", "IntakeResult", "Waker"]


class Waker:
    """A flag a loop sleeps on with a timeout. Unlike wait_for(Event.wait()), no inner task is
    made, so cancelling the loop at shutdown is immediate (3.11's wait_for could hang there)."""

    def __init__(self) -> None:
        self._fut: asyncio.Future | None = None
        self._flag = False

    def set(self) -> None:
        self._flag = True
        f = self._fut
        if f is not None and not f.done():
            f.set_result(None)

    async def wait(self, timeout: float) -> None:
        if self._flag:
            self._flag = False
            return
        loop = asyncio.get_running_loop()
        f = self._fut = loop.create_future()
        h = loop.call_later(timeout, lambda: f.done() or f.set_result(None))
        try:
            await f
        finally:
            h.cancel()
            self._fut = None
            self._flag = False


class PeerPool:
    """One gRPC channel per peer address, reused across pushes."""

    def __init__(self) -> None:
        self.channels: dict[str, object] = {}
        self.stubs: dict[str, agent_pb2_grpc.AgentStub] = {}

    def stub(self, address: str) -> agent_pb2_grpc.AgentStub:
        s = self.stubs.get(address)
        if s is None:
            ch = grpcutil.channel(address)
            self.channels[address] = ch
            s = self.stubs[address] = agent_pb2_grpc.AgentStub(ch)
        return s

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close()  # type: ignore[attr-defined]


class AgentNode(Membership, Intake, Routing, Crawling, Commit):
    """Owns the agent's state and tasks. `start()`, then `stop()` (graceful: in-flight fetches
    finish, everything is committed, the agent deregisters)."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        consultant: Consultant | None = None,
        storage: StorageClient | None = None,
        fetcher=None,
        clock=time.time,
    ):
        self.s = settings
        self.id = settings.agent_id
        self.clock = clock
        data = Path(settings.data_dir)
        data.mkdir(parents=True, exist_ok=True)
        self.frontier = Frontier(data / "frontier.sqlite")
        self.seen = SeenSet(data / "seen.sqlite")
        self.outbox = Outbox(data / "outbox.sqlite")
        self.spool = Spool(data / "spool", fsync=settings.storage_out.fsync)
        hosts = parse_hosts_file(settings.hosts_file) if settings.hosts_file else {}
        self.resolver = HostResolver(hosts, system_dns=settings.system_dns)
        self.fetcher = fetcher or create_fetcher(settings.fetcher, fetch_settings(settings), self.resolver)
        self.consultant: Consultant = consultant or ConsultantClient(settings.consultant)
        self.storage: StorageClient | None = storage or (GrpcStorageClient(settings.storage) if settings.storage else None)
        self.cache = HostCache(settings.routing.host_cache_size)
        r = settings.routing
        self.router = Router(self.id, self.cache, alpha=r.alpha, beta=r.beta, flush_interval=r.flush_interval)
        p = settings.politeness
        self.politeness = Politeness(
            p.delay, max_per_host=p.max_per_host, max_per_ip=p.max_per_ip, ip_delay=p.ip_delay,
            max_delay=p.max_crawl_delay, max_backoff=p.max_backoff, max_retry_after=p.max_retry_after,
        )
        self.scheduler = Scheduler(self.politeness)
        self.robots = RobotsCache(settings.fetch.user_agent, ttl=settings.robots.ttl, error_ttl=settings.robots.error_ttl)
        self.scope = Scope(settings.scope)
        self.peers = PeerPool()
        self.address = settings.advertise
        # Crawl state in memory (rebuilt from the frontier after a restart).
        self.host_ip: dict[str, str | None] = {}
        self.pages_per_host: dict[str, int] = {}
        self.attempts: dict[str, int] = {}
        self.in_flight = 0
        self.robots_in_flight: set[str] = set()
        # Group commit: pages whose capture and links await durability.
        self.captures: list = []
        self.captures_since = 0.0
        self.finished_items: list[Item] = []   # captured, waiting for their spool batch
        self.spooled_items: list[Item] = []    # their capture is in the spool: done at next commit
        self.commit_waiters: list[asyncio.Future] = []
        self.wakeup = Waker()        # the dispatcher: a fetch ended, a host got work
        self.route_wakeup = Waker()  # the router: URLs to resolve or push
        self.stopping = False
        self.tasks: list[asyncio.Task] = []
        self.fetch_tasks: set[asyncio.Task] = set()
        self.bg_tasks: set[asyncio.Task] = set()
        self.redirect_hops: dict[str, int] = {}  # URL reached by redirects -> hops so far
        # URLs this agent routed lately (in scope), oldest first; a pure traffic/CPU saver: the
        # owner's seen set is what guarantees each URL is crawled once.
        self.recently_routed: dict[str, None] = {}
        self.drained = asyncio.Event()
        self.metrics_snapshot: dict[str, float] = {}  # status_counters(), refreshed each second
        self.registered = False
        self.lease = 15.0  # the consultant's lease, learnt at Register
        self.rate_window: deque[float] = deque()
        self.counters: dict[str, float] = {
            "fetches": 0, "pages": 0, "bytes": 0, "errors": 0, "robots_fetches": 0, "robots_denied": 0,
            "out_of_scope": 0, "dropped_schemes": 0, "invalid_urls": 0, "redirects": 0, "not_html": 0,
            "truncated": 0, "retries": 0, "given_up": 0, "duplicates": 0, "pushed_in": 0, "not_mine_sent": 0,
            "consultant_rpcs": 0, "agent_rpcs": 0, "spool_batches_sent": 0, "storage_failures": 0,
            "recent_skips": 0,
        }

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        now = self.clock()
        self._intake_local(self.router.submit(self.outbox.load(), now))  # URLs still owed to peers
        for host in list(self.frontier.hosts_ready()):
            await self._wake_host(host)
        try:
            await self.register()
        except errors.WancrawlError as exc:
            log.warning("consultant unreachable at start (%s); crawling on cached routes, retrying", exc)
        loops = [self._dispatch_loop, self._routing_loop, self._commit_loop, self._membership_loop, self._storage_loop]
        self.tasks = [asyncio.create_task(f(), name=f.__name__) for f in loops]

    async def stop(self) -> None:
        """Graceful: no new fetches, in-flight ones finish, pushes flush, all is committed."""
        await self._stop_fetching()
        await self._flush_routes(force=True, deadline=self.clock() + 5)
        self._flush_captures(force=True)
        self._commit()
        await self._send_spool(max_batches=50)
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        try:
            if self.registered:
                await self.consultant.deregister(self.id)
        except errors.WancrawlError as exc:
            log.warning("deregister failed: %s", exc)
        await self.fetcher.close()
        await self.peers.close()
        for c in (self.consultant, self.storage):
            if c is not None and hasattr(c, "close"):
                await c.close()  # type: ignore[union-attr]
        self.frontier.close()
        self.seen.close()
        self.outbox.close()

    async def drain(self, timeout: float = 120.0) -> tuple[int, int]:
        """Graceful leave: deregister (the consultant hands this agent's hosts to their next
        agents and bumps the epoch), let in-flight fetches finish, route every queued URL to
        its new owner and wait until they acknowledged. Returns (handed over, still owed)."""
        self.router.leaving = True  # also keeps the membership loop from registering again
        if self.registered:
            try:
                epoch = await self.consultant.deregister(self.id)
                self.registered = False
                self._saw_epoch(epoch)
            except errors.WancrawlError as exc:
                log.warning("drain: deregister failed (%s); handing over by cached routes", exc)
        await self._stop_fetching()
        handed = 0
        for host in list(self.frontier.hosts_ready()):
            items = self.frontier.export_host(host)
            self.route([UrlItem(i.url, host, i.depth, i.via) for i in items])
            self.frontier.drop_host(host)
            handed += len(items)
        self._commit()
        await self._flush_routes(force=True, deadline=self.clock() + timeout)
        self._commit()
        log.info("drained: %d URLs handed over, %d still owed", handed, self.router.pending())
        self.drained.set()
        return handed, self.router.pending()

    async def _stop_fetching(self) -> None:
        """No new fetches; the ones under way finish (bounded by the fetch timeout)."""
        self.stopping = True
        self.wakeup.set()
        if self.fetch_tasks:
            await asyncio.wait(self.fetch_tasks, timeout=self.s.fetch.total_timeout + 5)

    # -- status ---------------------------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing queued, fetched, owed to peers or waiting for storage."""
        return (
            len(self.frontier) == 0 and self.in_flight == 0 and self.router.idle()
            and not self.captures and not self.finished_items and not self.spooled_items
            and (self.storage is None or len(self.spool) == 0)
        )

    def status_counters(self) -> dict[str, float]:
        c = self.router.c
        out = dict(self.counters)
        out.update(
            frontier=len(self.frontier), in_flight=self.in_flight, hosts_with_work=self.frontier.hosts_with_work(),
            seen=len(self.seen), epoch=self.cache.epoch, routed=c.discovered, routed_local=c.local, n=c.n,
            m=len(c.m_hosts), pushes=c.pushes, push_failures=c.push_failures, not_mine_received=c.not_mine,
            resolves=c.resolves, resolved_hosts=c.resolved_hosts, resolve_failures=c.resolve_failures,
            host_cache_hit_ratio=self.cache.hit_ratio, host_cache_size=len(self.cache),
            router_pending=self.router.pending(), spool_batches=len(self.spool), idle=float(self.idle()),
            hosts_routed=len(c.hosts), alpha=self.s.routing.alpha, beta=self.s.routing.beta,
            # Seed 002's coefficients: mu = share of discovered URLs sent to other agents,
            # lambda = share of distinct hosts that needed a consultant answer.
            mu=(c.n / c.discovered) if c.discovered else 0.0,
        )
        out["lambda"] = (c.resolved_hosts / len(c.hosts)) if c.hosts else 0.0
        return out
