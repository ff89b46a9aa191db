"""Storage's same-URL lookup (issue 26): the CPU `Index.latest` costs during ingest, per page.

10,000 first captures (storage.testing.pages) ingested in groups of 100 into an in-process Store
(SQLite index in a temp dir), with a timer around `Index.latest`. Before storage asked only for
captures flagged `Capture.refetch`, every group asked for its 200s; now a first-time crawl asks
nothing. To compare trees: `PYTHONPATH=TREE .venv/bin/python bench/parts/latest_lookup.py`.
Figures: docs/storage.md (the refetch flag).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import storage.store as store_module
from storage.client import make_batch
from storage.config import IndexSettings, IngestSettings, StorageSettings, WarcSettings
from storage.store import Store
from storage.testing import fetch_result, pages
from wancrawl.warcrecords import build_capture


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--group", type=int, default=100, help="captures per ingest group")
    args = ap.parse_args()
    print("store from", store_module.__file__)
    d = tempfile.mkdtemp(prefix="latest-lookup-")
    store = Store(StorageSettings(data_dir=d + "/data", index=IndexSettings(), warc=WarcSettings(),
                                  ingest=IngestSettings(fsync="os")))
    caps = [build_capture(fetch_result(u, b, at=1.0 + i)) for i, (u, b) in enumerate(pages(args.pages, seed=1))]
    spent, calls = 0.0, 0
    real = store.index.latest

    def timed(urls):
        nonlocal spent, calls
        t = time.process_time()
        try:
            return real(urls)
        finally:
            spent += time.process_time() - t
            calls += 1

    store.index.latest = timed  # type: ignore[method-assign]
    t0 = time.process_time()
    for i in range(0, len(caps), args.group):
        store.ingest([make_batch(caps[i:i + args.group])])
    total = time.process_time() - t0
    store.close()
    n = len(caps)
    print(f"ingest CPU {total * 1e6 / n:.1f} us/page; Index.latest calls {calls}, {spent * 1e6 / n:.1f} us/page")


if __name__ == "__main__":
    main()
