"""A lean keep-alive HTTP/1.1 load generator for measuring the lab server (raw asyncio streams)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from lab.topology import Topology


@dataclass
class LoadResult:
    requests: int
    bytes: int
    seconds: float
    errors: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def mbps(self) -> float:
        return self.bytes * 8 / 1e6 / self.seconds if self.seconds else 0.0


async def get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, target: str) -> tuple[int, bytes]:
    """One GET on an open keep-alive connection; the lab always sends Content-Length."""
    writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: lab-loadgen\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.lower() == b"content-length":
            length = int(v)
    body = await reader.readexactly(length) if length else b""
    return status, body


async def run_load(topology: Topology, urls: list[str], *, connections: int = 64, duration: float = 5.0, source: str | None = None) -> LoadResult:
    """Fetch `urls` round robin over `connections` keep-alive connections for `duration` seconds."""
    by_host: dict[str, list[str]] = {}
    for u in urls:
        p = urlsplit(u)
        by_host.setdefault(p.hostname or "", []).append(p.path + (f"?{p.query}" if p.query else ""))
    hosts = sorted(by_host)
    stats = [0, 0, 0]
    deadline = time.perf_counter() + duration

    async def worker(n: int) -> None:
        host = hosts[n % len(hosts)]
        site = topology.site(host)
        assert site is not None
        paths = by_host[host]
        reader, writer = await asyncio.open_connection(site.ip, site.port, local_addr=(source, 0) if source else None)
        k = n
        try:
            while time.perf_counter() < deadline:
                try:
                    status, body = await get(reader, writer, host, paths[k % len(paths)])
                except (asyncio.IncompleteReadError, ConnectionError):
                    stats[2] += 1
                    return
                k += 1
                stats[0] += 1
                stats[1] += len(body)
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in range(connections)))
    return LoadResult(stats[0], stats[1], time.perf_counter() - t0, stats[2])
