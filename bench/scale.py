"""Flat cost as the crawl grows (issue 24): one agent, then two, crawl a large lab web and the
agent's CPU per page is printed per slice of pages, with peak RSS, frontier and seen set on disk
and the longest event-loop stall.

The set-up is bench/agent_throughput.py's (its functions are reused): the real `agent run` CLI
with a TOML config, a `consultant serve` (hash) and a `storage serve`, the lab web with
`--zero-latency` and its page cache, no delays, robots.txt off, replication and TLS off, the
crawler pinned to core 0 and the rest to core 1. The web differs: `--sites-per-block` sites in
each of the lab's 9 blocks (default 40: 360 sites), each with the same number of pages, enough
for 1.25 x `--pages`, pages of `--page-kb` (default 4-16 KB, smaller than the lab's default
5-60 KB so a million pages fit in an afternoon; the per-URL costs that grow with a crawl, seen
set and frontier, weigh more per page). The lab renders pages as they are asked for (a
million pages do not fit in its cache; nothing is warmed). Agents sample their event loop's lag
every 10 ms (`loop_lag_interval = 0.01`; Status gauge loop_lag_max, counter loop_stalls).

The crawl stops when the agents together have fetched `--pages` pages. Per slice of
`--slice` pages (summed over the agents): CPU per page (utime + stime of the agent processes
from /proc), pages/s, the largest VmHWM, frontier and seen set on disk (their SQLite files
with WAL), the queue, and the longest loop lag so far: wall clock, and busy (the loop
thread's own CPU during a sample beyond its 10 ms; on a shared machine a process that is not
scheduled is late without a stall of its own making). Stalls counts busy lags over 100 ms; full GC ms is the longest full collection (loop thread
CPU), and a sample over 100 ms is logged by the agent with the loop's stack (wancrawl/runtime/looplag.py).
Targets: the last slice within 10% of the first (0.90-1.10; below it the verdict says the last
slice was the cheaper, and the fit of CPU against new URLs per page says how much of the first
slice was finding the web), peak RSS under 1 GB, no stall over 100 ms. The last line:
`last/first slice CPU per page: R` (of the last run: two agents unless `--agents 1`).

    nice -n 5 .venv/bin/python bench/scale.py [--pages 1000000] [--slice 100000] [--agents 1,2]
        [--sites-per-block 40] [--web-factor 1.25] [--page-kb 4,16] [--concurrency 64] [--per-host 8]
        [--swap-cores] [--stop-after S] [--keep] [--profile-slices DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import agent_throughput as at  # noqa: E402
from agent.client import AgentClient  # noqa: E402
from consultant.client import ConsultantClient  # noqa: E402
from lab import topology as lab_topology  # noqa: E402
from lab.cluster import free_port  # noqa: E402
from lab.geodb import write_all  # noqa: E402
from lab.web import Web  # noqa: E402
from measure import cpu_seconds  # noqa: E402
from wancrawl.errors import FailedPrecondition, Unavailable  # noqa: E402
from wancrawl.v1 import agent_pb2  # noqa: E402

FLAT_TARGET = 0.10    # the last slice's CPU per page within 10% of the first's
RSS_TARGET_MB = 1024  # peak RSS under 1 GB
STALL_TARGET = 0.100  # no event-loop stall over 100 ms
POLL = 0.5


def make_world(tmp: Path, args) -> tuple[lab_topology.Topology, dict, int]:
    """The lab topology with per-block sites of equal size, enough pages for 1.25 x --pages."""
    port = free_port()
    lo, hi = (float(x) for x in args.page_kb.split(","))
    blocks = 9  # the default topology's ISP x city blocks
    per_site = max(10, -(-int(args.pages * args.web_factor) // (blocks * args.sites_per_block)))
    topo_file = tmp / "topology.toml"
    topo_file.write_text(f"[sites]\nport = {port}\nper_block = {args.sites_per_block}\n\n"
                         f"[web]\npages_min = {per_site}\npages_max = {per_site}\npage_kb_min = {lo}\npage_kb_max = {hi}\n")
    topo = lab_topology.load(topo_file)
    paths = write_all(topo, tmp / "geo")
    web = Web(topo, args.seed)
    total = sum(web.pages(s) for s in topo.normal_sites)
    return topo, {"topology": topo_file, "port": port, "hosts_file": Path(paths["hosts"]), "geo": paths}, total


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def disk_mb(data: Path, stem: str) -> float:
    return sum(p.stat().st_size for p in data.glob(stem + "*") if p.is_file()) / 1e6


async def wait_members(consultant: str, ids: list[str], timeout: float = 30) -> int:
    """Until the consultant lists every agent alive; its epoch then (from a Resolve)."""
    async with ConsultantClient(consultant) as c:
        end = time.monotonic() + timeout
        while True:
            alive = {a.agent_id for a in (await c.list_agents()).agents}
            if set(ids) <= alive:
                try:
                    return max([r.epoch for r in await c.resolve(["x.invalid"])] or [1])
                except FailedPrecondition:  # listed, but the lease not yet seen valid by the placement: again
                    pass
            if time.monotonic() > end:
                raise RuntimeError(f"consultant lists {sorted(alive)}, not all of {ids}")
            await asyncio.sleep(0.2)


async def crawl(tmp: Path, topo, world: dict, args, n_agents: int) -> dict:
    """One crawl by n_agents agents until they have fetched --pages together; slices as they come."""
    tmp.mkdir(parents=True)
    secure = at.tls_setup(tmp, False)
    cport, sport = free_port(), free_port()
    cons_addr, stor_addr = f"127.0.0.1:{cport}", f"127.0.0.1:{sport}"
    procs: list[subprocess.Popen] = []
    agents: list[tuple[str, subprocess.Popen, str, Path, Path]] = []  # id, proc, addr, log, data dir
    try:
        for name, mod, cfg in (("consultant", "consultant.cli", at.consultant_config(tmp, world, cport)),
                               ("storage", "storage.cli", at.storage_config(tmp, sport))):
            p = at.spawn([sys.executable, "-m", mod, "serve", "--config", secure(cfg, "service", name)],
                         tmp / f"{name}.log", at.SERVICE_CORE)
            procs.append(p)
            await at.wait_health(f"127.0.0.1:{cport if name == 'consultant' else sport}", p, name, tmp / f"{name}.log")
        for k in range(n_agents):
            aid, aport = f"scale-agent{k}", free_port()
            data = tmp / f"agent{k}-data"
            cfg = at.agent_config(tmp / f"agent{k}.toml", topo, world, args, agent_id=aid, port=aport, slot=k,
                                  data_dir=data, consultant=cons_addr, storage=stor_addr, replication=False)
            cfg.write_text("loop_lag_interval = 0.01\n" + cfg.read_text())
            log = tmp / f"agent{k}.log"
            run = ["-m", "agent.cli"] if not args.profile_slices else \
                [str(ROOT / "bench" / "parts" / "slice_profile.py"), str(Path(args.profile_slices).resolve() / aid), "agent.cli"]
            p = at.spawn([sys.executable, *run, "run", "--config", secure(cfg, "agent", aid)], log, at.CRAWLER_CORE)
            procs.append(p)
            agents.append((aid, p, f"127.0.0.1:{aport}", log, data))
        for aid, p, addr, log, _ in agents:
            await at.wait_health(addr, p, aid, log)
        epoch = await wait_members(cons_addr, [a[0] for a in agents])
        stubs = [AgentClient(a[2]) for a in agents]
        for (aid, p, _, log, _), stub in zip(agents, stubs):
            await at.wait_registered(stub, p, aid, log, epoch=epoch)
        seeds = [agent_pb2.UrlItem(url=s.base_url + "/") for s in topo.normal_sites]
        pids = [a[1].pid for a in agents]
        c0 = sum(cpu_seconds(pid) for pid in pids)
        t0 = time.perf_counter()
        resp = await stubs[0].push("bench", 0, seeds, route=True, timeout=60)
        if resp.accepted != len(seeds):
            print(f"  warning: {resp.accepted}/{len(seeds)} seeds accepted, errors={resp.errors[:3]}")
        slices: list[dict] = []
        mark_pages, mark_cpu, mark_t = 0.0, c0, t0
        pages, idle_since, lag, busy, stalls, gc_full = 0.0, None, 0.0, 0.0, 0.0, 0.0
        print(f"{'slice':>9} {'CPU ms/page':>11} {'pages/s':>8} {'peak RSS MB':>11} {'frontier MB':>11} {'seen MB':>8} "
              f"{'queued':>9} {'seen URLs':>10} {'new/page':>8} {'max lag ms':>10} {'busy ms':>7} {'stalls':>6} {'full GC ms':>10}", flush=True)
        while True:
            for aid, p, _, log, _ in agents:
                if p.poll() is not None:
                    raise RuntimeError(f"{aid} exited ({p.returncode}):\n{at.tail(log)}")
            try:
                sts = [dict((await s.status(timeout=60)).counters) for s in stubs]
            except Unavailable as exc:  # a Status slower than 60 s is a stall to report, not the end of the run
                print(f"  Status failed: {exc}", flush=True)
                continue
            now, cpu = time.perf_counter(), sum(cpu_seconds(pid) for pid in pids)
            pages = sum(st.get("pages", 0) for st in sts)
            lag = max(st.get("loop_lag_max", 0) for st in sts)
            busy = max(st.get("loop_busy_max", 0) for st in sts)
            stalls = sum(st.get("loop_stalls", 0) for st in sts)
            # The longest full collection (it walks every tracked object on the loop's thread).
            gc_full = max(st.get("loop_gc_full_max", 0) for st in sts)
            # Out of time (--stop-after, a shared machine): the pages since the last slice end as a
            # short slice, and the run is reported as far as it got.
            out_of_time = bool(args.stop_after) and now - t0 > args.stop_after
            while pages >= mark_pages + args.slice or ((pages >= args.pages or out_of_time) and pages > mark_pages):
                # The slice ends at this poll (the pages since the mark, not exactly --slice of them).
                n = pages - mark_pages
                sl = {"end": pages, "cpu_ms": (cpu - mark_cpu) / n * 1000, "rate": n / max(now - mark_t, 1e-9),
                      "rss": max(vm_hwm_mb(pid) for pid in pids),
                      "frontier_mb": sum(disk_mb(a[4], "frontier.sqlite") for a in agents),
                      "seen_mb": sum(disk_mb(a[4], "seen.sqlite") for a in agents),
                      "queued": sum(st.get("frontier", 0) for st in sts), "seen": sum(st.get("seen", 0) for st in sts),
                      "lag": lag, "busy": busy, "stalls": stalls, "gc_full": gc_full}
                # URLs discovered per page in this slice: each costs scope checks, routing, a seen-set
                # insert and a frontier add, so a slice that finds more costs more per page.
                sl["new"] = (sl["seen"] - (slices[-1]["seen"] if slices else 0)) / n
                slices.append(sl)
                if args.profile_slices:  # the profile of this slice (bench/parts/slice_profile.py)
                    for pid in pids:
                        os.kill(pid, signal.SIGRTMIN + 3)
                print(f"{sl['end']:>9,.0f} {sl['cpu_ms']:>11.3f} {sl['rate']:>8.0f} {sl['rss']:>11.0f} {sl['frontier_mb']:>11.1f} "
                      f"{sl['seen_mb']:>8.1f} {sl['queued']:>9,.0f} {sl['seen']:>10,.0f} {sl['new']:>8.2f} {lag * 1000:>10.0f} {busy * 1000:>7.0f} {stalls:>6.0f} {gc_full * 1000:>10.0f}"
                      + (f"  (--stop-after {args.stop_after:.0f} s)" if out_of_time else ""), flush=True)
                mark_pages, mark_cpu, mark_t = pages, cpu, now
            if pages >= args.pages or out_of_time:
                break
            if all(st.get("idle") for st in sts):
                if idle_since is None:
                    idle_since = now
                elif now - idle_since > 3:
                    print(f"  the agents are idle at {pages:,.0f} pages: the web ran out before --pages")
                    break
            else:
                idle_since = None
            if now - t0 > args.timeout:
                raise RuntimeError(f"{pages:,.0f} pages after {args.timeout:.0f} s")
            await asyncio.sleep(POLL)
        for s in stubs:
            await s.close()
        return {"agents": n_agents, "pages": pages, "wall": time.perf_counter() - t0, "cpu": cpu - c0, "slices": slices,
                "rss": max(vm_hwm_mb(pid) for pid in pids), "lag": lag, "busy": busy, "stalls": stalls,
                "gc_full": gc_full}
    finally:
        for p in reversed(procs):
            at.stop(p)
        for aid, _, _, log, _ in agents:
            errs = [ln for ln in at.tail(log, 400).splitlines() if "Traceback" in ln or " ERROR " in ln]
            if errs:
                print(f"  {aid} log has {len(errs)} ERROR/Traceback lines; last: {errs[-1][:300]}  ({log})")


def verdict(ok: bool) -> str:
    return "ok" if ok else "OVER"


def report(r: dict) -> float:
    s = r["slices"]
    first, last = s[0]["cpu_ms"], s[-1]["cpu_ms"]
    ratio = last / first
    print(f"\n{r['agents']} agent(s): {r['pages']:,.0f} pages in {r['wall']:.0f} s ({r['pages'] / r['wall']:.0f} pages/s), "
          f"CPU {r['cpu']:.0f} s = {r['cpu'] / r['pages'] * 1000:.3f} ms/page")
    # Within 10% both ways is the target. Below the band the last slice is cheaper than the first:
    # no cost grew with the crawl, but the first slice found the web (the fit line below says how
    # much of it was the new URLs), so the verdict says which it is instead of a plain "ok".
    band = f"{1 - FLAT_TARGET:.2f}-{1 + FLAT_TARGET:.2f}"
    flat = "ok" if abs(ratio - 1) <= FLAT_TARGET else "OVER" if ratio > 1 else "below the band: cheaper at the end"
    print(f"  last/first slice CPU per page {ratio:.3f} ({last:.3f} / {first:.3f} ms; target {band}: {flat})")
    print(f"  peak RSS {r['rss']:.0f} MB (target < {RSS_TARGET_MB}: {verdict(r['rss'] < RSS_TARGET_MB)}); "
          f"longest loop stall {r['busy'] * 1000:.0f} ms busy, {r['stalls']:.0f} samples over 100 ms "
          f"(target none over {STALL_TARGET * 1000:.0f} ms: {verdict(r['busy'] <= STALL_TARGET)}); "
          f"longest wall-clock lag {r['lag'] * 1000:.0f} ms (busy or not scheduled); "
          f"longest full GC pass {r['gc_full'] * 1000:.0f} ms")
    print(f"  on disk at the end: frontier {s[-1]['frontier_mb']:.1f} MB, seen set {s[-1]['seen_mb']:.1f} MB "
          f"({s[-1]['seen_mb'] * 1e6 / max(s[-1]['seen'], 1):.1f} bytes per seen URL)")
    fit = discovery_fit(s)
    if fit:
        a, b = fit
        print(f"  least-squares fit over the slices: CPU ms/page = {a:.3f} + {b * 1000:.1f} us x new URLs/page; "
              f"without the new URLs' part, last/first {(last - b * s[-1]['new']) / (first - b * s[0]['new']):.3f} "
              f"(new URLs/page: first slice {s[0]['new']:.2f}, last {s[-1]['new']:.2f})")
    return ratio


def discovery_fit(s: list[dict]) -> tuple[float, float] | None:
    """CPU ms/page = a + b x new URLs/page over the slices (weighted by pages), or None when the
    slices do not differ in discovery. A slice that finds more URLs pays for each: scope, routing,
    seen set, frontier; a web only 1.25 x --pages is mostly found in the first slices."""
    w = [sl["end"] - (s[k - 1]["end"] if k else 0) for k, sl in enumerate(s)]
    x, y = [sl["new"] for sl in s], [sl["cpu_ms"] for sl in s]
    sw = sum(w)
    mx, my = sum(wi * xi for wi, xi in zip(w, x)) / sw, sum(wi * yi for wi, yi in zip(w, y)) / sw
    vx = sum(wi * (xi - mx) ** 2 for wi, xi in zip(w, x))
    if len(s) < 3 or vx < 1e-9 * sw:
        return None
    b = sum(wi * (xi - mx) * (yi - my) for wi, xi, yi in zip(w, x, y)) / vx
    return my - b * mx, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=1_000_000, help="pages to crawl in each run (summed over its agents)")
    ap.add_argument("--slice", type=int, default=0, help="pages per slice (default: a tenth of --pages)")
    ap.add_argument("--agents", default="1,2", help="agent counts, one crawl each (default 1,2)")
    ap.add_argument("--sites-per-block", type=int, default=40, help="sites in each of the lab's 9 blocks")
    ap.add_argument("--web-factor", type=float, default=1.25,
                    help="the web's pages per page crawled (default 1.25: most of it is discovered early, so "
                         "later slices find few new URLs; 20 keeps discovery going the whole run)")
    ap.add_argument("--page-kb", default="4,16", help="page size range, KB (lab web.page_kb_min,max)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--fetcher", default=at.DEFAULT_FETCHER, choices=sorted(at.FETCHERS),
                    help="the agents' fetcher backend (agent/fetch; default: the agent's default)")
    ap.add_argument("--swap-cores", action="store_true",
                    help="agents on core 1, the lab web and services on core 0 (two scale runs side by side)")
    ap.add_argument("--seed", type=int, default=0, help="the lab web's seed")
    ap.add_argument("--lab-workers", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=4 * 3600.0, help="seconds each crawl may take")
    ap.add_argument("--stop-after", type=float, default=0.0,
                    help="end each crawl after this many seconds, reported as far as it got (0: run to --pages)")
    ap.add_argument("--profile-slices", metavar="DIR",
                    help="run the agents under cProfile, a profile per slice: DIR/<agent>/slice-N.prof "
                         "(bench/parts/slice_profile.py --compare; the profiler inflates the CPU figures)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, configs, data dirs, WARCs)")
    args = ap.parse_args()
    if args.swap_cores:  # agent_throughput's spawns read these module globals when they run
        at.CRAWLER_CORE, at.SERVICE_CORE = at.SERVICE_CORE, at.CRAWLER_CORE
    args.slice = args.slice or max(1, args.pages // 10)
    counts = [int(x) for x in args.agents.split(",") if x.strip()]
    if not counts or min(counts) < 1 or max(counts) > 2:
        ap.error("--agents: 1 and/or 2")
    os.sched_setaffinity(0, at.SERVICE_CORE & os.sched_getaffinity(0) or os.sched_getaffinity(0))
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    tmp = Path(tempfile.mkdtemp(prefix="wancrawl-scale-"))
    lab = None
    results = []
    try:
        topo, world, total = make_world(tmp, args)
        print(f"lab web: {len(topo.normal_sites)} sites, {total:,} pages, {args.page_kb} KB each, port {world['port']}; "
              f"crawl {args.pages:,} pages in slices of {args.slice:,}", flush=True)
        lab = at.start_lab(tmp, world, args, cache_pages=8192)
        site0 = topo.normal_sites[0]
        at.wait_tcp(site0.ip, site0.port, lab, "lab web", tmp / "lab.log")
        for n in counts:
            print(f"\n{n} agent(s), concurrency {args.concurrency}, per host {args.per_host}:", flush=True)
            results.append(asyncio.run(crawl(tmp / f"run-{n}", topo, world, args, n)))
            report(results[-1])
    finally:
        at.stop(lab)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    ratio = 0.0
    for r in results:
        ratio = report(r)
    print(f"last/first slice CPU per page: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
