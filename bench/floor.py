"""The floor: a bare crawler on the lab web, the CPU per page below which a crawler in Python
hardly goes (issue 24). bench/agent_throughput.py runs it in the same invocation as the agent and
Scrapy and prints agent / floor beside agent / Scrapy.

What it does, and nothing more: aiohttp (one session, `--concurrency` workers, at most
`--per-host` connections per host, names answered from the lab's hosts file only), selectolax's
Lexbor parser for `<a href>`, `urllib.parse.urljoin`, scheme and host lower-cased and the fragment
cut, a Python set of the URLs seen, the allowed hosts. No robots.txt, no politeness delay, no
canonical form beyond that, no
WARC, no persistence, no routing. Wall and CPU (time.process_time: every thread of the process)
run from the first request to the last response.

    .venv/bin/python bench/floor.py --hosts-file HOSTS --seeds-file SEEDS --allowed ALLOWED \\
        --concurrency 64 --per-host 8 --out result.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver
from selectolax.lexbor import LexborHTMLParser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from wancrawl.hostres import parse_hosts_file  # noqa: E402


class HostsResolver(AbstractResolver):
    """The lab's hosts file only: any other name fails (no traffic leaves 127/8)."""

    def __init__(self, hosts: dict[str, str]):
        self.hosts = hosts

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list:  # type: ignore[override]
        ip = self.hosts.get(host.lower().rstrip("."))
        if ip is None:
            raise OSError(f"{host}: not in the lab's hosts file")
        return [{"hostname": host, "host": ip, "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


class Floor:
    """The crawl: a queue, a seen set, workers. Owns its counts."""

    def __init__(self, allowed: set[str], concurrency: int, pages_limit: int):
        self.allowed = allowed
        self.concurrency = concurrency
        self.pages_limit = pages_limit
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.seen: set[str] = set()
        self.pages = self.errors = self.links = 0
        self.t0 = self.c0 = self.t_last = self.c_last = 0.0

    def add(self, url: str) -> None:
        if url not in self.seen:
            self.seen.add(url)
            self.queue.put_nowait(url)

    def follow(self, body: bytes, base: str) -> None:
        tree = LexborHTMLParser(body)
        for node in tree.tags("a"):  # a third of css("a")'s cost
            href = node.attributes.get("href")
            if not href:
                continue
            self.links += 1
            parts = urlsplit(urljoin(base, href.strip()))
            scheme = parts.scheme.lower()
            if scheme in ("http", "https") and (parts.hostname or "") in self.allowed:
                # The least any crawler does, or it fetches one page under several spellings
                # (the lab writes links with upper-case hosts): scheme and host lower-cased,
                # fragment dropped, an empty path made "/".
                query = "?" + parts.query if parts.query else ""
                self.add(f"{scheme}://{parts.netloc.lower()}{parts.path or '/'}{query}")

    async def worker(self, session: aiohttp.ClientSession) -> None:
        while True:
            url = await self.queue.get()
            try:
                if self.pages_limit and self.pages >= self.pages_limit:
                    continue
                async with session.get(url, allow_redirects=False) as resp:
                    body = await resp.read()
                    ctype = resp.headers.get("Content-Type", "")
                self.pages += 1
                self.t_last, self.c_last = time.perf_counter(), time.process_time()
                if resp.status == 200 and "html" in ctype:
                    self.follow(body, url)
                elif resp.status in (301, 302, 303, 307, 308) and resp.headers.get("Location"):
                    self.add(urljoin(url, resp.headers["Location"]).split("#", 1)[0])
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                self.errors += 1
            finally:
                self.queue.task_done()

    async def run(self, seeds: list[str], hosts: dict[str, str], per_host: int) -> None:
        connector = aiohttp.TCPConnector(limit=self.concurrency, limit_per_host=per_host, resolver=HostsResolver(hosts),
                                         ttl_dns_cache=None)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=True,
                                         headers={"User-Agent": "wancrawl-floor-bench"}) as session:
            self.t0, self.c0 = time.perf_counter(), time.process_time()
            for s in seeds:
                self.add(s)
            workers = [asyncio.create_task(self.worker(session)) for _ in range(self.concurrency)]
            await self.queue.join()
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts-file", required=True)
    ap.add_argument("--seeds-file", required=True, help="one root URL a line")
    ap.add_argument("--allowed", required=True, help="file of allowed hosts, one a line")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--pages-limit", type=int, default=0)
    ap.add_argument("--out", required=True, help="JSON result file")
    args = ap.parse_args()
    seeds = [u.strip() for u in Path(args.seeds_file).read_text().splitlines() if u.strip()]
    allowed = {h.strip().lower() for h in Path(args.allowed).read_text().splitlines() if h.strip()}
    floor = Floor(allowed, args.concurrency, args.pages_limit)
    asyncio.run(floor.run(seeds, parse_hosts_file(args.hosts_file), args.per_host))
    Path(args.out).write_text(json.dumps({
        "crawler": "floor (aiohttp+lexbor)", "pages": floor.pages, "wall": floor.t_last - floor.t0,
        "cpu": floor.c_last - floor.c0, "errors": floor.errors, "links": floor.links, "seen": len(floor.seen),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
