"""build_capture alone (wancrawl/warcrecords.py): CPU per page to make the three gzip WARC
records of a lab page, as the agent's dispatcher does for every page it keeps (headers as
aiohttp reports the lab's, body decoded). Best of --rounds over --pages pages, this process
pinned to one core.

`--tree DIR` times the warcrecords module of another checkout (a git worktree of an older
commit) in the same way, for a before/after pair run back to back:

    python bench/parts/capture_build.py [--pages 1500] [--rounds 7] [--tree /path/to/old/worktree]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[2]), help="the checkout whose code is timed")
    args = ap.parse_args()
    sys.path.insert(0, args.tree)
    from lab import topology
    from lab.web import Web
    from wancrawl.warcrecords import FetchResult, build_capture

    os.sched_setaffinity(0, {args.core})
    web = Web(topology.load(), 1)
    pages = [(web.url(s, web.page_path(s, i)), web.render_page(s, i))
             for s in web.topology.normal_sites for i in range(web.pages(s))][: args.pages]
    fetches = [FetchResult(
        url=u, status=200, reason="OK", body=b, agent_id="agent-1", started_at=1.7e9 + i, ended_at=1.7e9 + i + 0.004,
        response_headers=[("Date", "Tue, 25 Nov 2026 22:00:00 GMT"), ("Server", "Python/3.11 aiohttp/3.14"),
                          ("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(b))),
                          ("Last-Modified", "Tue, 25 Nov 2026 21:00:00 GMT"), ("Cache-Control", "max-age=60")],
        request_headers=[("Host", u.split("/")[2]), ("User-Agent", "wancrawl/0.1 (+https://example.org/bot)"),
                         ("Accept", "text/html,*/*;q=0.8"), ("Accept-Encoding", "gzip, deflate")],
        ip="127.1.1.10", body_decoded=True) for i, (u, b) in enumerate(pages)]
    runs = []
    for _ in range(args.rounds):
        t = time.process_time()
        for f in fetches:
            build_capture(f)
        runs.append((time.process_time() - t) / len(fetches) * 1e6)
    print(f"{args.tree}: build_capture, {len(fetches)} lab pages: best {min(runs):.1f} us per page "
          f"(rounds {' '.join(f'{r:.1f}' for r in runs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
