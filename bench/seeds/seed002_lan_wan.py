"""Seed 002's Table 2 on the lab: three agents on one LAN (one access line) vs spread over a WAN.

Every ISP/city block has one access line of 10 Mbit/s (model), shared by the agents in it
(`access_scope = "block"`), as the paper's network access points were. LAN schemes put three
agents in one block with a random (hash) partition; the WAN scheme is Table 1's best (three
agents in Beijing on three ISPs, ISP partition), with three lines. Like the paper, it also
prints each LAN scheme times three, "the ideal with 30 Mbit/s".

The paper (pages in 30 / 60 min): A Unicom Beijing LAN 5,190 / 16,446; B Telecom Beijing LAN
5,704 / 22,015; C CERNET Harbin LAN 10,349 / 23,071; D WAN 19,686 / 35,152.

    python bench/seeds/seed002_lan_wan.py [--seconds 20] [--time-scale 2] [--delay 0.05] [--schemes A,B,C,D]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_experiment import run_scheme  # noqa: E402

SCHEMES = {
    "A": ("hash", ["unicom-beijing#0", "unicom-beijing#1", "unicom-beijing#2"], "Unicom Beijing, LAN"),
    "B": ("hash", ["telecom-beijing#0", "telecom-beijing#1", "telecom-beijing#2"], "Telecom Beijing, LAN"),
    "C": ("hash", ["cernet-harbin#0", "cernet-harbin#1", "cernet-harbin#2"], "CERNET Harbin, LAN"),
    "D": ("asn", ["unicom-beijing", "cernet-beijing", "telecom-beijing"], "WAN (Table 1's C)"),
}
PAPER = {"A": (5190, 16446), "B": (5704, 22015), "C": (10349, 23071), "D": (19686, 35152)}
TOPOLOGY = '[sites]\nhostile = false\n[web]\npages_min = 60\n[link]\naccess_kbps = 10000.0\naccess_scope = "block"\n'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="wall seconds per scheme")
    ap.add_argument("--time-scale", type=float, default=2.0, help="model seconds per wall second (bandwidths scale with it)")
    ap.add_argument("--delay", type=float, default=0.05, help="agents' politeness delay per host (s)")
    ap.add_argument("--schemes", default="A,B,C,D")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="wancrawl-seed002-lanwan-") as tmp:
        topo = Path(tmp) / "topology.toml"
        topo.write_text(TOPOLOGY)
        for name in args.schemes.split(","):
            strategy, groups, label = SCHEMES[name]
            print(f"scheme {name} ({label}): strategy {strategy}, agents {', '.join(groups)} ...", flush=True)
            r = run_scheme(Path(tmp) / name, topo, strategy, groups, seconds=args.seconds, time_scale=args.time_scale, delay=args.delay)
            rows.append((name, label, r))
    print(f"\nSeed 002 Table 2 on the lab: {args.seconds:.0f} s wall per scheme at time scale {args.time_scale:g}, "
          f"one 10 Mbit/s line per block")
    print(f"{'scheme':<28} {'pages T/2':>10} {'pages T':>9} {'x3 (ideal)':>11}   paper (30 / 60 min)")
    for name, label, r in rows:
        p30, p60 = PAPER[name]
        x3 = f"{3 * r.full:>11}" if name != "D" else f"{'':>11}"
        print(f"{name} {label:<26} {r.half:>10} {r.full:>9} {x3}   {p30:>6} / {p60:<6}")
    by = {n: r.full for n, _, r in rows}
    if "D" in by:
        for n in ("A", "B", "C"):
            if by.get(n):
                print(f"WAN / LAN {n}: {by['D'] / by[n]:.2f} (paper at 60 min: {PAPER['D'][1] / PAPER[n][1]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
