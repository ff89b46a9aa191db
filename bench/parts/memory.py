"""One agent's peak RSS on the lab's hostile web, bombs of every kind arriving at once, against 300 MB.

    .venv/bin/python bench/parts/memory.py [--duration 60] [--run-dir DIR] [--keep K=V ...]

`lab up` with one agent (telecom-beijing) at the agent's default settings (concurrency 100,
politeness delay 1 s, the default fetch caps and memory budget), scope open to the normal sites
and every hostile site. Seeded at once with: every name of the `bombs` site (decompression bombs
of bare <p> tags, deep <div> nesting, text without a tag, an astral character, 10 MiB of links, one
huge attribute; gzip and deflate, and a plain 10 MiB <p> page), the `huge` and `gzip-bomb` sites,
the 100,000-link page, every other hostile site's root and every normal site's root. The agent's
RSS (VmRSS of its process) is sampled every 0.1 s for --duration seconds; the figure is the peak,
printed beside the idle agent's RSS before seeding and the 300 MB target (issue 25). `--set K=V`
changes an agent setting (e.g. `--set memory.parse_bytes_in_flight=1073741824` for the old
unbounded parses) so the effect of a setting is measured in the same run conditions.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.client import AgentClient  # noqa: E402
from bench.hostile import rss_mb  # noqa: E402
from consultant.client import ConsultantClient  # noqa: E402
from lab import cluster, topology  # noqa: E402
from lab.web import Web  # noqa: E402
from manager.seed import inject  # noqa: E402
from wancrawl.urls import canonicalize  # noqa: E402

AGENT = "telecom-beijing"
TARGET_MB = 300.0


async def sample(cl: cluster.Cluster, pid: int, seeds: list[str], duration: float) -> dict:
    before = rss_mb(pid)
    async with ConsultantClient(cl.consultant) as c:
        await inject(c, seeds)
    peak, peak_at, t0 = 0.0, 0.0, time.monotonic()
    while time.monotonic() - t0 < duration:
        r = rss_mb(pid)
        if r > peak:
            peak, peak_at = r, time.monotonic() - t0
        await asyncio.sleep(0.1)
    async with AgentClient(cl.agents[AGENT], timeout=5.0) as a:
        counters = dict((await a.status()).counters)
    return {"before": before, "peak": peak, "peak_at": peak_at, "end": rss_mb(pid), "counters": counters}


def value(v: str) -> object:
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(v, v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", help="keep the run here (default: a temporary directory)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of sampling after the seeds go in")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="an agent setting (dotted key)")
    args = ap.parse_args()
    base = Path(args.run_dir or tempfile.mkdtemp(prefix="wancrawl-memory-"))
    tables: dict[str, dict[str, object]] = {}
    for kv in args.set:
        k, _, v = kv.partition("=")
        section, _, key = k.rpartition(".")
        tables.setdefault(section, {})[key] = value(v)
    extra = "".join(f"[{sec}]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"').replace("True", "true").replace("False", "false")
                                           for k, v in kv.items()) for sec, kv in tables.items() if sec)
    # The agent's own defaults (the lab's are a faster crawl): 100 fetches in flight, 1 s per host.
    cl = cluster.up(base, groups=[AGENT], seed=args.seed, allow_hostile=True, delay=1.0, concurrency=100,
                    agent_tables=extra)
    try:
        pid = next(p.pid for p in cl.procs if p.name == f"agent-{AGENT}")
        web = Web(topology.load(None), cl.seed, time_scale=cl.time_scale).with_port(cl.web_port)
        topo = web.topology
        bombs = topo.hostile_sites["bombs"]
        first = [Web._name_url(bombs, n) + "/" for n in topo.subdomains(bombs)]
        first += [web.url(topo.hostile_sites[k], "/") for k in ("huge", "gzip-bomb", "many-links")]
        seeds = first + [web.url(s, "/") for s in topo.hostile_sites.values()] + [web.url(s, "/") for s in topo.normal_sites]
        seeds = list(dict.fromkeys(canonicalize(u) for u in seeds))
        r = asyncio.run(sample(cl, pid, seeds, args.duration))
    finally:
        cluster.down(base)
    c = r["counters"]
    ok = r["peak"] < TARGET_MB
    print(f"$ python bench/parts/memory.py --duration {args.duration:.0f}{''.join(' --set ' + s for s in args.set)}"
          f"  (lab seed {cl.seed}, one agent, {len(seeds)} seeds, {len(first)} bombs at once)")
    print(f"{'agent RSS before seeding':<40} {r['before']:>8.0f} MB")
    print(f"{'agent peak RSS (0.1 s samples)':<40} {r['peak']:>8.0f} MB   target < {TARGET_MB:.0f} MB   "
          f"{'OK' if ok else 'MISSED'}   (at {r['peak_at']:.1f} s; {r['peak'] / TARGET_MB:.2f}x the target)")
    print(f"{'agent RSS at the end':<40} {r['end']:>8.0f} MB")
    print("counters: " + ", ".join(f"{k} {c.get(k, 0):.0f}" for k in (
        "pages", "truncated", "parse_waits", "parse_pieces", "parse_pieces_skipped", "links_over_cap", "errors")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
