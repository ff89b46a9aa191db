"""What a crawl stored, read from the WARC files themselves, against the lab's truth.

For a deployment whose storage index is out of reach (docker compose: the WARCs sit in a named
volume or an S3 bucket, the index in the compose PostgreSQL), the files are the record: every response and
revisit record's WARC-Target-URI, canonicalised as the crawler does, is one capture. The
comparison is lab/faults/measure.py's (the chaos harness's columns), so "lost" and "stored
twice" mean the same here as in docs/chaos.md.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from lab.faults.measure import Comparison, compare
from wancrawl.urls import InvalidUrl, canonicalize

CAPTURE_TYPES = ("response", "revisit")  # warcinfo, request and metadata records carry no capture
SUFFIXES = (".warc", ".warc.gz")

Source = tuple[str, Callable[[], BinaryIO]]  # a WARC's name and how to open it


def warc_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every *.warc / *.warc.gz under the paths (files or directories), sorted; partial files
    (a writer's open *.open or *.tmp) are left out: they are not yet the record."""
    out: list[Path] = []
    for p in map(Path, paths):
        found = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())
        out += [x for x in found if x.name.endswith(SUFFIXES)]
    return sorted(set(out))


def file_sources(files: Iterable[Path]) -> list[Source]:
    return [(str(f), lambda f=f: open(f, "rb")) for f in files]  # type: ignore[misc]


def bucket_sources(storage_config: str | Path) -> list[Source]:
    """Every completed WARC object in the bucket a storage config names, of every writer (each
    writes under its own <key_prefix><writer_id>/). Open multipart uploads are not objects yet:
    storage completes them once their records are committed (storage/s3sink.py)."""
    from storage import config
    from storage.s3sink import make_client

    cfg = config.load(storage_config).object_store
    s3 = make_client(cfg)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=cfg.bucket, Prefix=cfg.key_prefix)
            for o in page.get("Contents", []) if o["Key"].endswith(SUFFIXES)]

    def opener(key: str) -> Callable[[], BinaryIO]:
        return lambda: io.BytesIO(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())

    return [(f"s3://{cfg.bucket}/{k}", opener(k)) for k in sorted(keys)]


def captures(sources: Iterable[Source], *, sort_query: bool = False) -> Iterator[tuple[str, str]]:
    """(canonical URL, record type) of every response and revisit record in the WARCs."""
    from warcio.archiveiterator import ArchiveIterator

    for _name, open_ in sources:
        with open_() as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type not in CAPTURE_TYPES:
                    continue
                uri = rec.rec_headers.get_header("WARC-Target-URI") or ""
                try:
                    yield canonicalize(uri, sort_query=sort_query), rec.rec_type
                except InvalidUrl:
                    yield uri, rec.rec_type  # kept as written: it cannot be a truth URL, counts as outside


def check(truth: Iterable[str], sources: Iterable[Source], *, sort_query: bool = False) -> Comparison:
    """The chaos harness's comparison with the WARC records as the captures (no request log:
    fetched_twice stays 0)."""
    return compare(set(truth), captures(sources, sort_query=sort_query), [])
