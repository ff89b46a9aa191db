"""The httpx backend: an AsyncClient over an httpcore pool whose network backend dials pinned IPs."""

from __future__ import annotations

import asyncio
import ssl
import time

import httpcore
import httpx

from agent.fetch.base import (
    BaseFetcher,
    BodySink,
    FetchRequest,
    FetchResponse,
    FetchSettings,
    HostSlots,
    Resolver,
    ResponseFraming,
    apply_framing,
    apply_sink,
    collect_framing,
    end_framing,
    finish_headers,
    head_overflow,
    refuse_head,
)
from agent.fetch.base import (
    late_failure as _late,
)


class _FramedStream(httpcore.AsyncNetworkStream):
    """A connection's stream with ResponseFraming between the socket and h11: bytes past the end
    of a response never reach h11 (which would keep them and read them as the next response on
    the reused connection), and such a connection reports itself readable, which httpcore
    takes for a server-closed idle connection and drops instead of reusing it."""

    def __init__(self, inner: httpcore.AsyncNetworkStream):
        self.inner = inner
        self.framing = ResponseFraming()
        self._closed = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        while not self.framing.stopped:
            data = await self.inner.read(max_bytes, timeout)
            if not data:
                return data
            piece = self.framing.feed(data)
            if piece:
                return piece
        # Past a broken chunked framing (or the end of the message): as if the peer had closed.
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self.framing.arm()  # in the fetching task: the report goes to its collect_framing
        await self.inner.write(buffer, timeout)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self.inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return _FramedStream(await self.inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str):  # type: ignore[no-untyped-def]
        if info == "is_readable" and self.framing.broken:
            return True
        return self.inner.get_extra_info(info)


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the fetcher's pinned IP for a host; TLS still uses the host name for SNI."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, fetcher: HttpxFetcher):
        self.inner = inner
        self.fetcher = fetcher

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # type: ignore[no-untyped-def]
        ip = self.fetcher.pinned(host)
        if ip is None:
            raise httpcore.ConnectError(f"no address pinned for {host}")
        return _FramedStream(await self.inner.connect_tcp(ip, port, timeout=timeout, local_address=local_address, socket_options=socket_options))

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):  # type: ignore[no-untyped-def]
        raise httpcore.ConnectError("unix sockets are not crawled")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _Transport(httpx.AsyncHTTPTransport):
    def __init__(self, settings: FetchSettings, fetcher: HttpxFetcher):
        super().__init__(retries=0, trust_env=False)
        # Replace the default pool by one built through httpcore's public API with our backend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(),
            max_connections=settings.max_connections,
            max_keepalive_connections=settings.max_connections,
            keepalive_expiry=15.0,
            http1=True,
            http2=False,
            retries=0,
            local_address=settings.source_ip or None,
            network_backend=_PinnedBackend(httpcore.AnyIOBackend(), fetcher),
        )



def _take_head(resp: FetchResponse, r: httpx.Response, t0: float) -> _FramedStream | None:
    """The response's status line, headers and peer address into `resp`, as they came; returns
    the connection's framed stream (closed at once when the server sends past the message)."""
    resp.ttfb = time.monotonic() - t0
    resp.status = r.status_code
    resp.reason = r.reason_phrase
    resp.http_version = r.http_version
    resp.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in r.headers.raw]
    resp.request_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in r.request.headers.raw]
    ns = r.extensions.get("network_stream")
    if ns is None:
        return None
    peer = ns.get_extra_info("server_addr")
    if peer:
        resp.ip = peer[0]
    return ns if isinstance(ns, _FramedStream) else None


async def _read_body(r: httpx.Response, sink: BodySink) -> None:
    """The body into the sink until it ends (then finished) or the sink says stop."""
    async for chunk in r.aiter_raw():
        if not sink.feed(chunk):
            return
    sink.finish()


class HttpxFetcher(BaseFetcher):
    name = "httpx"

    def __init__(self, settings: FetchSettings | None = None, resolver: Resolver | None = None):
        super().__init__(settings, resolver)
        self._client: httpx.AsyncClient | None = None
        # httpcore has no per-host limit: politeness needs one.
        self._slots = HostSlots(self.settings.max_connections_per_host)

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            s = self.settings
            self._client = httpx.AsyncClient(
                transport=_Transport(s, self),
                timeout=httpx.Timeout(connect=s.connect_timeout, read=s.read_timeout, write=s.read_timeout, pool=s.total_timeout),
                follow_redirects=False,
                trust_env=False,
            )
        return self._client

    async def _fetch(self, req: FetchRequest, ip: str, resp: FetchResponse, t0: float) -> None:
        client = self._get_client()
        headers = self.request_headers(req)
        r: httpx.Response | None = None
        sink: BodySink | None = None
        stream: _FramedStream | None = None
        reports, token = collect_framing()
        cm = asyncio.timeout_at(self.deadline(t0))
        slot = False
        try:
            async with cm:
                await self._slots.acquire(req.host)
                slot = True
                r = await client.send(client.build_request("GET", req.url, headers=headers), stream=True)
                stream = _take_head(resp, r, t0)
                big = head_overflow(resp.reason, resp.headers)
                if big is not None:
                    refuse_head(resp, big)  # h11 limits the incomplete head only (16 KiB per read)
                else:
                    sink = BodySink(self.settings, finish_headers(resp))
                    await _read_body(r, sink)
        except TimeoutError:
            # httpx raises its own timeout classes, so this is the total deadline.
            _late(resp, sink, "time", "timeout", f"total timeout {self.settings.total_timeout}s")
        except httpx.TimeoutException as exc:
            which = {httpx.ConnectTimeout: "connect", httpx.PoolTimeout: "pool"}.get(type(exc), "read")
            limit = self.settings.connect_timeout if which == "connect" else self.settings.read_timeout
            _late(resp, sink, "time", "timeout", f"{which} timeout {limit}s")
        except httpx.ConnectError as exc:
            msg = str(exc)
            _late(resp, sink, "disconnect", "tls" if "SSL" in msg or "certificate" in msg else "connect", f"ConnectError: {msg}")
        except httpx.RemoteProtocolError as exc:
            # After the head this is the peer closing mid-body.
            _late(resp, sink, "disconnect", "protocol", f"RemoteProtocolError: {exc}")
        except (httpx.ReadError, httpx.WriteError, httpx.CloseError) as exc:
            _late(resp, sink, "disconnect", "read", f"{type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            _late(resp, sink, "disconnect", "protocol", f"{type(exc).__name__}: {exc}")
        finally:
            end_framing(token)
            if sink is not None:
                apply_sink(resp, sink)
            if apply_framing(resp, reports) and stream is not None:
                # Excess still arriving: close the socket now, not when the pool next looks at it.
                try:
                    await stream.aclose()
                except Exception:  # noqa: BLE001 - the response is already recorded
                    pass
            if r is not None:
                # Closing an unfinished stream drops the connection instead of pooling it.
                try:
                    await r.aclose()
                except Exception:  # noqa: BLE001 - the response is already recorded
                    pass
            if slot:
                self._slots.release(req.host)

    async def close(self) -> None:
        await super().close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

