"""The crawl loop: politeness picks a host, robots.txt first, fetch, then links, redirects, retries."""

from __future__ import annotations

import asyncio
import itertools
import logging

from agent.fetch import FetchRequest, FetchResponse
from agent.frontier import Item
from agent.links import extract_links
from agent.router import UrlItem
from wancrawl import errors
from wancrawl.urls import InvalidUrl, UnsupportedScheme, canonicalize, host_of_canonical
from wancrawl.warcrecords import FetchResult, build_capture

log = logging.getLogger("agent")

HTML_TYPES = ("text/html", "application/xhtml+xml")
REDIRECTS = (301, 302, 303, 307, 308)
RETRY_STATUSES = (429, 500, 502, 503, 504)
RETRY_ERRORS = ("connect", "timeout", "read", "dns", "internal")  # transient: worth another try
MAX_REDIRECT_HOPS = 20  # as browsers and Scrapy


class Crawling:
    """Part of AgentNode. A page is finished (`_finish`) once its capture is built and its links
    routed; it counts as done only at the commit after its capture reached the spool."""

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
                if self.politeness.next_time(host) <= now:
                    # Idle and past its delay: its politeness state can go (memory grows
                    # with every host ever crawled otherwise); _wake_known restores Crawl-delay.
                    self.politeness.forget(host)
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
        if self.scope.host_full(self.pages_per_host.get(host, 0)):
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
                    resp = await self.fetcher.fetch(FetchRequest(url, host_of_canonical(url), None))
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
        retry = resp.error in RETRY_ERRORS or resp.status in RETRY_STATUSES
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
                self.scheduler.finished(host, ip, now, resp.status or None, resp.retry_after, has_work=True)
                self._wake_known(host)  # with the retried URL's not-before
                return
            self.counters["given_up"] += 1
        self.scheduler.finished(host, ip, now, resp.status or None, resp.retry_after, has_work=self.frontier.has_work(host))
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
            self._follow_redirect(item, resp.location)
        elif resp.status == 200 and resp.content_type in HTML_TYPES and not resp.truncated:
            res = extract_links(resp.body, item.url, resp.charset, sort_query=self.s.sort_query)
            self.counters["dropped_schemes"] += sum(res.dropped_schemes.values())
            self.counters["invalid_urls"] += res.invalid
            self._discover(item, res.links)
        elif resp.status == 200:
            self.counters["not_html"] += 1
        self._capture(item, resp)
        self._finish(item)

    def _discover(self, item: Item, links: list[str]) -> None:
        """Route a page's links (canonical already, from extract_links)."""
        depth = item.depth + 1
        recent = self.recently_routed
        out: list[UrlItem] = []
        for url in links:
            # Navigation repeats the same links on every page: a URL routed a moment ago is
            # already with its owner (or owed to it), so skip it before any more work.
            if url in recent:
                self.counters["recent_skips"] += 1
                continue
            host = host_of_canonical(url)
            if self.scope.check(url, host, depth) is not None:
                self.counters["out_of_scope"] += 1
                continue
            if len(recent) >= self.s.routing.recent_filter:
                # Forget the oldest eighth (dicts keep insertion order): a cheap bounded FIFO.
                for old in list(itertools.islice(recent, len(recent) // 8 or 1)):
                    del recent[old]
            recent[url] = None
            out.append(UrlItem(url, host, depth, item.url))
        self.route(out)

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
        if hops > MAX_REDIRECT_HOPS or self.scope.check(url, host, item.depth + 1) is not None:
            self.counters["out_of_scope"] += 1
            return
        self.redirect_hops[url] = hops
        self.route([UrlItem(url, host, item.depth + 1, item.url)])

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
