"""Sitemaps on the crawl path: found (robots.txt's `Sitemap:` lines, the well-known /sitemap.xml),
routed like links within each host's bounds, and read once fetched. agent/crawl/sitemap.py is
the pure half (the parser and the per-host book); this is the half that routes and counts.

A fetched non-HTML 200 is read as a sitemap when this agent knows its URL as one (listed by
robots.txt, the well-known name, a child of an index) or its first bytes look like one. An
index's sitemaps go to routing one depth deeper; a urlset's URLs are discovered links (the
page's `discover` step), their hints handed to `hint` (the revisit schedule's; by default
nobody). Every entry of one call is on the sitemap's own host, which this agent owned when it
fetched the sitemap. Decisions and figures: docs/agent-fetching.md, "Sitemaps".
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from agent.crawl import sitemap
from agent.crawl.links import THREAD_PARSE_BYTES
from agent.crawl.politeness import origin_of
from agent.crawl.robots import RobotsCache
from agent.crawl.scope import Scope
from agent.crawl.sitemap import SitemapBook
from agent.settings import AgentSettings
from agent.state.frontier import Item
from agent.state.revisit import changefreq_seconds
from wancrawl.stats import Counters
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical

log = logging.getLogger("agent")


@dataclass(slots=True)
class SitemapCounters(Counters):
    SHARED = frozenset({"invalid_urls", "out_of_scope"})  # page steps and intake count them too
    sitemaps: int = 0          # sitemap files read
    sitemap_urls: int = 0      # urlset entries taken
    sitemap_refused: int = 0   # entries left out (the parser's refusals, the host's URL bound)
    sitemap_errors: int = 0    # files whose reading stopped early
    sitemaps_skipped: int = 0  # sitemap URLs not fetched or not read (bounds, a nested index)
    invalid_urls: int = 0      # robots.txt `Sitemap:` lines that are no URL
    out_of_scope: int = 0      # sitemap URLs out of scope


class SitemapReader:
    """`route(items)`: the sitemap URLs found, to routing; `discover(page, urls)`: a urlset's
    URLs, as a page's links. Owns the per-host book (`book`)."""

    def __init__(self, settings: AgentSettings, robots: RobotsCache, scope: Scope, *, route: Callable[[list[Item]], None],
                 discover: Callable[[Item, list[str]], None], hint: Callable[[str, str, float, float], None] | None = None):
        self.s = settings
        sm = settings.sitemaps
        self.enabled = sm.enabled
        self.book = SitemapBook(sm.max_files_per_host, sm.max_bytes_per_host, sm.max_urls_per_host)
        self.robots = robots
        self.scope = scope
        self.route = route
        self.discover = discover
        self.hint = hint  # Frontier.hint(host, url, lastmod, changefreq seconds): the revisit schedule
        self.stats = SitemapCounters()

    def hints(self, entries: list[sitemap.Entry]) -> None:
        """Entries' lastmod / changefreq into the revisit schedule (issue 26): a URL changed since
        its capture is due now, a changefreq is its prior rate (docs/continuous.md)."""
        if self.hint is None:
            return
        for e in entries:
            if e.lastmod is not None or e.changefreq is not None:
                self.hint(host_of_canonical(e.url), e.url, e.lastmod or 0.0, changefreq_seconds(e.changefreq))

    def find(self, origin: str) -> None:
        """An origin's robots.txt answered (or robots.txt is off): its `Sitemap:` lines, and
        /sitemap.xml with `sitemaps.well_known`, go to the frontier like discovered links (depth
        0: a site's own list of its pages comes first), each sitemap host within its bounds."""
        self.book.origins.add(origin)
        urls = self._robots_sitemaps(origin)
        found = [(u, "robots") for u in urls]
        if self.s.sitemaps.well_known:
            found.append((origin + "/sitemap.xml", "well-known"))
        for why in ("robots", "well-known"):
            self._route([u for u, w in found if w == why], 0, origin + "/robots.txt", why)

    def known(self, origin: str) -> bool:
        """Whether the origin's sitemaps were looked for."""
        return origin in self.book.origins

    def forget(self, host: str, origins: list[str]) -> None:
        self.book.forget(host)
        self.book.origins.difference_update(origins)

    def _robots_sitemaps(self, origin: str) -> list[str]:
        """The canonical URLs of the origin's robots.txt `Sitemap:` lines (at most max_robots_lines)."""
        if not self.s.robots.enabled:
            return []
        out = []
        for line in self.robots.sitemaps(origin)[: self.s.sitemaps.max_robots_lines]:
            try:
                out.append(canonicalize(line.strip(), origin + "/robots.txt", sort_query=self.s.sort_query))
            except InvalidUrl:
                self.stats.invalid_urls += 1
        return out

    def _why(self, url: str, host: str) -> str | None:
        """How this agent knows `url` is a sitemap ("robots", "well-known", "index-child"), or None."""
        why = self.book.why(host, url)
        if why is None and url in self._robots_sitemaps(origin_of(url)):
            why = "robots"  # listed by a robots.txt handed over with its host, or read before a restart
        return why

    def _route(self, urls: list[str], depth: int, via: str, why: str) -> None:
        by_host: dict[str, list[str]] = {}
        for u in urls:
            by_host.setdefault(host_of_canonical(u), []).append(u)
        out = []
        for host, group in by_host.items():
            admitted = self.book.admit(host, group, why)
            self.stats.sitemaps_skipped += len(set(group)) - len(admitted)
            for u in admitted:
                if self.scope.check(u, host, depth) is not None:
                    self.stats.out_of_scope += 1
                    continue
                out.append(Item(u, host, depth, via))
        if out:
            self.route(out)

    async def read_if_sitemap(self, item: Item, body: bytes) -> None:
        """A fetched non-HTML 200: read it when it is a sitemap known here or looks like one."""
        why = self._why(item.url, item.host)
        if why or sitemap.sniff(body):
            await self.read(item, body, why)

    async def read(self, item: Item, body: bytes, why: str | None) -> None:
        """Parse a fetched sitemap (in a thread when big or gzip'd) within the host's bounds; an
        index's sitemaps go to the frontier, a urlset's URLs are discovered links, one depth
        deeper, with their hints handed to `hints`."""
        sm, host = self.s.sitemaps, item.host
        room = min(sm.max_file_bytes, self.book.room(host))
        if room <= 0:
            self.stats.sitemaps_skipped += 1
            return
        # A sitemap its origin's robots.txt lists may list the whole origin (robots.txt at the root
        # speaks for it); any other follows the protocol's location rule (its directory).
        prefix = sitemap.origin_prefix(item.url) if why == "robots" else None
        parse = functools.partial(sitemap.parse, body, item.url, prefix=prefix, text=why is not None,
                                  max_urls=sm.max_urls_per_file, max_bytes=room, sort_query=self.s.sort_query)
        big = len(body) > THREAD_PARSE_BYTES or body[:2] == b"\x1f\x8b"
        res = await asyncio.to_thread(parse) if big else parse()
        self.book.read(host, res.bytes)
        if not res.kind:
            return
        self.stats.sitemaps += 1
        self.stats.sitemap_refused += sum(res.refused.values())
        if res.error:
            self.stats.sitemap_errors += 1
            log.info("sitemap %s: %s (%d entries kept)", item.url, res.error, len(res.entries))
        if res.kind == "index":
            if why == "index-child":
                # The protocol: an index lists sitemaps, not other indexes (nesting is refused).
                self.stats.sitemaps_skipped += 1
                return
            self._route([e.url for e in res.entries], item.depth + 1, item.url, "index-child")
            return
        self._take(item, res)

    def _take(self, item: Item, res: sitemap.Parsed) -> None:
        """A urlset's entries within the host's URL bound: hints to `hints`, URLs discovered."""
        depth, host = item.depth + 1, item.host
        kept = self.book.take(host, len(res.entries))
        if kept < len(res.entries):
            self.stats.sitemap_refused += len(res.entries) - kept
            res.entries = res.entries[:kept]
        hints = [e for e in res.entries if (e.lastmod is not None or e.changefreq is not None or e.priority is not None)
                 and self.scope.check(e.url, host, depth) is None]
        if hints:
            self.hints(hints)
        self.stats.sitemap_urls += len(res.entries)
        self.discover(item, [e.url for e in res.entries])
