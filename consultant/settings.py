"""The consultant's typed settings: every key, its default and its check, in one place."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any

from consultant.partition import PARTITIONERS, parse_options
from wancrawl.config import TomlWritable, build, load, read_toml, to_data
from wancrawl.runtime.eventloop import check as check_event_loop
from wancrawl.grpcutil import TlsSettings
from wancrawl.hostres import ResolverSettings
from wancrawl.errors import ConfigError


@dataclass(frozen=True)
class DatabaseSettings(TomlWritable):
    # Empty city_db means the GeoLite2 City DB shipped by the maxminddb-geolite2 package.
    city_db: str = ""
    asn_db: str = ""      # a MaxMind ASN DB (database_type contains "ASN")
    pyasn_file: str = ""  # or a pyasn ipasn file; asn_db wins when both are set


@dataclass(frozen=True)
class DnsSettings(ResolverSettings):
    """[dns]: the hosts file, then DNS (when system_dns) through the resolver the shared keys
    choose (wancrawl/hostres.py ResolverSettings: resolver, nameservers, TTL bounds, caches)."""

    hosts_file: str = ""          # /etc/hosts format; consulted before DNS
    system_dns: bool = True       # ask DNS (dns.resolver) for names not in hosts_file


@dataclass(frozen=True)
class BalanceSettings(TomlWritable):
    # Load balancing (docs/balance.md): hosts move from heavy to light agents through overrides,
    # to the allocator's targets. On by default (docs/balance.md "On by default?"): it costs
    # nothing measurable on a cluster of equal agents (0.86-1.03x crawl time in four runs, the
    # rule is at most 1.05x) and every scenario of a full chaos run with it on (session 10, after
    # the fixes of docs/balance.md "Stored twice after a move at a death") lost 0 and stored at
    # most 1 page twice (0.05%). Session 9's full run with it on had stored 2.4% twice in
    # consultant-rolling and 0.7% in kill2, which is why it was off until then.
    enabled: bool = True
    interval: float = 10.0        # seconds between rounds (the agents' load.period should match)
    max_moves: int = 8            # hosts moved per round, at most
    min_gap_seconds: float = 5.0  # a move needs the source's predicted runtime this far above the target's...
    min_ratio: float = 1.5        # ...and this many times it
    min_urls: int = 1             # hosts with fewer queued URLs do not move
    cooldown: float = 60.0        # a host moved stays where it went this long (no ping-pong)
    # Agents silent longer than this (seconds; 0: 0.4 x lease_seconds, one default heartbeat
    # interval of lease/3 and some slack) are left out of the plan: they may be dead.
    max_silence: float = 0.0

    def __post_init__(self) -> None:
        if (self.interval <= 0 or self.max_moves < 0 or self.min_gap_seconds < 0 or self.min_ratio < 1
                or self.min_urls < 1 or self.cooldown < 0 or self.max_silence < 0):
            raise ValueError("balance: interval > 0, max_moves >= 0, min_gap_seconds >= 0, min_ratio >= 1, "
                             "min_urls >= 1, cooldown >= 0, max_silence >= 0")


@dataclass(frozen=True)
class AgentLocation(TomlWritable):
    """One agent's place as the operator states it (`[agents.<id>]`): for agents whose address
    says nothing the consultant can check (behind NAT, in a container). Given fields are used as
    they are; `ip`, when set, is looked up in the City and ASN DBs for the fields left out. It
    comes before the agent's certificate and connection (docs/security.md, "Where an agent is")."""

    city: str = ""
    country: str = ""
    lat: float | None = None
    lon: float | None = None
    asn: int = 0
    ip: str = ""  # the agent's public address (its NAT's), if known

    def __post_init__(self) -> None:
        if (self.lat is None) != (self.lon is None):
            raise ValueError("lat and lon go together")
        if self.lat is not None and not (-90 <= self.lat <= 90 and -180 <= self.lon <= 180):  # type: ignore[operator]
            raise ValueError(f"lat/lon ({self.lat}, {self.lon}) out of range")
        if self.asn < 0:
            raise ValueError(f"asn must be >= 0, got {self.asn}")
        if self.ip:
            try:
                ipaddress.ip_address(self.ip)
            except ValueError:
                raise ValueError(f"ip {self.ip!r} is not an IP address") from None
        if not (self.city or self.country or self.lat is not None or self.asn or self.ip):
            raise ValueError("an agent's location needs at least one of city, country, lat/lon, asn, ip")


@dataclass(frozen=True)
class _ServiceSettings(TomlWritable):
    """Every key but the strategies' option tables."""

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
    # "asyncio" or "uvloop" (wancrawl/runtime/eventloop.py). asyncio by default: uvloop bought Resolve
    # nothing measurable (docs/benchmarks.md "Session 10, branch uvloop"), a host's placement is
    # the consultant's own Python work, not the loop's.
    event_loop: str = "asyncio"
    databases: DatabaseSettings = field(default_factory=DatabaseSettings)
    dns: DnsSettings = field(default_factory=DnsSettings)
    balance: BalanceSettings = field(default_factory=BalanceSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)  # mutual TLS (docs/security.md)
    # Agents' locations stated by the operator, by agent id: [agents.<id>] tables here, and the
    # same tables in the file `agent_locations` names (an id in both is an error).
    agents: dict[str, AgentLocation] = field(default_factory=dict)
    agent_locations: str = ""
    source: str = field(default="defaults", compare=False)  # where the settings came from

    def __post_init__(self) -> None:
        check_event_loop(self.event_loop)
        if self.preference_length < 1:
            raise ValueError("preference_length must be >= 1")
        if not 1 <= self.max_batch <= 100_000:
            raise ValueError("max_batch must be between 1 and 100000")
        if self.ttl_seconds < 0:
            raise ValueError("ttl_seconds must be >= 0")
        if self.lease_seconds <= 0 or self.sweep_interval <= 0 or self.sync_interval <= 0:
            raise ValueError("lease_seconds, sweep_interval and sync_interval must be > 0")


def _default_strategies() -> dict[str, Any]:
    return {name: parse_options(name) for name in PARTITIONERS}


@dataclass(frozen=True)
class ConsultantSettings(_ServiceSettings):
    # Every registered strategy's options by name, from the file's [<name>] table (defaults
    # when it has none). Their types live beside the partitioners, in consultant/partition/.
    strategies: dict[str, Any] = field(default_factory=_default_strategies)

    @property
    def isps(self) -> dict[str, list[int]]:
        """The ISP groups of [asn.isps]: they name agents' and sites' ISPs whatever the strategy."""
        return self.strategies["asn"].isps

    def toml_data(self) -> dict[str, Any]:
        """The file's layout (load_settings reads it back to equal settings): each strategy's
        options in its own top-level [<name>] table, and the agents the `agent_locations` file
        states left to that file (an id in both would be refused)."""
        data = to_data(self)
        strategies = data.pop("strategies", {})
        filed = set(read_toml(self.agent_locations)) if self.agent_locations else set()
        agents = {k: v for k, v in data.pop("agents", {}).items() if k not in filed}
        return {**data, **({"agents": agents} if agents else {}), **{k: v for k, v in strategies.items() if v}}


def _file_layout() -> type:
    # The file keeps each strategy's options in a top-level [<name>] table: one raw table per
    # registered strategy beside the other keys lets the shared loader check the rest (and
    # rebase its paths) as usual, and the registry check those tables.
    tables: list[tuple[str, Any, Any]] = [(name, dict[str, Any], field(default_factory=dict)) for name in PARTITIONERS]
    return make_dataclass("ConsultantFile", tables, bases=(_ServiceSettings,), frozen=True)


def load_settings(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> ConsultantSettings:
    """Settings from a TOML file (or defaults), then the dotted `overrides` (CLI flags)."""
    # Flags for strategy options ("xor.virtual_ids") are checked with their table, not by load().
    flags: dict[str, dict[str, Any]] = {name: {} for name in PARTITIONERS}
    rest: dict[str, Any] = {}
    for dotted, value in (overrides or {}).items():
        name, _, key = dotted.partition(".")
        if name not in flags:
            rest[dotted] = value
        elif value is not None:
            flags[name][key] = value
    raw: Any = load(
        _file_layout(), path, rest,
        paths=("databases.city_db", "databases.asn_db", "databases.pyasn_file", "dns.hosts_file", "tls.ca", "tls.cert", "tls.key",
               "agent_locations"),
        sqlite_urls=("state_url",),
    )
    return _settings(raw, flags)


def from_data(data: dict[str, Any], *, source: str = "config") -> ConsultantSettings:
    """Settings from a config's tables as TOML gives them (a config written by code: the lab's,
    the manager's), checked as load_settings checks a file's; paths are taken as they are."""
    return _settings(replace(build(_file_layout(), data, source=source), source=source), {name: {} for name in PARTITIONERS})


def _settings(raw: Any, flags: dict[str, dict[str, Any]]) -> ConsultantSettings:
    """The file's layout (`raw`, with a raw table per strategy) as settings, each strategy's
    table checked by its registry with the command line's `flags` for it over it."""
    strategies = {}
    for name in PARTITIONERS:
        table = getattr(raw, name)
        strategies[name] = parse_options(name, table, source=raw.source)
        if flags[name]:  # checked again with the flags, so an error names where a bad value came from
            strategies[name] = parse_options(name, {**table, **flags[name]}, source="command line")
    common = {f.name: getattr(raw, f.name) for f in fields(_ServiceSettings)}
    common["agents"] = {**raw.agents, **_agent_locations(raw.agent_locations, raw.agents)}
    return ConsultantSettings(**common, strategies=strategies)


def _agent_locations(path: str, inline: dict[str, AgentLocation]) -> dict[str, AgentLocation]:
    """The [<agent id>] tables of the `agent_locations` file, checked as [agents.<id>] are."""
    if not path:
        return {}
    data = read_toml(path)
    twice = sorted(set(data) & set(inline))
    if twice:
        raise ConfigError(f"{path}: {', '.join(twice)} also in the config's [agents] tables: state each agent's location once")
    out = {}
    for agent_id, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: '{agent_id}' must be a table of city, country, lat, lon, asn, ip")
        out[str(agent_id)] = build(AgentLocation, table, where=f"{agent_id}.", source=path)
    return out


__all__ = ["AgentLocation", "ConsultantSettings", "ConfigError", "from_data", "load_settings"]
