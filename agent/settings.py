"""The agent's typed settings: every key, its default and its check, in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.fetch import DEFAULT_FETCHER
from agent.fetch.base import FetchSettings
from agent.peers import ALPHA, K, PATHS, ROUTE_TTL
from wancrawl.config import TomlWritable, load
from wancrawl.errors import ConfigError, InvalidArgument
from wancrawl.runtime.eventloop import DEFAULT_EVENT_LOOP
from wancrawl.runtime.eventloop import check as check_event_loop
from wancrawl.failover import parse_addresses
from wancrawl.grpcutil import TlsSettings
from wancrawl.hostres import ResolverSettings
from wancrawl.urls import canonical_host
from wancrawl.warcrecords import DEFAULT_LEVEL


@dataclass
class ScopeSettings(TomlWritable):
    allowed_domains: list[str] = field(default_factory=list)  # host equal to or under one; [] = any
    denied_domains: list[str] = field(default_factory=list)  # wins over allowed_domains
    allow_patterns: list[str] = field(default_factory=list)  # regex searched in the URL; [] = any
    deny_patterns: list[str] = field(default_factory=list)
    # Link hops from a seed (seeds are depth 0; a link or a redirect is one more). On by default,
    # at Heritrix's maxHops: without it a calendar-style trap (one new in-host page per page, every
    # page distinct) is bounded only by the page budget and keeps the crawl from ever finishing.
    # -1 in TOML = no limit, for every optional budget below.
    max_depth: int | None = 20
    # Per-host budgets, on by default (issue 11): a trap host cannot grow the agent's memory or disk
    # without bound. Pages counted persistently (the frontier); unset = no limit.
    max_pages_per_host: int | None = 100_000
    max_queued_per_host: int | None = 50_000   # URLs queued at once; beyond it new ones are dropped
    # Per registered domain (the public suffix list: wancrawl/domains.py), on by default (issue 25):
    # a site that spawns subdomains (one per user, per session, wildcard DNS) is held as one. A
    # host new to this agent whose domain already has max_hosts_per_domain hosts here is refused;
    # a domain's pages count across its hosts (durable: the frontier's per-host counts). Counted
    # per agent: hosts are placed one by one, so a domain's hosts on n agents may have n budgets.
    max_pages_per_domain: int | None = 1_000_000
    max_hosts_per_domain: int | None = 1_000
    max_outlinks_per_page: int = 6_000          # links kept per page (Heritrix's default)
    max_urls_per_query_shape: int | None = 1_000  # URLs of a host differing only in query values
    follow_rel_nofollow: bool = True  # follow <a rel="nofollow"> (meta robots nofollow is always honoured)
    max_url_length: int = 2048
    max_path_depth: int = 32  # path segments
    max_segment_repeats: int = 2  # a block of path segments (any width) repeated back to back more often than this is a trap
    # One segment more often than this anywhere in a path is a trap: blocks that alternate (a/,
    # x1/x2/x3/x4/, never one three times in a row) escape the back-to-back rule and grow paths
    # exponentially up to max_path_depth; with every segment at most this often, a trap of D
    # distinct segments has paths of at most D * max_segment_count segments.
    max_segment_count: int = 4
    max_query_params: int = 32
    schemes: list[str] = field(default_factory=lambda: ["http", "https"])  # of the URLs followed
    ports: list[int] = field(default_factory=list)  # [] = any; else only these (a URL without a port: 80 or 443)
    TOML_NONE = -1  # not a field: to_toml writes a budget's None ("no limit") as -1, read back below

    def __post_init__(self) -> None:
        for key in ("allowed_domains", "denied_domains"):
            doms = []
            for i, d in enumerate(getattr(self, key)):
                try:
                    doms.append(canonical_host(str(d).lstrip(".")))
                except InvalidArgument as exc:
                    raise ValueError(f"{key}[{i}]: {exc}") from None
            setattr(self, key, doms)
        for key in ("allow_patterns", "deny_patterns"):
            for i, p in enumerate(getattr(self, key)):
                try:
                    re.compile(p)
                except re.error as exc:
                    raise ValueError(f"{key}[{i}]: bad regex {p!r}: {exc}") from None
        for key in ("max_depth", "max_pages_per_host", "max_queued_per_host", "max_urls_per_query_shape",
                    "max_pages_per_domain", "max_hosts_per_domain"):
            v = getattr(self, key)
            if v == -1:
                setattr(self, key, None)  # TOML has no null: -1 says "no limit"
            elif v is not None and v < 0:
                raise ValueError(f"{key} must be >= 0, or -1 for no limit, got {v}")
        bad = [x for x in self.schemes if x not in ("http", "https")]
        if bad or not self.schemes:
            raise ValueError(f"schemes must be a non-empty subset of http, https (got {self.schemes})")
        if any(not 0 < p < 65536 for p in self.ports):
            raise ValueError(f"ports must be 1..65535 (got {self.ports})")
        for key in ("max_url_length", "max_path_depth", "max_segment_repeats", "max_segment_count", "max_query_params",
                    "max_outlinks_per_page"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")


@dataclass(frozen=True)
class LocationSettings(TomlWritable):
    # Empty: the consultant derives city/coordinates/ASN from source_ip through its DBs.
    city: str = ""
    country: str = ""
    lat: float | None = None
    lon: float | None = None
    asn: int = 0

    def __post_init__(self) -> None:
        if (self.lat is None) != (self.lon is None):
            raise ValueError("location.lat and location.lon go together")
        if self.lat is not None and not (-90 <= self.lat <= 90 and -180 <= self.lon <= 180):  # type: ignore[operator]
            raise ValueError("location.lat/lon out of range")


@dataclass(frozen=True)
class RoutingSettings(TomlWritable):
    alpha: int = 1000            # URLs per PushUrls (seed 002's alpha)
    beta: int = 1000             # hosts per Resolve (seed 002's beta)
    flush_interval: float = 0.2  # seconds a partial push batch may wait
    host_cache_size: int = 1_000_000
    retry_seconds: float = 1.0   # pause before asking again after a failed Resolve or push
    max_pushes_in_flight: int = 16
    recent_filter: int = 200_000  # URLs remembered as routed lately (skipped when seen again)

    def __post_init__(self) -> None:
        if not 1 <= self.alpha <= 100_000 or not 1 <= self.beta <= 10_000:
            raise ValueError("routing.alpha must be 1..100000 and routing.beta 1..10000 (the consultant's limit)")
        if self.flush_interval < 0 or self.retry_seconds <= 0:
            raise ValueError("routing.flush_interval must be >= 0 and routing.retry_seconds > 0")


@dataclass(frozen=True)
class PolitenessSettings(TomlWritable):
    delay: float = 1.0           # seconds between two fetches of one host
    max_per_host: int = 1        # connections (fetches in flight) per host
    max_per_ip: int = 4          # per server IP (virtual hosts share it)
    # Seconds between fetch starts to one server IP, whatever the host name (BUbiNG's per-IP
    # delay): virtual hosts and generated subdomains on one server share its capacity, so 2,000
    # names on one IP get 4 requests/s, not 2,000. Never stricter than `delay` (delay 0: off).
    ip_delay: float = 0.25
    max_crawl_delay: float = 60.0  # robots.txt Crawl-delay is honoured up to this
    max_backoff: float = 3600.0  # exponential backoff after 5xx/errors grows up to this
    max_retry_after: float = 3600.0  # a Retry-After longer than this is cut to it
    max_retries: int = 3         # 429/5xx/network errors before a URL is given up
    # A host that cannot be fetched for longer than this (Retry-After, backoff, robots.txt
    # unreachable) is "parked": it does not keep the crawl from counting as finished.
    park_horizon: float = 300.0
    # An origin whose requests have failed without any answer (refused, timed out, TLS...) for
    # this long is given up (its URLs dropped with the reason); the host's other origins go on.
    # As robots.give_up_after: a site down for an hour is not waited for by a crawl.
    origin_give_up_after: float = 3600.0

    def __post_init__(self) -> None:
        if self.delay < 0 or self.ip_delay < 0 or self.max_per_host < 1 or self.max_per_ip < 1 or self.max_retries < 0:
            raise ValueError("politeness: delays >= 0, max_per_host/max_per_ip >= 1, max_retries >= 0")
        if self.origin_give_up_after <= 0:
            raise ValueError("politeness.origin_give_up_after must be > 0")


@dataclass(frozen=True)
class RobotsSettings(TomlWritable):
    enabled: bool = True
    ttl: float = 86400.0
    error_ttl: float = 600.0       # longest wait before asking an unreachable robots.txt again
    retry_base: float = 5.0        # first wait after a 5xx / network error (doubles each time)
    give_up_after: float = 3600.0  # robots.txt unreachable this long: the host is given up
    park_after: float = 120.0      # unreachable this long: the host counts as parked (the crawl can end)

    def __post_init__(self) -> None:
        if self.ttl <= 0 or self.error_ttl <= 0 or self.retry_base <= 0 or self.give_up_after <= 0 or self.park_after < 0:
            raise ValueError("robots.ttl, error_ttl, retry_base and give_up_after must be > 0, park_after >= 0")


@dataclass(frozen=True)
class MemorySettings(TomlWritable):
    """The agent's memory budget on any input (issue 25; docs/agent-fetching.md "Memory"). With
    the defaults one agent stays under 300 MB RSS on the lab's hostile web (bench/parts/memory.py)."""

    # The HTML parser sees at most this many bytes of a body at once: a bigger body is parsed in
    # pieces, and a piece without a link tag is not parsed. lexbor's tree costs up to ~60 bytes
    # per byte (bare <p> tags): 256 KiB holds a parse to ~15 MB.
    parse_piece_bytes: int = 256 * 1024
    # Bytes being parsed at once, threads included: each parse holds min(body, piece) bytes and
    # waits for room (one bigger than the budget runs alone). 1 MiB: four big parses at most.
    parse_bytes_in_flight: int = 1024 * 1024
    # Free heap the C allocator keeps at its top instead of giving it back to the kernel, and the
    # block size up to which it serves blocks from the heap (glibc's M_TRIM_THRESHOLD and
    # M_MMAP_THRESHOLD; wancrawl/runtime/malloc.py says why: lexbor's parse faulted its tree's pages in
    # anew on every page). 0: glibc's own defaults, nothing set.
    heap_keep_bytes: int = 32 * 1024 * 1024
    heap_mmap_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.parse_piece_bytes < 4096 or self.parse_bytes_in_flight < 1:
            raise ValueError("memory.parse_piece_bytes must be >= 4096 and memory.parse_bytes_in_flight >= 1")
        if not 0 <= self.heap_keep_bytes < 2**31 or not 0 <= self.heap_mmap_bytes <= 32 * 1024 * 1024:
            raise ValueError("memory.heap_keep_bytes must be in [0, 2 GiB) and memory.heap_mmap_bytes in [0, 32 MiB]")


@dataclass(frozen=True)
class SitemapSettings(TomlWritable):
    """Sitemaps (sitemaps.org; agent/crawl/sitemap.py, docs/agent-fetching.md "Sitemaps")."""

    enabled: bool = False            # follow robots.txt `Sitemap:` lines (off by default: docs say why)
    well_known: bool = False         # also ask /sitemap.xml of each origin (one more request per origin)
    max_files_per_host: int = 100    # sitemap and index files fetched per host (this agent's lifetime)
    max_bytes_per_host: int = 500 * 1024 * 1024  # decompressed sitemap bytes read per host
    max_urls_per_host: int = 100_000  # sitemap entries taken per host (scope.max_pages_per_host's default)
    max_urls_per_file: int = 50_000  # the protocol's limit
    max_file_bytes: int = 50 * 1024 * 1024  # decompressed, per file (the protocol's 52,428,800)
    max_robots_lines: int = 50       # Sitemap: lines taken from one robots.txt

    def __post_init__(self) -> None:
        if min(self.max_files_per_host, self.max_bytes_per_host, self.max_urls_per_host, self.max_urls_per_file, self.max_file_bytes,
               self.max_robots_lines) < 1:
            raise ValueError("sitemaps: every max_* must be >= 1")
        if self.max_urls_per_file > 50_000 or self.max_file_bytes > 50 * 1024 * 1024:
            raise ValueError("sitemaps: max_urls_per_file <= 50000 and max_file_bytes <= 52428800 (the protocol's limits)")


@dataclass(frozen=True)
class StorageOutSettings(TomlWritable):
    batch_pages: int = 100        # pages per PageBatch
    flush_interval: float = 0.2   # seconds a partial batch may wait (pages count as done once spooled)
    fsync: bool = True            # spool files are fsynced before pages count as done
    retry_seconds: float = 1.0
    gzip_level: int = DEFAULT_LEVEL  # zlib scale 1..9, deflated by ISA-L (1-5: its level 1; wancrawl/warcrecords.py)
    # Captures storage refuses as not placed (this agent not on their host's preference list,
    # e.g. declared dead during a pause until it registers again) are sent again for this long,
    # then set aside in spool/rejected (agent/state/shipper.py).
    not_placed_hold: float = 120.0

    def __post_init__(self) -> None:
        if self.batch_pages < 1 or not 1 <= self.gzip_level <= 9:
            raise ValueError("storage.batch_pages >= 1 and storage.gzip_level 1..9")
        if self.not_placed_hold < 0:
            raise ValueError("storage_out.not_placed_hold must be >= 0")


REVISIT_POLICIES = ("fixed", "adaptive", "optimal")  # agent/state/revisit.py


@dataclass(frozen=True)
class RevisitSettings(TomlWritable):
    """Continuous crawling (issue 26; docs/continuous.md). Off by default: a one-shot crawl
    fetches each URL once. On, every page fetched with a 2xx answer is due again after an
    interval chosen by `policy`, and a revisit asks with If-None-Match / If-Modified-Since."""

    enabled: bool = False
    policy: str = "fixed"             # fixed | adaptive (Nutch) | optimal (Cho and Garcia-Molina)
    interval: float = 86400.0         # fixed interval; the first interval of the other two
    min_interval: float = 60.0        # bounds of the adaptive and optimal intervals
    max_interval: float = 30 * 86400.0
    inc_rate: float = 0.4             # adaptive: interval * (1 + inc_rate) when a page did not change
    dec_rate: float = 0.2             # adaptive: interval * (1 - dec_rate) when it did
    pages_per_host_day: float = 1000.0  # optimal: revisits per host per day the intervals are planned for
    # Of a host's fetch slots when both kinds are due, at least this share goes to first visits
    # (discovery); revisits take the rest. Either kind alone takes every slot.
    discovery_share: float = 0.5
    conditional: bool = True          # send If-None-Match / If-Modified-Since from the last capture

    def __post_init__(self) -> None:
        if self.policy not in REVISIT_POLICIES:
            raise ValueError(f"revisit.policy must be one of {', '.join(REVISIT_POLICIES)}, got {self.policy!r}")
        # interval is not checked against the bounds (flags set one key at a time): the
        # policies clamp every interval into [min_interval, max_interval].
        if not (0 < self.min_interval <= self.max_interval and self.interval > 0):
            raise ValueError("revisit: 0 < min_interval <= max_interval, interval > 0")
        if not (0 <= self.inc_rate <= 10 and 0 <= self.dec_rate < 1):
            raise ValueError("revisit: inc_rate 0..10, dec_rate 0..<1")
        if self.pages_per_host_day <= 0 or not 0 <= self.discovery_share <= 1:
            raise ValueError("revisit: pages_per_host_day > 0, discovery_share 0..1")


@dataclass(frozen=True)
class ReplicationSettings(TomlWritable):
    # Each owned host's committed state goes to its first `backups` backups (docs/replication.md):
    # r = 2 survives the owner and its first backup dying at once (the consultant names three
    # agents per host; a shorter list replicates to as many as it names).
    enabled: bool = True
    backups: int = 2
    interval: float = 0.2         # seconds between replication rounds (changes of each commit)
    retry_seconds: float = 2.0    # after a failed send, that backup's hosts wait this long
    max_pending: int = 500_000    # changes held for lagging backups before hosts go whole later
    # Lease fence: no fetch unless the consultant answered a heartbeat within the lease. Off only
    # for an agent crawling alone without a consultant.
    fence: bool = True
    # After an epoch change or a registration, URLs of hosts new here wait until the agents of
    # the host's preference list answered a claim, for at most this long (0: twice the lease).
    settle_seconds: float = 0.0
    # A promoted replica's URLs the dead owner had fetched but not yet stored wait this long: an
    # owner that was only paused stores them and takes its hosts back meanwhile (no page twice);
    # a dead one's are fetched again after it.
    unshipped_grace: float = 10.0
    # ... and when they are due, storage is asked first (Lookup): those it holds from the dead
    # owner are not fetched again (agent/crawl/refetch.py). Likewise an agent whose lease lapsed asks
    # before shipping the pages it spooled before the lapse (agent/state/shipper.py): those the new
    # owner stored meanwhile are dropped. Off: both are fetched/stored (at least once).
    check_storage: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.backups <= 8:
            raise ValueError("replication.backups (r) must be 1..8")
        if (self.interval <= 0 or self.retry_seconds <= 0 or self.max_pending < 1 or self.settle_seconds < 0
                or self.unshipped_grace < 0):
            raise ValueError("replication: interval and retry_seconds > 0, max_pending >= 1, settle_seconds and "
                             "unshipped_grace >= 0")


@dataclass(frozen=True)
class KademliaSettings(TomlWritable):
    """The consultant-less mode (`mode = "kademlia"`, docs/kademlia.md): the overlay's knobs with
    the Kademlia paper's and libp2p's defaults (k = 20, alpha = 3) and leases like the
    consultant's (15 s)."""

    bootstrap: tuple[str, ...] = ()  # host:port of agents to join through (this agent's own address is skipped)
    k: int = K                       # bucket size and contacts per FIND_NODE answer (Kademlia, libp2p: 20)
    alpha: int = ALPHA               # lookups' parallelism (Kademlia, libp2p: 3)
    # Disjoint lookup paths (S/Kademlia d): a node is asked by one path only, and a key's result
    # is the union of the paths' (issue 36: no single peer's answer decides). 1: one path.
    paths: int = PATHS
    # An owner fetches only while all its k closest answered a ping within this. The pings are
    # the agent's heartbeats: every `heartbeat_interval` seconds (0: a third of the lease).
    lease_seconds: float = 15.0
    # A neighbour silent this long (by this node's clock) is dead: its hosts go to the next
    # closest. At least the lease: the owner's fence closes first (docs/kademlia.md, "Leases").
    dead_after: float = 15.0
    refresh_interval: float = 600.0  # bucket refresh (Kademlia: 3600 s; libp2p: 600 s)
    route_ttl: int = ROUTE_TTL       # seconds an agent caches a host's preference list (300)
    # Load balancing by diffusion (seed 000 §1.4; docs/kademlia.md "Load balancing in this mode"):
    # each node sends its load level in its Pings and, when heavy, delegates some of the hosts it
    # owns by XOR to light neighbours, nearest k-bucket first. Off by default (unlike consultant
    # mode's [balance] enabled): its chaos runs with it on lost nothing, but delegated too few
    # hosts around the faults to call it equally safe (docs/balance.md, "On by default?").
    balance: bool = False
    balance_max_moves: int = 4        # hosts one node delegates per heartbeat, at most
    balance_min_gap: float = 5.0      # a move needs this node's predicted runtime this far above the target's...
    balance_min_ratio: float = 1.5    # ...and this many times it (hysteresis: no ping-pong)
    balance_cooldown: float = 60.0    # a delegated host stays put this long
    balance_max_delegations: int = 64  # delegations one node holds at once (each travels in every Ping; at most 256)

    def __post_init__(self) -> None:
        if not 0 <= self.balance_max_moves <= 100 or not 1 <= self.balance_max_delegations <= 256:
            raise ValueError("kademlia: balance_max_moves must be 0..100 and balance_max_delegations 1..256")
        if self.balance_min_gap < 0 or self.balance_min_ratio < 1 or self.balance_cooldown < 0:
            raise ValueError("kademlia: balance_min_gap >= 0, balance_min_ratio >= 1, balance_cooldown >= 0")
        if not 1 <= self.k <= 100 or not 1 <= self.alpha <= self.k or not 1 <= self.paths <= self.k:
            raise ValueError("kademlia: k must be 1..100, alpha 1..k and paths 1..k")
        if self.lease_seconds <= 0 or self.refresh_interval <= 0:
            raise ValueError("kademlia: lease_seconds and refresh_interval must be > 0")
        if self.dead_after < self.lease_seconds:
            raise ValueError("kademlia.dead_after must be at least lease_seconds (an owner's fence closes first)")
        if self.route_ttl < 1:
            raise ValueError("kademlia.route_ttl must be >= 1")


@dataclass(frozen=True)
class LoadSettings(TomlWritable):
    # Seed 000's load level L = S - W_f/H, reported in every heartbeat (docs/balance.md).
    period: float = 10.0        # T: the balance period; the work area W is what the peak rate fetches in it
    block: int = 20             # H: URLs per heavy block (the paper's 20); only scales L
    peak_window: float = 120.0  # seconds the peak fetch rate is remembered (an idle agent keeps its capability)
    report_hosts: int = 32      # longest host queues sent with each heartbeat (the movable hosts)
    # The disk write rate (MB/s) reported as seed 003's disk_io; 0 = unknown (not measured: the
    # agent's writes are a WAL append per flush, rarely its bottleneck).
    disk_mbps: float = 0.0

    def __post_init__(self) -> None:
        if self.period <= 0 or self.block < 1 or self.peak_window <= 0 or not 0 <= self.report_hosts <= 1000:
            raise ValueError("load: period and peak_window > 0, block >= 1, report_hosts 0-1000")
        if not 0 <= self.disk_mbps <= 1e9:
            raise ValueError("load.disk_mbps must be 0..1e9")


@dataclass(frozen=True)
class AgentSettings(TomlWritable):
    agent_id: str = ""
    listen: str = "127.0.0.1:0"       # the Agent gRPC service
    advertise: str = ""               # host:port peers dial; default: the bound listen address
    # Who places hosts: "consultant" (seed 002: the consultant at `consultant`) or "kademlia"
    # (seeds 000 and 001: the agents' own overlay, [kademlia]; no consultant process).
    mode: str = "consultant"
    # The consultant, or its replicas over one state: `consultants = ["a:1", "b:2"]` (or
    # `consultant = "a:1,b:2"`), best first; calls fail over to the next that answers
    # (docs/consultant.md "Replicas and failover").
    consultant: str = "127.0.0.1:50051"
    consultants: tuple[str, ...] = ()
    storage: str = ""                 # storage address, or several "a,b" ranked (own region first; failover); empty: pages stay in the spool
    data_dir: str = "agent-data"      # frontier, seen set, outbox, spool
    source_ip: str = ""               # local address fetches come from (the lab needs it); also fetch.source_ip
    hosts_file: str = ""              # host -> IP before DNS (a small lab's names live only there)
    system_dns: bool = True           # ask DNS ([dns]: system getaddrinfo or c-ares) for names not in hosts_file
    dns: ResolverSettings = field(default_factory=ResolverSettings)
    capacity: float = 0.0             # relative capacity reported to the consultant (weighted)
    concurrency: int = 100            # fetches in flight
    heartbeat_interval: float = 0.0   # 0: a third of the consultant's lease
    commit_interval: float = 0.1      # group commit of frontier, seen set, outbox and spool
    # No group commit completed for this long (commits failing, or the commit loop stopped): the
    # agent reports NOT_SERVING and withholds its heartbeats, so the consultant's lease expires
    # and its hosts fail over (docs/agent.md). Well under the consultant's lease (15 s).
    commit_stall_seconds: float = 5.0
    metrics_listen: str = ""          # host:port for Prometheus metrics ("" = off)
    progress_interval: float = 30.0   # seconds between progress lines in the log (0 = none)
    # Sample the event loop's lag every this many seconds (0 = off): gauges loop_lag_max (wall)
    # and loop_busy_max (the loop thread's own CPU), counters loop_stalls and loop_late (over
    # 0.1 s; wancrawl/runtime/looplag.py). Off by default: a 10 ms timer costs the agent ~1% CPU.
    loop_lag_interval: float = 0.0
    fetcher: str = DEFAULT_FETCHER    # lean, aiohttp or httpx (docs/agent-fetching.md)
    # The event loop the agent runs on: "uvloop" (libuv; cheaper per page, docs/benchmarks.md
    # "Session 10, branch uvloop") or "asyncio" (the standard library's). wancrawl/runtime/eventloop.py.
    event_loop: str = DEFAULT_EVENT_LOOP
    sort_query: bool = False          # canonicalisation: sort query parameters
    log_level: str = "INFO"
    location: LocationSettings = field(default_factory=LocationSettings)
    fetch: FetchSettings = field(default_factory=FetchSettings)
    politeness: PolitenessSettings = field(default_factory=PolitenessSettings)
    robots: RobotsSettings = field(default_factory=RobotsSettings)
    sitemaps: SitemapSettings = field(default_factory=SitemapSettings)
    scope: ScopeSettings = field(default_factory=ScopeSettings)
    routing: RoutingSettings = field(default_factory=RoutingSettings)
    storage_out: StorageOutSettings = field(default_factory=StorageOutSettings)
    memory: MemorySettings = field(default_factory=MemorySettings)
    replication: ReplicationSettings = field(default_factory=ReplicationSettings)
    load: LoadSettings = field(default_factory=LoadSettings)
    kademlia: KademliaSettings = field(default_factory=KademliaSettings)
    revisit: RevisitSettings = field(default_factory=RevisitSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)  # mutual TLS, server and client (docs/security.md)
    source: str = field(default="defaults", compare=False)

    def __post_init__(self) -> None:
        if self.source_ip and self.fetch.source_ip and self.source_ip != self.fetch.source_ip:
            raise ValueError(f"source_ip {self.source_ip!r} and fetch.source_ip {self.fetch.source_ip!r} differ: set one")
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.mode not in ("consultant", "kademlia"):
            raise ValueError(f"mode must be \"consultant\" or \"kademlia\", got {self.mode!r}")
        if self.consultants and self.consultant not in ("", "127.0.0.1:50051", ",".join(self.consultants)):
            raise ValueError(f"consultant {self.consultant!r} and consultants {list(self.consultants)} differ: set one")
        try:
            consultant_addresses(self)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        check_event_loop(self.event_loop)
        if self.loop_lag_interval < 0:
            raise ValueError(f"loop_lag_interval must be >= 0 (0 = off), got {self.loop_lag_interval}")
        if self.commit_interval <= 0:
            raise ValueError("commit_interval must be > 0")
        if self.commit_stall_seconds <= 2 * self.commit_interval:
            raise ValueError(f"commit_stall_seconds must be more than twice commit_interval ({self.commit_interval}), "
                             f"got {self.commit_stall_seconds}")


def consultant_addresses(s: AgentSettings) -> tuple[str, ...]:
    """The consultant replicas to ask, best first: `consultants`, else `consultant` split at commas."""
    return parse_addresses(s.consultants or s.consultant, where="consultants" if s.consultants else "consultant")


def bind_ip(s: AgentSettings) -> str:
    """The address the agent fetches from (one setting, two places to write it)."""
    return s.source_ip or s.fetch.source_ip


def fetch_settings(s: AgentSettings) -> FetchSettings:
    """The fetcher's settings as the agent runs it: its source address, and connections per
    host and in all from the politeness and concurrency settings (the scheduler decides when
    a host may be fetched; a lower pool limit would make fetches wait inside the fetcher with
    their timeouts running)."""
    return replace(
        s.fetch, source_ip=bind_ip(s), max_connections_per_host=s.politeness.max_per_host,
        max_connections=max(s.fetch.max_connections, s.concurrency),
    )


def load_settings(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> AgentSettings:
    """Settings from a TOML file (or defaults), then the dotted `overrides` (CLI flags)."""
    s = load(AgentSettings, path, overrides, paths=("hosts_file", "data_dir", "tls.ca", "tls.cert", "tls.key"))
    if not s.agent_id:
        raise ConfigError(f"{s.source}: agent_id is required (key 'agent_id' or --id)")
    return s
