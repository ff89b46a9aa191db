"""The lean backend: HTTP/1.1 GETs over an asyncio Protocol, responses parsed by httptools (llhttp).

Why a third backend (issue 24): aiohttp's ClientSession request path (request and response
objects, the connector, the stream reader, per-request timers and traces) was ~10% of the
agent's GIL samples, and the fetcher's framing check and body sink ~55 us a page on top. This
one does only what the fetcher contract (base.py) asks: the parser's callbacks write the head
straight into the FetchResponse and hand body bytes straight to the BodySink, in the
protocol's data_received, so a whole fetch is one wait on one future; one loop timer per
request covers both the read and the total timeout.

What it shares with the other backends: BaseFetcher (resolution, the address guard, the pin),
ResponseFraming in front of the parser (where a response ends, RFC 9112 6.3), BodySink (the
caps and the decoding), apply_framing/apply_sink/late_failure (what the response says).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from typing import cast

import httptools

from agent.fetch.base import (
    MAX_RESPONSE_HEAD,
    BaseFetcher,
    BodySink,
    FetchRequest,
    FetchResponse,
    FetchSettings,
    Resolver,
    ResponseFraming,
    apply_framing,
    apply_sink,
    finish_headers,
    head_overflow,
    refuse_head,
)
from agent.fetch.base import (
    late_failure as _late,
)
from wancrawl.urls import split_target

# An idle pooled connection older than this is closed, not reused (aiohttp's keepalive_timeout):
# servers drop idle connections after 5-120 s, and a request on one they dropped costs a retry.
KEEPALIVE = 15.0
# The response head may not be longer than this (aiohttp refuses a header line over 8190 bytes,
# a field over max_field_size 16384; a head of 64 KiB is far beyond any real one).
MAX_HEAD = MAX_RESPONSE_HEAD
_DEFAULT_PORT = {"http": 80, "https": 443}


def split_url(url: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, Host header value, request target) of an absolute http(s) URL; the
    host as written (brackets kept for IPv6), the fragment dropped. ValueError if it is not one."""
    if url.startswith("http://"):
        scheme = "http"
    elif url.startswith("https://"):
        scheme = "https"
    else:
        raise ValueError(f"not an absolute http(s) URL: {url[:200]!r}")
    authority, path, query = split_target(url)
    if "@" in authority:
        authority = authority.rpartition("@")[2]
    default = _DEFAULT_PORT[scheme]
    if authority.startswith("["):
        end = authority.find("]")
        host, rest = authority[: end + 1], authority[end + 1 :]
    else:
        host, sep, rest = authority.partition(":")
        rest = sep + rest
    port = default
    if rest:
        if not rest.startswith(":") or not (rest[1:].isdigit() or rest == ":"):
            raise ValueError(f"bad port in {url[:200]!r}")
        port = int(rest[1:]) if rest != ":" else default
    if not host or port > 65535:
        raise ValueError(f"bad authority in {url[:200]!r}")
    target = path if query is None else f"{path}?{query}"
    return scheme, host, port, host if port == default else f"{host}:{port}", target


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 connection; carries one exchange at a time.

    Invariants: `done` is the current exchange's future (None before the first request); once
    it is done, the exchange's fields are final and bytes that arrive after are not a response
    to anything: they spoil the connection (closed, never reused). `closed` is set when the
    transport is lost or closed by us; a closed connection never goes back to the pool.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, settings: FetchSettings, conns: set[_Conn]) -> None:
        self.loop = loop
        self.settings = settings
        self.conns = conns
        self.transport: asyncio.Transport | None = None
        self.framing = ResponseFraming()
        self.closed = False
        self.uses = 0  # requests sent on this connection
        self.idle_since = 0.0
        self.peer: str | None = None
        # The exchange in progress (reset by start()).
        self.done: asyncio.Future[None] | None = None
        self.resp: FetchResponse | None = None
        self.sink: BodySink | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.t0 = 0.0  # time.monotonic() at the fetch's start (ttfb)
        self.deadline = 0.0  # loop time the whole fetch must end by
        self.last = 0.0  # loop time of the last bytes received (or of the request)
        self.got = 0  # response bytes received in this exchange
        self.reason = b""
        self.headers: list[tuple[str, str]] = []
        self.interim = False  # inside a 1xx response (the real one follows)
        self.complete = False  # the whole message arrived (and the sink is finished)
        self.keep = False  # the parser says the connection may carry another request
        self.retry = False  # lost before any byte of the response, on a reused connection
        self.timer: asyncio.TimerHandle | None = None

    # --- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not `isinstance(transport, asyncio.Transport)`: uvloop's transports (the agent's default
        # loop) implement the interface without subclassing asyncio's classes.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if peer else None
        self.conns.add(self)

    def data_received(self, data: bytes) -> None:
        done = self.done
        if done is None or done.done():
            # No request outstanding: counted as excess (of the last response, if its fetch has
            # not looked yet) and the connection is done for.
            self.framing.feed(data)
            self.close()
            return
        self.got += len(data)
        self.last = self.loop.time()
        piece = self.framing.feed(data)
        if piece:
            assert self.parser is not None
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserUpgrade:
                self._fail("disconnect", "protocol", "the server switched protocols (101): not followed")
            except httptools.HttpParserCallbackError as exc:
                cause = exc.__context__ or exc
                self._fail("disconnect", "internal", f"{type(cause).__name__}: {cause}")
            except httptools.HttpParserError as exc:
                if self.sink is not None:  # mid-body: the body ends where the parser stopped
                    self.framing.report.cut = self.framing.report.cut or f"parser: {exc}"
                    self._end_body()
                else:
                    self._fail("disconnect", "protocol", f"invalid response head: {exc}")
        if done.done():
            return
        if self.framing.report.cut is not None:
            self._end_body()  # the chunked framing broke: the body is what came before it
        elif self.sink is None and self.got > MAX_HEAD:
            self._fail("disconnect", "too_large", f"response head over {MAX_HEAD} bytes")

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost settles the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.conns.discard(self)
        done = self.done
        if done is None or done.done():
            return
        if self.sink is None:
            if self.got == 0 and self.uses > 1 and not self.interim:
                # A kept-alive connection the server had closed: nothing of this response came,
                # so the request is sent again on a fresh one (an idempotent GET).
                self.retry = True
                self._settle()
                return
            why = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection before the response head"
            self._fail("disconnect", "read", why)
        elif exc is None and self.framing.report.framing == "close":
            self._end_body()  # a body without a length ends when the server closes
        else:
            why = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection mid-body"
            self._fail("disconnect", "read", why)

    # --- httptools callbacks -------------------------------------------------------------------

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        parser = self.parser
        resp = self.resp
        assert parser is not None and resp is not None
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.interim = True  # 100 Continue, 103 Early Hints: the response follows
            self.headers = []
            self.reason = b""
            return
        # Only a read past the limit can hold a head past it: the usual response pays no sum.
        big = head_overflow(self.reason, self.headers) if self.got > MAX_HEAD else None
        if big is not None:
            # Whole in one read, the head never met the incomplete-head check in data_received.
            refuse_head(resp, big)
            self.keep = False
            self._settle()
            self.close()
            return
        resp.ttfb = time.monotonic() - self.t0
        resp.status = status
        resp.reason = self.reason.decode("latin-1").strip()
        resp.http_version = "HTTP/" + parser.get_http_version()
        resp.headers = self.headers
        if self.framing.report.invalid is not None:
            # apply_framing discards the response and names why.
            self._fail("disconnect", "protocol", self.framing.report.invalid)
            return
        self.sink = BodySink(self.settings, finish_headers(resp))

    def on_body(self, body: bytes) -> None:
        if self.done is None or self.done.done():
            return  # settled already (a refused head): what follows in this read is dropped
        sink = self.sink
        assert sink is not None
        if not sink.feed(body):
            self._settle()  # a cap reached or a bad stream: read nothing more
            self.close()

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        if self.done is not None and not self.done.done():
            assert self.parser is not None
            self.keep = self.parser.should_keep_alive()
            self._end_body()

    # --- the exchange --------------------------------------------------------------------------

    def start(self, resp: FetchResponse, request: bytes, t0: float, deadline: float) -> asyncio.Future[None]:
        """Send one request; the future is done when its response is settled in `resp`."""
        self.done = done = self.loop.create_future()
        self.resp = resp
        self.sink = None
        self.parser = httptools.HttpResponseParser(self)
        self.t0 = t0
        self.deadline = deadline
        self.got = 0
        self.reason = b""
        self.headers = []
        self.interim = self.complete = self.keep = self.retry = False
        self.uses += 1
        self.framing.arm()
        self.last = now = self.loop.time()
        self.timer = self.loop.call_at(min(deadline, now + self.settings.read_timeout), self._on_timer)
        assert self.transport is not None
        self.transport.write(request)
        return done

    def _on_timer(self) -> None:
        self.timer = None
        if self.done is None or self.done.done():
            return
        now = self.loop.time()
        s = self.settings
        if now >= self.deadline:
            self._fail("time", "timeout", f"total timeout {s.total_timeout}s")
        elif now - self.last >= s.read_timeout:
            self._fail("time", "timeout", f"read timeout {s.read_timeout}s")
        else:  # bytes came since: wait from the last of them
            self.timer = self.loop.call_at(min(self.deadline, self.last + s.read_timeout), self._on_timer)

    def _end_body(self) -> None:
        if self.sink is not None:
            self.sink.finish()
            self.complete = True
        self._settle()

    def _fail(self, truncated: str, error: str, detail: str) -> None:
        assert self.resp is not None
        _late(self.resp, self.sink, truncated, error, detail)
        self.keep = False
        self._settle()

    def _settle(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def park(self, now: float) -> None:
        """Back to the pool: bytes from here on arrive with no request outstanding, and the
        last exchange's response (its body) is not held by an idle connection."""
        self.idle_since = now
        self.done = None
        self.resp = self.sink = self.parser = None
        self.headers = []

    def reusable(self) -> bool:
        return self.complete and self.keep and not self.closed and not self.framing.broken and not self.transport.is_closing()  # type: ignore[union-attr]

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Limits:
    """At most `total` fetches on the wire and `per_host` per host (aiohttp's limit and
    limit_per_host). take() is a dict lookup when under both; waiting is first come, first
    served per queue. Entries vanish when a host has nothing in flight or waiting."""

    def __init__(self, total: int, per_host: int) -> None:
        self.total = total
        self.per_host = per_host
        self.active = 0
        self.hosts: dict[str, int] = {}
        self._host_waiters: dict[str, collections.deque[asyncio.Future[None]]] = {}
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def try_take(self, host: str) -> bool:
        n = self.hosts.get(host, 0)
        if n < self.per_host and self.active < self.total and host not in self._host_waiters and not self._waiters:
            self.hosts[host] = n + 1
            self.active += 1
            return True
        return False

    async def take(self, host: str) -> None:
        while self.hosts.get(host, 0) >= self.per_host:
            await self._wait(self._host_waiters.setdefault(host, collections.deque()), host)
        self.hosts[host] = self.hosts.get(host, 0) + 1
        try:
            while self.active >= self.total:
                await self._wait(self._waiters, None)
        except BaseException:
            self._give_host(host)
            raise
        self.active += 1

    def give(self, host: str) -> None:
        self.active -= 1
        _wake(self._waiters)
        self._give_host(host)

    def _give_host(self, host: str) -> None:
        n = self.hosts[host] - 1
        if n:
            self.hosts[host] = n
        else:
            del self.hosts[host]
        q = self._host_waiters.get(host)
        if q is not None:
            _wake(q)

    async def _wait(self, q: collections.deque[asyncio.Future[None]], host: str | None) -> None:
        fut = asyncio.get_running_loop().create_future()
        q.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                _wake(q)  # woken, then cancelled: the turn passes on
            raise
        finally:
            if fut in q:
                q.remove(fut)
            if host is not None and not q and self._host_waiters.get(host) is q:
                del self._host_waiters[host]


def _wake(q: collections.deque[asyncio.Future[None]]) -> None:
    while q:
        fut = q.popleft()
        if not fut.done():
            fut.set_result(None)
            return


class LeanFetcher(BaseFetcher):
    name = "lean"

    def __init__(self, settings: FetchSettings | None = None, resolver: Resolver | None = None):
        super().__init__(settings, resolver)
        s = self.settings
        self._limits = _Limits(s.max_connections, s.max_connections_per_host)
        # (scheme, host, port, ip) -> idle connections, the most recently used last. The source
        # address is the fetcher's own (settings.source_ip), the same for every key.
        self._idle: dict[tuple[str, str, int, str], list[_Conn]] = {}
        self._conns: set[_Conn] = set()  # every open connection, idle or busy (for close())
        self._next_sweep = 0.0
        self._ssl: ssl.SSLContext | None = None
        self._local = (s.source_ip, 0) if s.source_ip else None
        fixed = self.request_headers(FetchRequest("", ""))
        self._fixed = list(fixed.items())
        self._fixed_bytes = _header_bytes(self._fixed)

    def _ssl_context(self) -> ssl.SSLContext:
        # The settings aiohttp's default (verified) context has: the system's CAs, host names
        # checked, ALPN http/1.1 (aiohttp.connector._make_ssl_context(True)).
        if self._ssl is None:
            ctx = ssl.create_default_context()
            ctx.set_alpn_protocols(("http/1.1",))
            self._ssl = ctx
        return self._ssl

    def _request(self, req: FetchRequest, host_header: str, target: str) -> tuple[bytes, list[tuple[str, str]]]:
        head = f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\n".encode("utf-8")
        if not req.headers:
            return head + self._fixed_bytes + b"\r\n", [("Host", host_header), *self._fixed]
        items = list(self.request_headers(req).items())
        for k, v in items:
            if "\r" in k or "\n" in k or "\r" in v or "\n" in v or ":" in k:
                raise ValueError(f"request header {k!r} holds a line break or a colon")
        return head + _header_bytes(items) + b"\r\n", [("Host", host_header), *items]

    async def _fetch(self, req: FetchRequest, ip: str, resp: FetchResponse, t0: float) -> None:
        loop = asyncio.get_running_loop()
        scheme, host, port, host_header, target = split_url(req.url)
        request, resp.request_headers = self._request(req, host_header, target)
        deadline = self.deadline(t0)
        limits = self._limits
        if not limits.try_take(req.host):
            try:
                async with asyncio.timeout_at(deadline):
                    await limits.take(req.host)
            except TimeoutError:
                _late(resp, None, "time", "timeout", f"total timeout {self.settings.total_timeout}s")
                return
        try:
            key = (scheme, host, port, ip)
            conn = self._checkout(key, loop.time())
            if conn is not None:
                await self._exchange(conn, resp, request, t0, deadline)
                if conn.retry:
                    # Lost before any byte of the response came: the server had closed the kept
                    # connection. An idempotent GET goes once more, on a fresh connection (another
                    # pooled one may be as stale; a fresh one is never retried: its uses is 1).
                    conn.close()
                    conn = None
            if conn is None:
                conn = await self._connect(loop, key, resp, deadline)
                if conn is None:
                    return
                await self._exchange(conn, resp, request, t0, deadline)
            if conn.peer:
                resp.ip = conn.peer
            if conn.sink is not None:
                apply_sink(resp, conn.sink)
            spoiled = apply_framing(resp, [conn.framing.report])
            if not spoiled and conn.reusable():
                self._checkin(key, conn, loop.time())
            else:
                conn.close()  # unread bytes would poison a reused connection
        finally:
            limits.give(req.host)

    @staticmethod
    async def _exchange(conn: _Conn, resp: FetchResponse, request: bytes, t0: float, deadline: float) -> None:
        try:
            await conn.start(resp, request, t0, deadline)
        except BaseException:
            conn.close()  # cancelled mid-exchange: the connection holds the rest of a response
            raise

    async def _connect(self, loop: asyncio.AbstractEventLoop, key: tuple[str, str, int, str], resp: FetchResponse, deadline: float) -> _Conn | None:
        scheme, host, port, ip = key
        s = self.settings
        ctx = self._ssl_context() if scheme == "https" else None
        left = deadline - loop.time()
        wait = min(s.connect_timeout, left)
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Conn(loop, s, self._conns), ip, port, ssl=ctx,
                    server_hostname=host.strip("[]") if ctx is not None else None, local_addr=self._local,
                ),
                max(wait, 0.0),
            )
        except TimeoutError:
            which = f"connect timeout {s.connect_timeout}s" if s.connect_timeout <= left else f"total timeout {s.total_timeout}s"
            _late(resp, None, "time", "timeout", which)
            return None
        except (ssl.SSLError, ssl.CertificateError) as exc:
            _late(resp, None, "disconnect", "tls", f"{type(exc).__name__}: {exc}")
            return None
        except OSError as exc:
            _late(resp, None, "disconnect", "connect", f"{type(exc).__name__}: cannot connect to {host}:{port} ({ip}): {exc}")
            return None
        return conn

    def _checkout(self, key: tuple[str, str, int, str], now: float) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not idle:
                del self._idle[key]
            if not conn.closed and now - conn.idle_since < KEEPALIVE and not conn.transport.is_closing():  # type: ignore[union-attr]
                return conn
            conn.close()
            idle = self._idle.get(key)
        return None

    def _checkin(self, key: tuple[str, str, int, str], conn: _Conn, now: float) -> None:
        conn.park(now)
        idle = self._idle.get(key)
        if idle is None:
            self._idle[key] = [conn]
        else:
            idle.append(conn)
        if now >= self._next_sweep:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Close idle connections past KEEPALIVE (every few seconds, on a check-in)."""
        self._next_sweep = now + KEEPALIVE / 3
        for key in list(self._idle):
            idle = self._idle[key]
            keep = [c for c in idle if not c.closed and now - c.idle_since < KEEPALIVE]
            for c in idle:
                if c not in keep:
                    c.close()
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]

    async def close(self) -> None:
        await super().close()
        self._idle.clear()
        for conn in list(self._conns):
            conn.close()
        if self._conns:
            await asyncio.sleep(0)  # let the transports' connection_lost run


def _header_bytes(items: list[tuple[str, str]]) -> bytes:
    return "".join(f"{k}: {v}\r\n" for k, v in items).encode("latin-1")
