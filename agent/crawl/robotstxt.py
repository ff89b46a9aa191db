"""robots.txt on the crawl path (RFC 9309, per origin): fetched before an origin's first URL and
when its entry expires, its Crawl-delay handed to politeness, its `Sitemap:` lines to the
sitemap reader, and admission's verdicts on a URL carried out (denied, deferred, finished with
its origin). The rules themselves are agent/crawl/robots.py's cache; the decision which verdict
applies is agent/crawl/admission.py's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.crawl.admission import Act, Verdict
from agent.crawl.fetches import Requests, host_failure
from agent.crawl.hosts import CrawlHosts
from agent.crawl.outcome import REDIRECTS
from agent.crawl.politeness import Politeness, Scheduler
from agent.crawl.robots import RobotsCache
from agent.crawl.sitemap_reader import SitemapReader
from agent.fetch import FetchResponse
from agent.state.frontier import Frontier, Item
from wancrawl.stats import Counters
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical
from wancrawl.warcrecords import Capture


@dataclass(slots=True)
class RobotsCounters(Counters):
    robots_fetches: int = 0   # robots.txt fetched (a redirect chain is one)
    robots_denied: int = 0    # URLs its rules disallow
    robots_deferred: int = 0  # fetches that left it unreachable, and URLs that waited for its retry
    robots_given_up: int = 0  # URLs finished unfetched because their origin was given up


class RobotsTxt:
    """`schedule(host)`: the dispatcher's wake of a host (with its origins' new waits);
    `finish(item, None)`: a URL done unfetched. `in_flight`: the origins whose robots.txt is
    being fetched (their URLs wait: the dispatcher's origin_wait)."""

    def __init__(self, robots: RobotsCache, requests: Requests, hosts: CrawlHosts, frontier: Frontier, scheduler: Scheduler,
                 politeness: Politeness, sitemaps: SitemapReader, *, schedule: Callable[[str], None],
                 finish: Callable[[Item | None, Capture | None], None], clock: Callable[[], float], fetch_errors: dict[str, float]):
        self.robots = robots
        self.requests = requests
        self.hosts = hosts
        self.frontier = frontier
        self.scheduler = scheduler
        self.politeness = politeness
        self.sitemaps = sitemaps
        self.schedule = schedule
        self.finish = finish
        self.clock = clock
        self.fetch_errors = fetch_errors
        self.in_flight: set[str] = set()
        self.stats = RobotsCounters()

    def crawl_delay(self, host: str) -> float | None:
        """The longest Crawl-delay among the host's origins (the rate is kept per host)."""
        delays = [d for o in self.hosts.origins(host) if (d := self.robots.crawl_delay(o)) is not None]
        return max(delays) if delays else None

    def begin(self, item: Item, ip: str, origin: str, *, slot: bool) -> None:
        """robots.txt first, from the URL's origin (scheme, host, port); the URL goes back to
        its queue and the host's other origins go on meanwhile (origin_wait holds this one).
        The fetch itself is `fetch`, which the dispatcher spawns."""
        self.frontier.retry(item)
        self.in_flight.add(origin)
        self.hosts.add_origin(item.host, origin)
        if slot:
            # The slot is taken now, not when the task first runs: the next pick of this
            # turn must see it (per-IP delay and cap), or one turn starts a whole IP's hosts.
            self.scheduler.started(item.host, ip, self.clock())

    async def fetch(self, host: str, ip: str, origin: str, *, slot: bool = True) -> None:
        # The host's slot (slot: taken by `begin`) is held for the whole chain, so its politeness
        # sees one request.
        try:
            resp = await self._chain(f"{origin}/robots.txt", host, ip)
            self.stats.robots_fetches += 1
            failed = host_failure(resp)
            if failed is not None:
                if slot:
                    self.scheduler.finished(host, ip, self.clock(), 0, None, has_work=False)
                self.hosts.give_up(host, *failed)
                return
            why = f"{resp.error}: {(resp.error_detail or '')[:120]}" if resp.error else ""
            self.robots.update(origin, resp.status if not resp.error else 0, resp.body, self.clock(), why)
            if self.robots.unreachable(origin) is not None:
                self.stats.robots_deferred += 1  # the origin's URLs wait for the next try
            elif self.sitemaps.enabled and not self.sitemaps.known(origin):
                self.sitemaps.find(origin)
            delay = self.crawl_delay(host)
            if delay is not None:
                self.politeness.set_delay(host, delay)
            # A transport failure is the origin's (its robots entry retries with backoff), not the host's rate.
            if slot:
                self.scheduler.finished(host, ip, self.clock(), resp.status or 0, resp.retry_after, has_work=True)
        finally:
            self.in_flight.discard(origin)
            if self.hosts.resolved(host) and self.frontier.has_work(host) and self.hosts.given_up(host) is None:
                self.schedule(host)  # with this origin's new wait

    async def _chain(self, url: str, host: str, ip: str) -> FetchResponse:
        resp = await self.requests.fetch(url, host, ip)
        hops = 0
        # RFC 9309 2.3.1.2: follow at least five redirects for robots.txt.
        while resp.status in REDIRECTS and resp.location and hops < 5:
            hops += 1
            try:
                url = canonicalize(resp.location, url)
            except InvalidUrl:
                break
            target = host_of_canonical(url)
            resp = await self.requests.fetch(url, target, ip if target == host else None)
        return resp

    def refuse(self, item: Item, origin: str, verdict: Verdict) -> None:
        """Carry out admission's verdict on a URL that is not fetched now (the dispatcher then
        schedules its host again)."""
        act = verdict.act
        if act is Act.DEFER:
            # RFC 9309 2.4: disallowed for now, not refused: the URL waits for the retry.
            self.stats.robots_deferred += 1
            self.frontier.retry(item)
            return
        if act is Act.DENY:
            self.stats.robots_denied += 1
            self.fetch_errors["robots_denied"] += 1
        else:
            if act is Act.GIVE_UP_ORIGIN:
                self.hosts.give_up_origin(item.host, origin, verdict.reason)
            # Its origin is given up (robots.txt unreachable or no answer too long): its URLs are
            # finished as they come up (the loop yields between batches); the host's other origins go on.
            self.stats.robots_given_up += 1
        self.finish(item, None)
