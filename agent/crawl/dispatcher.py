"""The dispatcher: politeness picks a host, robots.txt first, fetch, then the outcome is carried out."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from agent.crawl.bytebudget import ByteBudget
from agent.crawl.incidents import BOMB_RATIO, TRAP_SCOPE_REASONS, Incidents
from agent.crawl.links import extract_links
from agent.crawl.outcome import ERROR_KINDS, MAX_REDIRECT_HOPS, REDIRECTS, Policy, decide, http_class
from agent.crawl.politeness import OriginBackoff, Politeness, Scheduler, origin_of
from agent.crawl.refetch import StoredCheck
from agent.crawl.robots import RobotsCache, RobotsState
from agent.crawl.scope import Scope
from agent.crawl import sitemap
from agent.crawl.sitemap import SitemapBook
from agent.fetch import Fetcher, FetchRequest, FetchResponse
from agent.placement.gate import Gate
from agent.settings import AgentSettings
from agent.state.frontier import Frontier, Item
from agent.state.revisit import Visit, changed, conditional_headers, validators
from agent.waker import HostSignal
from wancrawl import errors
from wancrawl.hostres import HostResolver
from wancrawl.runtime.looplag import PassBudget
from wancrawl.urls import InvalidUrl, UnsupportedScheme, canonicalize, host_of_canonical
from wancrawl.warcrecords import Capture, FetchResult, build_capture

log = logging.getLogger("agent")

INF = float("inf")
UNRESOLVED = "unresolved"  # the scheduler's IP key for a host whose address is not known yet
STARTS_PER_TURN = 256  # hosts looked at before the loop yields: refused items never starve the loop
THREAD_PARSE_BYTES = 256 * 1024  # bodies above this are parsed in a thread (docs/agent-fetching.md)
# Page work (parse, route, record) per event-loop pass: the pages past it wait for the next pass,
# so responses arriving together do not hold timers and RPCs for the whole batch (docs/agent.md).
PAGE_WORK_PER_PASS = 0.02
REDIRECT_HOPS_KEPT = 100_000  # redirect targets whose hop count is remembered (oldest dropped)


@dataclass(frozen=True)
class Parked:
    host: str
    until: float   # unix time the host may be fetched again
    reason: str


@dataclass(frozen=True)
class HostCrawlState:
    """The dispatcher's part of one host's state (agent/ownership/ledger.py HostState holds the rest)."""

    crawl_delay: float | None
    backoff_until: float
    backoff_level: int
    robots: list[tuple[str, RobotsState]]  # (origin, its robots.txt entry)
    pages: int


class Dispatcher:
    """Owns the crawl of this agent's hosts: scheduler and politeness, robots.txt, fetches in
    flight, per-host page counts and retry counts. Hosts get work through `signal` (intake and
    the ledger wake them); finished pages go to `finish` (the commit log) and their links to
    `route`. `wake`, `stop`, `idle` and the host export/import/drop are its public entries."""

    def __init__(
        self,
        settings: AgentSettings,
        frontier: Frontier,
        fetcher: Fetcher,
        resolver: HostResolver,
        scope: Scope,
        signal: HostSignal,
        *,
        route: Callable[[list[Item]], None],
        finish: Callable[[Item | None, Capture | None], None],
        clock: Callable[[], float],
        gate: Gate | None = None,
        stored_check: StoredCheck | None = None,
        incidents: Incidents | None = None,
        sitemap_hints: Callable[[list[sitemap.Entry]], None] | None = None,
        pass_budget: PassBudget | None = None,
        epoch: Callable[[], int] | None = None,
    ):
        self.s = settings
        self.id = settings.agent_id
        self.frontier = frontier
        self.fetcher = fetcher
        self.resolver = resolver
        self.scope = scope
        self.signal = signal
        self.route = route
        self.finish = finish
        self.clock = clock
        # The lease and held hosts (one fetcher per host); without one, every host, always.
        self.gate = gate or Gate(signal.wake, fenced=False)
        # URLs a dead owner may have stored already: storage is asked before they are fetched.
        self.stored_check = stored_check
        # What the hostile web did, by reason, for the operator (shared with intake).
        self.incidents = incidents or Incidents(clock)
        # Sitemaps (agent/crawl/sitemap.py): the per-host bounds, and where the lastmod /
        # changefreq / priority hints of in-scope sitemap entries go (a revisit schedule takes
        # them; by default nobody). Every entry of one call is on the sitemap's own host, which
        # this agent owned when it fetched the sitemap.
        sm = settings.sitemaps
        self.sitemaps = SitemapBook(sm.max_files_per_host, sm.max_bytes_per_host, sm.max_urls_per_host)
        self.sitemap_hints = sitemap_hints or (lambda entries: None)
        # Finished fetches take turns: at most PAGE_WORK_PER_PASS of page work per loop pass.
        self.pass_budget = pass_budget or PassBudget(PAGE_WORK_PER_PASS)
        p = settings.politeness
        self.policy = Policy(p.max_retries, p.max_retry_after)
        # The per-IP delay is never stricter than the host delay (a server with one site is paced
        # by the site's delay; politeness.delay = 0 turns both off, as on one's own servers).
        self.politeness = Politeness(
            p.delay, max_per_host=p.max_per_host, max_per_ip=p.max_per_ip, ip_delay=min(p.ip_delay, p.delay),
            max_delay=p.max_crawl_delay, max_backoff=p.max_backoff, max_retry_after=p.max_retry_after,
        )
        self.scheduler = Scheduler(self.politeness)
        self.origins = OriginBackoff(max(p.delay, 1.0), p.max_backoff)
        r = settings.robots
        self.robots = RobotsCache(settings.fetch.user_agent, ttl=r.ttl, error_ttl=r.error_ttl, retry_base=r.retry_base)
        self.host_ip: dict[str, str | None] = {}
        # robots.txt is per origin (RFC 9309): the robots cache is keyed by origin; these are the
        # origins of each host it holds entries for.
        self.origins_of: dict[str, set[str]] = {}
        # host or origin -> why its queue was dropped (budget, DNS; an origin: robots.txt unreachable)
        self.given_up: dict[str, str] = {}
        self.attempts: dict[str, int] = {}       # URL -> failed tries so far
        self.redirect_hops: dict[str, int] = {}  # URL reached by redirects -> hops so far
        # URLs routed lately (in scope), oldest first; a pure traffic/CPU saver: the owner's
        # seen set is what guarantees each URL is crawled once. Forgotten whenever the placement
        # epoch changes (`epoch`: the directory's): a URL routed before went to an owner that may
        # have died since with the URL in no surviving replica (its push acknowledged while a
        # backup lagged), and skipped here again it would be lost (issue 23, kill2 with
        # balancing on: docs/balance.md "Stored twice after a move at a death").
        self.recent: dict[str, None] = {}
        self.epoch = epoch
        self._recent_epoch = epoch() if epoch is not None else 0
        self.in_flight = 0
        self.fetch_tasks: set[asyncio.Task] = set()
        self.bg_tasks: set[asyncio.Task] = set()
        self.robots_in_flight: set[str] = set()
        # Bytes under the HTML parser at once (memory.parse_bytes_in_flight), threads included.
        self.parses = ByteBudget(settings.memory.parse_bytes_in_flight)
        self.stopping = False
        self.rate_window: deque[float] = deque()  # times of recent pages (pages/s for heartbeats)
        self.counters: dict[str, float] = {
            "fetches": 0, "pages": 0, "bytes": 0, "errors": 0, "robots_fetches": 0, "robots_denied": 0,
            "out_of_scope": 0, "dropped_schemes": 0, "invalid_urls": 0, "redirects": 0, "not_html": 0,
            "truncated": 0, "retries": 0, "given_up": 0, "recent_skips": 0, "budget_dropped": 0, "hosts_given_up": 0,
            "robots_deferred": 0, "robots_given_up": 0, "links_over_cap": 0, "nofollow_skipped": 0, "noindex_pages": 0,
            "fenced_results": 0, "hosts_dns_failed": 0, "origins_given_up": 0,
            # Continuous crawling (issue 26): revisits fetched, of them those that found the page
            # changed / unchanged, 304 answers, and the payload bytes those 304s did not send.
            "revisits": 0, "revisits_changed": 0, "revisits_unchanged": 0, "not_modified": 0, "not_modified_bytes": 0,
            "sitemaps": 0, "sitemap_urls": 0, "sitemap_refused": 0, "sitemap_errors": 0, "sitemaps_skipped": 0,
            "parse_waits": 0, "parse_pieces": 0, "parse_pieces_skipped": 0,
        }
        # Failed requests and refused URLs by kind (outcome.ERROR_KINDS); exported as one labelled
        # family, so not summed into status_counters.
        self.fetch_errors: dict[str, float] = dict.fromkeys(ERROR_KINDS, 0.0)
        self._last_progress = (self.clock(), 0.0)

    # -- waking hosts -----------------------------------------------------------------------------
    def wake(self, host: str) -> None:
        """The host has work: into the scheduler (after a DNS look-up if it is new here)."""
        if host in self.host_ip:
            self._schedule(host)
        else:
            t = asyncio.get_running_loop().create_task(self._resolve_and_schedule(host))
            self.bg_tasks.add(t)
            t.add_done_callback(self.bg_tasks.discard)

    def _schedule(self, host: str) -> None:
        if not self.politeness.tracks(host):
            # New to politeness (or forgotten while idle): its robots.txt Crawl-delay again.
            delay = self._crawl_delay(host)
            if delay is not None:
                self.politeness.set_delay(host, delay)
        self.scheduler.wake(host, self.host_ip.get(host) or UNRESOLVED, self.frontier.ready_at(host, self.origin_wait) or 0.0)
        self.signal.poke()

    def origin_wait(self, origin: str) -> float:
        """When the origin's URLs may be fetched (absolute time; <= now: now). Robots.txt, backoff
        and give-ups are per origin (RFC 9309 scopes robots.txt to scheme, host and port): a
        waiting origin never holds back another origin of its host (Frontier.pop passes it over)."""
        if origin in self.given_up:
            return 0.0  # its URLs are finished as they come up
        if origin in self.robots_in_flight:
            return INF  # robots.txt first; its end wakes the host
        t = self.origins.until(origin)
        if self.s.robots.enabled:
            failing = self.robots.unreachable(origin)
            if failing is not None:
                # Retry at failing[1], or give up at once when the give-up time has come.
                t = max(t, min(failing[1], failing[0] + self.s.robots.give_up_after))
        return t

    def _parked_origin(self, origin: str, now: float) -> tuple[float, str] | None:
        """(next try, reason) when the origin counts as parked: it cannot be fetched within the
        park horizon, or its robots.txt has been unreachable for robots.park_after (its retries
        back off for many minutes before they pass the horizon: a crawl must not wait for them)."""
        if origin in self.given_up:
            return None
        wait = self.origin_wait(origin)
        if self.s.robots.enabled:
            failing = self.robots.unreachable(origin)
            if failing is not None and (now - failing[0] >= self.s.robots.park_after or wait > now + self.s.politeness.park_horizon):
                return failing[1], f"robots.txt unreachable (last status {failing[2]}) for {now - failing[0]:.0f}s"
        if wait > now + self.s.politeness.park_horizon and wait != INF:
            return wait, f"backoff after {self.origins.level(origin)} transport failures (connect, timeout, TLS...)"
        return None

    def _park_wait(self, now: float) -> Callable[[str], float]:
        return lambda o: INF if self._parked_origin(o, now) is not None else self.origin_wait(o)

    def _crawl_delay(self, host: str) -> float | None:
        """The longest Crawl-delay among the host's origins (the rate is kept per host)."""
        delays = [d for o in self.origins_of.get(host, ()) if (d := self.robots.crawl_delay(o)) is not None]
        return max(delays) if delays else None

    async def _resolve_and_schedule(self, host: str) -> None:
        if host not in self.host_ip:
            self.host_ip[host] = await self.resolver.resolve(host)
        if self.frontier.has_work(host):
            self._schedule(host)

    # -- the loop ---------------------------------------------------------------------------------
    async def run(self) -> None:
        last_purge = self.clock()
        while not self.stopping:
            for host in self.signal.take():
                self.wake(host)
            now = self.clock()
            started = 0
            while self.in_flight < self.s.concurrency and started < STARTS_PER_TURN:
                ready = self.scheduler.pop_ready(now)
                if ready is None:
                    break
                self._start(ready, now)
                started += 1
            if started:
                await asyncio.sleep(0)
                continue
            self._progress(now)
            if now - last_purge >= 60.0:
                # Parsed robots.txt of hosts not crawled for a TTL: memory stays bounded.
                self.robots.purge(now)
                last_purge = now
            nxt = self.scheduler.next_wakeup(now)
            timeout = 0.5 if nxt is None else max(0.0, min(0.5, nxt - now))
            await self.signal.wait(timeout)

    async def stop(self) -> None:
        """No new fetches; the ones under way finish (bounded by the fetch timeout)."""
        self.stopping = True
        self.signal.poke()
        if self.fetch_tasks:
            await asyncio.wait(self.fetch_tasks, timeout=self.s.fetch.total_timeout + 5)

    def idle(self) -> bool:
        return self.in_flight == 0

    def _start(self, host: str, now: float) -> None:
        ip = self.host_ip.get(host) or UNRESOLVED
        if self.scope.host_full(self.frontier.pages(host)):
            # At its page budget: its whole queue goes in one range delete, not item by item.
            self._give_up(host, f"page budget ({self.frontier.pages(host)} pages)", "host_page_budget")
            return
        if self.scope.domain_full(self.frontier.domain_pages(host)):
            # Its registered domain is at its page budget: each of its hosts goes as it comes up.
            self._give_up(host, f"domain page budget ({self.frontier.domain_pages(host)} pages on {self.frontier.domain_of(host)})",
                          "domain_page_budget")
            return
        why = self.given_up.get(host)
        if why is not None and why.startswith("DNS") and self.resolver.failure(host) is not None:
            # Given up on DNS and the name still has no address: URLs found since go too.
            self._give_up(host, why, "dns_failure")
            return
        if not self.gate.allows(host, now):
            # Not ours to fetch now (lease lapsed, ownership settling): the gate wakes it again.
            self.scheduler.remove(host)
            return
        item = self.frontier.pop(host, now, self.origin_wait)
        if item is None:
            ready = self.frontier.ready_at(host, self.origin_wait)
            if ready is None:
                self.scheduler.remove(host)
                if self.politeness.next_time(host) <= now:
                    # Idle and past its delay: its politeness state can go (memory grows
                    # with every host ever crawled otherwise); _schedule restores Crawl-delay.
                    self.politeness.forget(host)
            else:
                self.scheduler.wake(host, ip, ready)
            return
        origin = origin_of(item.url)
        if origin in self.given_up:
            # Given up (robots.txt unreachable or no answer too long): its URLs are finished as they come up
            # (the loop yields between batches); the host's other origins go on.
            self.counters["robots_given_up"] += 1
            self.finish(item, None)
            self._schedule(host)
            return
        if not self.s.robots.enabled and self.s.sitemaps.enabled and origin not in self.sitemaps.origins:
            self._find_sitemaps(origin)
        if self.s.robots.enabled:
            failing = self.robots.unreachable(origin)
            if failing is not None and now - failing[0] >= self.s.robots.give_up_after:
                self._give_up_origin(host, origin, f"robots.txt unreachable for {now - failing[0]:.0f}s "
                                                   f"(last status {failing[2]})")
                self.counters["robots_given_up"] += 1
                self.finish(item, None)
                self._schedule(host)
                return
            if self.robots.needs_fetch(origin, now):
                # robots.txt first, from the URL's origin (scheme, host, port); the host's other
                # origins go on meanwhile (origin_wait holds this one).
                self.frontier.retry(item)
                self.robots_in_flight.add(origin)
                self.origins_of.setdefault(host, set()).add(origin)
                # A retry after no answer at all (refused, timed out) is a probe: it takes neither
                # the host's slot nor its delay, or each retry of a dead origin would hold back the
                # live ones for up to a connect timeout.
                probe = failing is not None and failing[2] == 0
                if not probe:
                    # The slot is taken now, not when the task first runs: the next pick of this
                    # turn must see it (per-IP delay and cap), or one turn starts a whole IP's hosts.
                    self.scheduler.started(host, ip, self.clock())
                self._spawn(self._fetch_robots(host, ip, origin, slot=not probe))
                self._schedule(host)
                return
            if failing is not None:
                # RFC 9309 2.4: disallowed for now, not refused: the URL waits for the retry.
                # (origin_wait keeps such URLs from being popped; this is a safety net.)
                self.counters["robots_deferred"] += 1
                self.frontier.retry(item)
                self._schedule(host)
                return
            if not self.robots.allowed(item.url, origin):
                self.counters["robots_denied"] += 1
                self.fetch_errors["robots_denied"] += 1
                self.finish(item, None)
                self._schedule(host)
                return
        self.scheduler.started(host, ip, self.clock())  # before the task runs (see robots.txt above)
        self._spawn(self._fetch_page(item, ip))

    def _give_up_origin(self, host: str, origin: str, reason: str) -> None:
        if origin not in self.given_up:
            self.counters["origins_given_up"] += 1
            self.incidents.note("robots_unreachable", host, f"{origin} given up: {reason}; the host's other origins go on")
        self.given_up[origin] = reason

    def _give_up(self, host: str, reason: str, kind: str) -> None:
        n = self.frontier.clear_queue(host)
        self.scheduler.remove(host)
        self.counters["budget_dropped"] += n
        if host not in self.given_up:
            self.counters["hosts_given_up"] += 1
            self.incidents.note(kind, host, f"given up, {reason}; {n} queued URLs dropped")
        self.given_up[host] = reason

    def parked(self, now: float) -> list[Parked]:
        """Hosts and origins with work that cannot be fetched within the park horizon, and why:
        an origin (scheme://host:port) whose robots.txt is unreachable or that is backed off; a
        host backed off (HTTP 429/5xx, Retry-After) or whose URLs are not due."""
        horizon = now + self.s.politeness.park_horizon
        out = []
        for host, due in self.scheduler.waiting():
            origins = self.frontier.origins(host)
            notes = [Parked(o, p[0], p[1]) for o in origins if (p := self._parked_origin(o, now)) is not None]
            out += notes
            if len(notes) == len(origins) or (due <= horizon and not notes):
                continue  # every origin listed, or due soon (the common case: no queue is read)
            ip = self.host_ip.get(host) or UNRESOLVED
            ready = self.frontier.ready_at(host, self._park_wait(now))
            t = max(self.politeness.next_time(host, ip), ready if ready is not None else INF)
            if t <= horizon:
                continue
            if self.politeness.backoff_state(host)[0] > horizon:
                reason = f"backoff after {self.politeness.backoff_level(host)} failures (Retry-After or errors)"
            else:
                reason = "URLs not due yet (Retry-After)"
            out.append(Parked(host, t, reason))
        return out

    def only_parked(self, now: float) -> bool:
        """Nothing fetchable is left here: nothing in flight or about to start, and every queued
        URL waits beyond the park horizon (its host or its origin parked: `parked` says which
        and why). The agent's half of "the crawl is finished" (manager.status.finished)."""
        if self.in_flight or self.bg_tasks or self.signal.pending():
            return False
        horizon = now + self.s.politeness.park_horizon
        nxt = self.scheduler.next_wakeup(now)
        if nxt is None or nxt > horizon:
            return True
        wait = self._park_wait(now)
        for host, due in self.scheduler.waiting():
            if due > horizon:
                continue  # parked whatever its origins (due counts their waits already)
            ready = self.frontier.ready_at(host, wait)
            if ready is not None and max(ready, self.politeness.next_time(host, self.host_ip.get(host) or UNRESOLVED)) <= horizon:
                return False
        return True

    def _progress(self, now: float) -> None:
        every = self.s.progress_interval
        t0, pages0 = self._last_progress
        if not every or now - t0 < every:
            return
        pages = self.counters["pages"]
        self._last_progress = (now, pages)
        log.info("progress: %d pages (%.1f/s), %d queued on %d hosts, %d in flight, %d parked, %d given up, %d errors",
                 pages, (pages - pages0) / (now - t0), len(self.frontier), self.frontier.hosts_with_work(), self.in_flight,
                 len(self.parked(now)), len(self.given_up), self.counters["errors"])

    def _spawn(self, coro) -> None:  # type: ignore[no-untyped-def]
        self.in_flight += 1
        t = asyncio.get_running_loop().create_task(coro)
        self.fetch_tasks.add(t)
        t.add_done_callback(self._fetch_done)

    def _fetch_done(self, t: asyncio.Task) -> None:
        self.fetch_tasks.discard(t)
        self.in_flight -= 1
        self.signal.poke()
        if not t.cancelled() and t.exception() is not None:
            log.error("fetch task failed", exc_info=t.exception())

    async def _fetch(self, url: str, host: str, ip: str | None, headers: dict[str, str] | None = None) -> FetchResponse:
        """One request through the fetcher, counted (robots.txt and its redirect hops too)."""
        try:
            resp = await self.fetcher.fetch(FetchRequest(url, host, None if ip in (None, UNRESOLVED) else ip, headers or None))
        except Exception as exc:
            log.exception("fetcher raised on %s", url)
            resp = FetchResponse(url, error="internal", error_detail=str(exc), started_at=self.clock(), ended_at=self.clock())
        self.counters["fetches"] += 1
        self.counters["bytes"] += resp.raw_length
        if resp.error:
            self.fetch_errors[resp.error] = self.fetch_errors.get(resp.error, 0.0) + 1
        return resp

    async def _fetch_robots(self, host: str, ip: str, origin: str, *, slot: bool = True) -> None:
        url = f"{origin}/robots.txt"
        # The host's slot (slot: taken by _start) is held for the whole chain, so its politeness
        # sees one request.
        try:
            resp = await self._fetch(url, host, ip)
            hops = 0
            # RFC 9309 2.3.1.2: follow at least five redirects for robots.txt.
            while resp.status in REDIRECTS and resp.location and hops < 5:
                hops += 1
                try:
                    url = canonicalize(resp.location, url)
                except InvalidUrl:
                    break
                target = host_of_canonical(url)
                resp = await self._fetch(url, target, ip if target == host else None)
            self.counters["robots_fetches"] += 1
            if self._host_failed(host, ip, resp, slot):
                return
            self.robots.update(origin, resp.status if not resp.error else 0, resp.body, self.clock())
            if self.robots.unreachable(origin) is not None:
                self.counters["robots_deferred"] += 1  # the origin's URLs wait for the next try
            elif self.s.sitemaps.enabled and origin not in self.sitemaps.origins:
                self._find_sitemaps(origin)
            delay = self._crawl_delay(host)
            if delay is not None:
                self.politeness.set_delay(host, delay)
            # A transport failure is the origin's (its robots entry retries with backoff), not the host's rate.
            if slot:
                self.scheduler.finished(host, ip, self.clock(), resp.status or 0, resp.retry_after, has_work=True)
        finally:
            self.robots_in_flight.discard(origin)
            if host in self.host_ip and self.frontier.has_work(host) and host not in self.given_up:
                self._schedule(host)  # with this origin's new wait

    def _host_failed(self, host: str, ip: str, resp: FetchResponse, slot: bool = True) -> bool:
        """A failure of the whole host, whatever the origin: its address is forbidden (the SSRF
        guard) or its name does not resolve (NXDOMAIN, no address: not worth an hour of robots.txt
        retries). The host is given up with the reason; True when it was."""
        if resp.error == "forbidden_address":
            reason = f"{resp.error_detail or 'forbidden address'} (fetch.allow_networks)"
        elif resp.error == "dns":
            self.counters["hosts_dns_failed"] += host not in self.given_up
            reason = f"DNS: {resp.error_detail or 'the name does not resolve'}"
        else:
            return False
        if slot:
            self.scheduler.finished(host, ip, self.clock(), 0, None, has_work=False)
        self._give_up(host, reason, "dns_failure" if resp.error == "dns" else "forbidden_address")
        return True

    async def _fetch_page(self, item: Item, ip: str) -> None:
        host = item.host  # its slot was taken by _start
        if (item.revisit is None and self.stored_check is not None and item.url in self.stored_check
                and (stored := await self.stored_check.stored(item.url))):
            # The owner it was promoted from stored it before its "done" reached the replica.
            now = self.clock()
            if self.s.revisit.enabled and 200 <= stored < 300 and not self.frontier.scheduled(host, item.url):
                # ... and maybe before its schedule entry did: the URL enters this agent's schedule
                # as fetched now (no digest or validators known here: its first revisit asks
                # unconditionally, and storage compares it with the URL's latest capture).
                item.visit = Visit(now, stored)
            self.scheduler.finished(host, ip, now, 0, None, has_work=self.frontier.has_work(host))
            self.finish(item, None)
            return
        rv = item.revisit
        resp = await self._fetch(item.url, host, ip, conditional_headers(rv) if rv is not None and self.s.revisit.conditional else None)
        await self.pass_budget.turn()
        now = self.clock()
        if not self.gate.lease_ok(now):
            # The lease lapsed while this fetch was under way: another agent may own the host
            # now, so the result is not ours to store; the URL stays queued (the gate wakes it).
            self.gate.allows(host, now)
            self.counters["fenced_results"] += 1
            self.scheduler.finished(host, ip, now, 0, None, has_work=False)
            self.frontier.retry(item)
            return
        if resp.error in ("forbidden_address", "dns"):
            self.frontier.retry(item)
            self._host_failed(host, ip, resp)
            return
        # A transport failure backs off the URL's origin; an HTTP 429/5xx the host (its rate).
        origin, transport = origin_of(item.url), not resp.status
        if transport:
            self.origins.failed(origin, now)
            if self.origins.failing_for(origin, now) >= self.s.politeness.origin_give_up_after:
                # The origin's failure budget is spent: its URLs are finished as they come up.
                self._give_up_origin(host, origin, f"no answer for {self.origins.failing_for(origin, now):.0f}s "
                                                   f"({self.origins.level(origin)} transport failures in a row)")
        else:
            self.origins.ok(origin)
        status = 0 if transport else resp.status
        kind = http_class(status)
        if kind is not None:
            self.fetch_errors[kind] += 1
        o = decide(resp, self.attempts.get(item.url, 0), self.policy, stopping=self.stopping)
        if o.retry:
            if o.attempt is not None:
                self.attempts[item.url] = o.attempt
                self.counters["retries"] += 1
            if o.record:
                self.finish(None, self._capture(item, resp))  # the response is kept; the URL is not done
            # The wait is the host's (politeness backs it off: Retry-After, 5xx) or the origin's
            # (transport failure): not the URL's, so no URL of a live origin waits behind it.
            self.frontier.retry(item)
            self.scheduler.finished(host, ip, now, status, resp.retry_after, has_work=True)
            self._schedule(host)  # with the origin's new wait
            return
        self.scheduler.finished(host, ip, now, status, resp.retry_after, has_work=self.frontier.has_work(host))
        self.attempts.pop(item.url, None)
        if o.follow is None:
            self.redirect_hops.pop(item.url, None)  # the chain ends here
        self.counters["given_up"] += o.given_up
        if o.given_up:
            self.incidents.note("retries_exhausted", host, f"{item.url} after {self.policy.max_retries} retries")
        if not o.page:
            self.counters["errors"] += 1
            self.finish(item, None)
            return
        self.counters["pages"] += 1
        self.frontier.add_pages(host)
        self.incidents.page(host, resp.raw_length)
        self.rate_window.append(now)
        if resp.truncated:
            self.counters["truncated"] += 1
            self.incidents.note(f"truncated_{resp.truncated}", host, f"{item.url} ({len(resp.body)} bytes kept)")
            if resp.truncated == "decoded" and len(resp.body) >= BOMB_RATIO * max(1, resp.raw_length):
                self.incidents.note("bomb", host, f"{item.url}: {resp.raw_length} bytes decoded past {len(resp.body)}")
        if o.follow is not None:
            self.counters["redirects"] += 1
            self._follow_redirect(item, o.follow)
        elif o.parse:
            sc = self.s.scope
            piece = self.s.memory.parse_piece_bytes
            parse = functools.partial(extract_links, resp.body, item.url, resp.charset, sort_query=self.s.sort_query,
                                      max_links=sc.max_outlinks_per_page, follow_rel_nofollow=sc.follow_rel_nofollow,
                                      piece_bytes=piece)
            # The parser holds one piece at a time: parses wait for room by bytes, not by count.
            async with self.parses.hold(min(len(resp.body), piece)):
                # Lexbor parses without the GIL: a big page goes to a thread so the loop (other
                # fetches, RPCs, heartbeats) does not stall for the ~15 ms per MiB it takes.
                res = await asyncio.to_thread(parse) if len(resp.body) > THREAD_PARSE_BYTES else parse()
            self.counters["parse_waits"] = self.parses.waits
            self.counters["parse_pieces"] += res.pieces
            self.counters["parse_pieces_skipped"] += res.pieces_skipped
            self.counters["dropped_schemes"] += sum(res.dropped_schemes.values())
            self.counters["invalid_urls"] += res.invalid
            self.counters["links_over_cap"] += res.over_cap
            if res.over_cap:
                self.incidents.note("links_capped", host, f"{item.url}: {len(res.links)} links kept, ~{res.over_cap} left")
            self.counters["nofollow_skipped"] += res.nofollow_skipped
            # noindex is a search engine's directive: an archive keeps the page (counted).
            self.counters["noindex_pages"] += res.noindex
            self._discover(item, res.links)
        elif o.not_html and self.s.sitemaps.enabled and resp.status == 200:
            why = self._sitemap_why(item.url, item.host)
            if why or sitemap.sniff(resp.body):
                await self._read_sitemap(item, resp.body, why)
        self.counters["not_html"] += o.not_html
        self.finish(item, self._visited(item, resp, self._capture(item, resp)))

    def _visited(self, item: Item, resp: FetchResponse, cap: Capture | None) -> Capture | None:
        """Tell the item what its fetch found (the frontier schedules the URL's next visit from
        it) and count revisits. A 304 confirms the capture the revisit entry names: its record
        goes to storage with that capture's payload digest (storage writes a server-not-modified
        revisit record referring to it)."""
        rv = item.revisit
        if rv is None and not self.s.revisit.enabled:
            return cap  # no schedule to feed: the fetch path pays nothing for revisits when they are off
        etag, modified = validators(resp.headers)
        digest = cap.payload_digest if cap is not None else ""
        if rv is not None and resp.status == 304:
            self.counters["not_modified"] += 1
            self.counters["not_modified_bytes"] += rv.length
            digest = rv.digest
            if cap is not None and rv.digest:
                cap = dataclasses.replace(cap, payload_digest=rv.digest)
        if rv is not None and cap is not None and rv.last > 0:
            cap = dataclasses.replace(cap, refetch=True)  # storage compares it with the URL's latest capture
        item.visit = Visit(resp.started_at or self.clock(), resp.status, digest, etag, modified, len(resp.body))
        if rv is not None:
            self.counters["revisits"] += 1
            c = changed(rv, item.visit)
            if c is not None:
                self.counters["revisits_changed" if c else "revisits_unchanged"] += 1
        return cap

    def pages_per_second(self, window: float = 10.0) -> float:
        now = self.clock()
        while self.rate_window and self.rate_window[0] < now - window:
            self.rate_window.popleft()
        return len(self.rate_window) / window

    # -- links ------------------------------------------------------------------------------------
    def _discover(self, item: Item, links: list[str]) -> None:
        """Route a page's links (canonical already, from extract_links)."""
        depth = item.depth + 1
        if self.epoch is not None and (e := self.epoch()) != self._recent_epoch:
            self._recent_epoch = e
            self.recent.clear()  # owners changed: what was routed may be nowhere now (see __init__)
        via = item.url
        recent = self.recent
        limit = self.s.routing.recent_filter
        check = self.scope.check
        out: list[Item] = []
        skips = 0
        for url in links:
            # Navigation repeats the same links on every page: a URL routed a moment ago is
            # already with its owner (or owed to it), so skip it before any more work.
            if url in recent:
                skips += 1
                continue
            host = host_of_canonical(url)
            why = check(url, host, depth)
            if why is not None:
                self.counters["out_of_scope"] += 1
                if why in TRAP_SCOPE_REASONS:
                    self.incidents.note(f"trap_{why}", host, url[:200])
                continue
            if len(recent) >= limit:
                # Forget the oldest eighth (dicts keep insertion order): a cheap bounded FIFO.
                for old in list(itertools.islice(recent, len(recent) // 8 or 1)):
                    del recent[old]
            recent[url] = None
            out.append(Item(url, host, depth, via))
        self.counters["recent_skips"] += skips
        self.route(out)

    # -- sitemaps -----------------------------------------------------------------------------------
    def _find_sitemaps(self, origin: str) -> None:
        """An origin's robots.txt answered (or robots.txt is off): its `Sitemap:` lines, and
        /sitemap.xml with `sitemaps.well_known`, go to the frontier like discovered links (depth
        0: a site's own list of its pages comes first), each sitemap host within its bounds."""
        self.sitemaps.origins.add(origin)
        urls = self._robots_sitemaps(origin)
        found = [(u, "robots") for u in urls]
        if self.s.sitemaps.well_known:
            found.append((origin + "/sitemap.xml", "well-known"))
        for why in ("robots", "well-known"):
            self._route_sitemaps([u for u, w in found if w == why], 0, origin + "/robots.txt", why)

    def _robots_sitemaps(self, origin: str) -> list[str]:
        """The canonical URLs of the origin's robots.txt `Sitemap:` lines (at most max_robots_lines)."""
        if not self.s.robots.enabled:
            return []
        out = []
        for line in self.robots.sitemaps(origin)[: self.s.sitemaps.max_robots_lines]:
            try:
                out.append(canonicalize(line.strip(), origin + "/robots.txt", sort_query=self.s.sort_query))
            except InvalidUrl:
                self.counters["invalid_urls"] += 1
        return out

    def _sitemap_why(self, url: str, host: str) -> str | None:
        """How this agent knows `url` is a sitemap ("robots", "well-known", "index-child"), or None."""
        why = self.sitemaps.why(host, url)
        if why is None and url in self._robots_sitemaps(origin_of(url)):
            why = "robots"  # listed by a robots.txt handed over with its host, or read before a restart
        return why

    def _route_sitemaps(self, urls: list[str], depth: int, via: str, why: str) -> None:
        by_host: dict[str, list[str]] = {}
        for u in urls:
            by_host.setdefault(host_of_canonical(u), []).append(u)
        out = []
        for host, group in by_host.items():
            admitted = self.sitemaps.admit(host, group, why)
            self.counters["sitemaps_skipped"] += len(set(group)) - len(admitted)
            for u in admitted:
                if self.scope.check(u, host, depth) is not None:
                    self.counters["out_of_scope"] += 1
                    continue
                out.append(Item(u, host, depth, via))
        if out:
            self.route(out)

    async def _read_sitemap(self, item: Item, body: bytes, why: str | None) -> None:
        """Parse a fetched sitemap (in a thread when big or gzip'd) within the host's bounds; an
        index's sitemaps go to the frontier, a urlset's URLs are discovered links, one depth
        deeper, with their hints handed to `sitemap_hints`."""
        sm, host = self.s.sitemaps, item.host
        room = min(sm.max_file_bytes, self.sitemaps.room(host))
        if room <= 0:
            self.counters["sitemaps_skipped"] += 1
            return
        # A sitemap its origin's robots.txt lists may list the whole origin (robots.txt at the root
        # speaks for it); any other follows the protocol's location rule (its directory).
        prefix = sitemap.origin_prefix(item.url) if why == "robots" else None
        parse = functools.partial(sitemap.parse, body, item.url, prefix=prefix, text=why is not None,
                                  max_urls=sm.max_urls_per_file, max_bytes=room, sort_query=self.s.sort_query)
        big = len(body) > THREAD_PARSE_BYTES or body[:2] == b"\x1f\x8b"
        res = await asyncio.to_thread(parse) if big else parse()
        self.sitemaps.read(host, res.bytes)
        if not res.kind:
            return
        self.counters["sitemaps"] += 1
        self.counters["sitemap_refused"] += sum(res.refused.values())
        if res.error:
            self.counters["sitemap_errors"] += 1
            log.info("sitemap %s: %s (%d entries kept)", item.url, res.error, len(res.entries))
        if res.kind == "index":
            if why == "index-child":
                # The protocol: an index lists sitemaps, not other indexes (nesting is refused).
                self.counters["sitemaps_skipped"] += 1
                return
            self._route_sitemaps([e.url for e in res.entries], item.depth + 1, item.url, "index-child")
            return
        depth = item.depth + 1
        kept = self.sitemaps.take(host, len(res.entries))
        if kept < len(res.entries):
            self.counters["sitemap_refused"] += len(res.entries) - kept
            res.entries = res.entries[:kept]
        hints = [e for e in res.entries if (e.lastmod is not None or e.changefreq is not None or e.priority is not None)
                 and self.scope.check(e.url, host, depth) is None]
        if hints:
            self.sitemap_hints(hints)
        self.counters["sitemap_urls"] += len(res.entries)
        self._discover(item, [e.url for e in res.entries])

    def _follow_redirect(self, item: Item, location: str) -> None:
        """A redirect is a new URL one level deeper, through routing; at most MAX_REDIRECT_HOPS
        in a row (counted on this agent)."""
        hops = self.redirect_hops.pop(item.url, 0) + 1
        try:
            url = canonicalize(location, item.url, sort_query=self.s.sort_query)
            host = host_of_canonical(url)
        except UnsupportedScheme:
            self.counters["dropped_schemes"] += 1
            return
        except InvalidUrl:
            self.counters["invalid_urls"] += 1
            return
        why = "redirect_hops" if hops > MAX_REDIRECT_HOPS else self.scope.check(url, host, item.depth + 1)
        if why is not None:
            self.counters["out_of_scope"] += 1
            if why == "redirect_hops" or why in TRAP_SCOPE_REASONS:
                self.incidents.note(f"trap_{why}", host, url[:200])
            return
        hops_of = self.redirect_hops
        if len(hops_of) >= REDIRECT_HOPS_KEPT:
            # A target that is not a redirect itself (or is routed to another agent) is never
            # popped: the oldest eighth goes, or the dict grows with every redirect of a crawl.
            for old in list(itertools.islice(hops_of, len(hops_of) // 8 or 1)):
                del hops_of[old]
        hops_of[url] = hops
        self.route([Item(url, host, item.depth + 1, item.url)])

    def _capture(self, item: Item, resp: FetchResponse) -> Capture | None:
        # WARC-Truncated knows length, time, disconnect and unspecified; a server that sent more
        # than its Content-Length ("excess") had its message cut at that length by us.
        trunc = {"decoded": "length", "excess": "unspecified"}.get(resp.truncated or "", resp.truncated)
        fr = FetchResult(
            url=item.url, status=resp.status, response_headers=resp.headers, body=resp.body, agent_id=self.id,
            started_at=resp.started_at, ended_at=resp.ended_at, request_headers=resp.request_headers,
            reason=resp.reason, http_version=resp.http_version or "HTTP/1.1", ip=resp.ip or "",
            truncated=trunc, body_decoded=True,
        )
        try:
            return build_capture(fr, level=self.s.storage_out.gzip_level)
        except errors.InvalidArgument as exc:
            log.warning("cannot record %s: %s", item.url, exc)
            return None

    # -- per-host state, for the ledger -----------------------------------------------------------
    def export_host(self, host: str, robots: bool = True) -> HostCrawlState:
        until, level = self.politeness.backoff_state(host)
        entries = [(o, st) for o in sorted(self.origins_of.get(host, ())) if (st := self.robots.export(o)) is not None] if robots else []
        return HostCrawlState(self._crawl_delay(host), until, level, entries, self.frontier.pages(host))

    def import_host(self, host: str, st: HostCrawlState) -> None:
        for origin, r in st.robots:
            self.robots.import_(origin, r)
            self.origins_of.setdefault(host, set()).add(origin)
        if st.crawl_delay is not None:
            self.politeness.set_delay(host, st.crawl_delay)
        self.politeness.restore_backoff(host, st.backoff_until, st.backoff_level)
        self.frontier.add_pages(host, st.pages)

    def drop_host(self, host: str) -> None:
        """Forget the host (its queue went with a handover); in-flight fetches are not touched."""
        self.scheduler.remove(host)
        self.politeness.forget(host)
        for origin in self.origins_of.pop(host, ()):
            self.robots.forget(origin)
            self.sitemaps.origins.discard(origin)
            self.given_up.pop(origin, None)
        self.origins.forget_host(host)
        self.sitemaps.forget(host)
        self.host_ip.pop(host, None)
        self.given_up.pop(host, None)
