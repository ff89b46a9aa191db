"""Seed 000 (Huang et al.) §2.2 re-run in the lab: 8 agents of three speeds, load balancing off and on.

    python bench/seeds/seed000_balance.py                     # off, then on (~6 minutes); the table and the gain
    python bench/seeds/seed000_balance.py --plots DIR         # also u(t) and throughput(t) plots, like its Fig 6 and 7
    python bench/seeds/seed000_balance.py --json

The paper's experiment: 8 nodes in three classes of crawl rate v (0.2, 0.1, 0.05), URL arrival
rates lambda per node as its Table 2 gives them (heavy nodes receive more than they can crawl,
light ones less), heavy blocks of H = 20 URLs, each node's work area W from its rate; the
system's output over time with and without its balancing (Fig 7: up to +33.3%), and each node's
load rate u = queued URLs / W over time (Fig 6).

Here: 8 lab agents, one per ISP/city block, each on an access line of its own (the link model's
[link.access]) of v x --kbps-per-v kbit/s, so the agents and not this machine set the pace; the
lab's sites are laid out so that each agent's block holds sites in proportion to the paper's
lambda (the asn strategy with the geo fallback places a block's sites on its own agent: the
URLs a node receives). Time scale 1, every site's root a seed. Off: the consultant never moves
a host. On: [balance] enabled (consultant/balance.py, docs/balance.md), H = load.block = 20, W =
the agent's rate x load.period (seed 000 §1.4.2 sizes W from v the same way; its Table 2 rounds
W to multiples of H by hand).

Printed: per agent v, lambda, pages crawled off/on and its last request; the crawl time off/on;
output (pages/s over the shorter run's crawl time: while both runs still have work) and the gain
beside the paper's +33.3%; hosts and HandOver bytes moved; lost and stored twice
(bench/chaos.py's counting); the mean load rate u of heavy and light agents over time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lab import cluster, topology
from lab.faults import measure, observe

# seed 000 Table 2: node -> (v, lambda); nodes placed on 8 of the lab's 9 blocks
TABLE2 = [
    ("telecom-beijing", 0.2, 0.083), ("unicom-beijing", 0.2, 0.08), ("cernet-beijing", 0.05, 0.16),
    ("telecom-harbin", 0.1, 0.34), ("unicom-harbin", 0.2, 0.09), ("cernet-harbin", 0.1, 0.083),
    ("telecom-guangzhou", 0.1, 0.22), ("unicom-guangzhou", 0.05, 0.136),
]
PAPER_GAIN = 0.333


@dataclass
class Run:
    mode: str
    crawl_s: float = 0.0
    pages: dict[str, int] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    buckets: list[int] = field(default_factory=list)          # pages per --bucket seconds from seeding
    u: dict[str, list[tuple[float, float]]] = field(default_factory=dict)   # agent -> (t, queued / W)
    hosts_moved: int = 0
    bytes_moved: int = 0
    truth: int = 0
    lost: int = 0
    stored_twice: int = 0
    finished: bool = False


def topology_text(args: argparse.Namespace, sources: dict[str, str]) -> str:
    blocks = "".join(f'"{g}" = {max(0, round(lam * args.sites_per_lambda))}\n' for g, _, lam in TABLE2)
    blocks += '"cernet-guangzhou" = 0\n'
    access = "".join(f'"{sources[g]}" = {v * args.kbps_per_v:g}\n' for g, v, _ in TABLE2)
    return (f"[sites]\nhostile = false\n[sites.blocks]\n{blocks}[web]\npages_min = {args.pages_min}\n"
            f"pages_max = {args.pages_max}\ncrawl_delay_ratio = 0.0\n[link]\naccess_kbps = 0.0\n"
            f"access_scope = \"address\"\ninterconnect_kbps = 0.0\n[link.access]\n{access}")


def sample_loads(cl: cluster.Cluster, stop: threading.Event, out: dict[str, list[tuple[float, float]]], t0: float,
                 every: float) -> None:
    """u = queued / W per agent, every `every` seconds, until `stop` (a thread beside the wait)."""
    while not stop.wait(every):
        try:
            counters = observe.agent_counters(cl)
        except Exception as exc:  # noqa: BLE001 - a missed sample is a gap in the plot, not a failure
            print(f"load sample missed: {exc}", file=sys.stderr)
            continue
        now = time.time() - t0
        for g, c in counters.items():
            w = c.get("work_area", 0.0)
            if w > 0:
                out.setdefault(g, []).append((now, c.get("frontier", 0.0) / w))


def run_mode(mode: str, base: Path, topo_file: Path, args: argparse.Namespace) -> Run:
    res = Run(mode)
    run = observe.fresh_run_dir(base / mode)
    groups = [g for g, _, _ in TABLE2]
    tables = (f"[balance]\nenabled = {'true' if mode == 'on' else 'false'}\ninterval = {args.interval}\n"
              f"max_moves = {args.max_moves}\nmin_gap_seconds = {args.min_gap}\ncooldown = {args.cooldown}\n")
    cl = cluster.up(run, strategy="asn", groups=groups, topology_path=str(topo_file), time_scale=1.0, delay=args.delay,
                    concurrency=args.concurrency, seed=args.seed, consultant_tables=tables,
                    agent_tables=f"[load]\nperiod = {args.period}\nblock = 20\n")
    stop = threading.Event()
    seeded = t_end = time.time()
    truth: set[str] = set()
    try:
        topo = topology.load(str(topo_file))
        Path(cl.seeds_file).write_text("".join(f"http://{s.host}:{cl.web_port}/\n" for s in topo.normal_sites))
        truth = observe.compute_truth(cl)
        seeded = time.time()
        sampler = threading.Thread(target=sample_loads, args=(cl, stop, res.u, seeded, args.sample), daemon=True)
        sampler.start()
        asyncio.run(observe.inject_seeds(cl))
        res.finished = asyncio.run(observe.wait_crawl_idle(cl, args.timeout, 2.0))
        stop.set()
        sampler.join(timeout=30)
        counters = observe.agent_counters(cl)
        res.hosts_moved = int(sum(c.get("hosts_handed_out", 0) for c in counters.values()))
        res.bytes_moved = int(sum(c.get("handover_bytes_out", 0) for c in counters.values()))
    finally:
        stop.set()
        t_end = time.time()
        cluster.down(run)
    entries = observe.LogTail(cl.web_log).poll()
    requests = [(e.t, e.client, u) for e in entries if e.t <= t_end and (u := observe.log_url(e, cl.web_port)) is not None]
    by_source = {src: g for g, src in cl.agent_sources.items()}
    pages = [(t - seeded, by_source.get(c, c)) for t, c, u in requests if urlsplit(u).path != "/robots.txt"]
    for t, g in pages:
        res.pages[g] = res.pages.get(g, 0) + 1
        res.last[g] = max(res.last.get(g, 0.0), t)
        k = int(t // args.bucket)
        res.buckets.extend([0] * (k + 1 - len(res.buckets)))
        res.buckets[k] += 1
    res.crawl_s = max((t for t, _ in pages), default=0.0)
    captures = [(u, t) for u, t, fetched in observe.read_captures(run) if fetched <= t_end]
    cmp = measure.compare(truth, captures, [u for _, _, u in requests])
    res.truth, res.lost, res.stored_twice = cmp.truth, cmp.lost, cmp.stored_twice
    return res


def output_in(run: Run, window: float, bucket: float) -> float:
    """Pages per second over [0, window) from the run's buckets."""
    whole = int(window // bucket)
    pages = sum(run.buckets[:whole]) + (run.buckets[whole] * (window - whole * bucket) / bucket if whole < len(run.buckets) else 0)
    return pages / window if window > 0 else 0.0


def peak_gain(off: Run, on: Run, window: float, bucket: float) -> tuple[float, float]:
    """The largest gain in output so far, cum_on(t) / cum_off(t) - 1, over the bucket ends t <=
    `window` (the paper's "up to": its Fig 7 compares output over time), and its t; buckets
    before a tenth of the off run's pages are left out (a small denominator is noise)."""
    best, at = 0.0, 0.0
    total = sum(off.buckets)
    c_off = c_on = 0
    for k in range(int(window // bucket)):
        c_off += off.buckets[k] if k < len(off.buckets) else 0
        c_on += on.buckets[k] if k < len(on.buckets) else 0
        if c_off >= total / 10 and c_on / c_off - 1 > best:
            best, at = c_on / c_off - 1, (k + 1) * bucket
    return best, at


def mean_u(run: Run, heavy: bool) -> list[tuple[float, float]]:
    names = [g for g, v, lam in TABLE2 if (lam > v) == heavy]
    by_t: dict[float, list[float]] = {}
    for g in names:
        for t, u in run.u.get(g, []):
            by_t.setdefault(round(t / 5) * 5, []).append(u)
    return sorted((t, sum(us) / len(us)) for t, us in by_t.items())


Line = tuple[str, list[float], list[float], str]  # label, x (s since seeding), y, line style


def save_plot(path: Path, panels: list[tuple[str, list[Line]]], ylabel: str, size: tuple[float, float]) -> None:
    """One figure of side-by-side panels (title, lines) sharing the y axis, saved as `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=size, sharey=True, squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels):
        for label, xs, ys, style in lines:
            ax.plot(xs, ys, label=label, linestyle=style)
        ax.set_title(title)
        ax.set_xlabel("s since seeding")
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plots(runs: dict[str, Run], out: Path, bucket: float) -> None:
    """seed 000's Fig 6 (each agent's load rate u over time, off and on) and Fig 7 (output over time)."""
    out.mkdir(parents=True, exist_ok=True)
    save_plot(out / "seed000_load_rate.png", [
        (f"load rate u = queued / W, balancing {mode}",
         [(f"{g} v={v} λ={lam}", [t for t, _ in r.u.get(g, [])], [u for _, u in r.u.get(g, [])], "-" if lam > v else "--")
          for g, v, lam in TABLE2])
        for mode, r in runs.items()], "u", (11, 4))
    save_plot(out / "seed000_output.png", [
        ("system output (seed 000 Fig 7)",
         [(f"balancing {mode}", [i * bucket for i in range(len(r.buckets))], [b / bucket for b in r.buckets], "-")
          for mode, r in runs.items()])], "pages/s", (7, 4))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kbps-per-v", type=float, default=12000.0, help="access line kbit/s per unit of the paper's v")
    p.add_argument("--sites-per-lambda", type=float, default=60.0, help="sites in a block per unit of the paper's lambda")
    p.add_argument("--pages-min", type=int, default=10)
    p.add_argument("--pages-max", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--interval", type=float, default=2.0, help="balance.interval (s)")
    p.add_argument("--period", type=float, default=10.0, help="load.period T (s): W = v x T")
    p.add_argument("--max-moves", type=int, default=8)
    p.add_argument("--min-gap", type=float, default=2.0)
    p.add_argument("--cooldown", type=float, default=60.0)
    p.add_argument("--timeout", type=float, default=400.0)
    p.add_argument("--bucket", type=float, default=5.0, help="seconds per throughput sample")
    p.add_argument("--sample", type=float, default=2.0, help="seconds between load-rate samples")
    p.add_argument("--plots", help="write the two plots here")
    p.add_argument("--run-dir", help="keep the runs here")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    base = Path(args.run_dir).resolve() if args.run_dir else Path(tempfile.mkdtemp(prefix="seed000-"))
    base.mkdir(parents=True, exist_ok=True)
    plan = topology.load(None)
    sources = {g: cluster.agent_group(plan, g)[1] for g, _, _ in TABLE2}
    topo_file = base / "topology.toml"
    topo_file.write_text(topology_text(args, sources))
    runs: dict[str, Run] = {}
    try:
        for mode in ("off", "on"):
            print(f"seed000: balancing {mode} ...", file=sys.stderr, flush=True)
            runs[mode] = run_mode(mode, base, topo_file, args)
    finally:
        if not args.run_dir:
            shutil.rmtree(base, ignore_errors=True)
    off, on = runs["off"], runs["on"]
    window = min(off.crawl_s, on.crawl_s)  # while both still have work: after it one run has none
    out_off, out_on = output_in(off, window, args.bucket), output_in(on, window, args.bucket)
    gain = out_on / out_off - 1 if out_off else 0.0
    peak, peak_at = peak_gain(off, on, window, args.bucket)
    if args.plots:
        plots(runs, Path(args.plots), args.bucket)
    if args.json:
        print(json.dumps({"params": vars(args), "runs": {m: asdict(r) for m, r in runs.items()},
                          "output_off": out_off, "output_on": out_on, "gain": gain,
                          "peak_gain": peak, "peak_gain_at": peak_at}, indent=1))
        return 0
    print(f"$ python bench/seeds/seed000_balance.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"8 agents, access line v x {args.kbps_per_v:g} kbit/s, sites per block lambda x {args.sites_per_lambda:g}, "
          f"{args.pages_min}-{args.pages_max} pages a site, time scale 1; H = 20, W = rate x {args.period:g} s")
    print(f"{'agent':18} {'v':>5} {'lambda':>6} {'kind':>5} {'pages off':>9} {'last off s':>10} {'pages on':>9} {'last on s':>9}")
    for g, v, lam in TABLE2:
        print(f"{g:18} {v:5g} {lam:6g} {'heavy' if lam > v else 'light':>5} {off.pages.get(g, 0):9d} {off.last.get(g, 0):10.1f} "
              f"{on.pages.get(g, 0):9d} {on.last.get(g, 0):9.1f}")
    for r in (off, on):
        print(f"balancing {r.mode:3}: crawl {r.crawl_s:6.1f}s, truth {r.truth}, lost {r.lost}, stored twice {r.stored_twice}, "
              f"hosts moved {r.hosts_moved}, HandOver bytes {r.bytes_moved:,}{'' if r.finished else ', TIMEOUT (not idle)'}")
    for r in (off, on):
        heavy, light = mean_u(r, True), mean_u(r, False)
        print(f"mean u, balancing {r.mode}: heavy " + " ".join(f"{u:.1f}" for _, u in heavy[:12])
              + " | light " + " ".join(f"{u:.1f}" for _, u in light[:12]) + " (every 5 s)")
    print(f"output over the first {window:.1f} s (the shorter crawl): off {out_off:.1f} pages/s, on {out_on:.1f} pages/s")
    print(f"gain over that window: {gain:+.1%}; largest gain in output so far: {peak:+.1%} at {peak_at:.0f} s "
          f"(the paper: up to +{PAPER_GAIN:.1%}; target >= +{PAPER_GAIN:.1%})")
    print(f"crawl time on / off: {on.crawl_s / off.crawl_s if off.crawl_s else 0:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
