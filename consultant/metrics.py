"""The consultant's Prometheus metrics: `wancrawl_consultant_*{listen=ADDRESS}` (docs/metrics.md).

ConsultantService.metrics() gives the numbers; GAUGES is the one list of levels, every other
number is a counter (`<name>_total`).
"""

from __future__ import annotations

from wancrawl.metrics import SERVER_HELP, SERVER_LABELLED, Schema

GAUGES = frozenset({"epoch", "agents_alive", "agents_dead", "answers_cached", "dns_cached"})

HELP = {
    "resolve_requests": "Resolve RPCs answered",
    "hosts_resolved": "hosts asked in Resolve RPCs",
    "cache_hits": "hosts answered from the answer cache (no site look-up)",
    "epoch_changes": "times this consultant moved to a new epoch (membership, assignment or strategy changed)",
    "registrations": "Register RPCs accepted",
    "heartbeats": "Heartbeat RPCs accepted (lease renewals)",
    "deregistrations": "Deregister RPCs accepted (graceful leaves)",
    "leases_expired": "agents declared dead because their lease expired",
    "balance_rounds": "load-balancing rounds planned ([balance] enabled; docs/balance.md)",
    "balance_moves": "hosts the balancer moved (overrides it set)",
    "dns_lookups": "site DNS look-ups made",
    "dns_failures": "site DNS look-ups that failed",
    "dns_cache_hits": "site names answered from the resolver's cache (TTL, negative cache)",
    "dns_cached": "names in the resolver's cache",
    "epoch": "the current epoch",
    "agents_alive": "agents with a valid lease",
    "agents_dead": "agents whose lease expired (not deregistered)",
    "answers_cached": "answers in the answer cache",
    **SERVER_HELP,
}

SCHEMA = Schema("wancrawl_consultant", "listen", HELP, GAUGES, SERVER_LABELLED)
