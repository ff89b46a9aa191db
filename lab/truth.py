"""Ground truth: the canonical URLs reachable from seeds under scope rules, by BFS over the generator."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from protego import Protego

from lab.web import Web
from wancrawl.errors import WancrawlError
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical


class TruthTooLarge(WancrawlError):
    """The reachable set exceeds max_urls: a trap is unbounded; set a max depth."""


@dataclass
class Scope:
    max_depth: int | None = None  # seeds are depth 0; a link or a redirect is one more
    allow_domains: list[str] = field(default_factory=list)  # host equal to or under one of these
    respect_robots: bool = False
    user_agent: str = "wancrawl"
    sort_query: bool = False  # must match the crawler's canonicalize setting
    max_urls: int = 1_000_000

    def allows_host(self, host: str) -> bool:
        if not self.allow_domains:
            return True
        return any(host == d or host.endswith("." + d) for d in self.allow_domains)


@dataclass(frozen=True)
class Reached:
    url: str
    depth: int
    status: int  # HTTP status; 0 = no response ever; -1 = nothing listens (unknown host or port)


def read_seeds(text: str) -> tuple[list[str], list[str]]:
    """Seed URLs from a file's text, and errors naming bad lines; blank lines and # comments skip."""
    seeds, errors = [], []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            seeds.append(canonicalize(s))
        except InvalidUrl as exc:
            errors.append(f"line {n}: {exc}: {s[:100]!r}")
    return seeds, errors


_QUERY_OK = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?[]@!$&'()*+,;=%")


def encode_query(href: str, encoding: str) -> str:
    """An href's query percent-encoded in its document's encoding, as browsers send it (WHATWG URL:
    the path is always UTF-8, the query of an http(s) URL takes the page's encoding)."""
    rest, hash_, fragment = href.partition("#")
    before, q, query = rest.partition("?")
    if not q or query.isascii():
        return href
    raw = query.encode(encoding, "xmlcharrefreplace")
    # Bytes RFC 3986 allows in a query stay; the rest (the encoding's non-ASCII bytes, and ASCII
    # ones such as "{" that Shift_JIS uses as second bytes) are percent-encoded.
    enc = "".join(chr(b) if b in _QUERY_OK else f"%{b:02X}" for b in raw)
    return before + "?" + enc + hash_ + fragment


class Truth:
    """BFS over the link graph the generator would serve; no sockets involved."""

    def __init__(self, web: Web, scope: Scope | None = None, resolves: Callable[[str], bool] | None = None):
        """`resolves(host)`: whether a crawler can look the host up (lab/dns.py Zone.resolves
        when the lab serves DNS): a URL of a host that does not is reached with status -1, as
        one whose host no server knows, and its links are not followed."""
        self.web = web
        self.scope = scope or Scope()
        self.resolves = resolves
        self._robots: dict[str, Protego | None] = {}

    def _robots_allow(self, url: str, host: str) -> bool:
        if host not in self._robots:
            site = self.web.topology.site(host)
            self._robots[host] = None if site is None or site.kind == "never" else Protego.parse(self.web.robots_txt(site))
        rp = self._robots[host]
        return rp is None or rp.can_fetch(url, self.scope.user_agent)

    def _in_scope(self, url: str, depth: int) -> bool:
        sc = self.scope
        if sc.max_depth is not None and depth > sc.max_depth:
            return False
        host = host_of_canonical(url)  # every URL here came out of canonicalize
        if not sc.allows_host(host):
            return False
        if sc.respect_robots and urlsplit(url).path != "/robots.txt" and not self._robots_allow(url, host):
            return False
        return True

    def reachable(self, seeds: list[str]) -> list[Reached]:
        """Every in-scope URL reachable from the seeds, in BFS order, each once."""
        sc = self.scope
        seen: set[str] = set()
        queue: deque[tuple[str, int]] = deque()
        for s in seeds:
            u = canonicalize(s, sort_query=sc.sort_query)
            if u not in seen and self._in_scope(u, 0):
                seen.add(u)
                queue.append((u, 0))
        out: list[Reached] = []
        topo = self.web.topology
        while queue:
            url, depth = queue.popleft()
            parts = urlsplit(url)
            site = topo.site(parts.hostname or "")
            if site is None or (parts.port or 80) != site.port or (self.resolves is not None and not self.resolves(parts.hostname or "")):
                out.append(Reached(url, depth, -1))
                continue
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            page = self.web.resolve(site.host, target, site=site)
            out.append(Reached(url, depth, page.status))
            if 300 <= page.status < 400 and page.location:
                nexts: tuple[str, ...] = (page.location,)
            elif page.status == 200 and page.html:
                # What a correct crawler follows: not rel/meta nofollow links, not session-id or
                # 404 floods, not links past a lying Content-Length; a meta refresh target, yes.
                nexts = page.followed
            else:
                continue
            for href in nexts:
                if page.encoding != "utf-8" and not href.isascii():
                    href = encode_query(href, page.encoding)
                try:
                    u = canonicalize(href, url, sort_query=sc.sort_query)
                except InvalidUrl:
                    continue  # javascript:, mailto:, data:, no host ...: the crawler drops them too
                if u in seen or not self._in_scope(u, depth + 1):
                    continue
                seen.add(u)
                if len(seen) > sc.max_urls:
                    raise TruthTooLarge(f"more than {sc.max_urls} URLs reachable; is a trap unbounded? set --max-depth")
                queue.append((u, depth + 1))
        return out
