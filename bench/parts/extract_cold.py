"""extract_links with a cold href cache, CPU per page, several rounds in one process: for a
before/after pair of trees run alternately (`--tree` a worktree of an older commit).

The C heap is kept as the agent keeps it (wancrawl/runtime/malloc.py when the tree has it, else glibc's
M_TRIM_THRESHOLD through the environment: run with MALLOC_TRIM_THRESHOLD_=33554432), and one
warm-up pass runs first, so the rounds compare code, not the allocator's state. Each round
clears the href cache (agent/crawl/links.py _CACHE) and extracts the links of --pages lab pages.

    MALLOC_TRIM_THRESHOLD_=33554432 taskset -c 1 python bench/parts/extract_cold.py [--tree DIR] [--rounds 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[2]), help="the checkout whose code is timed")
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    sys.path.insert(0, args.tree)
    from agent.crawl import links
    from lab import topology
    from lab.web import Web

    web = Web(topology.load(), 1)
    pages = [(web.url(s, web.page_path(s, i)), web.render_page(s, i))
             for s in web.topology.normal_sites for i in range(web.pages(s))][: args.pages]
    for u, b in pages:
        links.extract_links(b, u, "utf-8")  # warm-up: the heap, the codec caches
    out = []
    for _ in range(args.rounds):
        links._CACHE.clear()
        links._CACHED = 0
        t0 = time.process_time()
        for u, b in pages:
            links.extract_links(b, u, "utf-8")
        out.append((time.process_time() - t0) / len(pages) * 1e6)
    print(f"{args.tree}: extract_links, cold href cache, us CPU per page: " + ", ".join(f"{x:.0f}" for x in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
