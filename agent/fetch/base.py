"""The fetcher contract: request/response/settings types and the body pipeline every backend shares."""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import ipaddress
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agent.fetch.guard import AddressGuard
from wancrawl.hostres import TEMPORARY

DEFAULT_USER_AGENT = "wancrawl/0.1 (+https://example.invalid/wancrawl)"
MiB = 1024 * 1024

# The fixed vocabulary of FetchResponse.error: counters and retry policy key on these names.
ERRORS = ("connect", "timeout", "read", "dns", "forbidden_address", "protocol", "too_large", "tls", "internal")
# FetchResponse.truncated: the response head arrived but the body is incomplete. Every kind
# leaves `body` a prefix of what the server sent (decoded): HTML in it can still be parsed.
#   length      wire bytes > max_body_bytes: the first max_body_bytes are kept
#   decoded     decoded bytes > max_decoded_bytes (e.g. a gzip bomb)
#   time        total or read timeout mid-body
#   disconnect  the body ended before its framing said: peer closed or reset the connection
#               (short of Content-Length, chunked stream cut), or the framing broke mid-body
#               (garbage where a chunk size should be)
#   excess      the server sent more than its framing announced (bytes past Content-Length or
#               after the last chunk): the body is the announced message, as curl keeps it;
#               the rest is dropped unread and the connection is not reused
#   encoding    the Content-Encoding stream broke mid-body (a corrupt gzip member): the body is
#               what decoded before the break
TRUNCATIONS = ("length", "decoded", "time", "disconnect", "excess", "encoding")


@dataclass
class FetchRequest:
    url: str  # canonical absolute http(s) URL
    host: str  # canonical host of url (the politeness / partition unit)
    ip: str | None = None  # address to dial; None: resolve host through the fetcher's resolver
    headers: dict[str, str] | None = None  # extra request headers (e.g. If-Modified-Since)


@dataclass
class FetchResponse:
    url: str
    status: int = 0  # 0: no HTTP response
    reason: str = ""
    http_version: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)  # as received, in order
    request_headers: list[tuple[str, str]] = field(default_factory=list)  # as sent
    body: bytes = b""  # decoded per Content-Encoding, capped (unless `encoded` says otherwise)
    # The Content-Encoding the body still carries ("": decoded, or none was named): one this agent
    # cannot undo, or one the server named for a body that is not in it (kept as sent; the WARC
    # keeps the header then, so the record says what its bytes are).
    encoded: str = ""
    raw_length: int = 0  # body bytes read from the wire
    ip: str | None = None  # peer address actually connected to
    started_at: float = 0.0  # time.time()
    ended_at: float = 0.0
    ttfb: float | None = None  # seconds from start to the response head
    truncated: str | None = None  # one of TRUNCATIONS
    error: str | None = None  # one of ERRORS
    error_detail: str | None = None
    content_type: str | None = None  # lower-cased media type without parameters
    charset: str | None = None  # from the Content-Type header, lower-cased
    location: str | None = None  # raw Location header of a 3xx
    retry_after: float | None = None  # seconds, from Retry-After (delta or HTTP-date)

    @property
    def ok(self) -> bool:
        """A complete 2xx response."""
        return self.error is None and self.truncated is None and 200 <= self.status < 300


@runtime_checkable
class Fetcher(Protocol):
    async def fetch(self, req: FetchRequest) -> FetchResponse:
        """One GET, redirects not followed; network and HTTP problems come back in `error`."""
        ...

    async def close(self) -> None:
        ...


class Resolver(Protocol):
    async def resolve(self, host: str) -> str | None:
        ...

    def failure(self, host: str) -> str | None:
        """Why resolve() found no address (wancrawl.hostres: NXDOMAIN, NO_ADDRESS, ...), or None."""
        ...


@dataclass
class FetchSettings:
    user_agent: str = DEFAULT_USER_AGENT
    connect_timeout: float = 10.0
    read_timeout: float = 20.0  # longest wait for the head or between two body reads
    total_timeout: float = 60.0  # the whole fetch, pool wait and connect included
    max_body_bytes: int = 5 * MiB  # wire bytes kept; more -> truncated "length"
    max_decoded_bytes: int = 10 * MiB  # decoded bytes kept; more -> truncated "decoded"
    source_ip: str = ""  # local address to bind ("" = the kernel's choice)
    max_connections: int = 500
    max_connections_per_host: int = 1
    allow_networks: list[str] = field(default_factory=list)  # CIDRs allowed even if private
    accept_encoding: str = "gzip, deflate"

    def __post_init__(self) -> None:
        if not self.user_agent.strip():
            raise ValueError("user_agent must not be empty")
        for key in ("connect_timeout", "read_timeout", "total_timeout"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key} must be > 0, got {getattr(self, key)!r}")
        for key in ("max_body_bytes", "max_decoded_bytes", "max_connections", "max_connections_per_host"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)!r}")
        if self.source_ip:
            try:
                ipaddress.ip_address(self.source_ip)
            except ValueError:
                raise ValueError(f"source_ip must be an IP address, got {self.source_ip!r}") from None
        AddressGuard(self.allow_networks)  # raises ValueError naming allow_networks
        for enc in (e.strip().split(";")[0] for e in self.accept_encoding.split(",")):
            if enc and enc not in DECODERS:
                raise ValueError(f"accept_encoding: {enc!r} cannot be decoded (known: {', '.join(DECODERS)})")


# --- header helpers (pure) ------------------------------------------------------------------


def parse_content_type(value: str | None) -> tuple[str | None, str | None]:
    """(media type, charset) from a Content-Type value, both lower-cased; None when absent."""
    if not value:
        return None, None
    parts = value.split(";")
    media = parts[0].strip().lower() or None
    charset = None
    for p in parts[1:]:
        k, _, v = p.partition("=")
        if k.strip().lower() == "charset":
            charset = v.strip().strip("\"'").lower() or None
    return media, charset


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or HTTP-date); None if absent or bad."""
    if value is None:
        return None
    v = value.strip()
    if v.isdigit():
        return float(int(v))
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def finish_headers(resp: FetchResponse) -> str:
    """Fill the fields derived from the response head (one pass over the headers); returns
    the Content-Encoding, lower-cased ("" if none), for the body pipeline."""
    ct = ce = loc = ra = None
    for k, v in resp.headers:
        kl = k.lower()
        if kl == "content-type" and ct is None:
            ct = v
        elif kl == "location" and loc is None:
            loc = v
        elif kl == "retry-after" and ra is None:
            ra = v
        elif kl == "content-encoding" and ce is None:
            ce = v
    resp.content_type, resp.charset = parse_content_type(ct)
    resp.location = loc if 300 <= resp.status < 400 else None
    resp.retry_after = parse_retry_after(ra)
    return (ce or "").strip().lower()


# --- the body pipeline ----------------------------------------------------------------------


class _Decoder(Protocol):
    """What BodySink needs of a decoder: zlib's decompressobj API, or a stand-in with the same shape."""

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...

    @property
    def unconsumed_tail(self) -> bytes: ...

    def flush(self) -> bytes: ...


class _Identity:
    def decompress(self, data: bytes, max_length: int) -> bytes:
        return data

    unconsumed_tail = b""

    def flush(self) -> bytes:
        return b""


def _gzip() -> zlib._Decompress:
    return zlib.decompressobj(zlib.MAX_WBITS | 16)


def _deflate() -> _Deflate:
    return _Deflate()


class _Deflate:
    """HTTP "deflate" is meant to be zlib-wrapped, but many servers send raw deflate."""

    def __init__(self) -> None:
        self._d: zlib._Decompress | None = None
        self.unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._d is None:
            first = data[:1]
            # A zlib header's first byte has compression method 8 in its low nibble.
            self._d = zlib.decompressobj(zlib.MAX_WBITS if first and first[0] & 0x0F == 8 else -zlib.MAX_WBITS)
        out = self._d.decompress(data, max_length)
        self.unconsumed_tail = self._d.unconsumed_tail
        return out

    def flush(self) -> bytes:
        return self._d.flush() if self._d is not None else b""


DECODERS: dict[str, Callable[[], _Decoder]] = {"identity": _Identity, "gzip": _gzip, "x-gzip": _gzip, "deflate": _deflate}


class BodySink:
    """Takes wire chunks, decodes them, and says when to stop; memory stays within the caps.

    Decompression goes through `max_length` so a bomb is cut after at most
    max_decoded_bytes + one chunk of output, however much it would expand to.
    """

    def __init__(self, settings: FetchSettings, encoding: str):
        self.max_raw = settings.max_body_bytes
        self.max_decoded = settings.max_decoded_bytes
        self.raw_length = 0
        self.parts: list[bytes] = []
        self.decoded = 0
        self.truncated: str | None = None
        self.detail: str | None = None  # why the body is not decoded, or where its encoding broke
        enc = encoding if encoding else "identity"
        self.enc = enc
        factory = DECODERS.get(enc)
        # An encoding we did not ask for: keep the bytes as they came, say so.
        self.encoded = "" if factory is not None else enc
        if self.encoded:
            self.detail = f"content-encoding {enc!r} not decoded"
        self._dec: _Decoder = (factory or _Identity)()

    def feed(self, chunk: bytes) -> bool:
        """Add one wire chunk; False when reading must stop (cap reached or bad stream)."""
        room_raw = self.max_raw - self.raw_length
        if len(chunk) > room_raw:
            chunk = chunk[:room_raw]
            self.truncated = "length"
        self.raw_length += len(chunk)
        if chunk and not self._emit(chunk):
            return False
        return self.truncated is None

    def _emit(self, chunk: bytes) -> bool:
        try:
            room = self.max_decoded - self.decoded
            # Ask for one byte more than the room so "exactly at the cap" is not a truncation.
            out = self._dec.decompress(chunk, room + 1)
        except zlib.error as exc:
            return self._broken(chunk, f"bad {type(self._dec).__name__.strip('_').lower()} stream: {exc}")
        if len(out) > room or self._dec.unconsumed_tail:
            self.parts.append(out[:room])
            self.decoded += min(len(out), room)
            self.truncated = "decoded"
            return False
        self.parts.append(out)
        self.decoded += len(out)
        return True

    def _broken(self, chunk: bytes, why: str) -> bool:
        """The encoded stream is not what the header named. Broken at its first bytes (nothing
        decoded yet): the header lied, the body is kept as sent and says so (`encoded`); broken
        later: the body is what decoded before the break (truncated "encoding")."""
        if self.decoded == 0 and not self.encoded and self.raw_length == len(chunk):  # the first chunk: all of it is here
            self.encoded, self.detail = self.enc, f"content-encoding {self.enc!r} named, but {why}: the body is kept as sent"
            self._dec = _Identity()
            return self._emit(chunk)
        self.truncated, self.detail = "encoding", f"the {self.enc} stream broke after {self.decoded} decoded bytes: {why}"
        return False

    def finish(self) -> None:
        """The wire body is complete: flush the decoder's remainder (within the cap)."""
        if self.truncated is None:
            try:
                tail = self._dec.flush()
            except zlib.error as exc:
                self.truncated, self.detail = "encoding", f"the {self.enc} stream broke at its end: {exc}"
                return
            room = self.max_decoded - self.decoded
            if len(tail) > room:
                tail = tail[:room]
                self.truncated = "decoded"
            self.parts.append(tail)
            self.decoded += len(tail)

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)


# --- response framing (RFC 9112 section 6.3) -------------------------------------------------


class FramingReport:
    """What ResponseFraming saw of one response (one per request sent)."""

    __slots__ = ("cut", "excess", "framing", "invalid", "length")

    def __init__(self) -> None:
        self.excess = 0  # bytes received past the end of the message, dropped
        self.invalid: str | None = None  # why the head's framing is invalid (the response is discarded)
        self.cut: str | None = None  # why the body was cut short (its chunked framing broke)
        self.framing: str | None = None  # "length", "chunked", "close" (read until close); None: no body (204, 304)
        self.length: int | None = None  # the Content-Length, when framing == "length"

    @property
    def excess_detail(self) -> str:
        if self.framing == "length":
            return f"the server sent more than its Content-Length ({self.length}): the rest was dropped"
        if self.framing == "chunked":
            return "the server sent more after the last chunk: it was dropped"
        return "the server sent a body with a 204/304 response: it was dropped"


# The reports of the requests the current task sends: a backend's protocol or stream arms its
# ResponseFraming when a request goes out, in the fetching task, and files the report here.
_REPORTS: contextvars.ContextVar[list[FramingReport] | None] = contextvars.ContextVar("wancrawl_fetch_framing", default=None)


def collect_framing() -> tuple[list[FramingReport], contextvars.Token]:
    """Start collecting the framing reports of this task's requests (end_framing(token) after)."""
    reports: list[FramingReport] = []
    return reports, _REPORTS.set(reports)


def end_framing(token: contextvars.Token) -> None:
    _REPORTS.reset(token)


# States; from _PASS on the connection is `broken` (never reused).
(_IDLE, _HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _PASS, _CUT, _POISONED) = range(10)
_MAX_HEAD = 1024 * 1024  # a longer head is left to the library, which refuses it
_MAX_LINE = 16 * 1024  # a chunk-size or trailer line longer than this is garbage
# Chunked framing lines as both libraries take them (RFC 9112 7.1 without the BWS around ";" and
# "=" that aiohttp's parser refuses): garbage by these rules is cut here, the same on every backend.
_TCHARS = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = rb'"(?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[^\x00-\x08\x0a-\x1f\x7f])*"'
_CHUNK_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;" + _TCHARS + rb"(?:=(?:" + _TCHARS + rb"|" + _QUOTED + rb"))?)*[ \t]*\r\n")
_TRAILER_LINE = re.compile(_TCHARS + rb":[^\x00-\x08\x0a-\x1f\x7f]*\r\n")
_STATUS_LINE = re.compile(rb"HTTP/[^ \t\r\n]*[ \t]+([0-9]{3})(?![0-9])")
# The two fields that frame a body (a regex: a Python loop over every header line costs 3x).
_FRAMING_FIELDS = re.compile(rb"\n(content-length|transfer-encoding)[ \t]*:([^\r\n]*)", re.IGNORECASE)


def _head_end(buf: bytes | bytearray, start: int) -> int:
    """Index just past the empty line that ends a head (CRLF or bare LF), or -1."""
    a = buf.find(b"\n\r\n", start)
    # Only before `a`: find() of a two-byte needle crawls through a long body (~2 us per KB).
    b = buf.find(b"\n\n", start, a + 1 if a >= 0 else len(buf))
    if b >= 0:
        return b + 2
    return a + 3 if a >= 0 else -1


def _line_end(buf: bytes | bytearray, start: int) -> int:
    i = buf.find(b"\n", start)
    return i + 1 if i >= 0 else -1


class ResponseFraming:
    """Watches the bytes an HTTP/1.1 client connection receives and cuts each response where
    its framing says it ends (RFC 9112 section 6.3), before the client library parses them.

    `arm()` when a request is sent; `feed(data)` returns what to hand to the library's parser
    (`data`, a prefix of it, or with a chunk line held back from the previous read in front).

    * What follows the end of the message (past Content-Length, after the last chunk, any body
      of a 204/304), or arrives with no request outstanding, is dropped and counted in the
      report's `excess`.
    * Garbage where a chunk-size line, the CRLF after a chunk or a trailer should be: nothing
      from there on is passed, the report says why in `cut`, and the backend ends the body there.
    * A head whose framing is invalid (see _head) sets `invalid`: the library is given the bytes
      and refuses them, or the fetcher discards what it made of them.
    * What this class cannot follow (an unparseable or huge head, a body read until close, 101)
      is passed through: the library decides, as without this class.

    After any of these the connection is `broken`: never to be reused. GET only: a response to
    HEAD has no body whatever its Content-Length says.
    """

    __slots__ = ("_buf", "_fresh", "_left", "report", "state")

    def __init__(self) -> None:
        # A new connection expects a response: bytes a server sends before the first request is
        # out (a banner) are read as its head, as the library would, not as excess.
        self.state = _HEAD
        self.report = FramingReport()
        self._fresh = True  # the first arm() files self.report
        self._buf = bytearray()  # a partial head or chunk line
        self._left = 0  # body or chunk bytes still to come

    @property
    def broken(self) -> bool:
        """The connection must not carry another request."""
        return self.state >= _PASS

    @property
    def stopped(self) -> bool:
        """Nothing more will be passed to the library."""
        return self.state >= _CUT

    def arm(self) -> None:
        """A request is going out: the next bytes are its response. (Again while waiting for
        that response, or on a broken connection, nothing changes.)"""
        if self._fresh or self.state == _IDLE:
            if not self._fresh:
                self.state = _HEAD
                self.report = FramingReport()
            self._fresh = False
            reports = _REPORTS.get()
            if reports is not None:
                reports.append(self.report)

    def feed(self, data: bytes) -> bytes:
        n = len(data)
        pos = 0
        stop = -1  # >= 0: pass data only up to here (a chunk line held back, or garbage)
        release = b""  # the start of a chunk line held back from an earlier read, now complete
        while pos < n:
            st = self.state
            if st == _PASS:
                pos = n
                break
            if st == _BODY or st == _CHUNK_DATA:
                take = min(self._left, n - pos)
                pos += take
                self._left -= take
                if self._left == 0:
                    self.state = _IDLE if st == _BODY else _CHUNK_END
                continue
            if st == _IDLE or st == _POISONED:
                self.report.excess += n - pos
                self.state = _POISONED
                break
            if st == _CUT:
                break
            # A line-oriented state: a head (passed on as it comes, the library needs all of it
            # anyway), or a chunk-size line, the CRLF after a chunk, a trailer (held back until
            # complete and judged, so the library never sees garbage there).
            start = pos
            block, pos, held = self._take_block(data, pos, st == _HEAD)
            if block is None:
                pos = n
                if st != _HEAD:
                    stop = start
                self._check_size()
                break
            if st == _HEAD:
                self._head(block)
            else:
                why = self._chunk_line(st, block)
                if why is not None:
                    self._cut(why)
                    stop = start
                    break
                if held:
                    release = block[:held]
        if stop >= 0:
            pos = stop
        out = data if pos == n else data[:pos]
        return release + out if release else out

    def _take_block(self, data: bytes, pos: int, head: bool) -> tuple[bytes | None, int, int]:
        """The next complete line-oriented block at data[pos:] (a head, a chunk-size line, the CRLF
        after a chunk, a trailer), joined to what earlier reads held back in `_buf`: (block, the
        position after it in data, how many of its bytes came from `_buf`), or (None, pos, 0) when
        it is not complete yet (then data[pos:] joins `_buf`)."""
        if self._buf:
            old = len(self._buf)
            self._buf += data[pos:]
            end = _head_end(self._buf, max(0, old - 2)) if head else _line_end(self._buf, old)
            if end < 0:
                return None, pos, 0
            block = bytes(self._buf[:end])
            self._buf.clear()
            return block, pos + end - old, old
        end = _head_end(data, pos) if head else _line_end(data, pos)
        if end < 0:
            self._buf += data[pos:]
            return None, pos, 0
        return data[pos:end], end, 0

    def _cut(self, why: str) -> None:
        self.report.cut = why
        self.state = _CUT
        self._buf.clear()

    def _check_size(self) -> None:
        if self.state == _HEAD:
            if len(self._buf) > _MAX_HEAD:
                self._buf.clear()
                self.state = _PASS
        elif len(self._buf) > _MAX_LINE:
            self._cut(f"a chunked framing line over {_MAX_LINE} bytes")

    def _head(self, block: bytes) -> None:
        m = _STATUS_LINE.match(block)
        if m is None:
            self.state = _PASS
            return
        code = int(m[1])
        r = self.report
        fields = _FRAMING_FIELDS.findall(block, m.end())
        if len(fields) == 1 and len(fields[0][0]) == 14 and 200 <= code and code not in (204, 304):
            value = fields[0][1].strip()
            if value.isdigit():  # the usual head: one Content-Length, one number
                r.framing, r.length = "length", int(value)
                self._left = r.length
                self.state = _BODY if r.length else _IDLE
                return
        lengths: list[bytes] = []
        codings: list[bytes] = []
        for name, value in fields:
            if len(name) == 14:  # content-length
                lengths += [v.strip() for v in value.split(b",")]
            else:
                codings += [c.strip().lower() for c in value.split(b",") if c.strip()]
        if 100 <= code < 200:
            # An interim response: the real one follows (101 switches protocols: not ours to follow).
            self.state = _HEAD if code != 101 else _PASS
            return
        if code in (204, 304):
            self.state = _IDLE  # never a body
            return
        if codings and lengths:
            r.invalid = "both Transfer-Encoding and Content-Length"
        elif lengths:
            bad = [v for v in lengths if not v.isdigit()]
            if bad:
                r.invalid = f"Content-Length {bad[0].decode('latin-1')!r} is not a number"
            elif len(lengths) > 1:
                # Differing values are an error (RFC 9112 6.3); a repeated one may be refused
                # (RFC 9110 8.6), and is: aiohttp's parser refuses it, so every backend does.
                same = len({int(v) for v in lengths}) == 1
                values = ", ".join(v.decode("latin-1") for v in lengths)
                r.invalid = f"Content-Length repeated ({values})" if same else f"conflicting Content-Length values {values}"
            else:
                r.framing, r.length = "length", int(lengths[0])
                self._left = r.length
                self.state = _BODY if r.length else _IDLE
                return
        elif codings and codings[-1] == b"chunked":
            r.framing = "chunked"
            self.state = _CHUNK_SIZE
            return
        else:
            r.framing = "close"  # no length: the body runs until the server closes
        self.state = _PASS

    def _chunk_line(self, st: int, line: bytes) -> str | None:
        """Consume one line of the chunked framing; why it is garbage, or None. Lines end in
        CRLF (both libraries refuse a bare LF in chunked framing, unlike in a head)."""
        if st == _CHUNK_SIZE:
            m = _CHUNK_SIZE_LINE.fullmatch(line)
            if m is None:
                return f"{line[:40]!r} where a chunk size should be"
            self._left = int(m[1], 16)
            self.state = _CHUNK_DATA if self._left else _TRAILER
        elif st == _CHUNK_END:
            if line != b"\r\n":
                return f"{line[:40]!r} where the CRLF after a chunk should be"
            self.state = _CHUNK_SIZE
        elif line == b"\r\n":  # _TRAILER: an empty line ends the message
            self.state = _IDLE
        elif _TRAILER_LINE.fullmatch(line) is None:
            return f"{line[:40]!r} where a trailer field should be"
        return None


def apply_framing(resp: FetchResponse, reports: list[FramingReport]) -> bool:
    """Settle the response with what the framing check saw; True if the connection must not
    be reused (bytes past the message, a framing it could not follow)."""
    if not reports:
        return False
    report = reports[-1]
    if report.invalid is not None and resp.error in (None, "protocol"):
        # RFC 9112 6.3: a user agent closes the connection and discards the response.
        keep = FetchResponse(url=resp.url, ip=resp.ip, started_at=resp.started_at, ttfb=resp.ttfb, request_headers=resp.request_headers)
        resp.__dict__.update(keep.__dict__)
        resp.error, resp.error_detail = "protocol", f"invalid response: {report.invalid}"
        return True
    if resp.status and resp.error is None:
        if report.cut is not None and resp.truncated in (None, "disconnect"):
            resp.truncated, resp.error_detail = "disconnect", f"the chunked framing broke: {report.cut}"
        elif report.excess and resp.truncated is None:
            resp.truncated, resp.error_detail = "excess", report.excess_detail
    return bool(report.excess or report.cut or report.invalid)


class HostSlots:
    """At most `limit` concurrent fetches per host; entries vanish when a host goes idle."""

    def __init__(self, limit: int):
        self.limit = limit
        self._sems: dict[str, tuple[asyncio.Semaphore, int]] = {}

    async def acquire(self, host: str) -> None:
        sem, users = self._sems.get(host) or (asyncio.Semaphore(self.limit), 0)
        self._sems[host] = (sem, users + 1)
        try:
            await sem.acquire()
        except BaseException:
            self._drop(host)
            raise

    def release(self, host: str) -> None:
        self._sems[host][0].release()
        self._drop(host)

    def _drop(self, host: str) -> None:
        sem, users = self._sems[host]
        if users <= 1:
            del self._sems[host]
        else:
            self._sems[host] = (sem, users - 1)

    def __len__(self) -> int:
        return len(self._sems)


class BaseFetcher:
    """Shared shell: address resolution, the guard, per-host slots, deadlines, error mapping."""

    name = "base"

    def __init__(self, settings: FetchSettings | None = None, resolver: Resolver | None = None):
        self.settings = settings or FetchSettings()
        self.guard = AddressGuard(self.settings.allow_networks)
        self._resolver = resolver
        # host -> [IP, fetches in flight]: the backend's connector dials what we resolved and
        # checked, never a name of its own; entries go when the host's last fetch ends.
        self._pins: dict[str, list] = {}
        self._closed = False

    @property
    def resolver(self) -> Resolver:
        if self._resolver is None:
            from wancrawl.hostres import HostResolver

            self._resolver = HostResolver()
        return self._resolver

    def request_headers(self, req: FetchRequest) -> dict[str, str]:
        h = {
            "User-Agent": self.settings.user_agent,
            "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            "Accept-Encoding": self.settings.accept_encoding,
        }
        if req.headers:
            h.update(req.headers)
        return h

    async def fetch(self, req: FetchRequest) -> FetchResponse:
        s = self.settings
        resp = FetchResponse(url=req.url, started_at=time.time())
        t0 = time.monotonic()
        try:
            ip = req.ip
            if ip is None:
                from wancrawl.urls import ip_literal

                ip = ip_literal(req.host) or await asyncio.wait_for(self.resolver.resolve(req.host), s.connect_timeout)
            if ip is None:
                why = self.resolver.failure(req.host) or "no address"
                if why == TEMPORARY:  # worth another try, like any timeout
                    return _fail(resp, "timeout", f"{req.host}: {why}")
                # "dns": the name does not exist or has no address (the crawler gives the host up)
                return _fail(resp, "dns", f"{req.host} does not resolve: {why}")
            reason = self.guard.check(ip)
            if reason is not None:
                resp.ip = ip
                return _fail(resp, "forbidden_address", f"{ip} is {reason}")
            resp.ip = ip
            pin = self._pins.get(req.host)
            if pin is None:
                pin = self._pins[req.host] = [ip, 0]
            pin[0] = ip
            pin[1] += 1
            try:
                await self._fetch(req, ip, resp, t0)
            finally:
                pin[1] -= 1
                if pin[1] == 0 and self._pins.get(req.host) is pin:
                    del self._pins[req.host]
        except TimeoutError:
            # Only the resolver wait lands here: backends report their own timeouts.
            _fail(resp, "timeout", f"resolving {req.host} took longer than {s.connect_timeout}s")
        except Exception as exc:  # noqa: BLE001 - the contract: fetch never raises for a bad response
            _fail(resp, "internal", f"{type(exc).__name__}: {exc}")
        finally:
            resp.ended_at = time.time()
        return resp

    async def _fetch(self, req: FetchRequest, ip: str, resp: FetchResponse, t0: float) -> None:
        raise NotImplementedError

    def pinned(self, host: str) -> str | None:
        pin = self._pins.get(host)
        return pin[0] if pin else None

    def deadline(self, t0: float) -> float:
        """The loop-clock instant the whole fetch must end by."""
        loop = asyncio.get_running_loop()
        return loop.time() + self.settings.total_timeout - (time.monotonic() - t0)

    async def close(self) -> None:
        self._closed = True

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _fail(resp: FetchResponse, error: str, detail: str) -> FetchResponse:
    resp.error = error
    resp.error_detail = detail
    return resp


def apply_sink(resp: FetchResponse, sink: BodySink) -> None:
    resp.body = sink.body
    resp.raw_length = sink.raw_length
    if sink.truncated and resp.truncated is None:
        resp.truncated = sink.truncated
    resp.encoded = sink.encoded
    if sink.detail and resp.error is None and resp.error_detail is None:
        resp.error_detail = sink.detail


# A response head longer than this is refused (`too_large`, no response kept): no real head comes
# near it, and a server that sends one is a trap for memory (docs/agent-fetching.md).
MAX_RESPONSE_HEAD = 64 * 1024


def head_overflow(reason: str | bytes, headers: list[tuple[str, str]]) -> str | None:
    """Why a complete response head is refused (over MAX_RESPONSE_HEAD bytes as sent, counted
    from its status line and fields), or None. For the fetchers whose parser limits each field
    but not the whole head: 1,000 small fields pass any per-field limit."""
    n = 17 + len(reason) + sum(len(k) + len(v) + 4 for k, v in headers)  # "HTTP/1.1 200 " ... CRLFs
    if n <= MAX_RESPONSE_HEAD:
        return None
    return f"response head over {MAX_RESPONSE_HEAD} bytes ({len(headers)} fields)"


def refuse_head(resp: FetchResponse, detail: str) -> None:
    """A head refused after it was read: no response is kept (status 0), the error says why."""
    resp.status, resp.reason, resp.headers = 0, "", []
    _fail(resp, "too_large", detail)


def late_failure(resp: FetchResponse, sink: BodySink | None, truncated: str, error: str, detail: str) -> None:
    """A failure after the head truncates the body; before it, it is an error without a response."""
    if sink is not None:
        resp.truncated = resp.truncated or truncated
        resp.error_detail = detail
    else:
        resp.error = error
        resp.error_detail = detail
