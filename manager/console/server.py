"""`manager console`: the operator's page in a browser, over the data `manager status` reads.

A Starlette app served by uvicorn in the manager's process: `/` is the page (static HTML, our
JavaScript and uPlot, vendored under static/ so it works offline), `/api/status` the JSON the
page polls (manager/console/model.py `view`). One poller asks the directory (the consultant,
or the agents' overlay with `--peers`) and storage every interval, as `manager status` does;
every browser reads its last answer, so ten open tabs cost the cluster nothing more.

Read-only: nothing on the page changes the cluster. Served on loopback by default; another
address needs `--token`, then every request must carry it (`?token=` on the page's address,
which the page passes on, or `Authorization: Bearer`).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from manager.console.model import History, view
from manager.status import Snapshot
from wancrawl.errors import ConfigError, WancrawlError

STATIC = Path(__file__).resolve().parent / "static"
log = logging.getLogger(__name__)


class Console:
    """Owns the last view of the cluster and its history; `poll` refreshes them. A poll that
    fails keeps the last view and says why (the page shows it)."""

    def __init__(self, take: Callable[[], Awaitable[Snapshot]], mode: str, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        self.take, self.mode, self.interval = take, mode, interval
        self.clock, self.wall = clock, wall
        self.history = History()
        self.latest: dict[str, Any] = {"agents": [], "error": "no answer yet", "not_built": []}
        self.polls = 0

    async def poll(self) -> None:
        try:
            snap = await self.take()
        except WancrawlError as exc:
            self.latest = {**self.latest, "error": str(exc), "error_at": self.wall()}
            return
        rates = self.history.add(snap, self.clock(), self.wall())
        self.latest = {**view(snap, rates, self.history, self.mode, self.wall()), "error": "",
                       "interval": self.interval}
        self.polls += 1

    async def run(self) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(self.interval)


def create_app(console: Console, token: str = "") -> Any:
    """The ASGI app: the page, its JSON and its static files; with `token`, nothing without it."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, PlainTextResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    async def page(_request: Request) -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def status(_request: Request) -> JSONResponse:
        return JSONResponse(console.latest, headers={"Cache-Control": "no-store"})

    async def check_token(request: Request, call_next: Any) -> Any:
        given = request.query_params.get("token", "")
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:]
        if not hmac.compare_digest(given.encode(), token.encode()):
            return PlainTextResponse("manager console: this address needs the token (?token=...)", status_code=401)
        return await call_next(request)

    middleware = [Middleware(BaseHTTPMiddleware, dispatch=check_token)] if token else []
    routes = [Route("/", page), Route("/api/status", status), Mount("/static", StaticFiles(directory=STATIC))]
    return Starlette(routes=routes, middleware=middleware)


def listen_socket(listen: str, token: str) -> socket.socket:
    """The console's socket, bound now: a taken port or an open address without a token is a
    ConfigError saying so (uvicorn would log it and exit)."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(f"--listen {listen!r}: give an IP address and a port, e.g. 127.0.0.1:8765") from None
    if not addr.is_loopback and not token:
        raise ConfigError(f"--listen {listen}: off loopback the console needs --token (anyone who reaches the port "
                          "would see the crawl)")
    sock = socket.socket(socket.AF_INET6 if addr.version == 6 else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port or 0)))
        sock.listen(128)  # now: a browser opened at the printed address waits in the backlog, not refused
    except (OSError, ValueError) as exc:
        sock.close()
        raise ConfigError(f"--listen {listen}: cannot listen there ({getattr(exc, 'strerror', None) or exc})") from None
    return sock


async def run_console(args: Any) -> int:
    import uvicorn

    from manager.directory import open_directory
    from manager.status import snapshot

    sock = listen_socket(args.listen, args.token)
    host, port = sock.getsockname()[:2]
    async with open_directory(args) as directory:
        console = Console(lambda: snapshot(directory, True, args.storage), "kademlia" if args.peers else "consultant",
                          args.interval)
        await console.poll()
        config = uvicorn.Config(create_app(console, args.token), log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        poller = asyncio.create_task(console.run())
        shown = f"[{host}]" if ":" in host else host
        print(f"manager console: http://{shown}:{port}/{'?token=' + args.token if args.token else ''} "
              f"(Ctrl-C stops)", flush=True)
        if console.latest.get("error"):
            print(f"manager console: {console.latest['error']} (the page shows it until the directory answers)",
                  file=sys.stderr, flush=True)
        try:
            await server.serve(sockets=[sock])
        finally:
            poller.cancel()
    return 0
