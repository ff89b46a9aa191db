"""Test helpers: run a LabServer in a background thread and fetch from it with a chosen source address."""

from __future__ import annotations

import asyncio
import http.client
import random
import socket
import threading
import time
from dataclasses import dataclass

from lab.server import LabServer
from lab.topology import Site, Topology
from lab.web import Web


class ServerThread:
    """A LabServer on its own event loop thread, on a free port shared by every site address."""

    def __init__(self, web: Web, **kwargs: object):
        self.web = web
        self.kwargs = kwargs
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: LabServer | None = None

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        last: Exception | None = None
        for _ in range(20):
            port = random.randint(20000, 60000)
            srv = LabServer(self.web, port=port, **self.kwargs)  # type: ignore[arg-type]  # it moves the web to the port
            try:
                asyncio.run_coroutine_threadsafe(srv.start(), self.loop).result(10)
            except OSError as exc:  # port taken on some address: close what bound, try another
                last = exc
                asyncio.run_coroutine_threadsafe(srv.close(), self.loop).result(10)
                continue
            self.server = srv
            self.web = srv.web
            return self
        raise RuntimeError(f"no free port for the lab server: {last}")

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port


@dataclass
class Fetched:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes
    seconds: float


def fetch(site: Site, port: int, target: str = "/", *, source: str | None = None, timeout: float = 10.0,
          conn: http.client.HTTPConnection | None = None, host: str | None = None) -> Fetched:
    """One GET through http.client (no redirects, no decoding), optionally on a kept connection."""
    c = conn or http.client.HTTPConnection(site.ip, port, timeout=timeout, source_address=(source, 0) if source else None)
    t0 = time.perf_counter()
    c.request("GET", target, headers={"Host": host or site.host, "User-Agent": "wancrawl-test"})
    r = c.getresponse()
    body = r.read()
    dt = time.perf_counter() - t0
    headers = {k.lower(): v for k, v in r.getheaders()}
    if conn is None:
        c.close()
    return Fetched(r.status, headers, body, dt)


def connect(site: Site, port: int, source: str | None = None, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection((site.ip, port), timeout=timeout, source_address=(source, 0) if source else None)
    return s


def small_topology(hostile_kinds: list[str] | None = None, **web: object) -> Topology:
    """Two sites per block, the default world otherwise: quick to bind and to crawl
    (`hostile_kinds`: only these hostile sites)."""
    import dataclasses

    from lab import topology

    base = topology.default_spec()
    return topology.load(
        sites=dataclasses.replace(base.sites, per_block=2, hostile_kinds=list(hostile_kinds or [])),
        web=dataclasses.replace(base.web, **({"pages_max": 200} | web)),  # type: ignore[arg-type]
    )
