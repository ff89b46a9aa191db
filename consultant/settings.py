"""The consultant's typed settings: every key, its default and its check, in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wancrawl.config import load
from wancrawl.errors import ConfigError


@dataclass(frozen=True)
class DatabaseSettings:
    # Empty city_db means the GeoLite2 City DB shipped by the maxminddb-geolite2 package.
    city_db: str = ""
    asn_db: str = ""      # a MaxMind ASN DB (database_type contains "ASN")
    pyasn_file: str = ""  # or a pyasn ipasn file; asn_db wins when both are set


@dataclass(frozen=True)
class DnsSettings:
    hosts_file: str = ""          # /etc/hosts format; consulted before DNS
    system_dns: bool = True       # ask the system resolver for names not in hosts_file
    timeout: float = 2.0          # seconds per DNS lookup
    cache_ttl: float = 300.0      # seconds an answer is kept
    negative_ttl: float = 60.0    # seconds a failure is kept
    max_concurrency: int = 64     # DNS lookups in flight at once

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError("dns.timeout must be > 0")
        if self.max_concurrency < 1:
            raise ValueError("dns.max_concurrency must be >= 1")


@dataclass(frozen=True)
class HashOptions:
    salt: str = ""  # change to reshuffle every host (a new hash universe)


@dataclass(frozen=True)
class XorOptions:
    # Virtual ids per agent. One id per agent is textbook Kademlia, but with 10 agents the XOR
    # trie cannot split the key space more evenly than 1.25x the mean; 512 ids bring the
    # busiest agent within ~1.1x (measured in docs/partitioners.md).
    virtual_ids: int = 512

    def __post_init__(self) -> None:
        if not 1 <= self.virtual_ids <= 4096:
            raise ValueError("xor.virtual_ids must be between 1 and 4096")


@dataclass(frozen=True)
class GeoOptions:
    # Agents within this many km of each other count as equally near (ties broken by hash),
    # so agents in one city share that city's sites.
    tie_km: float = 1.0

    def __post_init__(self) -> None:
        if self.tie_km < 0:
            raise ValueError("geo.tie_km must be >= 0")


@dataclass(frozen=True)
class AsnOptions:
    # ISP name -> the AS numbers that make it up, e.g. telecom = [4134, 4809].
    isps: dict[str, list[int]] = field(default_factory=dict)
    # How agents are ordered within the site's ISP, and all agents when none is in it.
    fallback: str = "hash"

    def __post_init__(self) -> None:
        if self.fallback == "asn":
            raise ValueError("asn.fallback cannot be 'asn'")
        seen: dict[int, str] = {}
        for isp, asns in self.isps.items():
            for a in asns:
                if a in seen:
                    raise ValueError(f"asn.isps: AS{a} is in both {seen[a]!r} and {isp!r}")
                seen[a] = isp


@dataclass(frozen=True)
class WeightedOptions:
    # "config": weights below; "heartbeat": each agent's reported capacity.
    source: str = "config"
    weights: dict[str, float] = field(default_factory=dict)
    default_weight: float = 1.0
    # With source = "heartbeat", a weight changes (and the epoch goes up) only when the
    # reported capacity moves by more than this fraction: no epoch churn from noise.
    reweight_threshold: float = 0.2

    def __post_init__(self) -> None:
        if self.source not in ("config", "heartbeat"):
            raise ValueError(f"weighted.source must be 'config' or 'heartbeat', not {self.source!r}")
        if self.default_weight <= 0:
            raise ValueError("weighted.default_weight must be > 0")
        for k, w in self.weights.items():
            if w <= 0:
                raise ValueError(f"weighted.weights.{k} must be > 0")


@dataclass(frozen=True)
class ConsultantSettings:
    listen: str = "127.0.0.1:50051"
    # SQLAlchemy URL of the state (agents, leases, overrides, epoch). Replicas share one
    # PostgreSQL URL, e.g. postgresql+psycopg://user@host/db.
    state_url: str = "sqlite:///consultant-state.db"
    strategy: str = "hash"
    preference_length: int = 3     # owner + backups in each answer
    ttl_seconds: int = 300         # how long agents may cache an answer
    max_batch: int = 10_000        # hosts per Resolve
    lease_seconds: float = 15.0    # an agent that does not heartbeat within this is dead
    sweep_interval: float = 1.0    # how often leases are checked
    sync_interval: float = 0.5     # how often replicas look for a newer epoch in the state
    answer_cache_size: int = 1_000_000  # hosts whose answer is kept for the current epoch
    log_level: str = "INFO"
    metrics_listen: str = ""       # host:port for Prometheus metrics ("" = off)
    databases: DatabaseSettings = field(default_factory=DatabaseSettings)
    dns: DnsSettings = field(default_factory=DnsSettings)
    hash: HashOptions = field(default_factory=HashOptions)
    xor: XorOptions = field(default_factory=XorOptions)
    geo: GeoOptions = field(default_factory=GeoOptions)
    asn: AsnOptions = field(default_factory=AsnOptions)
    weighted: WeightedOptions = field(default_factory=WeightedOptions)
    source: str = field(default="defaults", compare=False)  # where the settings came from

    def __post_init__(self) -> None:
        if self.preference_length < 1:
            raise ValueError("preference_length must be >= 1")
        if not 1 <= self.max_batch <= 100_000:
            raise ValueError("max_batch must be between 1 and 100000")
        if self.ttl_seconds < 0:
            raise ValueError("ttl_seconds must be >= 0")
        if self.lease_seconds <= 0 or self.sweep_interval <= 0 or self.sync_interval <= 0:
            raise ValueError("lease_seconds, sweep_interval and sync_interval must be > 0")

    def strategy_options(self, name: str | None = None) -> Any:
        return getattr(self, name or self.strategy, None)


def load_settings(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> ConsultantSettings:
    """Settings from a TOML file (or defaults), then the dotted `overrides` (CLI flags)."""
    return load(
        ConsultantSettings, path, overrides,
        paths=("databases.city_db", "databases.asn_db", "databases.pyasn_file", "dns.hosts_file"),
        sqlite_urls=("state_url",),
    )


__all__ = ["ConsultantSettings", "ConfigError", "load_settings"]
