"""The agent's Prometheus metrics: the schema (which numbers are gauges, what each means) and the sample.

Counts are owned by the components (each a typed Counters dataclass in its `stats`, wancrawl/stats.py),
levels by their `gauges()`; the node registers both once in its StatsRegistry (AgentNode.stats) and
status_counters() is that registry's snapshot (names two components count, summed) plus the node's
own levels: the sample below, the Status RPC and the chaos harness read the same numbers. GAUGES
below is the one list of levels; every other number is a counter, `wancrawl_agent_<name>_total{agent=ID}`.
docs/metrics.md is generated from HELP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wancrawl.metrics import SERVER_HELP, SERVER_LABELLED, Sample, Schema

if TYPE_CHECKING:
    from agent.node import AgentNode
    from wancrawl.grpcutil import Security

# Levels: they go down as well as up (queues, ratios, settings, the epoch).
GAUGES = frozenset({
    "frontier", "in_flight", "hosts_with_work", "seen", "spool_batches", "idle", "parked_hosts",  # the node
    "router_pending", "alpha", "beta", "mu", "lambda",                                          # RoutingService
    "epoch", "host_cache_hit_ratio", "host_cache_size",                                         # HostDirectory
    "hosts_settling", "replica_hosts", "epoch_settled",                                         # Ownership
    "replica_unsynced", "replica_synced_hosts", "replica_lag_items",                            # Replicator
    "load_level", "work_area", "peak_pages_per_second",                                         # LoadGauge
    "stalled",                                                                                   # ProgressWatch
    "consultant_replica",                                                                        # ConsultantClient
    "loop_lag_max", "loop_busy_max", "loop_gc_max", "loop_gc_full_max",                          # LoopLag
    "overlay_contacts", "overlay_epoch",                                                         # Overlay (kademlia)
    "overlay_delegations_out", "overlay_delegations_in",                                         # Delegations (kademlia)
    "revisits_scheduled", "revisits_due", "revisit_freshness",                                   # revisit schedule (issue 26)
    "dns_cached",                                                                                # HostResolver (issue 37)
})

HELP = {
    # Dispatcher: fetching
    "fetches": "HTTP requests made (pages, robots.txt, robots.txt redirects; retries each count)",
    "pages": "pages fetched: URLs finished with a response (any status, truncated ones too)",
    "bytes": "body bytes read from the wire by every request",
    "request_errors": "requests without a response (connection refused or reset, TLS, timeout, DNS...), robots.txt's included",
    "fetch_errors": "failed requests and refused URLs by kind: a transport failure of any request (connect, timeout, "
                    "read, dns, forbidden_address, protocol, too_large, tls, internal), a page answered 4xx or 5xx "
                    "(http_4xx, http_5xx; each try counts), a URL robots.txt disallows (robots_denied)",
    "incidents": "what the hostile web did, by reason (agent/crawl/incidents.py; each also logged, at most one line per "
                 "reason every 10 s): a host given up (host_page_budget, domain_page_budget, forbidden_address, "
                 "robots_unreachable), a URL whose retries ran out (retries_exhausted), URLs refused (domain_hosts: a "
                 "new host of a registered domain at scope.max_hosts_per_domain; domain_page_budget at intake; "
                 "trap_depth, trap_url_length, trap_path_depth, trap_repeated_segments, trap_query_params, "
                 "trap_query_churn, trap_redirect_hops), a page (truncated_length, truncated_decoded, truncated_time, "
                 "truncated_disconnect, truncated_excess; bomb: decoded past the cap at over 20 times its wire "
                 "bytes; links_capped: links or parse stopped at a cap)",
    "errors": "URLs given up without any response (transport failures after the last retry)",
    "retries": "tries put back for another attempt (429/5xx/transport failures)",
    "given_up": "URLs whose retries ran out",
    "truncated": "pages stored with a truncated body (size cap, timeout, disconnect)",
    "redirects": "3xx pages whose target was routed as a new URL",
    "not_html": "200 pages that are not HTML (stored, not parsed)",
    "robots_fetches": "robots.txt files fetched (one per origin and expiry)",
    "robots_denied": "URLs robots.txt disallows (not fetched)",
    "robots_deferred": "robots.txt answers that left their origin's URLs waiting (5xx, 429, no answer: retried with backoff)",
    "robots_given_up": "URLs given up because robots.txt stayed unreachable for robots.give_up_after",
    "hosts_given_up": "hosts whose queue was dropped (page budget of the host or its domain, forbidden address, DNS failure)",
    "hosts_dns_failed": "hosts given up because their name does not resolve (NXDOMAIN, no address; at the first answer)",
    # HostResolver (wancrawl/hostres.py): the dispatcher's and the fetcher's look-ups, one cache
    "dns_lookups": "names asked of DNS ([dns] resolver: system or cares; the cache missed)",
    "dns_failures": "DNS look-ups answered without an address (NXDOMAIN, no address, timeout, SERVFAIL)",
    "dns_cache_hits": "names answered from the resolver's cache (an answer within its TTL, or a failure still kept)",
    "dns_cached": "names in the resolver's cache",
    "origins_given_up": "origins (scheme://host:port) given up: robots.txt unreachable for robots.give_up_after, "
                        "or no answer to any request for politeness.origin_give_up_after",
    "budget_dropped": "queued URLs dropped with a given-up host",
    "out_of_scope": "discovered or pushed URLs outside the agent's scope (domains, depth, schemes, ports)",
    "dropped_schemes": "links with a scheme that is not crawled (mailto:, javascript:, ...)",
    "invalid_urls": "links and pushed URLs that could not be canonicalised",
    "recent_skips": "links skipped because they were routed a moment ago (routing.recent_filter)",
    "links_over_cap": "links beyond scope.max_outlinks_per_page, not examined",
    "nofollow_skipped": "links skipped for nofollow",
    "noindex_pages": "pages marked noindex (stored all the same)",
    "revisits": "revisits fetched (URLs fetched again from the revisit schedule; [revisit] in the config)",
    "revisits_changed": "revisits that found the payload changed since this agent's last capture",
    "revisits_unchanged": "revisits that found it unchanged (a 304, or a 2xx with the same payload digest)",
    "not_modified": "revisits answered 304 Not Modified (conditional requests: If-None-Match / If-Modified-Since)",
    "not_modified_bytes": "payload bytes the 304 answers did not send (the size of the capture each confirmed)",
    "revisits_scheduled": "URLs in the revisit schedule",
    "revisits_due": "URLs in the revisit schedule due now",
    "revisit_freshness": "freshness estimate: the share of revisits that found the page unchanged (a lower bound of the "
                         "archive's freshness: a revisit sees the copy at its oldest); 1 before any revisit",
    "fenced_results": "fetch results dropped because the lease lapsed during the fetch",
    "sitemaps": "sitemap and sitemap index files read ([sitemaps]; agent/crawl/sitemap.py)",
    "sitemap_urls": "URLs read from sitemaps (routed like discovered links)",
    "sitemap_refused": "sitemap entries left out: the location rule, an invalid <loc>, over 50,000 in a file",
    "sitemap_errors": "sitemaps read only in part: malformed XML, a DOCTYPE, bad gzip, over 50 MiB decompressed",
    "sitemaps_skipped": "sitemaps not fetched or not read: the host's file or byte budget, an index nested in an index",
    # Intake: URLs arriving
    "duplicates": "URLs already in the seen set, not queued again",
    "pushes_received": "PushUrls RPCs received from peers",
    "urls_received": "URLs in PushUrls RPCs received from peers",
    "pushed_in": "pushed URLs accepted into this agent's frontier",
    "not_mine_sent": "pushed URLs answered \"not mine\" (another agent owns the host)",
    "over_queue_budget": "URLs dropped: their host's queue was at scope.max_queued_per_host",
    "over_page_budget": "URLs dropped: their host was at scope.max_pages_per_host",
    "over_domain_page_budget": "URLs dropped: their registered domain was at scope.max_pages_per_domain",
    "over_domain_hosts": "URLs dropped: their host is new and its registered domain has scope.max_hosts_per_domain hosts here",
    "parse_waits": "HTML parses that waited for room under memory.parse_bytes_in_flight",
    "parse_pieces": "pieces HTML bodies were parsed in (a body over memory.parse_piece_bytes or 1,024 tags is cut)",
    "parse_pieces_skipped": "pieces of big bodies not parsed: no link tag in them",
    "query_churn": "URLs dropped: too many URLs of one query shape (scope.max_urls_per_query_shape)",
    "agent_rpcs": "Agent-service RPCs made to peers and received (pushes, seeds)",
    "unstorable": "discovered URLs dropped because the frontier could not store them (e.g. not UTF-8)",
    # RoutingService and HostDirectory: seed 002's routing
    "routed": "discovered URLs submitted for routing",
    "routed_local": "routed URLs that went to this agent's own frontier",
    "n": "URLs pushed to other agents (seed 002's n)",
    "m": "distinct foreign hosts URLs were pushed for (seed 002's m)",
    "hosts_routed": "distinct hosts routed",
    "pushes": "PushUrls batches sent to peers",
    "push_failures": "PushUrls batches that failed (the URLs wait and are retried)",
    "not_mine_received": "URLs a peer answered \"not mine\" for (re-resolved)",
    "resolves": "Resolve RPCs to the consultant (batches of at most beta hosts)",
    "resolved_hosts": "hosts answered by Resolve",
    "resolve_failures": "Resolve RPCs that failed",
    "router_pending": "URLs in the router: waiting for an answer or in a batch not yet pushed",
    "alpha": "routing.alpha: at most this many URLs per push",
    "beta": "routing.beta: at most this many hosts per Resolve",
    "mu": "seed 002's mu: share of routed URLs sent to other agents (n / routed, since start)",
    "lambda": "seed 002's lambda: share of routed hosts that needed a consultant answer (resolved_hosts / hosts_routed)",
    "host_cache_hits": "host cache look-ups answered from the cache",
    "host_cache_misses": "host cache look-ups that needed the consultant (absent, expired or of an older epoch)",
    "host_cache_hit_ratio": "hits / look-ups since start (rate(hits) / rate(hits + misses) for a window)",
    "host_cache_size": "hosts in the host cache",
    "epoch": "the newest epoch the consultant has given this agent",
    "epoch_claims": "peer messages claiming an epoch newer than the consultant's latest",
    "epoch_checks": "Resolves made to check such a claim",
    "epoch_claims_refuted": "claims the consultant did not confirm",
    "live_agents_failures": "LiveAgents asks placement could not answer (unreachable, or a consultant replica behind this agent's epoch)",
    "consultant_rpcs": "RPCs to the consultant (register, heartbeat, resolve)",
    "heartbeats_withheld": "heartbeats (or registrations) not sent because the agent made no durable progress",
    # ConsultantClient over several replicas (consultant/client.py, wancrawl/failover.py)
    "consultant_failovers": "consultant calls sent on to the next replica after one did not answer (UNAVAILABLE or its deadline)",
    "consultant_unanswered": "consultant calls no replica answered (the agent crawls on cached routes)",
    "consultant_replica": "the consultant replica that answered last: its index in `consultants` (0 = the first listed)",
    # CommitLog, ProgressWatch (agent/state/commit.py, agent/state/progress.py; docs/agent.md)
    "commit_failures": "group commits that failed (their changes stay buffered for the next one)",
    "rows_rejected": "frontier changes left out of a commit because they could not be written (poison rows)",
    "stalls": "times the agent went without a completed commit for commit_stall_seconds (NOT_SERVING, no heartbeat)",
    "stalled": "1 while no group commit has completed for commit_stall_seconds, else 0",
    "loop_lag_max": "longest event-loop lag (wall clock) sampled since start, seconds (loop_lag_interval > 0 only)",
    "loop_busy_max": "longest busy lag sampled since start: CPU the loop thread spent in a sample beyond the "
                     "interval, seconds (a stall of the agent's own making; loop_lag_interval > 0 only)",
    "loop_gc_max": "longest pass of the cyclic garbage collector timed since start (any generation), seconds of "
                   "the loop thread's CPU (loop_lag_interval > 0 only)",
    "loop_gc_full_max": "longest full (generation 2) collection timed since start, seconds of the loop thread's "
                        "CPU: it walks every tracked object (loop_lag_interval > 0 only)",
    "loop_gc_full": "full (generation 2) collections timed since start (loop_lag_interval > 0 only)",
    "loop_stalls": "loop lag samples whose busy lag was over 0.1 s (loop_lag_interval > 0 only)",
    "loop_late": "loop lag samples whose wall-clock lag was over 0.1 s, busy or not scheduled (loop_lag_interval > 0 only)",
    # Queues (the node)
    "frontier": "URLs queued in the frontier",
    "hosts_with_work": "hosts with queued URLs",
    "in_flight": "fetches under way",
    "parked_hosts": "hosts and origins that cannot be fetched within politeness.park_horizon (backoff, Retry-After, an origin's robots.txt)",
    "seen": "URL fingerprints in the seen set",
    "spool_batches": "page batches in the spool, waiting for storage",
    "idle": "1 when the agent has nothing to do (parked hosts aside), else 0",
    # StorageShipper
    "spool_batches_sent": "page batches storage acknowledged",
    "captures_stored": "captures storage acknowledged (stored, revisit or duplicate; rejected ones not counted)",
    "captures_superseded": "captures spooled before a lease lapse not sent: storage had those URLs from the agent "
                           "that held their hosts meanwhile",
    "storage_failures": "Ingest calls that failed (storage unreachable; the spool keeps the batches)",
    "storage_batches_rejected": "batches storage refused as invalid (set aside in spool/rejected)",
    "storage_captures_rejected": "captures storage rejected in its answer (set aside in spool/rejected)",
    "storage_captures_not_placed": "captures storage refused as not placed (agent not on their host's preference list); "
                                   "kept in the spool and sent again, set aside after storage_out.not_placed_hold",
    # HandOff, Gate
    "hosts_handed_out": "hosts handed over to another agent",
    "hosts_handed_in": "hosts received in a handover",
    "handover_failures": "handovers that failed (the hosts stay here)",
    "handover_bytes_out": "bytes of host state sent in handovers",
    "handover_dropped_done": "queued URLs dropped when a host being taken over was reconciled with what its previous holder did",
    "handover_deferred_done": "queued URLs of a host crawled here that a HandOver said its sender did: not dropped, deferred a grace and checked at storage before they are fetched",
    "handover_refused_out": "hosts this agent handed over that the receiver refused (they stay here)",
    "handover_hosts_refused": "hosts of a peer's handover refused: not owned here now, or not from a holder expected (issue 21)",
    "replicate_hosts_refused": "hosts of a peer's Replicate refused: the sender does not own them, or this agent is not a backup",
    "overlay_contacts": "Kademlia mode: verified contacts in this agent's routing table",
    "overlay_epoch": "Kademlia mode: this agent's view epoch (a Lamport clock over changes among its k closest)",
    "overlay_pings": "Kademlia mode: Pings sent (lease rounds of the k closest, verifications, bucket checks)",
    "overlay_find_nodes": "Kademlia mode: FindNode calls sent (each carries up to 1,000 targets): the routing RPCs",
    "overlay_find_nodes_answered": "Kademlia mode: FindNode calls this agent answered",
    "overlay_rpc_failures": "Kademlia mode: overlay calls to a contact that did not answer as itself",
    "overlay_dead": "Kademlia mode: contacts declared dead (a neighbour silent for dead_after, another after a failed call)",
    "overlay_joined": "Kademlia mode: contacts admitted to the routing table after answering as themselves",
    "overlay_left": "Kademlia mode: contacts removed because they left gracefully",
    "overlay_refused_ids": "Kademlia mode: answers from an address that named another contact than the one dialed",
    "overlay_lookups": "Kademlia mode: batched iterative lookups (Resolve of up to beta hosts, joins, refreshes)",
    "reconcile_full": "ownership passes that looked at every host held and every replica (a registration, or no view log: consultant mode)",
    "reconcile_ranged": "Kademlia mode: ownership passes that looked only at the hosts a newcomer is closer to (the firstdiff host-key index)",
    "reconcile_hosts_read": "hosts and replicas ownership looked at in its passes (what the firstdiff index saves)",
    "overlay_delegations": "Kademlia mode: hosts this agent, their XOR owner, delegated to a lighter neighbour (kademlia.balance)",
    "overlay_delegations_out": "Kademlia mode: hosts this agent delegates now (it is their XOR owner)",
    "overlay_delegations_in": "Kademlia mode: hosts delegated to this agent by their XOR owners, as announced",
    "fence_refusals": "hosts refused a fetch while the lease had lapsed or the host was held for settling",
    "lease_lapses": "times the consultant forgot this agent or the lease ran out (no fetch until it registers again)",
    "lease_ran_out": "times the lease had run out when an answer renewed it (the fence was closed meanwhile)",
    # Ownership, Replicator, ReplicaStore (docs/replication.md)
    "hosts_settling": "hosts held until their ownership is settled",
    "epoch_settled": "the epoch whose host moves this agent has made (below epoch while a new epoch's are still to come)",
    "replica_hosts": "other agents' hosts backed up here",
    "hosts_promoted": "hosts taken over from a local replica",
    "promotions_refused": "replicas that could not be promoted (a value the frontier cannot store; kept for an operator)",
    "hosts_claimed": "hosts taken over by claiming them from their previous holder",
    "claims_sent": "Claim RPCs sent",
    "claim_failures": "Claim RPCs that failed",
    "claims_timed_out": "claims given up after the settle window",
    "hosts_moved_out": "hosts given to the agent that owns them now",
    "replicas_dropped": "replicas dropped here (the host's owner or backup changed)",
    "replicas_handed_out": "replicas of a departed owner handed to the host's current owner (the host moved as its owner died)",
    "replicas_kept_owner_alive": "replicas whose owner is off the host's new list but alive, kept for its own handover (or claimed from it) rather than handed on",
    "replica_owner_liveness_unknown": "replicas whose owner is off the host's new list, taken for dead because placement could not say who is alive",
    "replicas_handed_in": "hosts taken over from a backup's replica of their departed owner (merged like a promotion)",
    "replicas_superseded_unhanded": "replicas replaced by a new owner's Replicate before they could be handed to it (the handover failed)",
    "replica_unsynced": "this agent's hosts whose backup has no full copy yet",
    "replica_synced_hosts": "this agent's hosts whose backup has a full copy",
    "replica_lag_items": "committed frontier changes not yet at a backup (replica lag)",
    "replica_sends": "Replicate rounds a backup acknowledged",
    "replica_send_failures": "Replicate rounds that failed",
    "replica_hosts_refused": "hosts of this agent's Replicate sends a backup refused (its view of their placement differs: a move one of them has not seen); only those lag",
    "replica_full_copies": "full copies of a host sent to its backup",
    "replica_bytes_out": "bytes sent to backups",
    "replica_drops_sent": "messages telling an old backup to drop its copy of a host (the host or its backup moved)",
    "replica_overflows": "times the changes owed to backups passed their limit (those hosts get a full copy later)",
    "replica_messages": "Replicate messages applied here (as a backup)",
    "replica_drops": "replicas dropped on their owner's request",
    # LoadGauge (agent/placement/load.py, docs/balance.md): as of the last heartbeat
    "load_level": "seed 000's load level L = (queue - W) / load.block: heavy blocks beyond one balance period's work "
                  "(> 0 heavy, < 0 light)",
    "work_area": "seed 000's work area W: URLs the peak rate fetches in load.period seconds",
    "peak_pages_per_second": "the highest fetch rate (pages/s over 10 s) sampled in the last load.peak_window seconds",
    # StoredCheck (agent/crawl/refetch.py)
    "stored_checks": "promoted URLs a dead owner may have stored, asked of storage before fetching them again",
    "refetches_avoided": "of those, URLs storage already held: done without a request",
    "stored_check_errors": "storage Lookup calls that failed (their URLs were fetched)",
    "stored_check_unwatched": "promoted URLs fetched without asking storage (the watch list was full)",
    **SERVER_HELP,
}

SCHEMA = Schema("wancrawl_agent", "agent", HELP, GAUGES, {"fetch_errors": "kind", "incidents": "reason", **SERVER_LABELLED})


def sample(node: AgentNode, security: Security) -> Sample:
    """Every number of the agent, made on the event loop (AgentServer keeps the latest for the
    scrape thread)."""
    return {**node.status_counters(), **security.metrics(), "fetch_errors": dict(node.dispatcher.fetch_errors),
            "incidents": dict(node.incidents.counts)}
