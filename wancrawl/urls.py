"""URL and host canonicalisation shared by the agent, the manager, storage and the consultant.

Parsing is WHATWG URL parsing, as browsers do it, by the Ada URL parser (can_ada): hosts as the
URL standard's host parser leaves them (IPv4 in any of its spellings as a dotted quad, IDNA by
UTS #46 to punycode, percent-escapes in hosts decoded), dot segments (also "%2e") removed,
backslashes as slashes, and the characters the standard escapes in paths and queries escaped.
wancrawl's canonical form adds to that: no user info, no fragment, no trailing dot on the host,
hosts held to the letters, digits, '-' and '_' of DNS labels, escapes upper-cased and the ones of
unreserved characters decoded, an optionally sorted query. docs/urls.md lists the differences from
the urllib-based form wancrawl used before, and why.
"""

from __future__ import annotations

import codecs
import ipaddress
import re
from functools import lru_cache
from urllib.parse import quote_from_bytes

import can_ada

from wancrawl.checks import shown
from wancrawl.errors import InvalidArgument

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_HOST_LENGTH = 253
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PCT = re.compile(r"%([0-9a-fA-F]{2})")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# WHATWG: a scheme is an ASCII letter, then letters, digits, '+', '-' or '.', then ':'.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_C0_SPACE = "".join(chr(c) for c in range(0x21))  # what the URL parser strips from both ends
# Characters a host given on its own must not hold: each would end the host in a URL.
_NOT_IN_HOST = re.compile(r"[/?#@\\\s]")
_HOSTS: dict[str, str | None] = {}  # WHATWG hostname -> canonical host, None: not one we crawl
_HOSTS_SIZE = 100_000


class InvalidUrl(InvalidArgument):
    """A URL that cannot be crawled; the message says why."""


class UnsupportedScheme(InvalidUrl):
    """A URL whose scheme is not http(s) (mailto:, javascript:, data:, ...)."""

    def __init__(self, scheme: str):
        super().__init__(f"scheme {shown(scheme)} is not crawled")
        self.scheme = scheme


def canonical_host(host: str) -> str:
    """The host as it is in a canonical URL, without brackets around IPv6 literals.

    WHATWG's host parser (lower case, IDNA to punycode by UTS #46, IPv4 numbers in any form such
    as "0x7f000001", "2130706433" or "127.1" as a dotted quad), then no trailing dot and DNS
    labels only. Raises InvalidArgument naming what is wrong. The host is wancrawl's partition
    unit, so every service must agree on this form: canonicalize puts this very string in URLs.
    """
    if not isinstance(host, str):
        raise InvalidArgument("host must be a string")
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if not h:
        raise InvalidArgument("empty host name")
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h).compressed
        except ValueError:
            raise InvalidArgument(f"malformed host name {shown(host)}: ':' is only allowed in IPv6 literals") from None
    if _NOT_IN_HOST.search(h):
        raise InvalidArgument(f"malformed host name {shown(host)}")
    try:
        parsed = can_ada.parse(f"http://{h}/").hostname
    except ValueError:
        raise InvalidArgument(f"malformed host name {shown(host)}: not a valid WHATWG host") from None
    out = _crawlable_host(parsed)
    if out is None:
        raise InvalidArgument(f"malformed host name {shown(host)}: {_host_fault(parsed)}")
    return out.strip("[]")


def _crawlable_host(hostname: str) -> str | None:
    """wancrawl's host for a WHATWG hostname, as it goes in a URL (IPv6 in brackets); None when
    it is not one we crawl.

    Cached: a crawl meets the same few hosts again and again."""
    got = _HOSTS.get(hostname, "")
    if got != "":
        return got
    h = hostname
    if h.startswith("["):
        out: str | None = h  # an IPv6 literal, already compressed and lower-cased by the parser
    else:
        h = h.rstrip(".")  # "example.com." is example.com (WHATWG keeps the dot; DNS does not care)
        out = h if h and _host_fault(h) is None else None
    if len(_HOSTS) >= _HOSTS_SIZE:
        _HOSTS.clear()
    _HOSTS[hostname] = out
    return out


def _host_fault(h: str) -> str | None:
    """Why a WHATWG hostname is not a DNS name we crawl ("a..b", "exa$mple.com"), None if it is."""
    h = h.rstrip(".")
    if not h:
        return "empty host name"
    if len(h) > MAX_HOST_LENGTH:
        return f"longer than {MAX_HOST_LENGTH} characters"
    if _is_ipv4(h):
        return None
    for label in h.split("."):
        if not _LABEL.match(label):
            return f"bad label {shown(label)}"
    return None


def _is_ipv4(h: str) -> bool:
    try:
        ipaddress.IPv4Address(h)
        return True
    except ValueError:
        return False


def ip_literal(host: str) -> str | None:
    """The host itself when it is an IP literal, else None."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


@lru_cache(maxsize=64)
def query_codec(encoding: str | None) -> str:
    """The codec a document in `encoding` uses for URL queries: its own, but UTF-8 for UTF-16
    (WHATWG "get an output encoding") and for unknown labels."""
    if not encoding:
        return "utf-8"
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return "utf-8"
    return "utf-8" if name.startswith("utf") else name


def _fix_escape(m: re.Match[str]) -> str:
    # Upper-case escapes; decode the ones that encode unreserved characters (RFC 3986 6.2.2).
    # Decoding creates no dot segment: WHATWG already removed every "%2e" and "%2e%2e" segment.
    ch = chr(int(m.group(1), 16))
    return ch if ch in _UNRESERVED else "%" + m.group(1).upper()


def _encode_run(run: str, codec: str) -> str:
    # Every byte of the encoded characters is escaped but the unreserved ones ("%83A" for
    # Shift_JIS "ア", "%96%7B" for the "本" browsers send as "%96{"): the same bytes reach the
    # server, the result equals what server-side encoders (urlencode, quote) write into pages,
    # and canonicalize leaves it as it is the second time. A character the codec lacks is sent
    # as "&#<decimal>;", percent-encoded (WHATWG URL "percent-encode after encoding").
    try:
        return quote_from_bytes(run.encode(codec), safe="")
    except UnicodeEncodeError:
        out = []
        for c in run:
            try:
                out.append(quote_from_bytes(c.encode(codec), safe=""))
            except UnicodeEncodeError:
                out.append(f"%26%23{ord(c)}%3B")
        return "".join(out)


def _encode_query(ref: str, codec: str) -> str:
    """`ref` with the non-ASCII characters of its query encoded in `codec` (WHATWG's encoding
    override: the parser then sees escapes, and the path and host stay UTF-8 and IDNA)."""
    q = ref.find("?")
    if q < 0:
        return ref
    h = ref.find("#", q)
    end = len(ref) if h < 0 else h
    query = _NON_ASCII.sub(lambda m: _encode_run(m.group(), codec), ref[q:end])
    return ref[:q] + query + ref[end:]


class BaseUrl:
    """A page's URL, split once to resolve the page's many references against it.

    can_ada parses absolute URLs only, so the relative step of WHATWG parsing is done here, by
    spelling each reference out as the absolute URL it stands for: "//h/p" under the base's
    scheme, "/p" under its origin, "p" under its directory, "?q" under its path, "#f" and ""
    as the base itself. The parser then does the rest (dot segments, escapes, host) exactly as it
    would with a base; tests/test_shared.py holds this to Ada's own join (ada-url) on random
    references. `usable` is False for a base that is not an http(s) URL: then only absolute
    references resolve.
    """

    __slots__ = ("href", "scheme", "origin", "directory", "path", "usable")

    def __init__(self, url: str):
        self.href = self.scheme = self.origin = self.directory = self.path = ""
        self.usable = False
        try:
            u = can_ada.parse(url.strip(_C0_SPACE))
        except ValueError:
            return
        scheme = u.protocol[:-1]
        if scheme not in DEFAULT_PORTS or not u.host:
            return
        pathname = u.pathname
        self.scheme = scheme
        self.origin = f"{scheme}://{u.host}"
        self.path = self.origin + pathname  # what "?q" replaces the query of
        self.directory = self.origin + pathname[: pathname.rfind("/") + 1]
        self.href = self.path + u.search
        self.usable = True

    def absolute(self, ref: str) -> str:
        """The absolute URL `ref` stands for on this page, as a string for the parser."""
        m = _SCHEME.match(ref)
        if m is not None:
            scheme = m.group(1).lower()
            if scheme not in DEFAULT_PORTS:
                raise UnsupportedScheme(scheme)
            if scheme != self.scheme:
                return ref  # absolute; an http(s) URL needs no base
            # WHATWG "special relative or authority state": the base's own scheme followed by
            # anything but "//" is a relative reference ("http:page.html", "http:?q").
            rest = ref[m.end():]
            if rest.startswith("//"):
                return ref
            ref = rest
        if not self.usable:
            raise InvalidUrl("relative URL without a base")
        if not ref or ref[0] == "#":
            return self.href
        c = ref[0]
        if c == "/" or c == "\\":
            if len(ref) > 1 and ref[1] in "/\\":
                return f"{self.scheme}:{ref}"  # scheme-relative: "//host/p" (backslashes too)
            return self.origin + ref
        if c == "?":
            return self.path + ref
        return self.directory + ref


@lru_cache(maxsize=256)
def _base(url: str) -> BaseUrl:
    return BaseUrl(url)


def canonicalize(url: str, base: str | BaseUrl | None = None, *, sort_query: bool = False,
                 query_encoding: str = "utf-8") -> str:
    """The canonical form of `url` (resolved against `base`): the key of the seen set.

    WHATWG URL parsing (see the module's doc), then user info and fragment dropped, the host's
    trailing dot dropped, escapes upper-cased and unreserved ones decoded, query optionally
    sorted. Non-ASCII characters are percent-encoded as UTF-8 in the path and as
    `query_encoding` in the query: pass the encoding of the page a link comes from (Shift_JIS,
    GBK, windows-1251...), as browsers do; characters it lacks become "%26%23N%3B". `base` may be
    a BaseUrl, split once for many links of one page. Raises UnsupportedScheme for non-http(s)
    URLs and InvalidUrl for the rest.
    """
    if not isinstance(url, str):
        raise InvalidUrl("URL must be a string")
    raw = url.strip()
    if raw and (raw[0] <= " " or raw[-1] <= " "):
        raw = raw.strip(_C0_SPACE)
    if not raw:
        raise InvalidUrl("empty URL")
    if "\t" in raw or "\n" in raw or "\r" in raw or "\x00" in raw:
        # WHATWG drops tabs and newlines inside URLs; a crawler takes them for a broken page.
        raise InvalidUrl("URL contains control characters")
    if query_encoding != "utf-8" and not raw.isascii():
        codec = query_codec(query_encoding)
        if codec != "utf-8":
            raw = _encode_query(raw, codec)
    if base is None:
        m = _SCHEME.match(raw)
        if m is None:
            raise InvalidUrl("relative URL without a base")
        scheme = m.group(1).lower()
        if scheme not in DEFAULT_PORTS:
            raise UnsupportedScheme(scheme)
        absolute = raw
    else:
        absolute = (base if isinstance(base, BaseUrl) else _base(base)).absolute(raw)
    # The fragment is dropped before parsing: the first "#" of an absolute URL starts it wherever
    # it stands (WHATWG), so the parser never sees one and the href needs no rebuilding for it.
    # Not after a space or control: the parser would strip it as trailing, where before the "#"
    # it is part of the URL ("/a #f" is "/a%20"); nor after a "?": the rebuild below has always
    # dropped an empty query with the fragment ("/p?#f" is "/p"). Those are rebuilt as before.
    h = absolute.find("#")
    hashed = False
    if h > 0 and absolute[h - 1] > " " and absolute[h - 1] != "?":
        absolute = absolute[:h]
    else:
        hashed = h >= 0
    try:
        u = can_ada.parse(absolute)
    except ValueError:
        raise InvalidUrl(f"malformed URL {shown(url)}") from None
    hostname = u.hostname
    host = _HOSTS.get(hostname) or _crawlable_host(hostname)
    if host is None:
        raise InvalidUrl(f"malformed URL {shown(url)}: {_host_fault(hostname) or 'bad host'}")
    href = u.href
    # User info needs an "@" in the string (each of these calls into the parser costs ~0.15 us).
    if host != hostname or hashed or ("@" in absolute and u.has_credentials()):
        port = u.port
        href = f"{u.protocol}//{host}{':' + port if port else ''}{u.pathname}{u.search}"
    if "%" in href:
        start = href.index("/", href.index("//") + 2)
        href = href[:start] + _PCT.sub(_fix_escape, href[start:])
    if "^" in href:
        href = _caret(href)
    if sort_query:
        q = href.find("?")
        if q >= 0 and q + 1 < len(href):
            href = href[: q + 1] + "&".join(sorted(href[q + 1:].split("&")))
    return href


def _caret(href: str) -> str:
    # The URL standard added '^' to the path percent-encode set in 2024; the Ada inside can_ada 3
    # predates it. Escaped here so the canonical form is the standard's, whichever Ada parsed it.
    start = href.index("/", href.index("//") + 2)
    q = href.find("?", start)
    end = len(href) if q < 0 else q
    return href[:start] + href[start:end].replace("^", "%5E") + href[end:]


def host_of(url: str) -> str:
    """The canonical host of an (already canonical or raw absolute) URL."""
    try:
        u = can_ada.parse(url.strip(_C0_SPACE))
    except ValueError:
        raise InvalidUrl(f"malformed URL: {shown(url)}") from None
    hostname = u.hostname
    if not hostname:
        raise InvalidUrl(f"URL has no host: {shown(url)}")
    host = _crawlable_host(hostname)
    if host is None:
        raise InvalidUrl(f"malformed host name {shown(hostname)}: {_host_fault(hostname)}")
    return host.strip("[]")


def host_of_canonical(url: str) -> str:
    """The host of a URL that `canonicalize` produced, without parsing it again (hot path)."""
    start = url.find("://") + 3
    end = url.find("/", start)
    netloc = url[start:] if end < 0 else url[start:end]
    if netloc.startswith("["):
        return netloc[1 : netloc.index("]")]
    colon = netloc.rfind(":")
    return netloc if colon < 0 else netloc[:colon]


def split_target(url: str) -> tuple[str, str, str | None]:
    """(authority, path, query) of an absolute URL, found by index (hot path: every link a page
    yields, every fetch, every record): the authority runs from "://" (the string's start
    without one) to the first "/", "?" or "#"; the path to the next "?" or "#", "/" when empty
    (a request target's origin-form, RFC 9112 3.2.1); the query from that "?" to the "#", None
    without a "?" and "" for a bare one. The fragment is never part of a request.

    The one place the request target is cut out of a URL: the lean fetcher's request line, the
    WARC request record's, and the scope's trap guards all take it from here. For an http(s) URL
    this is what urlsplit gives (netloc, path or "/", query) wherever urlsplit keeps the URL as
    written; it does not strip, unescape or check anything (tests/test_shared.py)."""
    k = url.find("://")
    start = k + 3 if k >= 0 else 0
    end = url.find("#", start)
    if end < 0:
        end = len(url)
    q = url.find("?", start, end)
    stop = end if q < 0 else q  # the authority and the path end by here
    p = url.find("/", start, stop)
    if p < 0:
        return url[start:stop], "/", (None if q < 0 else url[q + 1 : end])
    return url[start:p], url[p:stop], (None if q < 0 else url[q + 1 : end])
