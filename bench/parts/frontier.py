"""Frontier cost per URL: 1 million URLs over 10,000 hosts added, then popped from random hosts
and marked done, with group commits as the agent makes them; RSS beside it.

    python bench/parts/frontier.py [--urls 1000000] [--hosts 10000]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.state.frontier import Frontier, Item  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--urls", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--flush-every", type=int, default=2_000, help="URLs between group commits")
    args = ap.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        f = Frontier(Path(tmp) / "frontier.sqlite")
        rss0 = rss_mb()
        per_host = args.urls // args.hosts
        t0 = time.process_time()
        n = 0
        # Discovered links arrive in small batches per page: 50 URLs of one host at a time.
        for start in range(0, per_host, 50):
            for h in range(args.hosts):
                f.add([Item(f"http://h{h}.lab/p/{start + k}.html", f"h{h}.lab", 1 + (start + k) // 100)
                       for k in range(min(50, per_host - start))])
                n += min(50, per_host - start)
                if n % args.flush_every < 50:
                    f.flush()
        f.flush()
        add_us = (time.process_time() - t0) / n * 1e6
        rss_queued = rss_mb() - rss0
        hosts = [f"h{h}.lab" for h in range(args.hosts)]
        t0 = time.process_time()
        popped = 0
        while popped < n:
            host = hosts[rng.randrange(len(hosts))]
            it = f.pop(host)
            if it is None:
                hosts.remove(host)
                continue
            f.done(it)
            popped += 1
            if popped % args.flush_every == 0:
                f.flush()
        f.flush()
        pop_us = (time.process_time() - t0) / popped * 1e6
        print(f"{n:,} URLs over {args.hosts:,} hosts, group commit every {args.flush_every:,} URLs")
        print(f"  add + flush:              {add_us:6.1f} us CPU per URL   (target: well under 20)")
        print(f"  pop (random host) + done: {pop_us:6.1f} us CPU per URL   (target: well under 20)")
        print(f"  RSS with all queued:      {rss_queued:6.0f} MB above the start")
        f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
