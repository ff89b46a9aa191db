"""`lab demo`: three agents in three ISP/city blocks crawl the lab to the end, then a summary.

--mode kademlia: no consultant; seeds go to one agent with route=true and the end of the crawl
is read from the agents (lab/peers.py). The report's plots and locality figures need the
consultant's places (manager report asks it), so that mode prints what it does not show."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path

from lab.cluster import Cluster, check_strategy, down, up


async def _seed_and_wait(cl: Cluster, timeout: float) -> tuple[dict, bool]:
    from consultant.client import ConsultantClient
    from manager.seed import inject, parse_seeds
    from manager.status import wait_idle

    seeds = parse_seeds(Path(cl.seeds_file).read_text())
    if cl.mode == "kademlia":
        from lab import peers

        agents = list(cl.agents.values())
        # The operator asks one agent; it routes every seed to its owner over the overlay.
        res = await peers.inject(agents[:1], seeds.urls)
        done = await peers.wait_idle(agents, timeout, stable=1.0)
        return {"seeds": len(seeds.urls), "accepted": sum(res.taken.values()), "not_injected": len(res.failed)}, done
    async with ConsultantClient(cl.consultant) as c:
        accepted, failed = await inject(c, seeds.urls)
        done = await wait_idle(c, timeout, stable=1.0, quiet=False)
    print(file=sys.stderr)
    return {"seeds": len(seeds.urls), "accepted": sum(accepted.values()), "not_injected": len(failed)}, done


def run_demo(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    check_strategy(args.strategy, args.mode)  # before the earlier demo is removed
    run = Path(args.run_dir)
    if (run / "cluster.json").is_file():
        # A demo starts from nothing: stop and remove what an earlier demo left in its run dir.
        down(run)
        shutil.rmtree(run)
    groups = [g.strip() for g in args.groups.split(",") if g.strip()] if args.groups else None
    kademlia = args.mode == "kademlia"
    placer = "no consultant (a Kademlia overlay among the agents)" if kademlia else f"consultant ({args.strategy})"
    print(f"lab demo: starting the lab web, {placer}, storage and agents in {args.run_dir} ...")
    cl = up(args.run_dir, strategy=args.strategy, groups=groups, topology_path=args.topology, seed=args.seed,
            time_scale=args.time_scale, zero_latency=args.zero_latency, delay=args.delay, concurrency=args.concurrency,
            mode=args.mode, consultants=getattr(args, "consultants", 1), dns=getattr(args, "dns", False))
    up_s = time.monotonic() - t0
    if cl.dns:
        print(f"  dns   {cl.dns}: every name resolved through the lab's DNS server (c-ares)")
    for a, addr in cl.agents.items():
        print(f"  agent {a:<20} {addr}, fetching from {cl.agent_sources[a]}")
    try:
        crawl_t0 = time.monotonic()
        seeded, done = asyncio.run(_seed_and_wait(cl, args.timeout))
        crawl_s = time.monotonic() - crawl_t0
        from storage.client import GrpcStorageClient

        stats = asyncio.run(GrpcStorageClient.stats_of(cl.storage))
        from manager.report import write_report

        report_dir = Path(cl.run_dir) / "report"
        # The report places agents and sites through the consultant's Explain: none in kademlia mode.
        locality = None if kademlia else write_report(report_dir, Path(cl.run_dir) / "storage.toml", cl.consultant)
    finally:
        if not args.keep:
            down(cl.run_dir)
    total_s = time.monotonic() - t0
    print()
    print("=" * 72)
    how = "Kademlia mode (no consultant, hosts placed by XOR distance)" if kademlia else f"strategy {cl.strategy}"
    print(f"wancrawl demo: {how}, {len(cl.agents)} agents, "
          f"{'crawl finished' if done else 'TIMED OUT before the crawl finished'}")
    print(f"  seeds           {seeded['seeds']} ({seeded['accepted']} accepted, routed to their owners by the agents)")
    print(f"  pages stored    {stats.pages} in {crawl_s:.1f} s of crawling ({stats.pages / max(crawl_s, 1e-9):.0f} pages/s)")
    for c in stats.per_agent:
        print(f"    {c.key:<22} {c.pages} pages")
    print(f"  compression     {stats.raw_bytes / 1e6:.1f} MB of records stored in {stats.stored_bytes / 1e6:.1f} MB "
          f"(ratio {stats.compression_ratio:.2f})")
    if locality:
        share = locality.get("locality", {}).get("share", {})
        print(f"  locality        {share.get('same_isp', 0) * 100:.0f}% of fetches within the agent's own ISP, "
              f"{share.get('same_city', 0) * 100:.0f}% in its own city")
        print(f"  report          {report_dir}/*.png")
    elif kademlia:
        print("  not shown       locality and the report's plots (`manager report` asks the consultant where agents "
              "and sites are; this mode has none)")
    print(f"  WARC files      {Path(cl.run_dir) / 'storage' / 'warcs'}")
    print(f"  time            {total_s:.1f} s in all (start-up {up_s:.1f} s)")
    if args.keep:
        print(f"  still running:  lab down --run-dir {args.run_dir}")
    print("=" * 72)
    return 0 if done else 1
