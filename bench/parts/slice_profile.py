"""Run a module's main under cProfile, one profile per slice: each SIGRTMIN+3 writes the stats since the
last one to DIR/slice-N.prof and starts afresh (bench/scale.py --profile-slices sends it at every
slice's end). Compare two slices with `python bench/parts/slice_profile.py --compare A.prof B.prof
--pages-a N --pages-b M`: each function's own CPU per page in both, largest differences first.

    python bench/parts/slice_profile.py DIR agent.cli run --config agent.toml
"""

from __future__ import annotations

import cProfile
import pstats
import runpy
import signal
import sys
from pathlib import Path


def run(out: Path, module: str, argv: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    prof = cProfile.Profile()
    n = [0]

    def dump(*_: object) -> None:
        prof.disable()
        n[0] += 1
        prof.dump_stats(str(out / f"slice-{n[0]}.prof"))
        prof.clear()
        prof.enable()

    signal.signal(signal.SIGRTMIN + 3, dump)
    sys.argv = [module] + argv
    prof.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        prof.disable()
        prof.dump_stats(str(out / "rest.prof"))


def compare(a: str, b: str, pages_a: float, pages_b: float, top: int = 30) -> None:
    sa, sb = pstats.Stats(a).stats, pstats.Stats(b).stats  # type: ignore[attr-defined]
    ta = sum(v[2] for v in sa.values()) / pages_a * 1e6
    tb = sum(v[2] for v in sb.values()) / pages_b * 1e6
    print(f"profiled CPU per page: {ta:.0f} us ({a}) vs {tb:.0f} us ({b}), difference {ta - tb:+.0f} us")
    rows = []
    for key in set(sa) | set(sb):
        ua = sa[key][2] / pages_a * 1e6 if key in sa else 0.0
        ub = sb[key][2] / pages_b * 1e6 if key in sb else 0.0
        ca = sa[key][1] / pages_a if key in sa else 0.0
        cb = sb[key][1] / pages_b if key in sb else 0.0
        rows.append((ua - ub, ua, ub, ca, cb, key))
    rows.sort(key=lambda r: -abs(r[0]))
    print(f"{'diff us/page':>12} {'A us/page':>9} {'B us/page':>9} {'A calls/page':>12} {'B calls/page':>12}  function (own time)")
    for d, ua, ub, ca, cb, (file, line, fn) in rows[:top]:
        where = "/".join(Path(file).parts[-2:]) if file != "~" else ""
        print(f"{d:>12.1f} {ua:>9.1f} {ub:>9.1f} {ca:>12.2f} {cb:>12.2f}  {where}:{line} {fn}")


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        import argparse

        ap = argparse.ArgumentParser()
        ap.add_argument("--compare", nargs=2)
        ap.add_argument("--pages-a", type=float, required=True)
        ap.add_argument("--pages-b", type=float, required=True)
        ap.add_argument("--top", type=int, default=30)
        x = ap.parse_args()
        compare(x.compare[0], x.compare[1], x.pages_a, x.pages_b, x.top)
    else:
        run(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
