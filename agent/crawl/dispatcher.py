"""The dispatcher: the crawl loop. Hosts with work are woken (a DNS look-up first when new here)
into the politeness scheduler; each host it hands out is admitted (agent/crawl/admission.py,
pure: budgets, DNS, then the gate, then robots.txt for the URL its queue gives) and its fetch is
spawned: robots.txt first (agent/crawl/robotstxt.py) or the page and its steps after the fetch
(agent/crawl/page.py). A host's own crawl state is one object (agent/crawl/hosts.py); its
export, import and drop for a handover are here, as are the parked hosts and origins."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from agent.crawl.admission import Act, Admission
from agent.crawl.fetches import Requests
from agent.crawl.hosts import CrawlHosts, HostCrawlState, unresolved
from agent.crawl.incidents import Incidents
from agent.crawl.outcome import ERROR_KINDS
from agent.crawl.page import Discovery, PageSteps, Shared
from agent.crawl.politeness import OriginBackoff, Politeness, Scheduler, origin_of
from agent.crawl.refetch import StoredCheck
from agent.crawl.robots import RobotsCache
from agent.crawl.robotstxt import RobotsTxt
from agent.crawl.scope import Scope
from agent.crawl.sitemap_reader import SitemapReader
from agent.fetch import ERRORS, Fetcher
from agent.placement.gate import Gate
from agent.settings import AgentSettings
from agent.state.frontier import Frontier, Item
from agent.waker import HostSignal
from wancrawl.hostres import DEFINITIVE, HostResolver
from wancrawl.runtime.looplag import PassBudget
from wancrawl.stats import Counters
from wancrawl.warcrecords import Capture

__all__ = ["Dispatcher", "HostCrawlState", "Parked"]

log = logging.getLogger("agent")

INF = float("inf")
STARTS_PER_TURN = 256  # hosts looked at before the loop yields: refused items never starve the loop
# Page work (parse, route, record) per event-loop pass: the pages past it wait for the next pass,
# so responses arriving together do not hold timers and RPCs for the whole batch (docs/agent.md).
PAGE_WORK_PER_PASS = 0.02


@dataclass(frozen=True)
class Parked:
    host: str
    until: float   # unix time the host may be fetched again
    reason: str


def error_kinds(fetch_errors: dict[str, float], top: int = 3) -> str:
    """' (connect 12, timeout 3)': the commonest kinds of requests without a response, for the
    progress line ('errors' counts every request that got none, robots.txt's included: a host
    that refuses connections shows its errors, not 0)."""
    kinds = sorted(((n, k) for k, n in fetch_errors.items() if k in ERRORS and n), reverse=True)[:top]
    return f" ({', '.join(f'{k} {n:.0f}' for n, k in kinds)})" if kinds else ""


class Dispatcher:
    """Owns the crawl of this agent's hosts: the scheduler and politeness, the hosts' crawl
    state, fetches in flight. Hosts get work through `signal` (intake and the ledger wake them);
    finished pages go to `finish` (the commit log) and their links to `route`. `wake`, `stop`,
    `idle`, `parked` and the host export/import/drop are its public entries; `stats` its parts'
    counters by part, `fetch_errors` failed requests and refused URLs by kind (outcome.ERROR_KINDS;
    exported as one labelled family)."""

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
        sitemap_hint: Callable[[str, str, float, float], None] | None = None,
        pass_budget: PassBudget | None = None,
        epoch: Callable[[], int] | None = None,
    ):
        self.s = settings
        self.stopping = False  # read by the page's outcome step: a retry while stopping is not counted
        self.frontier, self.resolver, self.signal, self.finish, self.clock = frontier, resolver, signal, finish, clock
        # The lease and held hosts (one fetcher per host); without one, every host, always.
        self.gate = gate or Gate(signal.wake, fenced=False)
        # What the hostile web did, by reason, for the operator (shared with intake).
        self.incidents = incidents or Incidents(clock)
        p, r = settings.politeness, settings.robots
        # The per-IP delay is never stricter than the host delay (a server with one site is paced
        # by the site's delay; politeness.delay = 0 turns both off, as on one's own servers).
        self.politeness = Politeness(
            p.delay, max_per_host=p.max_per_host, max_per_ip=p.max_per_ip, ip_delay=min(p.ip_delay, p.delay),
            max_delay=p.max_crawl_delay, max_backoff=p.max_backoff, max_retry_after=p.max_retry_after,
        )
        self.scheduler = Scheduler(self.politeness)
        self.origins = OriginBackoff(max(p.delay, 1.0), p.max_backoff)
        self.robots = RobotsCache(settings.fetch.user_agent, ttl=r.ttl, error_ttl=r.error_ttl, retry_base=r.retry_base)
        self.hosts = CrawlHosts(frontier.clear_queue, self.scheduler.remove, self.incidents)
        self.admission = Admission(scope, self.robots, robots_enabled=r.enabled, robots_give_up_after=r.give_up_after,
                                   dns_failure=resolver.failure, domain_of=frontier.domain_of)
        self.fetch_errors: dict[str, float] = dict.fromkeys(ERROR_KINDS, 0.0)
        self.requests = Requests(fetcher, clock, self.fetch_errors)
        c = Shared(settings, frontier, self.scheduler, self.hosts, scope, self.incidents, self.fetch_errors, clock, finish, route,
                   self._schedule)
        discovery = Discovery(c, epoch)
        self.sitemaps = SitemapReader(settings, self.robots, scope, route=route, discover=discovery.discover, hint=sitemap_hint)
        self.robots_txt = RobotsTxt(self.robots, self.requests, self.hosts, frontier, self.scheduler, self.politeness, self.sitemaps,
                                    schedule=self._schedule, finish=finish, clock=clock, fetch_errors=self.fetch_errors)
        # Finished fetches take turns: at most PAGE_WORK_PER_PASS of page work per loop pass.
        self.page = PageSteps(c, self.requests, discovery, self.sitemaps, gate=self.gate, origins=self.origins,
                              stopping=lambda: self.stopping, stored_check=stored_check,
                              pass_budget=pass_budget or PassBudget(PAGE_WORK_PER_PASS))
        self.stats: dict[str, Counters] = {"fetch": self.requests.stats, **self.page.stats(), "sitemaps": self.sitemaps.stats,
                                           "robots": self.robots_txt.stats, "hosts": self.hosts.stats}
        self.in_flight = 0
        self.fetch_tasks: set[asyncio.Task] = set()
        self.bg_tasks: set[asyncio.Task] = set()
        self._refreshing: set[str] = set()  # hosts whose expired address is being looked up again
        self._last_progress = (self.clock(), 0.0)

    # -- waking hosts -----------------------------------------------------------------------------
    def wake(self, host: str) -> None:
        """The host has work: into the scheduler (after a DNS look-up if it is new here)."""
        if self.hosts.resolved(host) and not unresolved(self.hosts.ip(host)):
            self._schedule(host)
        else:
            t = asyncio.get_running_loop().create_task(self._resolve_and_schedule(host))
            self.bg_tasks.add(t)
            t.add_done_callback(self.bg_tasks.discard)

    def _schedule(self, host: str) -> None:
        if not self.politeness.tracks(host):
            # New to politeness (or forgotten while idle): its robots.txt Crawl-delay again.
            delay = self.robots_txt.crawl_delay(host)
            if delay is not None:
                self.politeness.set_delay(host, delay)
        self.scheduler.wake(host, self.hosts.ip(host), self.frontier.ready_at(host, self.origin_wait) or 0.0)
        self.signal.poke()

    def origin_wait(self, origin: str) -> float:
        """When the origin's URLs may be fetched (absolute time; <= now: now). Robots.txt, backoff
        and give-ups are per origin (RFC 9309 scopes robots.txt to scheme, host and port): a
        waiting origin never holds back another origin of its host (Frontier.pop passes it over)."""
        if self.hosts.origin_given_up(origin) is not None:
            return 0.0  # its URLs are finished as they come up
        if origin in self.robots_txt.in_flight:
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
        if self.hosts.origin_given_up(origin) is not None:
            return None
        wait = self.origin_wait(origin)
        if self.s.robots.enabled:
            failing = self.robots.unreachable(origin)
            if failing is not None and (now - failing[0] >= self.s.robots.park_after or wait > now + self.s.politeness.park_horizon):
                return failing[1], f"robots.txt unreachable ({self.robots.failure(origin)}) for {now - failing[0]:.0f}s"
        if wait > now + self.s.politeness.park_horizon and wait != INF:
            return wait, f"backoff after {self.origins.level(origin)} transport failures (connect, timeout, TLS...)"
        return None

    def _park_wait(self, now: float) -> Callable[[str], float]:
        return lambda o: INF if self._parked_origin(o, now) is not None else self.origin_wait(o)

    async def _resolve_and_schedule(self, host: str) -> None:
        """Look the host up (the resolver's cache first) and schedule it; a name that does not
        exist or has no address is given up here, with no fetch and no turn in the scheduler, so
        failed names are given up as fast as the resolver answers, all in parallel. A temporary
        failure is scheduled under the host's own key: its fetch asks again, and fails as a
        timeout does (origin backoff, parking) until an answer comes."""
        if not self.hosts.resolved(host) or unresolved(self.hosts.ip(host)):
            ip = await self.resolver.resolve(host)
            self.hosts.resolve(host, ip)
            why = self.resolver.failure(host) if ip is None else None
            if why in DEFINITIVE:
                self.hosts.give_up(host, f"DNS: {host} does not resolve: {why}", "dns_failure")
                return
        if self.frontier.has_work(host):
            self._schedule(host)

    def _refresh(self, host: str) -> None:
        """The host's address outlived its TTL: look it up again in the background (once at a
        time). Fetches go on with the old address until the answer comes; a new one is used, and
        politeness keyed on it, from the host's next start. A name gone since (NXDOMAIN) is given
        up; a temporary failure keeps the old address (asked again after temporary_ttl)."""
        if host in self._refreshing:
            return
        self._refreshing.add(host)
        t = asyncio.get_running_loop().create_task(self._re_resolve(host))
        self.bg_tasks.add(t)
        t.add_done_callback(self.bg_tasks.discard)

    async def _re_resolve(self, host: str) -> None:
        try:
            ip = await self.resolver.resolve(host)
        finally:
            self._refreshing.discard(host)
        if not self.hosts.resolved(host):
            return  # dropped meanwhile (handed over): nothing to update
        if ip is not None:
            self.hosts.resolve(host, ip)
        elif (why := self.resolver.failure(host)) in DEFINITIVE:
            self.hosts.resolve(host, None)
            self.hosts.give_up(host, f"DNS: {host} does not resolve: {why}", "dns_failure")

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
        """The host the scheduler handed out: admitted, then its next URL (or it leaves the
        scheduler: given up, closed by the gate, nothing due)."""
        verdict = self.admission.host(host, self.frontier.pages(host), self.frontier.domain_pages(host), self.hosts.given_up(host))
        if verdict is not None:
            self.hosts.give_up(host, verdict.reason, verdict.kind)
            return
        if not self.gate.allows(host, now):
            # Not ours to fetch now (lease lapsed, ownership settling): the gate wakes it again.
            self.scheduler.remove(host)
            return
        ip = self.hosts.ip(host)
        if not unresolved(ip) and not self.resolver.fresh(host):
            self._refresh(host)
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
        self._start_url(item, ip, now)

    def _start_url(self, item: Item, ip: str, now: float) -> None:
        host, origin = item.host, origin_of(item.url)
        verdict = self.admission.url(item.url, origin, self.hosts.origin_given_up(origin) is not None, now)
        act = verdict.act
        if act is Act.FETCH:
            if not self.s.robots.enabled and self.sitemaps.enabled and not self.sitemaps.known(origin):
                self.sitemaps.find(origin)
            self.scheduler.started(host, ip, self.clock())  # before the task runs (see RobotsTxt.begin)
            self._spawn(self.page.run(item, ip))
            return
        if act is Act.FETCH_ROBOTS or act is Act.PROBE_ROBOTS:
            slot = act is Act.FETCH_ROBOTS
            self.robots_txt.begin(item, ip, origin, slot=slot)
            self._spawn(self.robots_txt.fetch(host, ip, origin, slot=slot))
        else:
            self.robots_txt.refuse(item, origin, verdict)
        self._schedule(host)

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
            ip = self.hosts.ip(host)
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
            if ready is not None and max(ready, self.politeness.next_time(host, self.hosts.ip(host))) <= horizon:
                return False
        return True

    def _progress(self, now: float) -> None:
        every = self.s.progress_interval
        t0, pages0 = self._last_progress
        if not every or now - t0 < every:
            return
        pages = self.page.outcome.stats.pages
        self._last_progress = (now, pages)
        log.info("progress: %d pages (%.1f/s), %d queued on %d hosts, %d in flight, %d parked, %d given up, %d errors%s",
                 pages, (pages - pages0) / (now - t0), len(self.frontier), self.frontier.hosts_with_work(), self.in_flight,
                 len(self.parked(now)), self.hosts.given_up_count, self.requests.stats.request_errors,
                 error_kinds(self.fetch_errors))

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

    def pages_per_second(self, window: float = 10.0) -> float:
        return self.page.outcome.pages_per_second(self.clock(), window)

    @property
    def given_up(self) -> dict[str, str]:
        """Every host and origin given up here -> why (for the operator and tests: a new dict)."""
        return self.hosts.all_given_up()

    # -- per-host state, for the ledger -----------------------------------------------------------
    def export_host(self, host: str, robots: bool = True) -> HostCrawlState:
        until, level = self.politeness.backoff_state(host)
        entries = [(o, st) for o in sorted(self.hosts.origins(host)) if (st := self.robots.export(o)) is not None] if robots else []
        return HostCrawlState(self.robots_txt.crawl_delay(host), until, level, entries, self.frontier.pages(host))

    def import_host(self, host: str, st: HostCrawlState) -> None:
        """Take over a handed host's crawl state, never past what this agent would set itself
        (issue 36: a compromised backup's HandOver parked a host with backoff_until = 9e10 and
        held it with crawl_delay = 1e6): robots.txt entries expire within this agent's robots
        TTL, the backoff ends within its max_backoff from now, and the crawl delay is the one
        the handed (or held) robots.txt rules give, read here, not the sender's number (an
        honest sender's number is that same reading: export_host)."""
        now = self.clock()
        for origin, r in st.robots:
            self.robots.import_(origin, r.expiring_by(now + self.robots.ttl))
            self.hosts.add_origin(host, origin)
        delay = self.robots_txt.crawl_delay(host) if st.robots else None
        if delay is not None:
            self.politeness.set_delay(host, delay)
        self.politeness.restore_backoff(host, min(st.backoff_until, now + self.politeness.max_backoff), st.backoff_level)
        self.frontier.add_pages(host, st.pages)

    def drop_host(self, host: str) -> None:
        """Forget the host (its queue went with a handover); in-flight fetches are not touched."""
        self.scheduler.remove(host)
        self.politeness.forget(host)
        origins = self.hosts.drop(host)
        for origin in origins:
            self.robots.forget(origin)
        self.origins.forget_host(host)
        self.sitemaps.forget(host, origins)
