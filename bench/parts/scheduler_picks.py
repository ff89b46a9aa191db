"""Host scheduler cost per pick: 100,000 hosts with work over 5,000 IPs, all ready, picked one by
one with pop_ready() until none is left, beside the target (100,000 picks in under 5 s, i.e.
50 us per pick; a scan of the waiting hosts per pick would be ~10^10 steps).

This figure used to be a wall-clock assertion in tests/test_agent_politeness.py, which now
checks the same run by counting the scheduler's questions to Politeness instead.

    python bench/parts/scheduler_picks.py [--hosts 100000] [--ips 5000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.crawl.politeness import Politeness, Scheduler  # noqa: E402

TARGET_US_PER_PICK = 50.0  # 100,000 picks in 5 s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--ips", type=int, default=5_000)
    args = ap.parse_args()
    s = Scheduler(Politeness(1.0, max_per_host=1, max_per_ip=1_000_000))
    t0 = time.process_time()
    for i in range(args.hosts):
        s.wake(f"h{i}", f"ip{i % args.ips}", not_before=(i % 977) * 0.001)
    wake_us = (time.process_time() - t0) / args.hosts * 1e6
    w0, t0 = time.perf_counter(), time.process_time()
    picks = 0
    while s.pop_ready(2.0) is not None:
        picks += 1
    cpu = time.process_time() - t0
    wall = time.perf_counter() - w0
    if picks != args.hosts:
        print(f"picked {picks:,} hosts of {args.hosts:,}: the scheduler lost some")
        return 1
    pick_us = cpu / picks * 1e6
    print(f"scheduler: {args.hosts:,} hosts over {args.ips:,} IPs, all ready, picked until empty")
    print(f"  wake:       {wake_us:6.2f} us CPU per host")
    print(f"  pop_ready:  {pick_us:6.2f} us CPU per pick ({cpu:.2f} s CPU, {wall:.2f} s wall for {picks:,} picks)")
    print(f"  target:     {TARGET_US_PER_PICK:6.2f} us per pick: x{TARGET_US_PER_PICK / pick_us:.1f} headroom  "
          f"{'OK' if pick_us <= TARGET_US_PER_PICK else 'ABOVE TARGET'}")
    return 0 if pick_us <= TARGET_US_PER_PICK else 1


if __name__ == "__main__":
    sys.exit(main())
