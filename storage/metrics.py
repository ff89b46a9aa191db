"""Storage's Prometheus metrics: `wancrawl_storage_*{listen=ADDRESS}` (docs/metrics.md).

StorageServicer.counters counts what was received and acknowledged since start; GAUGES is the
one list of levels, every other number is a counter (`<name>_total`).
"""

from __future__ import annotations

from wancrawl.metrics import SERVER_HELP, SERVER_LABELLED, Schema

GAUGES = frozenset({"ingest_queue"})

HELP = {
    "ingest_calls": "Ingest streams acknowledged",
    "batches": "page batches acknowledged",
    "captures_received": "captures received in acknowledged batches (stored, revisit, duplicate or rejected)",
    "stored": "captures stored as new response records",
    "revisits": "captures stored as revisit records (payload seen before)",
    "duplicates": "captures already stored (a resent batch; idempotent ingest)",
    "rejected": "captures rejected as invalid",
    "raw_bytes_received": "uncompressed size of the WARC records received (the agents' raw_length)",
    "bytes_received": "gzip WARC record bytes received",
    "bytes_written": "bytes appended to WARC files",
    "ingest_queue": "batches waiting for the writer thread",
    **SERVER_HELP,
}

SCHEMA = Schema("wancrawl_storage", "listen", HELP, GAUGES, SERVER_LABELLED)
