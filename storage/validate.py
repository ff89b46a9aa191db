"""Validation at the edge of storage (issues 13 and 21): the one place that says what a capture,
a batch and a read request may hold; every field of every request message has its bound here
(docs/security.md, "Validation at the edge").

A bad capture is rejected alone: `capture` runs on every capture of every batch before the group
commit that stores them (Store.ingest), and a capture it refuses is listed in the ack's
`rejected` while the rest of its batch and the other clients' batches of the same group are
stored. A batch that is malformed as a whole (`batch`: too many captures, an over-long id)
fails its Ingest call with INVALID_ARGUMENT, which agents do not retry (agent/state/shipper.py moves
it aside)."""

from __future__ import annotations

import zlib

from wancrawl import checks, urls
from wancrawl.errors import InvalidArgument
from wancrawl.v1 import storage_pb2

MAX_CAPTURES = 10_000              # captures in one PageBatch (agents send a few hundred)
MAX_RECORD_BYTES = checks.MAX_BLOB  # one gzip member, or the raw HTTP head: 32 MiB
MAX_LENGTH = checks.MAX_COUNT      # payload/raw lengths: SQL BIGINT and exact as a float
MAX_FETCHED_AT = checks.MAX_TIME   # unix seconds: year 5138; NaN and infinities are refused
MAX_TOP = 10_000                   # hosts/agents listed by Stats
MAX_LOOKUP = 10_000                # URLs asked in one Lookup
MAX_HISTORY = 10_000               # captures answered by one History

_GZIP_MAGIC = b"\x1f\x8b\x08"


def check_member(data: bytes, what: str, full: bool) -> None:
    """Raise InvalidArgument unless `data` is one gzip member holding a WARC record."""
    checks.size(what, data, MAX_RECORD_BYTES)
    if data[:3] != _GZIP_MAGIC:
        raise InvalidArgument(f"{what} is not a gzip member")
    d = zlib.decompressobj(31)
    try:
        if full:
            head = d.decompress(data)
            if not d.eof or d.unused_data:
                raise InvalidArgument(f"{what} is not exactly one complete gzip member")
        else:
            head = d.decompress(data, 16)
    except zlib.error as exc:
        raise InvalidArgument(f"{what}: corrupt gzip data ({exc})") from None
    if not head.startswith(b"WARC/1."):
        raise InvalidArgument(f"{what} does not start a WARC record")


def capture(c: storage_pb2.Capture, full: bool = False) -> tuple[str, str]:
    """Check one capture's fields; return (canonical_url, host) or raise InvalidArgument naming
    the field."""
    if not c.record_id or len(c.record_id) > 100:
        raise InvalidArgument(f"record_id must be 1..100 characters, not {len(c.record_id)}")
    if not c.agent_id or len(c.agent_id) > 128:
        raise InvalidArgument(f"agent_id must be 1..128 characters, not {len(c.agent_id)}")
    checks.text("url", c.url, checks.MAX_URL, required=True)
    canonical = urls.canonicalize(c.url)
    host = urls.host_of_canonical(canonical)
    checks.finite("fetched_at", c.fetched_at, low=0.0, high=MAX_FETCHED_AT)
    if not c.payload_digest or ":" not in c.payload_digest or len(c.payload_digest) > 64:
        raise InvalidArgument(f"payload_digest {checks.shown(c.payload_digest)} is not 'algorithm:value'")
    if not c.warc_date:
        raise InvalidArgument("warc_date is empty")
    checks.text("warc_date", c.warc_date, 64)
    checks.integer("status", c.status, low=100, high=999)
    checks.text("content_type", c.content_type, checks.MAX_TEXT)
    checks.text("ip", c.ip, 64)
    checks.text("truncated", c.truncated, 32)
    checks.integer("payload_length", c.payload_length, high=MAX_LENGTH)
    checks.integer("raw_length", c.raw_length, high=MAX_LENGTH)
    checks.size("http_headers", c.http_headers, MAX_RECORD_BYTES)
    if not c.response:
        raise InvalidArgument("response record is empty")
    check_member(c.response, "response", full)
    if c.request:
        check_member(c.request, "request", full)
    if c.metadata:
        check_member(c.metadata, "metadata", full)
    return canonical, host


def host(c: storage_pb2.Capture) -> str | None:
    """The host `capture` indexes a capture under (the partition unit the consultant places), or
    None for a URL `capture` refuses anyway."""
    if not c.url or len(c.url) > checks.MAX_URL:
        return None
    try:
        return urls.host_of_canonical(urls.canonicalize(c.url))
    except InvalidArgument:
        return None


def batch(b: storage_pb2.PageBatch) -> None:
    """A batch as a whole (its captures are checked one by one at the group commit)."""
    checks.text("batch_id", b.batch_id, checks.MAX_ID)
    if len(b.captures) > MAX_CAPTURES:
        raise InvalidArgument(f"batch {checks.shown(b.batch_id)}: {len(b.captures)} captures; at most {MAX_CAPTURES}")


def get(r: storage_pb2.GetRequest) -> None:
    if not r.url and not r.record_id:
        raise InvalidArgument("Get needs url or record_id")
    checks.text("url", r.url, checks.MAX_URL)
    checks.text("record_id", r.record_id, 100)
    checks.unix_time("at", r.at)  # checked even without has_at: a client sending it means something


def lookup(r: storage_pb2.LookupRequest) -> None:
    checks.count("urls", r.urls, MAX_LOOKUP)
    for i, u in enumerate(r.urls):
        checks.text(checks.indexed("urls", i), u, checks.MAX_URL)


def history(r: storage_pb2.HistoryRequest) -> None:
    if not r.url:
        raise InvalidArgument("History needs url")
    checks.text("url", r.url, checks.MAX_URL)
    checks.integer("limit", r.limit, high=MAX_HISTORY)
    try:
        urls.canonicalize(r.url)
    except InvalidArgument as exc:
        raise InvalidArgument(f"url: {exc}") from None


def stats(r: storage_pb2.StatsRequest) -> None:
    checks.integer("top", r.top, high=MAX_TOP)
