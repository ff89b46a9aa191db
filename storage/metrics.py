"""Storage's Prometheus metrics: `wancrawl_storage_*{listen=ADDRESS}` (docs/metrics.md).

StorageServicer.stats (IngestCounters) counts what was received and acknowledged since start,
PlacementCheck.stats (PlacementCounters) the placement check (`placement_*`: only when a consultant is configured); GAUGES is the
one list of levels, every other number is a counter (`<name>_total`).
"""

from __future__ import annotations

from wancrawl.metrics import SERVER_HELP, SERVER_LABELLED, Schema

GAUGES = frozenset({"ingest_queue", "ingest_lag_seconds", "placement_routes_cached"})

HELP = {
    "ingest_calls": "Ingest streams acknowledged",
    "batches": "page batches acknowledged",
    "captures_received": "captures received in acknowledged batches (stored, revisit, duplicate, rejected or not placed)",
    "stored": "captures stored as new response records",
    "revisits": "captures stored as revisit records (payload seen before)",
    "duplicates": "captures already stored (a resent batch; idempotent ingest)",
    "rejected": "captures rejected as invalid",
    "rejected_not_placed": "captures refused: their agent is neither owner nor backup of their host (consultant configured)",
    "placement_resolves": "Resolve calls to the consultant for the placement check (one per ingest batch with a host to ask)",
    "placement_resolve_failures": "of those, the ones the consultant did not answer",
    "placement_stale_routes": "hosts decided by an expired cached route because the consultant did not answer",
    "placement_unavailable": "Ingest calls answered UNAVAILABLE: the consultant did not answer and no cached route placed the sender",
    "placement_routes_cached": "hosts whose placement storage holds in its route cache",
    "placement_contested": "captures held (Ingest answered UNAVAILABLE) because the overlay's disjoint lookups disagreed on their host and left their agent out (Kademlia mode)",
    "peer_members_calls": "Members calls to the agents named in `peers` (Kademlia mode: up to `paths` per resolve)",
    "peer_find_node_calls": "FindNode calls of the overlay lookups (Kademlia mode)",
    "peer_find_node_failures": "of those, the ones that failed or were answered by another node than the one dialed",
    "peer_contacts_skipped": "contacts of the overlay lookups failed without a call: their address answers as another node (a liar's made-up contacts)",
    "peer_resolves": "overlay lookups of a batch of hosts (Kademlia mode)",
    "peer_hosts_contested": "hosts whose disjoint lookup paths disagreed on the closest nodes (Kademlia mode): not known yet",
    "raw_bytes_received": "uncompressed size of the WARC records received (the agents' raw_length)",
    "bytes_received": "gzip WARC record bytes received",
    "bytes_written": "bytes appended to WARC files",
    "ingest_queue": "batches waiting for the writer thread",
    "ingest_lag_seconds": "age of the oldest batch received and not yet durable (0 when none waits): the writer's lag",
    **SERVER_HELP,
}

SCHEMA = Schema("wancrawl_storage", "listen", HELP, GAUGES, SERVER_LABELLED)
