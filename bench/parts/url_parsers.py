"""The URL step of link extraction alone, per href of the lab's pages: urllib (what the floor and
wancrawl's former canonicalize used), the two Python bindings of Ada, the WHATWG URL parser
(ada-url through cffi, can_ada through nanobind), and wancrawl's canonicalize on top of can_ada.
Why wancrawl took can_ada (issue 24; docs/urls.md): it parses in a fraction of ada-url's time,
though it takes no base URL, so wancrawl.urls.BaseUrl spells relative references out itself.

Target: canonicalize costs at most a third of what urljoin + urlsplit cost (the floor's step).
CPU per href (process_time, best of 3 rounds).

    python bench/parts/url_parsers.py [--hrefs 60000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import ada_url  # noqa: E402
import can_ada  # noqa: E402

from lab import topology  # noqa: E402
from lab.web import Web  # noqa: E402
from wancrawl.urls import BaseUrl, InvalidUrl, canonicalize  # noqa: E402

TARGET_SHARE = 1 / 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hrefs", type=int, default=60_000)
    args = ap.parse_args()
    web = Web(topology.load(), 1)
    pairs: list[tuple[str, str]] = []
    for s in web.topology.normal_sites:
        for i in range(web.pages(s)):
            page = web.url(s, web.page_path(s, i))
            pairs += [(page, h) for h in web.links(s, i) if h.startswith(("/", ".", "h", "H"))]
        if len(pairs) >= args.hrefs:
            break
    pairs = pairs[: args.hrefs]
    bases = {b: BaseUrl(b) for b, _ in pairs}
    absolute = [ada_url.join_url(b, h) for b, h in pairs]

    def ada_url_attrs(b: str, h: str) -> tuple:
        u = ada_url.URL(h, b)
        return u.protocol, u.host, u.pathname, u.search

    def can_ada_attrs(u: str) -> tuple:
        p = can_ada.parse(u)
        return p.protocol, p.host, p.pathname, p.search

    rows = [
        ("urllib: urljoin + urlsplit (the floor)", lambda: [urlsplit(urljoin(b, h)) for b, h in pairs]),
        ("ada-url: join_url (href only)", lambda: [ada_url.join_url(b, h) for b, h in pairs]),
        ("ada-url: URL(href, base) + 4 parts", lambda: [ada_url_attrs(b, h) for b, h in pairs]),
        ("can_ada: parse(absolute).href (no base)", lambda: [can_ada.parse(u).href for u in absolute]),
        ("can_ada: parse(absolute) + 4 parts", lambda: [can_ada_attrs(u) for u in absolute]),
        ("BaseUrl.absolute + can_ada.parse", lambda: [can_ada.parse(bases[b].absolute(h)).href for b, h in pairs]),
        ("canonicalize(href, base str)", lambda: [_canon(h, b) for b, h in pairs]),
        ("canonicalize(href, BaseUrl)", lambda: [_canon(h, bases[b]) for b, h in pairs]),
    ]
    print(f"{len(pairs)} hrefs of lab pages (seed 1), CPU us per href, best of 3")
    out = {}
    for name, fn in rows:
        out[name] = best(fn) / len(pairs) * 1e6
        print(f"  {name:44} {out[name]:6.2f}")
    ratio = out["canonicalize(href, BaseUrl)"] / out["urllib: urljoin + urlsplit (the floor)"]
    verdict = "OK" if ratio <= TARGET_SHARE else "ABOVE TARGET"
    print(f"canonicalize / urllib join+split: {ratio:.2f} (target <= {TARGET_SHARE:.2f}) -- {verdict}")
    return 0 if ratio <= TARGET_SHARE else 1


def _canon(href: str, base) -> str | None:
    try:
        return canonicalize(href, base)
    except InvalidUrl:
        return None


def best(fn, n: int = 3) -> float:
    out = float("inf")
    for _ in range(n):
        t0 = time.process_time()
        fn()
        out = min(out, time.process_time() - t0)
    return out


if __name__ == "__main__":
    sys.exit(main())
