"""URL and host canonicalisation shared by the agent, the manager, storage and the consultant."""

from __future__ import annotations

import codecs
import ipaddress
import re
from functools import lru_cache
from urllib.parse import quote, quote_from_bytes, urljoin, urlsplit, urlunsplit

from wancrawl.checks import shown
from wancrawl.errors import InvalidArgument

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_HOST_LENGTH = 253
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PCT = re.compile(r"%([0-9a-fA-F]{2})")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# Characters left as they are when escaping a path or query ('%' keeps existing escapes).
_SAFE = "!#$%&'()*+,/:;=?@[]~-._|^`{}\"<>\\"


class InvalidUrl(InvalidArgument):
    """A URL that cannot be crawled; the message says why."""


class UnsupportedScheme(InvalidUrl):
    """A URL whose scheme is not http(s) (mailto:, javascript:, data:, ...)."""

    def __init__(self, scheme: str):
        super().__init__(f"scheme {shown(scheme)} is not crawled")
        self.scheme = scheme


def canonical_host(host: str) -> str:
    """Lower-case, IDNA-encoded host without a trailing dot; IPv6 literals without brackets.

    Raises InvalidArgument naming what is wrong. The host is wancrawl's partition unit, so
    every service must agree on this form.
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
    h = h.rstrip(".").lower()
    if not h:
        raise InvalidArgument(f"malformed host name {shown(host)}")
    if not h.isascii():
        try:
            h = h.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise InvalidArgument(f"malformed host name {shown(host)}: {exc}") from None
    if len(h) > MAX_HOST_LENGTH:
        raise InvalidArgument(f"malformed host name: longer than {MAX_HOST_LENGTH} characters")
    if _is_ipv4(h):
        return h
    for label in h.split("."):
        if not _LABEL.match(label):
            raise InvalidArgument(f"malformed host name {shown(host)}: bad label {shown(label)}")
    return h


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


def _normalise_escapes(part: str, encoding: str = "utf-8") -> str:
    # Upper-case escapes; decode the ones that encode unreserved characters (RFC 3986 6.2.2).
    def fix(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

    part = _PCT.sub(fix, part)
    if part.isascii() and " " not in part:
        return part
    # Spaces and non-ASCII characters are sent percent-encoded as UTF-8, as browsers do; a query
    # in the page's encoding when the caller says so (see canonicalize).
    if encoding != "utf-8":
        codec = query_codec(encoding)
        if codec != "utf-8":
            part = _NON_ASCII.sub(lambda m: _encode_run(m.group(), codec), part)
    return quote(part, safe=_SAFE)


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


def _remove_dot_segments(path: str) -> str:
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if seg == ".":
            if i == len(segments) - 1:
                out.append("")
            continue
        if seg == "..":
            if len(out) > 1:
                out.pop()
            if i == len(segments) - 1:
                out.append("")
            continue
        out.append(seg)
    result = "/".join(out)
    if not result.startswith("/"):
        result = "/" + result
    return result


def canonicalize(url: str, base: str | None = None, *, sort_query: bool = False,
                 query_encoding: str = "utf-8") -> str:
    """The canonical form of `url` (resolved against `base`): the key of the seen set.

    Scheme and host lower-cased, default port dropped, dot segments removed, escapes
    normalised, fragment and user info dropped, empty path made "/", query optionally sorted.
    Non-ASCII characters are percent-encoded as UTF-8 in the path and as `query_encoding`
    in the query: pass the encoding of the page a link comes from (Shift_JIS, GBK,
    windows-1251...), as browsers do (WHATWG URL); characters it lacks become "%26%23N%3B".
    Raises UnsupportedScheme for non-http(s) URLs and InvalidUrl for the rest.
    """
    if not isinstance(url, str):
        raise InvalidUrl("URL must be a string")
    raw = url.strip()
    if not raw:
        raise InvalidUrl("empty URL")
    if any(c in raw for c in "\x00\r\n\t"):
        raise InvalidUrl("URL contains control characters")
    if base:
        try:
            raw = urljoin(base, raw)
        except ValueError as exc:
            raise InvalidUrl(f"cannot resolve against base: {exc}") from None
    try:
        parts = urlsplit(raw)
    except ValueError as exc:
        raise InvalidUrl(f"malformed URL: {exc}") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise InvalidUrl("relative URL without a base")
    if scheme not in DEFAULT_PORTS:
        raise UnsupportedScheme(scheme)
    try:
        hostname = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise InvalidUrl(f"malformed URL: {exc}") from None
    if not hostname:
        raise InvalidUrl("URL has no host")
    try:
        host = canonical_host(hostname)
    except InvalidArgument as exc:
        raise InvalidUrl(str(exc)) from None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    path = _remove_dot_segments(_normalise_escapes(parts.path or "/"))
    query = _normalise_escapes(parts.query, query_encoding)
    if sort_query and query:
        query = "&".join(sorted(query.split("&")))
    return urlunsplit((scheme, netloc, path, query, ""))


def host_of(url: str) -> str:
    """The canonical host of an (already canonical or raw absolute) URL."""
    try:
        hostname = urlsplit(url).hostname
    except ValueError as exc:
        raise InvalidUrl(f"malformed URL: {exc}") from None
    if not hostname:
        raise InvalidUrl(f"URL has no host: {shown(url)}")
    return canonical_host(hostname)


def host_of_canonical(url: str) -> str:
    """The host of a URL that `canonicalize` produced, without parsing it again (hot path)."""
    start = url.find("://") + 3
    end = url.find("/", start)
    netloc = url[start:] if end < 0 else url[start:end]
    if netloc.startswith("["):
        return netloc[1 : netloc.index("]")]
    colon = netloc.rfind(":")
    return netloc if colon < 0 else netloc[:colon]
