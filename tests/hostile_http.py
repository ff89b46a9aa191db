"""A raw HTTP/1.1 server for tests that writes exact bytes: responses that lie about their framing.

The lab web (lab/server.py) speaks correct HTTP; this one answers each request path with a
canned byte string, so a test can send a Content-Length shorter or longer than the body,
two Content-Length headers, broken chunked encoding... It runs on its own event loop thread
and records every connection and request, so tests can tell whether a client reused a
connection (one connection, two requests) or dialled anew.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field


@dataclass
class Reply:
    data: bytes  # written as is: status line, headers, body
    excess: int = 0  # then this many more bytes ("x" * excess), written in 64 KiB pieces
    close: bool = False  # close the connection after writing (else read the next request)


@dataclass
class Conn:
    requests: list[str] = field(default_factory=list)  # request targets, in order
    written: int = 0  # bytes written to the client
    write_error: str | None = None  # why writing stopped early (the client went away)
    closed: threading.Event = field(default_factory=threading.Event)  # this side closed it (its FIN is sent)


class HostileServer:
    """`with HostileServer({"/path": Reply(...)}) as srv:` serves 127.0.0.1:srv.port."""

    def __init__(self, routes: dict[str, Reply], host: str = "127.0.0.1", ssl_context=None):
        self.routes = routes
        self.host = host
        self.ssl_context = ssl_context  # serve TLS with it (url() then says https)
        self.port = 0
        self.conns: list[Conn] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    def __enter__(self) -> "HostileServer":
        self.thread.start()

        async def start() -> None:
            self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=self.ssl_context)
            self.port = self._server.sockets[0].getsockname()[1]

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def url(self, path: str, host: str = "liar.test") -> str:
        return f"{'https' if self.ssl_context else 'http'}://{host}:{self.port}{path}"

    def requests_for(self, path: str) -> list[Conn]:
        """The connections that carried at least one request for `path`."""
        return [c for c in list(self.conns) if path in c.requests]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn()
        self.conns.append(conn)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
                conn.requests.append(target)
                reply = self.routes.get(target) or Reply(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                try:
                    await self._write(writer, conn, reply)
                except (ConnectionError, OSError) as exc:
                    conn.write_error = type(exc).__name__
                    return
                if reply.close:
                    return
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError, asyncio.CancelledError):
                pass
            conn.closed.set()

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, conn: Conn, reply: Reply) -> None:
        writer.write(reply.data)
        await writer.drain()
        conn.written += len(reply.data)
        left = reply.excess
        piece = b"x" * 65536
        while left > 0:
            n = min(left, len(piece))
            writer.write(piece[:n])
            await writer.drain()
            conn.written += n
            left -= n
