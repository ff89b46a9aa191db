"""The httpx backend: an AsyncClient over an httpcore pool whose network backend dials pinned IPs."""

from __future__ import annotations

import asyncio
import ssl
import time

import httpcore
import httpx

from agent.fetch.base import BaseFetcher, BodySink, FetchRequest, FetchResponse, FetchSettings, HostSlots, Resolver, apply_sink, finish_headers, late_failure as _late



class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the fetcher's pinned IP for a host; TLS still uses the host name for SNI."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, fetcher: "HttpxFetcher"):
        self.inner = inner
        self.fetcher = fetcher

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # type: ignore[no-untyped-def]
        ip = self.fetcher.pinned(host)
        if ip is None:
            raise httpcore.ConnectError(f"no address pinned for {host}")
        return await self.inner.connect_tcp(ip, port, timeout=timeout, local_address=local_address, socket_options=socket_options)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):  # type: ignore[no-untyped-def]
        raise httpcore.ConnectError("unix sockets are not crawled")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _Transport(httpx.AsyncHTTPTransport):
    def __init__(self, settings: FetchSettings, fetcher: "HttpxFetcher"):
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
        cm = asyncio.timeout_at(self.deadline(t0))
        slot = False
        try:
            async with cm:
                await self._slots.acquire(req.host)
                slot = True
                r = await client.send(client.build_request("GET", req.url, headers=headers), stream=True)
                resp.ttfb = time.monotonic() - t0
                resp.status = r.status_code
                resp.reason = r.reason_phrase
                resp.http_version = r.http_version
                resp.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in r.headers.raw]
                resp.request_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in r.request.headers.raw]
                stream = r.extensions.get("network_stream")
                if stream is not None:
                    peer = stream.get_extra_info("server_addr")
                    if peer:
                        resp.ip = peer[0]
                sink = BodySink(self.settings, finish_headers(resp))
                complete = True
                async for chunk in r.aiter_raw():
                    if not sink.feed(chunk):
                        complete = False
                        break
                if complete:
                    sink.finish()
        except asyncio.TimeoutError:
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
            if sink is not None:
                apply_sink(resp, sink)
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

