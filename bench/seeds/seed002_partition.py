"""Seed 002's Table 1 on the lab: geo partition vs ISP partition, agents in three cities / one city.

Each scheme runs the whole stack as processes (`lab up`) on the lab's web with its link model
on (RTT from distance, a penalty and a narrow shared interconnect between ISPs), seeds the
same sites, and counts the pages fetched after T/2 and T seconds, as the paper counts pages
after 30 and 60 minutes:

  A  geo distribute, geo partition: Beijing, Harbin, Guangzhou on ISPs picked at random
     (here telecom-beijing, unicom-harbin, cernet-guangzhou; the paper did not say which)
  B  geo distribute, ISP partition: unicom-beijing, cernet-harbin, telecom-guangzhou
  C  Beijing only, ISP partition:   unicom-beijing, cernet-beijing, telecom-beijing

The paper measured (pages in 30 / 60 min): A 15,316 / 20,108; B 14,825 / 35,439; C 19,686 /
35,152: ISP partition beats geo partition because crossing ISPs is the bottleneck.

    python bench/seeds/seed002_partition.py [--seconds 20] [--time-scale 2] [--delay 0.05] [--schemes A,B,C]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_experiment import run_scheme  # noqa: E402

SCHEMES = {
    "A": ("geo", ["telecom-beijing", "unicom-harbin", "cernet-guangzhou"], "geo distribute, geo partition"),
    "B": ("asn", ["unicom-beijing", "cernet-harbin", "telecom-guangzhou"], "geo distribute, ISP partition"),
    "C": ("asn", ["unicom-beijing", "cernet-beijing", "telecom-beijing"], "Beijing, ISP partition"),
}
PAPER = {"A": (15316, 20108), "B": (14825, 35439), "C": (19686, 35152)}
# A web big enough not to run out within the run; no hostile sites (they only add timeouts).
TOPOLOGY = "[sites]\nhostile = false\n[web]\npages_min = 60\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="wall seconds per scheme")
    ap.add_argument("--time-scale", type=float, default=2.0, help="model seconds per wall second (bandwidths scale with it)")
    ap.add_argument("--schemes", default="A,B,C")
    ap.add_argument("--delay", type=float, default=0.05, help="agents' politeness delay per host (s): low, so the network is the limit")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="wancrawl-seed002-") as tmp:
        topo = Path(tmp) / "topology.toml"
        topo.write_text(TOPOLOGY)
        for name in args.schemes.split(","):
            strategy, groups, label = SCHEMES[name]
            run = Path(tmp) / name
            print(f"scheme {name} ({label}): strategy {strategy}, agents {', '.join(groups)} ...", flush=True)
            r = run_scheme(run, topo, strategy, groups, seconds=args.seconds, time_scale=args.time_scale, delay=args.delay)
            half, full, per_agent = r.half, r.full, r.per_agent
            rows.append((name, label, half, full, per_agent))
    model_min = args.seconds * args.time_scale / 60
    print(f"\nSeed 002 Table 1 on the lab: {args.seconds:.0f} s wall per scheme at time scale {args.time_scale:g} "
          f"(= {model_min:.1f} model minutes), politeness {args.delay:g} s per host")
    print(f"{'scheme':<34} {'pages T/2':>10} {'pages T':>9} {'pages/s':>8}   paper (30 / 60 min)   per agent")
    for name, label, half, full, per_agent in rows:
        p30, p60 = PAPER[name]
        print(f"{name} {label:<32} {half:>10} {full:>9} {full / args.seconds:>8.1f}   {p30:>6} / {p60:<6}       "
              + ", ".join(f"{k}={v}" for k, v in sorted(per_agent.items())))
    by = {r[0]: r[3] for r in rows}
    if "A" in by and "B" in by and by["A"]:
        print(f"\nISP partition vs geo partition (B / A): {by['B'] / by['A']:.2f} (paper at 60 min: {PAPER['B'][1] / PAPER['A'][1]:.2f})")
    if "A" in by and "C" in by and by["A"]:
        print(f"Beijing ISP partition vs geo partition (C / A): {by['C'] / by['A']:.2f} (paper: {PAPER['C'][1] / PAPER['A'][1]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
