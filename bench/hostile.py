"""One agent with default budgets against the lab's whole web, hostile sites allowed (issue 11).

    .venv/bin/python bench/hostile.py [--run-dir DIR] [--timeout 1800]

`lab up` with one agent (telecom-beijing) whose scope allows the normal sites and every hostile
site (session-id trap, robots.txt 503 at start, 429 forever, lying Content-Length, 100,000 links,
meta robots, Shift_JIS, redirect loops, calendars, bombs...), seeded with every normal site's
root and every hostile site's root. While it crawls, every 0.5 s: the agent's RSS (VmRSS of its
process), whether the consultant still lists it alive (heartbeats), and whether it answers its
Status RPC within 2 s. At the end (`manager wait` logic, bounded by --timeout): the normal sites'
truth against the lab's request log, the robots-503 site's pages, the largest queue per host in
the agent's frontier, the parked and given-up hosts, and the seconds from the last page request
to the end being seen. Each figure is printed beside its target.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.client import AgentClient  # noqa: E402
from consultant.client import ConsultantClient  # noqa: E402
from lab import cluster, topology  # noqa: E402
from lab.checks import read_log  # noqa: E402
from lab.truth import Scope as TruthScope, Truth  # noqa: E402
from lab.web import Web  # noqa: E402
from manager.seed import inject  # noqa: E402
from manager.status import host_notes, snapshot  # noqa: E402
from wancrawl.errors import WancrawlError  # noqa: E402
from wancrawl.urls import canonicalize  # noqa: E402

AGENT = "telecom-beijing"
RSS_TARGET_MB = 512.0
END_TARGET_S = 120.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def watch(cl: cluster.Cluster, pid: int, timeout: float, stable: float = 2.0) -> dict:
    """Sample RSS, liveness and Status latency until every agent is idle for `stable` s."""
    peak = 0.0
    dead_seen = slow_status = samples = 0
    worst_status = 0.0
    idle_since = None
    end = time.monotonic() + timeout
    async with ConsultantClient(cl.consultant) as c, AgentClient(cl.agents[AGENT], timeout=2.0) as a:
        while time.monotonic() < end:
            samples += 1
            peak = max(peak, rss_mb(pid))
            alive = {x.agent_id for x in (await c.list_agents()).agents}
            dead_seen += AGENT not in alive
            t0 = time.monotonic()
            try:
                st = await a.status()
                worst_status = max(worst_status, time.monotonic() - t0)
                idle = st.counters.get("idle") == 1.0
            except WancrawlError:
                slow_status += 1
                idle = False
            if idle:
                idle_since = idle_since or time.time()
                if time.time() - idle_since >= stable:
                    break
            else:
                idle_since = None
            await asyncio.sleep(0.5)
        snap = await snapshot(c)
        counters = dict((await a.status()).counters)
    return {"peak_rss_mb": peak, "not_alive_samples": dead_seen, "status_failures": slow_status,
            "worst_status_s": worst_status, "samples": samples, "idle_at": idle_since, "finished": idle_since is not None,
            "notes": host_notes(snap, time.time()), "counters": counters}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", help="keep the run here (default: a temporary directory)")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    base = Path(args.run_dir or tempfile.mkdtemp(prefix="wancrawl-hostile-"))
    cl = cluster.up(base, groups=[AGENT], seed=args.seed, allow_hostile=True)
    try:
        pid = next(p.pid for p in cl.procs if p.name == f"agent-{AGENT}")
        web = Web(topology.load(None), cl.seed, time_scale=cl.time_scale).with_port(cl.web_port)
        topo = web.topology  # its sites carry the run's port
        seeds = [web.url(s, "/") for s in topo.normal_sites] + [web.url(s, "/") for s in topo.hostile_sites.values()]
        t_seed = time.time()

        async def seed() -> None:
            async with ConsultantClient(cl.consultant) as c:
                await inject(c, [canonicalize(u) for u in seeds])

        asyncio.run(seed())
        w = asyncio.run(watch(cl, pid, args.timeout))
        frontier = sqlite3.connect(f"file:{base}/agents/{AGENT}/frontier.sqlite?mode=ro", uri=True)
        queued = Counter(dict(frontier.execute("SELECT host, count(*) FROM queue GROUP BY host")))
        frontier.close()
    finally:
        cluster.down(base)
    log = read_log(cl.web_log)
    normal = {s.host for s in topo.normal_sites}
    truth = {r.url for r in Truth(web, TruthScope(allow_domains=sorted(normal), respect_robots=True)).reachable(
        [web.url(s, "/") for s in topo.normal_sites])}
    port = f":{cl.web_port}"
    fetched = {canonicalize(f"http://{e.host}{'' if ':' in e.host else port}{e.path}") for e in log if e.path != "/robots.txt"}
    r503 = topo.hostile_sites.get("robots-503")
    r503_pages = {canonicalize(web.url(r503, p)) for p in ["/"] + [f"/p/{i}.html" for i in range(1, 20)]} if r503 else set()
    pages_t = [e.t for e in log if e.path != "/robots.txt" and e.status]
    end_lag = (w["idle_at"] - max(pages_t)) if w["finished"] and pages_t else float("nan")
    budget = 50_000
    rows = [
        ("normal truth URLs fetched", f"{len(truth & fetched)} / {len(truth)}", "all", len(truth & fetched) == len(truth)),
        ("robots-503 site pages fetched", f"{len(r503_pages & fetched)} / {len(r503_pages)}", "all",
         bool(r503_pages) and r503_pages <= fetched),
        ("agent peak RSS (sampled)", f"{w['peak_rss_mb']:.0f} MB", f"< {RSS_TARGET_MB:.0f} MB", w["peak_rss_mb"] < RSS_TARGET_MB),
        ("largest queue left on one host", f"{max(queued.values(), default=0)}", f"<= {budget}", max(queued.values(), default=0) <= budget),
        ("samples where the consultant did not list it alive", f"{w['not_alive_samples']} / {w['samples']}", "0",
         w["not_alive_samples"] == 0),
        ("Status RPC failures (2 s deadline) / slowest answer", f"{w['status_failures']} / {w['worst_status_s'] * 1000:.0f} ms", "0",
         w["status_failures"] == 0),
        ("seconds from the last page request to idle seen", f"{end_lag:.1f}", f"<= {END_TARGET_S:.0f}",
         w["finished"] and end_lag <= END_TARGET_S),
    ]
    c = w["counters"]
    print(f"$ python bench/hostile.py  (lab seed {cl.seed}, one agent {AGENT}, default budgets, "
          f"{len(seeds)} seeds, {time.time() - t_seed:.0f} s)")
    for name, got, target, ok in rows:
        print(f"{name:<55} {got:>16}   target {target:<10} {'OK' if ok else 'MISSED'}")
    print("counters: " + ", ".join(f"{k} {c.get(k, 0):.0f}" for k in (
        "pages", "errors", "budget_dropped", "over_queue_budget", "query_churn", "links_over_cap", "robots_deferred",
        "robots_given_up", "robots_denied", "given_up", "parked_hosts")))
    for line in w["notes"]:
        print(line)
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
