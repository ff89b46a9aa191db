"""Load balancing, phase 1: crawl an unequal lab cluster to the end with the balancer off, then
on, and compare (docs/balance.md).

    python bench/balance.py                       # off, then on; prints the table
    python bench/balance.py --run-dir /tmp/bal    # keep the runs
    python bench/balance.py --json

The cluster is bench/chaos.py's: `lab up` with four agents (seed 002's scheme B plus a second
China Telecom agent), the asn strategy, lab seed 9 (1,831 truth URLs over 72 sites). One agent
(--slow, default telecom-beijing) fetches with --slow-concurrency (2) fetches in flight where the
others have --concurrency (32), and waits --slow-delay (0.5 s) between two fetches of a host where
the others wait --delay (0.05 s): a small machine with a cautious policy. Its hosts could go ten
times as fast elsewhere, so it is the crawl's bottleneck. (Concurrency 2 alone is not: at the
lab's time scale it still fetches ~37 pages/s, and the crawl's end is set by the largest site's
politeness, 278 pages x 0.05 s, on any agent; on 37cb3b2 it gave 19.2 s off, 19.0 s on.)
With the balancer on, the consultant ([balance] enabled) moves hosts off it through overrides,
nearest region first (its same-ISP neighbour telecom-guangzhou before the others).
`--equal` runs the equal cluster: every agent as the others (--slow-concurrency and --slow-delay
set to --concurrency and --delay); the target there is that balancing costs at most 5% (on/off
<= 1.05), the rule for turning it on by default (docs/balance.md).

`--mode kademlia` runs the same cluster with no consultant (lab up --mode kademlia): the agents
place hosts by XOR distance and, with balancing on (`[kademlia] balance = true`), a heavy agent
delegates hosts it owns to light neighbours, nearest k-bucket first (docs/kademlia.md, "Load
balancing in this mode"). "balance moves" is then the agents' overlay_delegations summed.

Columns, per mode (truth, lost and stored twice are chaos.py's `compare`, on storage's index and
the lab's request log):
  crawl s        seeding to the last page request in the lab's log (the crawl's makespan)
  pages/agent    page requests (robots.txt excluded) per agent, by its source address; the slow
                 agent first
  hosts moved    the agents' `hosts_handed_out` summed at the end (before `lab down`)
  balance moves  the consultant's balance_moves (hosts it pinned elsewhere)
Targets printed beside the figures: crawl time on at most 0.8x off, 0 lost, stored twice <= 1%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab import cluster  # noqa: E402
from lab.faults import measure, observe, scenarios  # noqa: E402

MODES = ("off", "on")
TARGET_RATIO = 0.8
TARGET_EQUAL = 1.05   # --equal: balancing may cost at most 5% where no agent is slower (issue 23's rule for on by default)
TARGET_TWICE = 0.01


@dataclass
class Result:
    mode: str
    crawl_s: float | None = None
    pages: dict[str, int] = field(default_factory=dict)
    hosts_moved: int = 0
    balance_moves: int = 0
    metrics: measure.Comparison | None = None
    finished: bool = False
    notes: list[str] = field(default_factory=list)


def balance_table(args: argparse.Namespace, on: bool) -> str:
    return (f"[balance]\nenabled = {'true' if on else 'false'}\ninterval = {args.interval}\nmax_moves = {args.max_moves}\n"
            f"min_gap_seconds = {args.min_gap}\ncooldown = {args.cooldown}\n")


async def _consultant_moves(cl: cluster.Cluster) -> int:
    """The balancer's overrides in the consultant's answer: hosts it pinned (ListAgents does not
    carry the consultant's counters; the state does)."""
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{cl.run_dir}/consultant.db")
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM consultant_overrides WHERE origin = 'balance'")).scalar_one())
    finally:
        engine.dispose()


def run_mode(mode: str, base: Path, args: argparse.Namespace) -> Result:
    run = observe.fresh_run_dir(base / mode)
    res = Result(mode)
    kad = args.mode == "kademlia"
    kademlia_keys = (f"balance = {'true' if mode == 'on' else 'false'}\nbalance_max_moves = {args.max_moves}\n"
                     f"balance_min_gap = {args.min_gap}\nbalance_cooldown = {args.cooldown}\n")
    cl = cluster.up(run, strategy=args.strategy, groups=args.groups, seed=args.seed, time_scale=args.time_scale,
                    delay=args.delay, concurrency=args.concurrency, lease=args.lease,
                    agent_keys={args.slow: {"concurrency": args.slow_concurrency, "delay": args.slow_delay}},
                    consultant_tables="" if kad else balance_table(args, mode == "on"),
                    agent_tables=f"[load]\nperiod = {args.period}\n", mode=args.mode,
                    kademlia_keys=kademlia_keys if kad else "")
    t_end = time.time()
    seeded_at = time.time()
    truth: set[str] = set()
    try:
        truth = observe.compute_truth(cl)
        seeded_at = time.time()
        asyncio.run(observe.inject_seeds(cl))
        res.finished = asyncio.run(observe.wait_crawl_idle(cl, args.timeout, args.stable))
        if not res.finished:
            res.notes.append(f"TIMEOUT: not idle {args.timeout:.0f}s after seeding")
        counters = observe.agent_counters(cl)
        res.hosts_moved = int(sum(c.get("hosts_handed_out", 0) for c in counters.values()))
        res.balance_moves = (int(sum(c.get("overlay_delegations", 0) for c in counters.values())) if kad
                             else asyncio.run(_consultant_moves(cl)))
    finally:
        t_end = time.time()
        cluster.down(run)
    entries = observe.LogTail(cl.web_log).poll()
    requests = [(e.t, e.client, u) for e in entries if e.t <= t_end and (u := observe.log_url(e, cl.web_port)) is not None]
    pages = [(t, c) for t, c, u in requests if urlsplit(u).path != "/robots.txt"]
    if pages:
        res.crawl_s = max(t for t, _ in pages) - seeded_at
    by_source = {src: g for g, src in cl.agent_sources.items()}
    for _, client in pages:
        g = by_source.get(client, client)
        res.pages[g] = res.pages.get(g, 0) + 1
    captures = [(u, t) for u, t, fetched in observe.read_captures(run) if fetched <= t_end]
    res.metrics = measure.compare(truth, captures, [u for _, _, u in requests])
    return res


def rows(results: list[Result], slow: str, groups: list[str]) -> list[list[str]]:
    order = [g for g in [slow, *groups] if g in groups]
    order = list(dict.fromkeys(order))
    out = []
    for r in results:
        m = r.metrics
        out.append([
            r.mode, "-" if r.crawl_s is None else f"{r.crawl_s:.1f}", " / ".join(str(r.pages.get(g, 0)) for g in order),
            str(r.hosts_moved), str(r.balance_moves), str(m.truth if m else "-"), str(m.stored if m else "-"),
            str(m.lost if m else "-"), f"{m.stored_twice} ({m.stored_twice / max(1, m.truth):.1%})" if m else "-",
            "yes" if r.finished else "NO",
        ])
    return out


HEADERS = ["balance", "crawl s", "pages/agent", "hosts moved", "balance moves", "truth", "stored", "lost", "stored twice", "finished"]


def verdict(results: list[Result], equal: bool = False) -> list[str]:
    by = {r.mode: r for r in results}
    lines = []
    off, on = by.get("off"), by.get("on")
    if off and on and off.crawl_s and on.crawl_s:
        ratio = on.crawl_s / off.crawl_s
        target, what = (TARGET_EQUAL, "equal agents: costs at most 5%") if equal else (TARGET_RATIO, "one slow agent")
        lines.append(f"crawl time on/off: {ratio:.3f} (target <= {target}, {what}) {'ok' if ratio <= target else 'MISSED'}")
    for r in results:
        if r.metrics is not None:
            twice = r.metrics.stored_twice / max(1, r.metrics.truth)
            ok = r.metrics.lost == 0 and twice <= TARGET_TWICE
            lines.append(f"{r.mode}: lost {r.metrics.lost} (target 0), stored twice {twice:.1%} (target <= {TARGET_TWICE:.0%}) "
                         f"{'ok' if ok else 'MISSED'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", help="keep the runs here (default: a temporary directory, removed)")
    p.add_argument("--modes", default="off,on", help="off, on or both (default)")
    p.add_argument("--mode", choices=("consultant", "kademlia"), default="consultant",
                   help="placement: the consultant's asn strategy with its balancer, or the agents' overlay (no consultant)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--seed", type=int, default=scenarios.DEFAULT_SEED)
    p.add_argument("--strategy", default="asn")
    p.add_argument("--groups", default=",".join(scenarios.DEFAULT_GROUPS))
    p.add_argument("--slow", default="telecom-beijing", help="the agent made slow")
    p.add_argument("--equal", action="store_true", help="no slow agent: every agent has --concurrency and --delay")
    p.add_argument("--slow-concurrency", type=int, default=2)
    p.add_argument("--slow-delay", type=float, default=0.5, help="the slow agent's per-host politeness delay (s)")
    p.add_argument("--concurrency", type=int, default=32, help="the other agents' fetches in flight")
    p.add_argument("--delay", type=float, default=0.05, help="the other agents' per-host politeness delay (s)")
    p.add_argument("--time-scale", type=float, default=60.0)
    p.add_argument("--lease", type=float, default=15.0)
    p.add_argument("--interval", type=float, default=2.0, help="balance.interval (s)")
    p.add_argument("--period", type=float, default=10.0,
                   help="the agents' load.period T (s): W is what an agent fetches in T (the default)")
    p.add_argument("--max-moves", type=int, default=8)
    p.add_argument("--min-gap", type=float, default=2.0, help="balance.min_gap_seconds")
    p.add_argument("--cooldown", type=float, default=60.0)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--stable", type=float, default=2.0)
    args = p.parse_args(argv)
    args.groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    if args.equal:
        args.slow_concurrency, args.slow_delay = args.concurrency, args.delay
    modes = [m.strip() for m in args.modes.split(",") if m.strip() in MODES]
    base = Path(args.run_dir).resolve() if args.run_dir else Path(tempfile.mkdtemp(prefix="wancrawl-balance-"))
    base.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for m in modes:
            print(f"balance: {m} ...", file=sys.stderr, flush=True)
            results.append(run_mode(m, base, args))
    finally:
        if not args.run_dir:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps({"params": {k: v for k, v in vars(args).items() if k != "json"},
                          "results": [asdict(r) | {"metrics": asdict(r.metrics) | {"lost_urls": r.metrics.lost_urls[:20]}
                                                   if r.metrics else None} for r in results],
                          "verdict": verdict(results, args.equal)}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    console.print(f"$ python bench/balance.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    console.print(f"mode {args.mode}, lab seed {args.seed}, strategy {args.strategy if args.mode == 'consultant' else 'xor (overlay)'}, agents {', '.join(args.groups)}; {args.slow}: concurrency "
                  f"{args.slow_concurrency}, politeness delay {args.slow_delay:g}s; the others {args.concurrency}, "
                  f"{args.delay:g}s; "
                  + (f"balance interval {args.interval:g}s, " if args.mode == "consultant" else "balance at each heartbeat (1 s), ")
                  + f"load.period {args.period:g}s, max {args.max_moves} moves/round, min gap {args.min_gap:g}s, "
                  f"cooldown {args.cooldown:g}s")
    t = Table()
    for h in HEADERS:
        t.add_column(h, justify="left" if h in ("balance", "pages/agent") else "right")
    for row in rows(results, args.slow, args.groups):
        t.add_row(*row)
    console.print(t)
    order = list(dict.fromkeys([args.slow, *args.groups]))
    console.print("pages/agent: " + " / ".join(order))
    for line in verdict(results, args.equal):
        console.print(line)
    for r in results:
        for n in r.notes:
            console.print(f"{r.mode}: {n}")
    return 0 if all(r.finished for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
