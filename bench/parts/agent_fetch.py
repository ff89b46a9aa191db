"""Fetcher backends side by side on the lab's zero-latency web: pages/s and client CPU ms per request.

--loops asyncio uvloop runs each backend on each event loop (wancrawl/runtime/eventloop.py); --rounds N
repeats every (backend, loop) run N times, interleaved, and prints the medians."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import statistics  # noqa: E402

from agent.fetch import FETCHERS, FetchRequest, FetchSettings, create_fetcher  # noqa: E402
from wancrawl.runtime import eventloop  # noqa: E402
from lab import topology  # noqa: E402
from lab.web import Web  # noqa: E402
from wancrawl.urls import host_of  # noqa: E402


def start_lab(port: int, seed: int) -> subprocess.Popen:
    # The server runs in its own process so the CPU measured here is the client's alone.
    cmd = [sys.executable, "-m", "lab.cli", "web", "--zero-latency", "--port", str(port), "--seed", str(seed)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    site = topology.load().normal_sites[0]
    for _ in range(200):
        try:
            socket.create_connection((site.ip, port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"lab web exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("lab web did not start")


async def run_one(backend: str, reqs: list[FetchRequest], concurrency: int, source: str, per_host: int) -> tuple[float, float, int, int]:
    st = FetchSettings(source_ip=source, allow_networks=["127.0.0.0/8"], max_connections=concurrency,
                       max_connections_per_host=per_host)
    f = create_fetcher(backend, st)
    it = iter(reqs)
    ok = bad = 0

    async def worker() -> None:
        nonlocal ok, bad
        for r in it:
            resp = await f.fetch(r)
            if resp.ok:
                ok += 1
            else:
                bad += 1

    # Warm-up: connections open, server page cache filled, code paths hot.
    warm = reqs[: min(len(reqs), concurrency * 2)]
    await asyncio.gather(*(f.fetch(r) for r in warm))
    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    await f.close()
    return wall, cpu, ok, bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=4000, help="timed requests per backend and concurrency")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[50, 500])
    ap.add_argument("--port", type=int, default=0, help="lab port (0: pick one)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backends", nargs="+", default=sorted(FETCHERS))
    ap.add_argument("--loops", nargs="+", default=["asyncio"], choices=eventloop.EVENT_LOOPS,
                    help="event loops to run each backend on (named backend@loop when more than one)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved runs of each; the medians are printed")
    args = ap.parse_args(argv)
    port = args.port or random.randint(20000, 60000)
    topo = topology.load()
    web = Web(topo, args.seed).with_port(port)
    urls = web.all_page_urls()
    random.Random(0).shuffle(urls)
    ips = {s.host: s.ip for s in web.topology.sites}
    reqs = [FetchRequest(u, host_of(u), ips[host_of(u)]) for u in urls]
    reqs = (reqs * (args.requests // len(reqs) + 2))[: args.requests]
    source = topo.agent_address("telecom", "beijing", 0)
    variants = [(f"{b}@{lp}" if len(args.loops) > 1 else b, b, lp) for b in args.backends for lp in args.loops]
    proc = start_lab(port, args.seed)
    try:
        print(f"lab web --zero-latency on :{port}, {len(topo.normal_sites)} sites, client bound to {source}, "
              f"{args.requests} timed requests each, {os.cpu_count()} cores")
        rows = []
        for conc in args.concurrency:
            per_host = max(1, -(-conc // len(topo.normal_sites)))  # enough hosts x slots for the concurrency
            runs: dict[str, list[tuple[float, float, int]]] = {n: [] for n, _, _ in variants}
            for _ in range(args.rounds):
                for name, b, lp in variants:
                    wall, cpu, ok, bad = eventloop.run(run_one(b, reqs, conc, source, per_host), lp)
                    runs[name].append((ok / wall, cpu / (ok + bad) * 1000, bad))
            res = {n: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs), sum(r[2] for r in rs))
                   for n, rs in runs.items()}
            rows.append((conc, per_host, res))
            if args.rounds > 1:
                for n, rs in runs.items():
                    print(f"  conc {conc} {n}: CPU ms per request {', '.join(f'{r[1]:.3f}' for r in rs)}")
        names = [n for n, _, _ in variants]
        print(f"{'conc':>5} {'per-host':>8} " + " ".join(f"{b + ' p/s':>12} {b + ' CPU ms':>14}" for b in names)
              + ("   ratio p/s  ratio CPU" if len(names) == 2 else ""))
        for conc, per_host, res in rows:
            line = f"{conc:>5} {per_host:>8} " + " ".join(f"{res[b][0]:>12.0f} {res[b][1]:>14.3f}" for b in names)
            if len(names) == 2:
                a, b = names
                line += f"   {res[a][0] / res[b][0]:>9.2f}x {res[b][1] / res[a][1]:>9.2f}x"
            print(line + ("" if all(res[b][2] == 0 for b in names) else f"  (failures: {[res[b][2] for b in names]})"))
        if len(names) == 2:
            print(f"ratios: {names[0]} over {names[1]} (pages/s), {names[1]} over {names[0]} (CPU per request)")
    finally:
        proc.terminate()
        proc.wait(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
