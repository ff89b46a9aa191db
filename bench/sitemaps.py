"""The sitemap parser (agent/crawl/sitemap.py) on real-world shapes and hostile ones, with
ultimate-sitemap-parser beside it when it is installed (it is not a dependency: the comparison
that chose our own parser, docs/agent-fetching.md "Sitemaps").

    .venv/bin/python bench/sitemaps.py
    .venv/bin/pip install ultimate-sitemap-parser && .venv/bin/python bench/sitemaps.py  # with USP

For each input: CPU seconds (best of 3) and peak Python memory (tracemalloc) of one parse, entries
kept, each figure beside its target. Inputs: a 50,000-entry urlset with lastmod/changefreq (the
protocol's largest file), the same gzip'd, a gzip bomb (1 GiB of whitespace behind one entry,
~1 MB on the wire), a billion-laughs entity bomb.
"""

from __future__ import annotations

import gzip
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.crawl import sitemap  # noqa: E402
from lab.web import _gzip_repeat, _sitemap_xml  # noqa: E402

URL = "http://www.example.com/sitemap.xml"


def inputs() -> dict[str, bytes]:
    rows = [(f"http://www.example.com/section/page-{i}.html?id={i}", "2024-03-01T12:00:00+00:00", "daily") for i in range(50_000)]
    plain = _sitemap_xml("urlset", "url", rows)
    head = _sitemap_xml("urlset", "url", [("http://www.example.com/first.html", None, None)]).replace(b"</urlset>", b"")
    laughs = (b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">' +
              b"".join(f'<!ENTITY {chr(98 + k)} "{("&" + chr(97 + k) + ";") * 10}">'.encode() for k in range(9)) +
              b']><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://www.example.com/&j;</loc></url></urlset>')
    return {"urlset 50,000": plain, "urlset 50,000 gzip": gzip.compress(plain, 6),
            "gzip bomb 1 GiB": _gzip_repeat(head, b" " * (1 << 20), 1024, b"</urlset>\n"), "billion laughs": laughs}


def measure(fn) -> tuple[float, float, int]:
    best = float("inf")
    n = 0
    for _ in range(3):
        t = time.process_time()
        n = fn()
        best = min(best, time.process_time() - t)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak / 2**20, n


def ours(body: bytes) -> int:
    return len(sitemap.parse(body, URL).entries)


def with_usp(body: bytes) -> int:
    """USP's parse of a string (SitemapStrParser: its own fetching left out); USP gunzips a whole
    body (up to 100 MB) before parsing, done here the same way."""
    from usp.fetch_parse import SitemapStrParser

    text = body.decode("utf-8", "replace") if body[:2] != b"\x1f\x8b" else None
    if text is None:
        try:
            import zlib
            d = zlib.decompressobj(wbits=31)
            text = d.decompress(body, 100 * 2**20).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001
            return 0
    try:
        tree = SitemapStrParser(static_content=text).sitemap()
    except Exception:  # noqa: BLE001
        return 0
    return sum(1 for _ in tree.all_pages())


def main() -> int:
    try:
        import usp  # noqa: F401
        have_usp = True
    except ImportError:
        have_usp = False
    targets = {"urlset 50,000": (1.0, 64.0, 50_000), "urlset 50,000 gzip": (1.0, 64.0, 50_000),
               "gzip bomb 1 GiB": (2.0, 16.0, 1), "billion laughs": (0.1, 1.0, 0)}
    for name, body in inputs().items():
        cpu, mem, n = measure(lambda: ours(body))
        t_cpu, t_mem, t_n = targets[name]
        print(f"ours  {name:20} {len(body) / 2**20:7.2f} MiB in: {cpu:6.3f} s CPU (target < {t_cpu}), "
              f"peak {mem:7.1f} MiB (target < {t_mem}), {n} entries (expected {t_n})")
        if have_usp:
            cpu, mem, n = measure(lambda: with_usp(body))
            print(f"usp   {name:20} {len(body) / 2**20:7.2f} MiB in: {cpu:6.3f} s CPU, peak {mem:7.1f} MiB, {n} entries")
    if not have_usp:
        print("ultimate-sitemap-parser not installed: its column is left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
