"""Scope rules as a pure object: domains, URL patterns, depth and crawler-trap guards."""

from __future__ import annotations

import re
from collections import Counter

from agent.settings import ScopeSettings
from wancrawl.urls import split_target

# Stable reason names (counter keys), in the order check() tries them.
REASONS = (
    "url_length", "depth", "scheme", "port", "domain", "denied_domain", "denied_pattern", "pattern",
    "path_depth", "repeated_segments", "query_params",
)


class Scope:
    """check(url, host, depth) -> None if in scope, else a reason from REASONS. No state."""

    def __init__(self, settings: ScopeSettings | None = None):
        self.settings = s = settings or ScopeSettings()
        # Sets: a host is checked by looking up it and each parent domain (a few lookups),
        # not by scanning every listed domain (crawls restricted to thousands of sites).
        self._allowed = frozenset(s.allowed_domains)
        self._denied = frozenset(s.denied_domains)
        # One alternation per list: a single regex search per URL however many patterns.
        self._allow = re.compile("|".join(f"(?:{p})" for p in s.allow_patterns)) if s.allow_patterns else None
        self._deny = re.compile("|".join(f"(?:{p})" for p in s.deny_patterns)) if s.deny_patterns else None
        self._schemes = tuple(f"{x}://" for x in s.schemes)
        self._ports = frozenset(s.ports)

    @staticmethod
    def _under(host: str, domains: frozenset[str]) -> bool:
        if host in domains:
            return True
        i = host.find(".")
        while i >= 0:
            if host[i + 1 :] in domains:
                return True
            i = host.find(".", i + 1)
        return False

    def check(self, url: str, host: str, depth: int) -> str | None:
        s = self.settings
        if len(url) > s.max_url_length:
            return "url_length"
        if s.max_depth is not None and depth > s.max_depth:
            return "depth"
        if not url.startswith(self._schemes):
            return "scheme"
        if self._ports and self._port(url) not in self._ports:
            return "port"
        if self._allowed and not self._under(host, self._allowed):
            return "domain"
        if self._denied and self._under(host, self._denied):
            return "denied_domain"
        if self._deny is not None and self._deny.search(url):
            return "denied_pattern"
        if self._allow is not None and not self._allow.search(url):
            return "pattern"
        return self.check_traps(url)

    @staticmethod
    def _port(url: str) -> int:
        scheme, _, rest = url.partition("://")
        netloc = rest.split("/", 1)[0]
        if netloc.rpartition("]")[2].count(":"):  # an explicit port (IPv6 brackets skipped)
            return int(netloc.rsplit(":", 1)[1])
        return 443 if scheme == "https" else 80

    def check_traps(self, url: str) -> str | None:
        """Trap guards on the path and query of a canonical URL."""
        s = self.settings
        # Path and query by index, without splitting the URL (this runs for every link a page
        # yields; tests/test_agent_scope.py holds it to the split-and-partition reference).
        _, path, query = split_target(url)
        # Every non-empty segment follows a "/": a path with few slashes has as few segments, and
        # is within both segment limits without splitting it.
        if path.count("/") > min(s.max_path_depth, s.max_segment_repeats):
            segs = [x for x in path.split("/") if x]
            if len(segs) > s.max_path_depth:
                return "path_depth"
            if len(segs) > s.max_segment_repeats and _repeats(segs, s.max_segment_repeats):
                return "repeated_segments"
            if len(segs) > s.max_segment_count and max(Counter(segs).values()) > s.max_segment_count:
                return "repeated_segments"
        if query and query.count("&") + 1 > s.max_query_params:
            return "query_params"
        return None

    def host_full(self, pages_fetched: int) -> bool:
        """Whether a host that already had `pages_fetched` pages has reached max_pages_per_host."""
        m = self.settings.max_pages_per_host
        return m is not None and pages_fetched >= m

    def domain_full(self, pages_fetched: int) -> bool:
        """Whether a registered domain that had `pages_fetched` pages here is at max_pages_per_domain."""
        m = self.settings.max_pages_per_domain
        return m is not None and pages_fetched >= m

    def domain_crowded(self, hosts: int) -> bool:
        """Whether a registered domain with `hosts` hosts here may take no new one (max_hosts_per_domain)."""
        m = self.settings.max_hosts_per_domain
        return m is not None and hosts >= m

    def queue_room(self, queued: int) -> int | None:
        """How many more URLs a host with `queued` URLs may queue (None: no limit)."""
        m = self.settings.max_queued_per_host
        return None if m is None else max(0, m - queued)


def query_shape(url: str) -> str | None:
    """The URL with every query value blanked (None without a query): URLs that differ only in
    query values share a shape (a session id, a calendar's date, a sort order...)."""
    base, sep, query = url.partition("?")
    if not sep:
        return None
    return base + "?" + "&".join(p.partition("=")[0] for p in query.split("&"))


def _repeats(segs: list[str], limit: int) -> bool:
    """A block of segments of any width repeated back to back more than `limit` times
    (/x/x/x, /a/b/a/b/a/b, /a/b/c/d/a/b/c/d/a/b/c/d...): a relative link that keeps resolving
    one level deeper. A block of width w needs w * (limit + 1) segments, so the widths tried stop
    at len(segs) // (limit + 1): at most ~n^2 / (limit + 1) comparisons (n <= max_path_depth)."""
    n = len(segs)
    for width in range(1, n // (limit + 1) + 1):
        need = width * limit  # matches segs[i] == segs[i - width] in a row: limit + 1 copies
        run = 0
        for i in range(width, n):
            if segs[i] == segs[i - width]:
                run += 1
                if run >= need:
                    return True
            else:
                run = 0
    return False
