"""Host name to IP: a hosts file first, then (optionally) DNS, with a cache of answers and failures.

`HostResolver` is the one interface the agent (dispatcher, fetcher) and the consultant (its
locator) use. Behind it a backend asks DNS: "system" (getaddrinfo in the event loop's thread
pool: no TTLs, the system's resolv.conf) or "cares" (c-ares through aiodns, wancrawl/dns/cares.py:
asynchronous, the answers' TTLs, the nameservers given in the settings). The cache
(wancrawl/dns/cache.py, pure) is shared by everything holding the resolver; a name asked again
while its look-up runs waits for that look-up instead of asking twice.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from wancrawl.config import TomlWritable
from wancrawl.dns.answers import (DEFINITIVE, NO_ADDRESS, NOT_LISTED, NXDOMAIN, TEMPORARY, EAI_REASONS, Lookup,
                                  split_nameserver)
from wancrawl.dns.cache import DnsCache
from wancrawl.errors import ConfigError
from wancrawl.stats import Counters
from wancrawl.urls import canonical_host, ip_literal


def parse_hosts_file(path: str | Path) -> dict[str, str]:
    """An /etc/hosts-format file as {canonical host: first IP}. Bad lines name their number."""
    mapping: dict[str, str] = {}
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"hosts file {p} not found") from None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) < 2 or ip_literal(fields[0]) is None:
            raise ConfigError(f"hosts file {p} line {n}: expected 'IP name...', got {line!r}")
        for name in fields[1:]:
            try:
                mapping.setdefault(canonical_host(name), fields[0])
            except Exception as exc:  # noqa: BLE001
                raise ConfigError(f"hosts file {p} line {n}: {exc}") from None
    return mapping


log = logging.getLogger("wancrawl.dns")

RESOLVERS = ("system", "cares")


@dataclass(frozen=True)
class ResolverSettings(TomlWritable):
    """How names are resolved when DNS is on (the agent's [dns] table; the consultant's [dns]
    adds its hosts file). Keys read by both services, so one class."""

    resolver: str = "system"          # "system" (getaddrinfo in threads) or "cares" (c-ares through aiodns)
    # "IP" or "IP:PORT", asked in turn (cares only; empty: the system's resolv.conf servers). The
    # lab gives its own server here: no query of a test, bench or demo leaves the machine.
    nameservers: tuple[str, ...] = ()
    timeout: float = 2.0              # seconds per look-up, all tries included
    tries: int = 2                    # cares: tries per server within the timeout
    cache_ttl: float = 300.0          # seconds an answer without a TTL is kept (system resolver)
    min_ttl: float = 5.0              # an answer's TTL is kept within [min_ttl, max_ttl]
    max_ttl: float = 3600.0
    negative_ttl: float = 60.0        # seconds a definitive failure (NXDOMAIN, no address) is kept
    temporary_ttl: float = 10.0       # seconds a temporary failure (timeout, SERVFAIL) is kept
    max_concurrency: int = 64         # look-ups in flight: per nameserver (cares), in all (system)
    cache_size: int = 1_000_000       # names kept at most (the oldest answer goes first)

    def __post_init__(self) -> None:
        if self.resolver not in RESOLVERS:
            raise ValueError(f"dns.resolver must be one of {', '.join(RESOLVERS)}, not {self.resolver!r}")
        if self.nameservers and self.resolver != "cares":
            raise ValueError("dns.nameservers needs dns.resolver = \"cares\" (getaddrinfo asks the system's servers)")
        for ns in self.nameservers:
            host, port = split_nameserver(ns)
            if ip_literal(host) is None or not 0 < port < 65536:
                raise ValueError(f"dns.nameservers: {ns!r} is not IP or IP:PORT")
        if self.timeout <= 0 or self.tries < 1:
            raise ValueError("dns.timeout must be > 0 and dns.tries >= 1")
        if not 0 <= self.min_ttl <= self.max_ttl or min(self.cache_ttl, self.negative_ttl, self.temporary_ttl) < 0:
            raise ValueError("dns TTLs must be >= 0 and min_ttl <= max_ttl")
        if self.max_concurrency < 1 or self.cache_size < 1:
            raise ValueError("dns.max_concurrency and dns.cache_size must be >= 1")


class Backend(Protocol):
    """Asks DNS for one name: an address with its TTL, or why there is none (a reason below)."""

    async def lookup(self, host: str) -> Lookup: ...

    async def close(self) -> None: ...


GetAddrInfo = Callable[..., Any]


class SystemLookup:
    """getaddrinfo in the event loop's thread pool (the loop's own, looked up per call, so a
    test can put another in its place). No TTLs: the cache keeps answers cache_ttl."""

    def __init__(self, timeout: float, max_concurrency: int, getaddrinfo: GetAddrInfo | None = None):
        self.timeout = timeout
        self.getaddrinfo = getaddrinfo
        self._sem = asyncio.Semaphore(max_concurrency)

    async def lookup(self, host: str) -> Lookup:
        why = NO_ADDRESS
        async with self._sem:
            gai = self.getaddrinfo or asyncio.get_running_loop().getaddrinfo
            try:
                infos = await asyncio.wait_for(gai(host, None, type=socket.SOCK_STREAM), timeout=self.timeout)
            except socket.gaierror as exc:
                infos, why = [], EAI_REASONS.get(exc.errno, TEMPORARY)
            except UnicodeError:
                infos, why = [], NXDOMAIN  # not a name DNS can carry
            except (OSError, asyncio.TimeoutError):
                infos, why = [], TEMPORARY
        # A host name resolves to AF_INET/AF_INET6 answers, whose sockaddr starts with the address
        # string (the stubs also allow (int, bytes), for CPython builds without IPv6 support).
        addrs = [a for i in infos if isinstance(a := i[4][0], str)]
        v4 = [a for a in addrs if ":" not in a]
        ip = v4[0] if v4 else addrs[0] if addrs else None
        return Lookup(ip) if ip is not None else Lookup(None, None, why)

    async def close(self) -> None:
        pass


@dataclass(slots=True)
class DnsCounters(Counters):
    dns_lookups: int = 0     # names asked of DNS (the cache missed)
    dns_failures: int = 0    # of them, answered without an address (any reason)
    dns_cache_hits: int = 0  # names answered from the cache (an address or a failure still kept)


class HostResolver:
    """Resolves canonical host names to one IP each (IPv4 preferred): the hosts file (and IP
    literals) first, then, when `system_dns` (DNS on), the backend through the cache.

    Invariant: a name is asked of the backend only on a cache miss, and once at a time
    (`_pending`); the cache holds its last answer or failure with the failure's reason (one of
    NXDOMAIN, NO_ADDRESS, TEMPORARY; NOT_LISTED is said without a look-up when DNS is off).
    """

    def __init__(
        self,
        hosts: dict[str, str] | None = None,
        *,
        system_dns: bool = True,
        timeout: float = 2.0,
        ttl: float = 300.0,
        negative_ttl: float = 60.0,
        temporary_ttl: float | None = None,
        min_ttl: float = 0.0,
        max_ttl: float = math.inf,
        max_concurrency: int = 64,
        cache_size: int = 1_000_000,
        backend: Backend | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.hosts = dict(hosts or {})
        self.system_dns = system_dns
        self.clock = clock
        self.backend: Backend = backend or SystemLookup(timeout, max_concurrency)
        # Temporary failures kept as long as definitive ones unless told otherwise (the old behaviour).
        self.cache = DnsCache(default_ttl=ttl, min_ttl=min_ttl, max_ttl=max_ttl, negative_ttl=negative_ttl,
                              temporary_ttl=negative_ttl if temporary_ttl is None else temporary_ttl,
                              max_entries=cache_size, definitive=DEFINITIVE)
        self._pending: dict[str, asyncio.Task[str | None]] = {}
        self.stats = DnsCounters()

    @property
    def lookups(self) -> int:
        return self.stats.dns_lookups

    @property
    def failures(self) -> int:
        return self.stats.dns_failures

    def gauges(self) -> dict[str, float]:
        return {"dns_cached": len(self.cache)}

    def static(self, host: str) -> str | None:
        """The IP if the host is a literal or in the hosts file, else None."""
        ip = self.hosts.get(host)
        if ip is not None:
            return ip
        # Only a name starting with a digit or holding a colon can be a literal: the others skip
        # ipaddress's parse and its ValueError (~10 us, on every URL start through fresh()).
        return ip_literal(host) if host[:1].isdigit() or ":" in host else None

    def cached(self, host: str) -> tuple[bool, str | None]:
        """(known, ip): known is False when DNS must be asked."""
        ip = self.static(host)
        if ip is not None:
            return True, ip
        if not self.system_dns:
            return True, None
        hit = self.cache.get(host, self.clock())
        if hit is not None:
            self.stats.dns_cache_hits += 1
            return True, hit.ip
        return False, None

    def fresh(self, host: str) -> bool:
        """Whether what is known of the host is still good (static, DNS off, or a cache entry
        within its kept time): a crawler holding its address need not ask again before using it."""
        return not self.system_dns or self.cache.peek(host, self.clock()) is not None or self.static(host) is not None

    def failure(self, host: str) -> str | None:
        """Why the host has no address (None: it has one, or was not asked yet, or its cached
        failure expired: then it is asked again)."""
        if self.static(host) is not None:
            return None
        if not self.system_dns:
            return NOT_LISTED
        hit = self.cache.peek(host, self.clock())
        return hit.why if hit is not None else None

    async def resolve(self, host: str) -> str | None:
        known, ip = self.cached(host)
        if known:
            return ip
        return await asyncio.shield(self._task(host))

    def _task(self, host: str) -> asyncio.Task[str | None]:
        """The host's look-up under way, or a new one. Its own task: a caller that gives up
        waiting (a fetch's deadline) does not cancel the look-up the others wait for; it ends by
        the backend's own timeout."""
        task = self._pending.get(host)
        if task is None:
            task = self._pending[host] = asyncio.get_running_loop().create_task(self._ask(host))
        return task

    async def _ask(self, host: str) -> str | None:
        try:
            self.stats.dns_lookups += 1
            try:
                answer = await self.backend.lookup(host)
            except Exception:  # noqa: BLE001 - a backend's bug or a channel that cannot be made
                log.exception("DNS look-up of %s failed", host)
                answer = Lookup(None, None, TEMPORARY)  # asked again after temporary_ttl
            self.stats.dns_failures += answer.ip is None
            self.cache.put(host, answer, self.clock())
            return answer.ip
        finally:
            del self._pending[host]

    async def resolve_many(self, hosts: Iterable[str]) -> dict[str, str | None]:
        hosts = list(dict.fromkeys(hosts))
        out: dict[str, str | None] = {}
        ask = []
        for h in hosts:
            known, ip = self.cached(h)
            if known:
                out[h] = ip
            else:
                ask.append(h)
        if ask:
            # The look-up tasks themselves (one per name, shared with any other caller), under
            # one shield: a task per name less than gathering resolve() calls.
            ips = await asyncio.shield(asyncio.gather(*(self._task(h) for h in ask)))
            out.update(zip(ask, ips))
        return out

    async def close(self) -> None:
        await self.backend.close()


def make_resolver(settings: ResolverSettings, hosts: dict[str, str] | None = None, *, dns: bool = True,
                  clock: Callable[[], float] = time.monotonic) -> HostResolver:
    """The resolver a service's settings ask for: the hosts file first; then, when `dns`, the
    configured backend (c-ares imported only when chosen)."""
    s = settings
    backend: Backend
    if s.resolver == "cares":
        from wancrawl.dns.cares import CaresLookup

        backend = CaresLookup(s.nameservers, timeout=s.timeout, tries=s.tries, max_per_server=s.max_concurrency)
    else:
        backend = SystemLookup(s.timeout, s.max_concurrency)
    return HostResolver(hosts, system_dns=dns, ttl=s.cache_ttl, negative_ttl=s.negative_ttl, temporary_ttl=s.temporary_ttl,
                        min_ttl=s.min_ttl, max_ttl=s.max_ttl, cache_size=s.cache_size, backend=backend, clock=clock)


__all__ = ["DEFINITIVE", "NOT_LISTED", "NO_ADDRESS", "NXDOMAIN", "TEMPORARY", "HostResolver", "Lookup", "ResolverSettings",
           "SystemLookup", "make_resolver", "parse_hosts_file", "split_nameserver"]
