"""The aiohttp backend: one ClientSession whose connector dials the address the agent resolved."""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
import time

import aiohttp
from aiohttp.abc import AbstractResolver
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import EMPTY_PAYLOAD
from yarl import URL

from agent.fetch.base import (
    BaseFetcher,
    BodySink,
    FetchRequest,
    FetchResponse,
    FetchSettings,
    Resolver,
    ResponseFraming,
    apply_framing,
    apply_sink,
    collect_framing,
    end_framing,
    finish_headers,
)
from agent.fetch.base import (
    late_failure as _late,
)


def _take_head(resp: FetchResponse, r: aiohttp.ClientResponse, t0: float) -> None:
    """The response's status line, headers and peer address into `resp`, as they came."""
    resp.ttfb = time.monotonic() - t0
    resp.status = r.status
    resp.reason = r.reason or ""
    resp.http_version = f"HTTP/{r.version.major}.{r.version.minor}" if r.version else ""
    resp.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in r.raw_headers]
    resp.request_headers = list(r.request_info.headers.items())
    if r.connection is not None and r.connection.transport is not None:
        peer = r.connection.transport.get_extra_info("peername")
        if peer:
            resp.ip = peer[0]

class _FramedHandler(ResponseHandler):
    """aiohttp's connection protocol with ResponseFraming in front of its parser: bytes past the
    end of a response never reach the parser (which would fail the whole read on them, losing
    the response), a body whose chunked framing breaks ends where it broke, and such a
    connection is neither kept nor taken from the pool again."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.framing = ResponseFraming()

    @property
    def should_close(self) -> bool:
        return self.framing.broken or super().should_close

    def is_connected(self) -> bool:
        # The pool asks this before reusing an idle connection.
        return not self.framing.broken and super().is_connected()

    def set_response_params(self, **kw) -> None:  # type: ignore[no-untyped-def, override]
        self.framing.arm()  # called once per request, in the fetching task, before it is sent
        super().set_response_params(**kw)

    def data_received(self, data: bytes) -> None:
        if not data or self._upgraded or self._payload_parser is not None:
            super().data_received(data)
            return
        piece = self.framing.feed(data)
        if piece:
            super().data_received(piece)
        if self.framing.report.cut is not None:
            self._end_body()

    def set_exception(self, exc: BaseException, *cause: BaseException) -> None:  # type: ignore[override]
        # aiohttp's C parser, failing mid-body, drops the body stream without ending it: the
        # reader would wait for the read timeout. End the body there, like a broken chunked framing.
        if isinstance(exc, HttpProcessingError) and self._body_open():
            self.framing.report.cut = self.framing.report.cut or f"parser: {exc.message}"
            self._end_body()
        super().set_exception(exc, *cause)

    def _body_open(self) -> bool:
        p = self._payload
        return p is not None and p is not EMPTY_PAYLOAD and not p.is_eof() and p.exception() is None

    def _end_body(self) -> None:
        # End of stream rather than an error: the reader keeps what is buffered (an error would
        # discard it); the fetcher reads the cut from the report.
        if self._body_open():
            assert self._payload is not None
            self._payload.feed_eof()
        self.force_close()


def _framed_handler(loop: asyncio.AbstractEventLoop) -> ResponseHandler:
    return _FramedHandler(loop)


class _PinnedResolver(AbstractResolver):
    """Answers only with the fetcher's pins, so aiohttp never looks a name up on its own."""

    def __init__(self, fetcher: AiohttpFetcher):
        self.fetcher = fetcher

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list:
        ip = self.fetcher.pinned(host)
        if ip is None:
            raise OSError(f"no address pinned for {host}")
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        return [{"hostname": host, "host": ip, "port": port, "family": fam, "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


class AiohttpFetcher(BaseFetcher):
    name = "aiohttp"

    def __init__(self, settings: FetchSettings | None = None, resolver: Resolver | None = None):
        super().__init__(settings, resolver)
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        # Built on first use: the session belongs to the loop that runs the fetches.
        if self._session is None:
            s = self.settings
            conn = aiohttp.TCPConnector(
                limit=s.max_connections,
                limit_per_host=s.max_connections_per_host,
                resolver=_PinnedResolver(self),
                use_dns_cache=False,
                local_addr=(s.source_ip, 0) if s.source_ip else None,
                happy_eyeballs_delay=None,
            )
            # No public hook for the protocol class: the connector builds its connections with _factory.
            if not isinstance(getattr(conn, "_factory", None), functools.partial):
                raise RuntimeError(f"aiohttp {aiohttp.__version__}: TCPConnector._factory is gone; _FramedHandler cannot be installed")
            conn._factory = functools.partial(_framed_handler, loop=asyncio.get_running_loop())
            self._session = aiohttp.ClientSession(
                connector=conn,
                auto_decompress=False,  # BodySink decodes under the caps
                trust_env=False,  # never a proxy from the environment
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=s.connect_timeout, sock_read=s.read_timeout),
                skip_auto_headers=("Accept-Encoding",),
                raise_for_status=False,
                max_field_size=16384,
            )
        return self._session

    async def _fetch(self, req: FetchRequest, ip: str, resp: FetchResponse, t0: float) -> None:
        session = self._get_session()
        headers = self.request_headers(req)
        r: aiohttp.ClientResponse | None = None
        sink: BodySink | None = None
        complete = False
        reports, token = collect_framing()
        cm = asyncio.timeout_at(self.deadline(t0))
        try:
            async with cm:
                r = await session.get(URL(req.url, encoded=True), headers=headers, allow_redirects=False)
                _take_head(resp, r, t0)
                sink = BodySink(self.settings, finish_headers(resp))
                content = r.content
                while True:
                    chunk = await content.readany()
                    if not chunk:
                        complete = True
                        sink.finish()
                        break
                    if not sink.feed(chunk):
                        break
        except TimeoutError as exc:
            if cm.expired():
                _late(resp, sink, "time", "timeout", f"total timeout {self.settings.total_timeout}s")
            elif isinstance(exc, aiohttp.ConnectionTimeoutError):
                _late(resp, sink, "time", "timeout", f"connect timeout {self.settings.connect_timeout}s")
            else:
                _late(resp, sink, "time", "timeout", f"read timeout {self.settings.read_timeout}s")
        except aiohttp.ClientPayloadError as exc:
            _late(resp, sink, "disconnect", "read", f"{type(exc).__name__}: {exc}")
        except aiohttp.ClientResponseError as exc:
            # Unparseable head (bad status line, oversized headers...).
            too_big = "too" in str(exc).lower() and ("long" in str(exc).lower() or "large" in str(exc).lower())
            _late(resp, sink, "disconnect", "too_large" if too_big else "protocol", f"{type(exc).__name__}: {exc}")
        except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
            _late(resp, sink, "disconnect", "tls", f"{type(exc).__name__}: {exc}")
        except aiohttp.ClientConnectorDNSError as exc:
            _late(resp, sink, "disconnect", "dns", str(exc))
        except aiohttp.ClientConnectorError as exc:
            _late(resp, sink, "disconnect", "connect", f"{type(exc).__name__}: {exc}")
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionError) as exc:
            _late(resp, sink, "disconnect", "read", f"{type(exc).__name__}: {exc}")
        except aiohttp.ClientError as exc:
            _late(resp, sink, "disconnect", "protocol", f"{type(exc).__name__}: {exc}")
        finally:
            end_framing(token)
            if sink is not None:
                apply_sink(resp, sink)
            spoiled = apply_framing(resp, reports)
            if r is not None:
                if complete and not spoiled:
                    r.release()
                else:
                    r.close()  # unread bytes would poison a reused connection

    async def close(self) -> None:
        await super().close()
        if self._session is not None:
            await self._session.close()
            self._session = None

