"""What a crawl stored, read from the WARC files themselves, against the lab's truth.

For a deployment whose storage index is out of reach (docker compose: the WARCs sit in a named
volume, the index in the compose PostgreSQL), the files are the record: every response and
revisit record's WARC-Target-URI, canonicalised as the crawler does, is one capture. The
comparison is lab/faults/measure.py's (the chaos harness's columns), so "lost" and "stored
twice" mean the same here as in docs/chaos.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from lab.faults.measure import Comparison, compare
from wancrawl.urls import InvalidUrl, canonicalize

CAPTURE_TYPES = ("response", "revisit")  # warcinfo, request and metadata records carry no capture


def warc_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every *.warc / *.warc.gz under the paths (files or directories), sorted; partial files
    (a writer's open *.open or *.tmp) are left out: they are not yet the record."""
    out: list[Path] = []
    for p in map(Path, paths):
        found = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())
        out += [x for x in found if x.name.endswith((".warc", ".warc.gz"))]
    return sorted(set(out))


def captures(files: Iterable[Path], *, sort_query: bool = False) -> Iterator[tuple[str, str]]:
    """(canonical URL, record type) of every response and revisit record in the files."""
    from warcio.archiveiterator import ArchiveIterator

    for f in files:
        with open(f, "rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type not in CAPTURE_TYPES:
                    continue
                uri = rec.rec_headers.get_header("WARC-Target-URI") or ""
                try:
                    yield canonicalize(uri, sort_query=sort_query), rec.rec_type
                except InvalidUrl:
                    yield uri, rec.rec_type  # kept as written: it cannot be a truth URL, counts as outside


def check(truth: Iterable[str], files: Iterable[Path], *, sort_query: bool = False) -> Comparison:
    """The chaos harness's comparison with the WARC records as the captures (no request log:
    fetched_twice stays 0)."""
    return compare(set(truth), captures(files, sort_query=sort_query), [])
