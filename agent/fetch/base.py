"""The fetcher contract: request/response/settings types and the body pipeline every backend shares."""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agent.fetch.guard import AddressGuard

DEFAULT_USER_AGENT = "wancrawl/0.1 (+https://example.invalid/wancrawl)"
MiB = 1024 * 1024

# The fixed vocabulary of FetchResponse.error: counters and retry policy key on these names.
ERRORS = ("connect", "timeout", "read", "dns", "forbidden_address", "protocol", "too_large", "tls", "internal")
# FetchResponse.truncated: the response head arrived but the body is incomplete.
TRUNCATIONS = ("length", "decoded", "time", "disconnect")


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
    body: bytes = b""  # decoded per Content-Encoding, capped
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


def _gzip() -> "zlib._Decompress":
    return zlib.decompressobj(zlib.MAX_WBITS | 16)


def _deflate() -> "_Deflate":
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
        self.error: str | None = None
        enc = encoding if encoding else "identity"
        factory = DECODERS.get(enc)
        # An encoding we did not ask for: keep the bytes as they came, say so.
        self.undecodable = None if factory is not None else enc
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
            self.error = f"bad {type(self._dec).__name__.strip('_').lower()} stream: {exc}"
            return False
        if len(out) > room or self._dec.unconsumed_tail:
            self.parts.append(out[:room])
            self.decoded += min(len(out), room)
            self.truncated = "decoded"
            return False
        self.parts.append(out)
        self.decoded += len(out)
        return True

    def finish(self) -> None:
        """The wire body is complete: flush the decoder's remainder (within the cap)."""
        if self.truncated is None and self.error is None:
            try:
                tail = self._dec.flush()
            except zlib.error as exc:
                self.error = f"bad stream at end: {exc}"
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
                return _fail(resp, "dns", f"{req.host} does not resolve")
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
        except asyncio.TimeoutError:
            # Only the resolver wait lands here: backends report their own timeouts.
            _fail(resp, "dns", f"resolving {req.host} took longer than {s.connect_timeout}s")
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
    if sink.error and resp.error is None:
        resp.error, resp.error_detail = "protocol", sink.error
    if sink.undecodable and resp.error is None:
        resp.error_detail = f"content-encoding {sink.undecodable!r} not decoded"


def late_failure(resp: FetchResponse, sink: BodySink | None, truncated: str, error: str, detail: str) -> None:
    """A failure after the head truncates the body; before it, it is an error without a response."""
    if sink is not None:
        resp.truncated = resp.truncated or truncated
        resp.error_detail = detail
    else:
        resp.error = error
        resp.error_detail = detail
