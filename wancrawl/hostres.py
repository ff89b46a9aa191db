"""Host name to IP: a hosts file first, then (optionally) DNS, with caching of answers and failures."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from wancrawl.errors import ConfigError
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


# Why a name has no address. A *definitive* answer (the name does not exist or has no address,
# or is not in the hosts file when DNS is off) lets a crawler give the host up at once; a
# temporary one (a timeout, SERVFAIL / EAI_AGAIN) is worth asking again.
NXDOMAIN = "no such name (NXDOMAIN)"
NO_ADDRESS = "no address for the name"
NOT_LISTED = "not in the hosts file (system DNS off)"
TEMPORARY = "temporary DNS failure"
DEFINITIVE = frozenset({NXDOMAIN, NO_ADDRESS, NOT_LISTED})
_EAI_DEFINITIVE = {getattr(socket, n): w for n, w in (("EAI_NONAME", NXDOMAIN), ("EAI_NODATA", NO_ADDRESS),
                                                     ("EAI_ADDRFAMILY", NO_ADDRESS), ("EAI_FAIL", NXDOMAIN))
                   if hasattr(socket, n)}


class HostResolver:
    """Resolves canonical host names to one IP each (IPv4 preferred).

    Invariant: `_cache[host] = (ip or None, expires_at)`; None is a cached failure, kept
    `negative_ttl` seconds so a dead name is not asked again on every batch; `_why[host]` is
    the reason of the host's last failure (one of NXDOMAIN, NO_ADDRESS, NOT_LISTED, TEMPORARY).
    """

    def __init__(
        self,
        hosts: dict[str, str] | None = None,
        *,
        system_dns: bool = True,
        timeout: float = 2.0,
        ttl: float = 300.0,
        negative_ttl: float = 60.0,
        max_concurrency: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.hosts = dict(hosts or {})
        self.system_dns = system_dns
        self.timeout = timeout
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.clock = clock
        self._cache: dict[str, tuple[str | None, float]] = {}
        self._why: dict[str, str] = {}
        self._sem = asyncio.Semaphore(max_concurrency)
        self.lookups = 0
        self.failures = 0

    def static(self, host: str) -> str | None:
        """The IP if the host is a literal or in the hosts file, else None."""
        return ip_literal(host) or self.hosts.get(host)

    def cached(self, host: str) -> tuple[bool, str | None]:
        """(known, ip): known is False when DNS must be asked."""
        ip = self.static(host)
        if ip is not None:
            return True, ip
        hit = self._cache.get(host)
        if hit is not None and hit[1] > self.clock():
            return True, hit[0]
        if not self.system_dns:
            return True, None
        return False, None

    def failure(self, host: str) -> str | None:
        """Why the host has no address (None: it has one, or was not asked yet)."""
        if self.static(host) is not None:
            return None
        if not self.system_dns and host not in self._cache:
            return NOT_LISTED
        hit = self._cache.get(host)  # a failure while it is cached (negative_ttl): then asked again
        return self._why.get(host) if hit is not None and hit[0] is None and hit[1] > self.clock() else None

    async def resolve(self, host: str) -> str | None:
        known, ip = self.cached(host)
        if known:
            return ip
        why = NO_ADDRESS
        async with self._sem:
            self.lookups += 1
            loop = asyncio.get_running_loop()
            try:
                infos = await asyncio.wait_for(
                    loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), timeout=self.timeout
                )
            except socket.gaierror as exc:
                infos, why = [], _EAI_DEFINITIVE.get(exc.errno, TEMPORARY)
            except UnicodeError:
                infos, why = [], NXDOMAIN  # not a name DNS can carry
            except (OSError, asyncio.TimeoutError):
                infos, why = [], TEMPORARY
        # A host name resolves to AF_INET/AF_INET6 answers, whose sockaddr starts with the address
        # string (the stubs also allow (int, bytes), for CPython builds without IPv6 support).
        addrs = [a for i in infos if isinstance(a := i[4][0], str)]
        v4 = [a for a in addrs if ":" not in a]
        ip = v4[0] if v4 else addrs[0] if addrs else None
        if ip is None:
            self.failures += 1
            self._why[host] = why
        else:
            self._why.pop(host, None)
        self._cache[host] = (ip, self.clock() + (self.ttl if ip else self.negative_ttl))
        return ip

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
            ips = await asyncio.gather(*(self.resolve(h) for h in ask))
            out.update(zip(ask, ips))
        return out
