"""Sitemaps (sitemaps.org protocol 0.9) as pure functions and a pure per-host book; the dispatcher fetches.

`parse(body, url, ...)` takes the bytes of one fetched sitemap (gzip'd or not) and gives its
entries, with every limit applied while reading: at most `max_urls` entries (the protocol's
50,000), at most `max_bytes` decompressed (the protocol's 50 MiB), a `<loc>` at most 2,048
characters, only URLs the protocol's location rule allows. The XML is read by expat in chunks as
it is decompressed, so a gzip bomb is cut at `max_bytes` of output and memory holds one chunk
and the entries; a DOCTYPE or an entity declaration stops the parse (no entity expansion at
all: the billion-laughs kind of bomb never starts), as defusedxml and ultimate-sitemap-parser
do. A malformed file keeps the entries read before the error.

`SitemapBook` is the agent's per-host account: which URLs are sitemaps (listed by robots.txt,
the well-known /sitemap.xml, children of an index), how many sitemap files and decompressed
bytes a host has used, so a hostile host (an index of 50,000 indexes, a loop) stays bounded.
Decisions and figures: docs/agent-fetching.md, "Sitemaps".
"""

from __future__ import annotations

import re
import xml.parsers.expat
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from wancrawl.errors import InvalidArgument
from wancrawl.urls import canonicalize

MAX_URLS = 50_000             # per sitemap or index file (the protocol)
MAX_BYTES = 50 * 1024 * 1024  # 52,428,800 bytes uncompressed per file (the protocol)
MAX_LOC = 2048                # "must be less than 2,048 characters"
MAX_FIELD = 4096              # characters kept of any element's text (a 50 MiB <loc> is cut, not held)
CHUNK = 64 * 1024             # decompressed bytes fed to expat at a time
CHANGEFREQS = ("always", "hourly", "daily", "weekly", "monthly", "yearly", "never")
# Root namespaces taken as sitemaps: the protocol's, and Google's 0.84 that older generators write.
NAMESPACES = frozenset({"http://www.sitemaps.org/schemas/sitemap/0.9", "http://www.google.com/schemas/sitemap/0.84", ""})
_FIELDS = frozenset({"loc", "lastmod", "changefreq", "priority"})


@dataclass(frozen=True, slots=True)
class Entry:
    """One <url> of a urlset (or <sitemap> of an index): canonical URL and the optional hints."""

    url: str
    lastmod: float | None = None     # unix time
    changefreq: str | None = None    # one of CHANGEFREQS
    priority: float | None = None    # 0.0 .. 1.0


@dataclass
class Parsed:
    """What one sitemap file gave. kind: "urlset", "index", "text", or "" (not a sitemap)."""

    kind: str = ""
    entries: list[Entry] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)  # reason -> entries left out
    error: str = ""   # why reading stopped early (malformed XML, a limit, bad gzip); "" = read whole
    bytes: int = 0    # decompressed bytes read

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


class _Stop(Exception):
    """Raised from an expat handler to end the parse (a limit was reached)."""


_W3C = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?"
                  r"\s*(Z|z|[+-]\d{2}:?\d{2})?)?)?)?")


def parse_lastmod(text: str) -> float | None:
    """W3C Datetime (YYYY, YYYY-MM, YYYY-MM-DD, with hh:mm[:ss[.s]] and a zone) -> unix time.
    A time without a zone is read as UTC (the protocol requires one; generators forget it)."""
    m = _W3C.fullmatch(text.strip())
    if m is None:
        return None
    y, mo, d, hh, mi, ss, frac, tz = m.groups()
    try:
        dt = datetime(int(y), int(mo or 1), int(d or 1), int(hh or 0), int(mi or 0), int(ss or 0),
                      int((frac or "0")[:6].ljust(6, "0")), tzinfo=timezone.utc)
    except ValueError:
        return None
    if tz and tz not in ("Z", "z"):
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        dt -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return dt.timestamp()


def location_prefix(sitemap_url: str) -> str:
    """The protocol's location rule: a sitemap at http://h/catalog/sitemap.xml may list only URLs
    starting with http://h/catalog/ (same scheme, host and port; under its directory)."""
    base = sitemap_url.split("?", 1)[0].split("#", 1)[0]
    return base[: base.rfind("/") + 1]


def origin_prefix(url: str) -> str:
    """scheme://host[:port]/ of a canonical URL: an index may list sitemaps anywhere on its site."""
    i = url.find("/", url.find("//") + 2)
    return (url if i < 0 else url[:i]) + "/"


class _Reader:
    """expat handlers collecting entries of the root's namespace only (image:loc, xhtml:link and
    other extensions are skipped); fields are cut at MAX_FIELD characters as they arrive."""

    def __init__(self, out: Parsed, url: str, prefix: str, max_urls: int, sort_query: bool):
        self.out = out
        self.url = url
        self.prefix = prefix
        self.max_urls = max_urls
        self.sort_query = sort_query
        self.ns: str | None = None
        self.depth = 0
        self.item: dict[str, str] | None = None   # fields of the <url>/<sitemap> being read
        self.field: str | None = None
        self.text: list[str] = []
        self.size = 0

    def start(self, name: str, _attrs: object) -> None:
        ns, _, local = name.rpartition(" ")
        self.depth += 1
        if self.depth == 1:
            if local not in ("urlset", "sitemapindex") or ns not in NAMESPACES:
                raise _Stop(f"root element {local!r} is not a sitemap")
            self.ns = ns
            self.out.kind = "urlset" if local == "urlset" else "index"
            return
        if ns != self.ns:
            return
        if self.depth == 2 and local == ("url" if self.out.kind == "urlset" else "sitemap"):
            self.item = {}
        elif self.depth == 3 and self.item is not None and local in _FIELDS:
            self.field, self.text, self.size = local, [], 0

    def chars(self, data: str) -> None:
        if self.field is not None and self.size <= MAX_FIELD:
            self.text.append(data)
            self.size += len(data)

    def end(self, name: str) -> None:
        self.depth -= 1
        if self.field is not None and self.depth == 2:
            if self.size <= MAX_FIELD and self.item is not None:
                self.item[self.field] = "".join(self.text).strip()
            elif self.item is not None:
                self.item["toolong"] = self.field
            self.field = None
        elif self.depth == 1 and self.item is not None:
            item, self.item = self.item, None
            self.add(item)

    def add(self, item: dict[str, str]) -> None:
        out = self.out
        if len(out.entries) >= self.max_urls:
            out.refuse("over_limit")
            raise _Stop(f"more than {self.max_urls} entries")
        loc = item.get("loc", "")
        if not loc or len(loc) >= MAX_LOC or "toolong" in item:
            out.refuse("invalid")
            return
        try:
            url = canonicalize(loc, self.url, sort_query=self.sort_query)
        except InvalidArgument:
            out.refuse("invalid")
            return
        if not url.startswith(self.prefix):
            out.refuse("location")
            return
        freq = item.get("changefreq", "").lower() or None
        try:
            prio: float | None = float(item["priority"]) if "priority" in item else None
        except ValueError:
            prio = None
        out.entries.append(Entry(
            url, parse_lastmod(item["lastmod"]) if item.get("lastmod") else None,
            freq if freq in CHANGEFREQS else None, prio if prio is not None and 0.0 <= prio <= 1.0 else None,
        ))


def _refuse_decl(what: str) -> Callable[..., None]:
    def handler(*_args: object) -> None:
        raise _Stop(f"{what} in a sitemap (refused: no entity expansion)")
    return handler


def _chunks(body: bytes, out: Parsed, max_bytes: int):  # type: ignore[no-untyped-def]
    """The decompressed body in chunks, cut at max_bytes (gzip: every member, as gzip -d does)."""
    if body[:2] != b"\x1f\x8b":
        if len(body) > max_bytes:
            out.error = f"over {max_bytes} bytes"
        for i in range(0, min(len(body), max_bytes), CHUNK):
            piece = body[i:i + CHUNK]
            out.bytes += len(piece)
            yield piece
        return
    data = body
    while data:
        d = zlib.decompressobj(wbits=31)
        while data:
            room = max_bytes - out.bytes
            if room <= 0:
                out.error = f"over {max_bytes} bytes decompressed"
                return
            try:
                piece = d.decompress(data, min(CHUNK, room))
            except zlib.error as exc:
                out.error = f"gzip: {exc}"
                return
            data = d.unconsumed_tail
            out.bytes += len(piece)
            if piece:
                yield piece
            if d.eof:
                break
        if not d.eof:
            if not out.error:
                out.error = "gzip: truncated"
            return
        data = d.unused_data
        if data[:2] != b"\x1f\x8b":
            return  # trailing garbage after the last member is ignored, as gzip -d does


def parse(body: bytes, url: str, *, prefix: str | None = None, text: bool = False, max_urls: int = MAX_URLS,
          max_bytes: int = MAX_BYTES, sort_query: bool = False) -> Parsed:
    """Entries of the sitemap `body` fetched from the canonical `url`.

    `prefix`: the URLs a urlset may list (default the location rule, `location_prefix(url)`; a
    sitemap listed in its origin's robots.txt may list the whole origin). An index may list
    sitemaps of its own origin only. `text`: read a body that is not XML as the protocol's text
    format (one URL a line); without it such a body is not a sitemap (kind "")."""
    out = Parsed()
    chunks = _chunks(body, out, max_bytes)
    first = b""
    for piece in chunks:
        first = piece
        break
    head = first.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"<"):
        if text and first:
            _parse_text(first, chunks, out, url, prefix or location_prefix(url), max_urls, sort_query)
        return out
    reader = _Reader(out, url, prefix or location_prefix(url), max_urls, sort_query)
    p = xml.parsers.expat.ParserCreate(namespace_separator=" ")
    p.StartElementHandler = reader.start
    p.EndElementHandler = reader.end
    p.CharacterDataHandler = reader.chars
    p.StartDoctypeDeclHandler = _refuse_decl("DOCTYPE")
    p.EntityDeclHandler = _refuse_decl("ENTITY")
    p.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        p.Parse(first, False)
        for piece in chunks:
            p.Parse(piece, False)
        p.Parse(b"", True)
    except _Stop as exc:
        out.error = out.error or str(exc)
    except xml.parsers.expat.ExpatError as exc:
        out.error = out.error or f"malformed XML: {exc}"
    if out.kind == "index":
        # An index lists sitemaps of its own site only (the protocol); the urlset prefix is not theirs.
        site = origin_prefix(url)
        kept = [e for e in out.entries if e.url.startswith(site)]
        for _ in range(len(out.entries) - len(kept)):
            out.refuse("location")
        out.entries = kept
    return out


def _parse_text(first: bytes, rest, out: Parsed, url: str, prefix: str, max_urls: int,  # type: ignore[no-untyped-def]
                sort_query: bool) -> None:
    out.kind = "text"
    carry = b""
    for piece in _chain(first, rest):
        lines = (carry + piece).split(b"\n")
        carry = lines.pop()
        if len(carry) > MAX_FIELD:
            carry = b""
            out.refuse("invalid")
        for raw in lines:
            if not _text_line(raw, out, url, prefix, max_urls, sort_query):
                return
    _text_line(carry, out, url, prefix, max_urls, sort_query)


def _chain(first: bytes, rest):  # type: ignore[no-untyped-def]
    yield first
    yield from rest


def _text_line(raw: bytes, out: Parsed, url: str, prefix: str, max_urls: int, sort_query: bool) -> bool:
    line = raw.decode("utf-8", "replace").strip().lstrip("\ufeff")
    if not line:
        return True
    if len(out.entries) >= max_urls:
        out.refuse("over_limit")
        out.error = f"more than {max_urls} entries"
        return False
    if len(line) >= MAX_LOC:
        out.refuse("invalid")
        return True
    try:
        u = canonicalize(line, url, sort_query=sort_query)
    except InvalidArgument:
        out.refuse("invalid")
        return True
    if u.startswith(prefix):
        out.entries.append(Entry(u))
    else:
        out.refuse("location")
    return True


def sniff(body: bytes) -> bool:
    """Whether a body not known to be a sitemap looks like one: its first KiB (gunzipped) has a
    <urlset or <sitemapindex root. Cheap: reads at most one chunk."""
    head = body[:CHUNK]
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=31).decompress(body[:CHUNK], 4096)
        except zlib.error:
            return False
    head = head[:4096]
    return b"<urlset" in head or b"<sitemapindex" in head or b":urlset" in head or b":sitemapindex" in head


class SitemapBook:
    """Per host: the sitemap files proposed and the decompressed bytes read, against the
    `[sitemaps]` bounds; which URLs are sitemaps known to this agent (children of an index, the
    well-known /sitemap.xml; robots.txt's lines are asked of the robots cache). Pure state in
    memory: a restart forgets it (the seen set still keeps every sitemap URL to one fetch; a
    text-format child of an index is then not known as a sitemap, XML ones are sniffed)."""

    def __init__(self, max_files_per_host: int, max_bytes_per_host: int, max_urls_per_host: int = 100_000):
        self.max_files = max_files_per_host
        self.max_bytes = max_bytes_per_host
        self.max_urls = max_urls_per_host
        self.files: dict[str, int] = {}
        self.urls: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.known: dict[str, dict[str, str]] = {}  # host -> sitemap URL -> "robots" | "well-known" | "index-child"
        self.origins: set[str] = set()    # origins whose sitemaps were looked for

    def admit(self, host: str, urls: list[str], why: str) -> list[str]:
        """The sitemap URLs of `host` that may still be fetched (each admitted once), marked `why`."""
        n = self.files.get(host, 0)
        known = self.known.setdefault(host, {})
        out = []
        for u in urls:
            if u in known:
                continue
            if n >= self.max_files:
                break
            n += 1
            known[u] = why
            out.append(u)
        self.files[host] = n
        return out

    def why(self, host: str, url: str) -> str | None:
        """How the URL is known as a sitemap of `host` ("robots", "well-known", "index-child"), or None."""
        return self.known.get(host, {}).get(url)

    def room(self, host: str) -> int:
        """Decompressed bytes the host may still have read."""
        return max(0, self.max_bytes - self.bytes.get(host, 0))

    def take(self, host: str, n: int) -> int:
        """How many of n more sitemap entries of `host` may be taken (and count them)."""
        k = max(0, min(n, self.max_urls - self.urls.get(host, 0)))
        self.urls[host] = self.urls.get(host, 0) + k
        return k

    def read(self, host: str, n: int) -> None:
        self.bytes[host] = self.bytes.get(host, 0) + n

    def forget(self, host: str) -> None:
        self.files.pop(host, None)
        self.bytes.pop(host, None)
        self.urls.pop(host, None)
        self.known.pop(host, None)
