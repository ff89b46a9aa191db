"""The agent's I/O shell: the crawl loop, routing and membership loops, intake and group commit.

The decisions live in plain objects (Router, Politeness/Scheduler, Frontier, SeenSet, Scope,
RobotsCache); this module wires them to the network (fetcher, consultant, peers, storage) and to
the clock. Crash safety rests on one rule, kept by `_commit`: a page counts as done only after
its capture is in the spool and its links are durable (local frontier, or outbox for others).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from agent.fetch import FetchRequest, FetchResponse, create_fetcher
from agent.frontier import Frontier, Item
from agent.hostcache import HostCache, Route
from agent.links import extract_links
from agent.outbox import Outbox
from agent.politeness import Politeness, Scheduler
from agent.robots import RobotsCache
from agent.router import PushBatch, Router, UrlItem
from agent.scope import Scope
from agent.seen import SeenSet
from agent.settings import AgentSettings
from agent.spool import Spool
from consultant.client import Consultant, ConsultantClient
from storage.client import GrpcStorageClient, StorageClient, make_batch
from wancrawl import errors, grpcutil
from wancrawl.hostres import HostResolver, parse_hosts_file
from wancrawl.urls import InvalidUrl, UnsupportedScheme, canonicalize, host_of, host_of_canonical
from wancrawl.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from wancrawl.warcrecords import FetchResult, build_capture

log = logging.getLogger("agent")

HTML_TYPES = ("text/html", "application/xhtml+xml")
REDIRECTS = (301, 302, 303, 307, 308)
RETRY_STATUSES = (429, 500, 502, 503, 504)
MAX_REDIRECT_HOPS = 20  # as browsers and Scrapy


@dataclass
class IntakeResult:
    accepted: int
    not_mine: list[int]
    errors: list[str]


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


class AgentNode:
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
        self.fetcher = fetcher or create_fetcher(settings.fetcher, settings.fetch, self.resolver)
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
        self.epoch = 0
        self.registered = False
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
        for it in self.router.submit(self.outbox.load(), now):  # URLs still owed to peers
            self._intake_local([it])
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
        self.stopping = True
        self.wakeup.set()
        if self.fetch_tasks:
            await asyncio.wait(self.fetch_tasks, timeout=self.s.fetch.total_timeout + 5)
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
        self.stopping = True
        self.router.leaving = True  # also keeps the membership loop from registering again
        self.wakeup.set()
        if self.registered:
            try:
                epoch = await self.consultant.deregister(self.id)
                self.registered = False
                self._saw_epoch(epoch)
            except errors.WancrawlError as exc:
                log.warning("drain: deregister failed (%s); handing over by cached routes", exc)
        if self.fetch_tasks:
            await asyncio.wait(self.fetch_tasks, timeout=self.s.fetch.total_timeout + 5)
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

    # -- membership -----------------------------------------------------------------------------
    async def register(self) -> None:
        loc = self.s.location
        location = common_pb2.Location(city=loc.city, country=loc.country, asn=loc.asn)
        if loc.lat is not None:
            location.lat, location.lon, location.has_coordinates = loc.lat, loc.lon, True  # type: ignore[assignment]
        self.counters["consultant_rpcs"] += 1
        reg = await self.consultant.register(self.id, self.address, location=location, source_ip=self.s.fetch.source_ip or self.s.source_ip, capacity=self.s.capacity)
        self.registered = True
        self.lease = reg.lease_seconds
        self._saw_epoch(reg.epoch)
        log.info("registered %s at %s (epoch %d, lease %.0fs)", self.id, self.address, reg.epoch, reg.lease_seconds)

    def load_report(self) -> common_pb2.LoadReport:
        now = self.clock()
        while self.rate_window and self.rate_window[0] < now - 10:
            self.rate_window.popleft()
        return common_pb2.LoadReport(
            queue_length=len(self.frontier), in_flight=self.in_flight,
            pages_per_second=len(self.rate_window) / 10.0, errors=int(self.counters["errors"]),
            hosts_owned=self.frontier.hosts_with_work(), capacity=self.s.capacity,
            pages_fetched=int(self.counters["pages"]), spool_pages=len(self.spool),
        )

    async def _membership_loop(self) -> None:
        while True:
            interval = self.s.heartbeat_interval or max(0.5, getattr(self, "lease", 15.0) / 3)
            await asyncio.sleep(interval)
            if self.router.leaving:
                return
            try:
                if not self.registered:
                    await self.register()
                    continue
                self.counters["consultant_rpcs"] += 1
                self._saw_epoch(await self.consultant.heartbeat(self.id, self.load_report()))
            except errors.NotFound:
                log.info("consultant forgot %s (restart or expiry): registering again", self.id)
                self.registered = False
            except errors.WancrawlError as exc:
                log.warning("heartbeat failed (%s); crawling on cached routes", exc)

    def _saw_epoch(self, epoch: int) -> None:
        if self.cache.saw_epoch(epoch):
            self.epoch = epoch
            self.route_wakeup.set()

    # -- intake: URLs of hosts this agent owns ------------------------------------------------
    def _intake_local(self, items: list[UrlItem]) -> int:
        """Dedup through the seen set, queue the new ones; returns how many were new. Durable
        at the next commit (outbox rows of bounced URLs are released at the same time)."""
        by_host: dict[str, list[UrlItem]] = {}
        for it in items:
            by_host.setdefault(it.host, []).append(it)
        fresh: list[Item] = []
        for host, its in by_host.items():
            flags = self.seen.add_new(host, [i.url for i in its])
            fresh += [Item(i.url, host, i.depth, i.via) for i, new in zip(its, flags) if new]
            self.counters["duplicates"] += len(its) - sum(flags)
        self.outbox.delivered([i for i in items if i.seq])
        if fresh:
            self.frontier.add(fresh)
            for host in {i.host for i in fresh}:
                if host in self.host_ip:
                    self._wake_known(host)
                else:
                    self._background(self._wake_host(host))
        return len(fresh)

    def _background(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self.bg_tasks.add(t)
        t.add_done_callback(self.bg_tasks.discard)

    def _wake_known(self, host: str) -> None:
        ip = self.host_ip.get(host)
        self.scheduler.wake(host, ip or "unresolved", self.frontier.ready_at(host) or 0.0)
        self.wakeup.set()

    async def _wake_host(self, host: str) -> None:
        if host not in self.host_ip:
            self.host_ip[host] = await self.resolver.resolve(host)
        self._wake_known(host)

    async def intake_push(self, sender: str, epoch: int, urls: list[agent_pb2.UrlItem]) -> IntakeResult:
        """PushUrls: keep the URLs of hosts this agent owns, answer "not mine" for the others
        (only when it knows an answer at least as new as the sender's), then wait for the
        commit so an acknowledged URL is durable."""
        self.counters["agent_rpcs"] += 1
        self._saw_epoch(epoch)
        now = self.clock()
        parsed: list[tuple[int, UrlItem]] = []
        errs: list[str] = []
        for i, u in enumerate(urls):
            try:
                url = canonicalize(u.url, sort_query=self.s.sort_query)
                parsed.append((i, UrlItem(url, host_of(url), u.depth, u.via)))
            except InvalidUrl as exc:
                errs.append(f"{i}: {exc}")
        unknown = sorted({it.host for _, it in parsed if self.router.owns(it.host, now) is None})
        if unknown:
            await self._resolve_now(unknown)
        accepted: list[UrlItem] = []
        not_mine: list[int] = []
        for i, it in parsed:
            owns = False if self.router.leaving else self.router.owns(it.host, self.clock())
            if owns is False:
                not_mine.append(i)
                continue
            # Owner, or the consultant cannot say now: keep it (the sender routed it here).
            reason = self.scope.check(it.url, it.host, it.depth)
            if reason is not None:
                self.counters["out_of_scope"] += 1
                continue
            accepted.append(it)
        self._intake_local(accepted)
        self.counters["pushed_in"] += len(accepted)
        self.counters["not_mine_sent"] += len(not_mine)
        await self.commit_barrier()
        return IntakeResult(len(accepted), not_mine, errs)

    async def _resolve_now(self, hosts: list[str]) -> None:
        for i in range(0, len(hosts), self.s.routing.beta):
            chunk = hosts[i : i + self.s.routing.beta]
            try:
                self.counters["consultant_rpcs"] += 1
                answers = await self.consultant.resolve(chunk)
            except errors.WancrawlError as exc:
                log.warning("resolve failed: %s", exc)
                return
            now = self.clock()
            for a in answers:
                if not a.error and a.agents:
                    self.cache.put(Route(a.host, a.agents, a.epoch, now + a.ttl))

    # -- routing loop: batched resolves and pushes ------------------------------------------
    def route(self, items: list[UrlItem]) -> None:
        """Send discovered URLs on their way: local ones to the frontier, the rest to outboxes.
        Every URL gets an outbox row first (released at once if it is local), so whatever is
        owed to a peer is on disk at the next commit."""
        if not items:
            return
        local = self.router.submit(self.outbox.add(items), self.clock())
        self._intake_local(local)
        self.route_wakeup.set()

    async def _routing_loop(self) -> None:
        interval = max(0.01, min(0.05, self.s.routing.flush_interval / 2))
        while True:
            await self.route_wakeup.wait(interval)
            try:
                await self._flush_routes(force=False)
            except Exception:  # noqa: BLE001 - routing must go on
                log.exception("routing step failed")

    async def _flush_routes(self, force: bool, deadline: float | None = None) -> None:
        while True:
            now = self.clock()
            hosts = self.router.hosts_to_resolve(now)
            while hosts:
                await self._resolve_batch(hosts)
                hosts = self.router.hosts_to_resolve(self.clock())
            batches = self.router.due_pushes(self.clock(), force=force)
            if batches:
                await asyncio.gather(*(self._push(b) for b in batches))
            if not force or self.router.idle() or deadline is None or self.clock() > deadline:
                return
            await asyncio.sleep(0.05)

    async def _resolve_batch(self, hosts: list[str]) -> None:
        try:
            self.counters["consultant_rpcs"] += 1
            answers = await self.consultant.resolve(hosts)
        except errors.WancrawlError as exc:
            log.warning("resolve of %d hosts failed: %s", len(hosts), exc)
            local = self.router.resolve_failed(hosts, self.clock(), self.s.routing.retry_seconds)
            self._intake_local(local)
            return
        now = self.clock()
        routes = [Route(a.host, a.agents, a.epoch, now + a.ttl) for a in answers if not a.error and a.agents]
        errs = {a.host: a.error for a in answers if a.error}
        if answers:
            self._saw_epoch(answers[0].epoch)
        # The consultant answers with canonical names; we asked with canonical names too.
        local = self.router.resolved(routes, now, errs)
        if self.router.rejected:
            self.counters["invalid_urls"] += len(self.router.rejected)
            self.outbox.delivered(self.router.rejected)
        self._intake_local(local)

    async def _push(self, batch: PushBatch) -> None:
        req = agent_pb2.PushUrlsRequest(
            sender_id=self.id, epoch=batch.epoch,
            urls=[agent_pb2.UrlItem(url=i.url, depth=i.depth, via=i.via) for i in batch.items],
        )
        try:
            self.counters["agent_rpcs"] += 1
            resp = await self.peers.stub(batch.address).PushUrls(req, timeout=30)
        except Exception as exc:  # noqa: BLE001 - any failure: the URLs stay owed
            log.warning("push of %d URLs to %s failed: %s", len(batch.items), batch.owner_id, getattr(exc, "details", lambda: exc)())
            self.router.push_failed(batch, self.clock(), self.s.routing.retry_seconds)
            return
        delivered = self.router.pushed(batch, list(resp.not_mine), resp.epoch, self.clock())
        self.outbox.delivered(delivered)
        if resp.not_mine:
            self.route_wakeup.set()

    # -- the crawl loop -------------------------------------------------------------------------
    async def _dispatch_loop(self) -> None:
        while not self.stopping:
            now = self.clock()
            started = False
            while self.in_flight < self.s.concurrency:
                host = self.scheduler.pop_ready(now)
                if host is None:
                    break
                self._start(host, now)
                started = True
            if started:
                await asyncio.sleep(0)
                continue
            nxt = self.scheduler.next_wakeup(now)
            timeout = 0.5 if nxt is None else max(0.0, min(0.5, nxt - now))
            await self.wakeup.wait(timeout)

    def _start(self, host: str, now: float) -> None:
        ip = self.host_ip.get(host) or "unresolved"
        item = self.frontier.pop(host, now)
        if item is None:
            ready = self.frontier.ready_at(host)
            if ready is None:
                self.scheduler.remove(host)
            else:
                self.scheduler.wake(host, ip, ready)
            return
        if self.s.robots.enabled and self.robots.needs_fetch(host, now):
            # robots.txt first, from the origin (scheme, port) of the URL that needs it.
            self.frontier.retry(item)
            if host not in self.robots_in_flight:
                self.robots_in_flight.add(host)
                self._spawn(self._fetch_robots(host, ip, item.url))
            return
        if self.s.robots.enabled and not self.robots.allowed(item.url, host):
            self.counters["robots_denied"] += 1
            self._finish(item)
            self._wake_known(host)
            return
        limit = self.s.scope.max_pages_per_host
        if limit is not None and self.pages_per_host.get(host, 0) >= limit:
            self.counters["out_of_scope"] += 1
            self._finish(item)
            self._wake_known(host)
            return
        self._spawn(self._fetch_page(item, ip))

    def _spawn(self, coro) -> None:
        self.in_flight += 1
        t = asyncio.get_running_loop().create_task(coro)
        self.fetch_tasks.add(t)
        t.add_done_callback(self._fetch_done)

    def _fetch_done(self, t: asyncio.Task) -> None:
        self.fetch_tasks.discard(t)
        self.in_flight -= 1
        self.wakeup.set()
        if not t.cancelled() and t.exception() is not None:
            log.error("fetch task failed", exc_info=t.exception())

    async def _fetch(self, url: str, host: str, ip: str) -> FetchResponse:
        self.scheduler.started(host, ip, self.clock())
        try:
            resp = await self.fetcher.fetch(FetchRequest(url, host, None if ip == "unresolved" else ip))
        except Exception as exc:  # noqa: BLE001 - a fetcher bug must not stop the crawl
            log.exception("fetcher raised on %s", url)
            resp = FetchResponse(url, error="internal", error_detail=str(exc), started_at=self.clock(), ended_at=self.clock())
        self.counters["fetches"] += 1
        self.counters["bytes"] += resp.raw_length
        return resp

    async def _fetch_robots(self, host: str, ip: str, page_url: str) -> None:
        scheme, _, rest = page_url.partition("://")
        url = f"{scheme}://{rest.split('/', 1)[0]}/robots.txt"
        try:
            resp = await self._fetch(url, host, ip)
            hops = 0
            # RFC 9309 2.3.1.2: follow at least five redirects for robots.txt.
            while resp.status in REDIRECTS and resp.location and hops < 5:
                hops += 1
                try:
                    url = canonicalize(resp.location, url)
                    resp = await self.fetcher.fetch(FetchRequest(url, host_of(url), None))
                except InvalidUrl:
                    break
            self.counters["robots_fetches"] += 1
            self.robots.update(host, resp.status if not resp.error else 0, resp.body, self.clock())
            delay = self.robots.crawl_delay(host)
            if delay is not None:
                self.politeness.set_delay(host, delay)
            self.scheduler.finished(host, ip, self.clock(), resp.status or None, resp.retry_after, has_work=True)
        finally:
            self.robots_in_flight.discard(host)

    async def _fetch_page(self, item: Item, ip: str) -> None:
        resp = await self._fetch(item.url, item.host, ip)
        now = self.clock()
        host = item.host
        retry = resp.error in ("connect", "timeout", "read", "dns", "internal") or resp.status in RETRY_STATUSES
        self.scheduler.finished(host, ip, now, resp.status or None, resp.retry_after, has_work=True)
        if retry:
            n = self.attempts.get(item.url, 0) + 1
            if self.stopping or n <= self.s.politeness.max_retries:
                # 429/503: Retry-After (the politeness backoff holds the host meanwhile).
                wait = min(resp.retry_after or 0.0, self.s.politeness.max_retry_after)
                if not self.stopping:
                    self.attempts[item.url] = n
                    self.counters["retries"] += 1
                if resp.status:
                    self._capture(item, resp)
                self.frontier.retry(item, now + wait)
                self._wake_known(host)
                return
            self.counters["given_up"] += 1
        self.attempts.pop(item.url, None)
        if resp.error and not resp.status:
            self.counters["errors"] += 1
            self._finish(item)
            return
        self.pages_per_host[host] = self.pages_per_host.get(host, 0) + 1
        self.counters["pages"] += 1
        self.rate_window.append(now)
        if resp.truncated:
            self.counters["truncated"] += 1
        if resp.status in REDIRECTS and resp.location:
            self.counters["redirects"] += 1
            self._discover(item, [resp.location], redirect=True)
        elif resp.status == 200 and resp.content_type in HTML_TYPES and not resp.truncated:
            res = extract_links(resp.body, item.url, resp.charset, sort_query=self.s.sort_query)
            self.counters["dropped_schemes"] += sum(res.dropped_schemes.values())
            self.counters["invalid_urls"] += res.invalid
            self._discover(item, res.links, redirect=False)
        elif resp.status == 200:
            self.counters["not_html"] += 1
        self._capture(item, resp)
        self._finish(item)

    def _discover(self, item: Item, links: list[str], redirect: bool) -> None:
        depth = item.depth + 1
        hops = self.redirect_hops.pop(item.url, 0) + 1 if redirect else 0
        if hops > MAX_REDIRECT_HOPS:
            self.counters["out_of_scope"] += 1
            return
        out: list[UrlItem] = []
        recent = self.recently_routed
        for href in links:
            if not redirect:
                # Navigation repeats the same links on every page: a URL routed a moment ago
                # is already with its owner (or owed to it), so skip it before any more work.
                if href in recent:
                    self.counters["recent_skips"] += 1
                    continue
                url, host = href, host_of_canonical(href)
            else:
                try:
                    url = canonicalize(href, item.url, sort_query=self.s.sort_query)
                    host = host_of(url)
                except UnsupportedScheme:
                    self.counters["dropped_schemes"] += 1
                    continue
                except InvalidUrl:
                    self.counters["invalid_urls"] += 1
                    continue
            if self.scope.check(url, host, depth) is not None:
                self.counters["out_of_scope"] += 1
                continue
            if redirect:
                self.redirect_hops[url] = hops
            else:
                if len(recent) >= self.s.routing.recent_filter:
                    # Forget the oldest eighth (dicts keep insertion order): a cheap bounded FIFO.
                    for old in list(itertools.islice(recent, len(recent) // 8 or 1)):
                        del recent[old]
                recent[url] = None
            out.append(UrlItem(url, host, depth, item.url))
        self.route(out)

    def _capture(self, item: Item, resp: FetchResponse) -> None:
        trunc = {"decoded": "length"}.get(resp.truncated or "", resp.truncated)
        fr = FetchResult(
            url=item.url, status=resp.status, response_headers=resp.headers, body=resp.body, agent_id=self.id,
            started_at=resp.started_at, ended_at=resp.ended_at, request_headers=resp.request_headers,
            reason=resp.reason, http_version=resp.http_version or "HTTP/1.1", ip=resp.ip or "",
            truncated=trunc, body_decoded=True,
        )
        try:
            cap = build_capture(fr, level=self.s.storage_out.gzip_level)
        except errors.InvalidArgument as exc:
            log.warning("cannot record %s: %s", item.url, exc)
            return
        if not self.captures:
            self.captures_since = self.clock()
        self.captures.append(cap)

    def _finish(self, item: Item) -> None:
        self.finished_items.append(item)
        if len(self.captures) >= self.s.storage_out.batch_pages:
            self._flush_captures(force=True)

    # -- group commit ---------------------------------------------------------------------------
    def _flush_captures(self, force: bool) -> None:
        due = self.captures and (force or self.clock() - self.captures_since >= self.s.storage_out.flush_interval)
        if due:
            self.spool.put(make_batch(self.captures))
            self.captures = []
        if due or not self.captures:
            # Every finished page's capture is in the spool now (or it had none).
            self.spooled_items.extend(self.finished_items)
            self.finished_items = []

    def _commit(self) -> None:
        """Outbox first, then the frontier (links added and pages done in one transaction), then
        the seen set: a crash between steps can only cause a repeat, never a loss."""
        self._flush_captures(force=False)
        self.outbox.flush()
        for it in self.spooled_items:
            self.frontier.done(it)
        self.spooled_items = []
        self.frontier.flush()
        self.seen.flush()
        waiters, self.commit_waiters = self.commit_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def commit_barrier(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.commit_waiters.append(fut)
        await fut

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.commit_interval)
            try:
                self._commit()
            except Exception:  # noqa: BLE001
                log.exception("commit failed")

    # -- storage --------------------------------------------------------------------------------
    async def _storage_loop(self) -> None:
        while True:
            sent = await self._send_spool(max_batches=10)
            await asyncio.sleep(0.05 if sent else self.s.storage_out.retry_seconds / 4)

    async def _send_spool(self, max_batches: int) -> int:
        if self.storage is None:
            return 0
        paths = self.spool.oldest(max_batches)
        if not paths:
            return 0
        batches = [self.spool.read(p) for p in paths]
        try:
            ack = await self.storage.send(batches)
        except errors.WancrawlError as exc:
            self.counters["storage_failures"] += 1
            log.warning("storage unavailable (%s); %d batches stay in the spool", exc, len(self.spool))
            await asyncio.sleep(self.s.storage_out.retry_seconds)
            return 0
        if ack.rejected:
            log.warning("storage rejected %d captures: %s", len(ack.rejected), ack.rejected[:3])
        self.spool.remove(paths)
        self.counters["spool_batches_sent"] += len(paths)
        return len(paths)

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
            seen=len(self.seen), epoch=self.epoch, routed=c.discovered, routed_local=c.local, n=c.n,
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
