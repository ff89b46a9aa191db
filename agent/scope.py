"""Scope rules as a pure object: domains, URL patterns, depth and crawler-trap guards."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from wancrawl.errors import InvalidArgument
from wancrawl.urls import canonical_host

# Stable reason names (counter keys), in the order check() tries them.
REASONS = (
    "url_length", "depth", "domain", "denied_domain", "denied_pattern", "pattern",
    "path_depth", "repeated_segments", "query_params",
)


@dataclass
class ScopeSettings:
    allowed_domains: list[str] = field(default_factory=list)  # host equal to or under one; [] = any
    denied_domains: list[str] = field(default_factory=list)  # wins over allowed_domains
    allow_patterns: list[str] = field(default_factory=list)  # regex searched in the URL; [] = any
    deny_patterns: list[str] = field(default_factory=list)
    max_depth: int | None = None  # seeds are depth 0
    max_pages_per_host: int | None = None  # consulted by the caller through Scope.host_full
    max_url_length: int = 2048
    max_path_depth: int = 32  # path segments
    max_segment_repeats: int = 2  # a run of 1-3 segments repeated more often than this is a trap
    max_query_params: int = 32

    def __post_init__(self) -> None:
        for key in ("allowed_domains", "denied_domains"):
            doms = []
            for i, d in enumerate(getattr(self, key)):
                try:
                    doms.append(canonical_host(str(d).lstrip(".")))
                except InvalidArgument as exc:
                    raise ValueError(f"{key}[{i}]: {exc}") from None
            setattr(self, key, doms)
        for key in ("allow_patterns", "deny_patterns"):
            for i, p in enumerate(getattr(self, key)):
                try:
                    re.compile(p)
                except re.error as exc:
                    raise ValueError(f"{key}[{i}]: bad regex {p!r}: {exc}") from None
        for key in ("max_depth", "max_pages_per_host"):
            v = getattr(self, key)
            if v is not None and v < 0:
                raise ValueError(f"{key} must be >= 0 or unset, got {v}")
        for key in ("max_url_length", "max_path_depth", "max_segment_repeats", "max_query_params"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")


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
        if self._allowed and not self._under(host, self._allowed):
            return "domain"
        if self._denied and self._under(host, self._denied):
            return "denied_domain"
        if self._deny is not None and self._deny.search(url):
            return "denied_pattern"
        if self._allow is not None and not self._allow.search(url):
            return "pattern"
        return self.check_traps(url)

    def check_traps(self, url: str) -> str | None:
        """Trap guards on the path and query of a canonical URL."""
        s = self.settings
        rest = url.split("://", 1)[-1]
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
        path, _, query = target.partition("?")
        segs = [x for x in path.split("/") if x]
        if len(segs) > s.max_path_depth:
            return "path_depth"
        if len(segs) > s.max_segment_repeats and _repeats(segs, s.max_segment_repeats):
            return "repeated_segments"
        if query and query.count("&") + 1 > s.max_query_params:
            return "query_params"
        return None

    def host_full(self, pages_fetched: int) -> bool:
        """Whether a host that already had `pages_fetched` pages has reached max_pages_per_host."""
        m = self.settings.max_pages_per_host
        return m is not None and pages_fetched >= m


def _repeats(segs: list[str], limit: int) -> bool:
    """A block of 1 to 3 segments repeated back to back more than `limit` times (/a/b/a/b/a/b)."""
    n = len(segs)
    for width in (1, 2, 3):
        need = width * (limit + 1)
        if need > n:
            break
        run = width  # length of the current periodic stretch
        for i in range(width, n):
            if segs[i] == segs[i - width]:
                run += 1
                if run >= need:
                    return True
            else:
                run = width
    return False
