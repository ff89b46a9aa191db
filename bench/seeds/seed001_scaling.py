"""Seed 001's linear scaling (its Fig 7; seed 000's Fig 4: nodes join two at a time): steady
crawl throughput of lab clusters of 2, 4, 6 and 8 agents, consultant mode and Kademlia mode
side by side, with a least-squares line, R-squared and the slope per agent.

    python bench/seeds/seed001_scaling.py                      # both modes, sizes 2,4,6,8, one agent as baseline
    python bench/seeds/seed001_scaling.py --mode kademlia --sizes 2,4 --window 10

What makes it a measure of the cluster and not of this machine: the link model is on and every
agent has its own access line (`access_scope = "address"`, --access-kbps, default 1600 kbit/s,
time scale 1), so an agent fetches at most what its line carries; the ISP interconnects are
unlimited (they would be a bottleneck shared by the cluster, and the figure would flatten for
the network's reason, not the crawler's). Every site's home page is seeded and every site has
--pages-min pages or more with no robots crawl-delay, so every agent has a backlog for the whole
window: an agent owning fewer hosts is not starved, and the imbalance of placement does not
matter. The machine's CPU over the window is printed beside each row: it must stay well under
its cores, else the figure measures the machine.

Each size is a fresh cluster (`lab up` with that many agents, one per ISP/city block), seeded,
given --warmup seconds to fill its frontiers, then measured over --window seconds from the
agents' own `pages` counters (Status). A cluster of N agents is what a smaller one becomes once
N - 2 more agents have joined and taken their hosts; a fresh one has no handover in the window.
The 1-agent baseline is measured too (--single-from-2 derives it from the 2-agent run / 2).

Targets (issue 22): R-squared >= 0.98 and 8 agents >= 95% of 8 x one agent, in both modes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lab import cluster, topology  # noqa: E402

TARGET_R2 = 0.98
TARGET_EFFICIENCY = 0.95
MODES = ("consultant", "kademlia")


@dataclass
class Row:
    mode: str
    agents: int
    pages: int             # fetched by all agents in the window
    seconds: float         # the window, measured
    min_backlog: int       # the smallest agent frontier at the window's end (> 0: nobody starved)
    cpu: float             # the machine's busy share of all its cores over the window

    @property
    def rate(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Fit:
    slope: float
    intercept: float
    r2: float


def least_squares(xs: list[float], ys: list[float]) -> Fit:
    """y = slope * x + intercept by ordinary least squares, and R-squared (1 - SS_res / SS_tot)."""
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError("a line needs two different x")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys))
    return Fit(slope, intercept, 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0)


def efficiency(rows: list[Row], single: float | None) -> tuple[float, int] | None:
    """Throughput of the largest cluster / (its size x one agent's), and that size."""
    if not rows or not single:
        return None
    big = max(rows, key=lambda r: r.agents)
    return big.rate / (big.agents * single), big.agents


def topology_text(args: argparse.Namespace) -> str:
    return (f"[sites]\nhostile = false\n[web]\npages_min = {args.pages_min}\npages_max = {args.pages_max}\n"
            f"crawl_delay_ratio = 0.0\n[link]\naccess_kbps = {args.access_kbps}\naccess_scope = \"address\"\n"
            f"interconnect_kbps = 0.0\n")


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


async def _counters(cl: cluster.Cluster) -> dict[str, dict[str, float]]:
    from agent.client import AgentPool
    from wancrawl.errors import WancrawlError

    async with AgentPool(timeout=5) as pool:
        async def one(address: str) -> dict[str, float]:
            try:
                return dict((await pool.get(address).status(timeout=5)).counters)
            except WancrawlError:
                return {}

        got = await asyncio.gather(*(one(a) for a in cl.agents.values()))
    return dict(zip(cl.agents, got))


async def _seed(cl: cluster.Cluster, urls: list[str]) -> int:
    if cl.mode == "kademlia":
        from lab import peers

        return sum((await peers.inject(list(cl.agents.values())[:1], urls)).taken.values())
    from consultant.client import ConsultantClient
    from manager.seed import inject_all

    async with ConsultantClient(cl.consultant) as c:
        return sum((await inject_all(c, urls)).taken.values())


def run_one(mode: str, n: int, base: Path, topo_file: Path, args: argparse.Namespace) -> Row:
    topo = topology.load(str(topo_file))
    groups = [b.name for b in topo.blocks][:n]
    run = base / f"{mode}-{n}"
    t_up = time.monotonic()
    cl = cluster.up(run, mode=mode, strategy="hash", groups=groups, topology_path=str(topo_file), time_scale=1.0,
                    delay=args.delay, concurrency=args.concurrency, seed=args.seed)
    print(f"  up in {time.monotonic() - t_up:.1f}s", file=sys.stderr, flush=True)
    try:
        urls = [f"http://{s.host}:{cl.web_port}/" for s in topo.normal_sites]
        if asyncio.run(_seed(cl, urls)) != len(urls):
            raise RuntimeError(f"{mode}, {n} agents: not every seed was taken")
        time.sleep(args.warmup)  # the frontiers fill: a fixed stretch of time, not an event
        before, (b0, t0), w0 = asyncio.run(_counters(cl)), cpu_times(), time.monotonic()
        time.sleep(args.window)
        after, (b1, t1), w1 = asyncio.run(_counters(cl)), cpu_times(), time.monotonic()
    finally:
        t_down = time.monotonic()
        # The counters are read: a graceful stop would wait for the fetches in flight on the slow
        # access lines (~15 s). A crash of the agents first, then `down` for the rest.
        try:
            cluster.kill_all(run, [f"agent-{g}" for g in groups])
        finally:
            cluster.down(run)
        print(f"  down in {time.monotonic() - t_down:.1f}s", file=sys.stderr, flush=True)
    pages = int(sum(after[g].get("pages", 0) - before[g].get("pages", 0) for g in groups))
    backlog = int(min(after[g].get("frontier", 0) for g in groups))
    return Row(mode, n, pages, w1 - w0, backlog, (b1 - b0) / max(t1 - t0, 1.0))


def table(rows: list[Row], singles: dict[str, tuple[float, str]], args: argparse.Namespace) -> list[str]:
    out = [f"{'mode':<11} {'agents':>6} {'pages/s':>9} {'per agent':>10} {'min backlog':>12} {'CPU':>6}"]
    for r in rows:
        out.append(f"{r.mode:<11} {r.agents:>6} {r.rate:>9.1f} {r.rate / r.agents:>10.1f} {r.min_backlog:>12} {r.cpu:>6.0%}")
    out.append("")
    for mode in dict.fromkeys(r.mode for r in rows):
        pts = [r for r in rows if r.mode == mode and r.agents > 1]
        single, how = singles.get(mode, (0.0, ""))
        line = f"{mode:<11} "
        if len({r.agents for r in pts}) >= 2:
            fit = least_squares([float(r.agents) for r in pts], [r.rate for r in pts])
            line += (f"slope {fit.slope:.2f} pages/s per agent, intercept {fit.intercept:.1f}, "
                     f"R^2 {fit.r2:.4f} (target >= {TARGET_R2}) {'ok' if fit.r2 >= TARGET_R2 else 'MISSED'}; ")
        eff = efficiency(pts, single)
        if eff is not None:
            e, size = eff
            line += (f"{size} agents / ({size} x 1 agent, {single:.1f} pages/s {how}) = {e:.1%} "
                     f"(target >= {TARGET_EFFICIENCY:.0%}) {'ok' if e >= TARGET_EFFICIENCY else 'MISSED'}")
        out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", default="both", choices=("both", *MODES))
    p.add_argument("--sizes", default="2,4,6,8", help="cluster sizes (agents), at most the topology's 9 blocks")
    p.add_argument("--single-from-2", action="store_true", help="derive one agent's rate as the 2-agent run's / 2 "
                   "instead of measuring a 1-agent cluster")
    p.add_argument("--access-kbps", type=float, default=1600.0, help="each agent's own access line (kbit/s)")
    p.add_argument("--warmup", type=float, default=6.0, help="seconds between seeding and the window")
    p.add_argument("--window", type=float, default=15.0, help="seconds measured")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--delay", type=float, default=0.05, help="politeness delay per host (s)")
    p.add_argument("--pages-min", type=int, default=400, help="every site has at least this many pages")
    p.add_argument("--pages-max", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", help="keep the runs here (default: a temporary directory, removed)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    sizes = sorted({int(x) for x in args.sizes.split(",") if x.strip()})
    modes = list(MODES) if args.mode == "both" else [args.mode]
    base = Path(args.run_dir).resolve() if args.run_dir else Path(tempfile.mkdtemp(prefix="wancrawl-scaling-"))
    base.mkdir(parents=True, exist_ok=True)
    topo_file = base / "topology.toml"
    topo_file.write_text(topology_text(args))
    rows: list[Row] = []
    singles: dict[str, tuple[float, str]] = {}
    try:
        for mode in modes:
            todo = sizes if args.single_from_2 or 1 in sizes else [1, *sizes]
            for n in todo:
                print(f"seed001 scaling: {mode}, {n} agent(s) ...", file=sys.stderr, flush=True)
                r = run_one(mode, n, base, topo_file, args)
                print(f"  {r.rate:.1f} pages/s, CPU {r.cpu:.0%}, min backlog {r.min_backlog}", file=sys.stderr, flush=True)
                if n == 1:
                    singles[mode] = (r.rate, "measured")
                rows.append(r)
            if args.single_from_2:
                two = next((r for r in rows if r.mode == mode and r.agents == 2), None)
                if two is not None:
                    singles[mode] = (two.rate / 2, "from 2 agents / 2")
    finally:
        if not args.run_dir:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps({"params": vars(args), "rows": [asdict(r) | {"rate": r.rate} for r in rows],
                          "single": singles}, indent=2))
        return 0
    print(f"$ python bench/seeds/seed001_scaling.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"link model on: {args.access_kbps:g} kbit/s access line per agent, interconnects unlimited, time scale 1; "
          f"sites of {args.pages_min}-{args.pages_max} pages, every home page seeded; warmup {args.warmup:g}s, "
          f"window {args.window:g}s; concurrency {args.concurrency}, politeness delay {args.delay:g}s")
    for line in table(rows, singles, args):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
