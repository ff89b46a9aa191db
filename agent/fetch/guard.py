"""Address policy: which IPs the fetcher may dial (no private, loopback, ... unless allowed)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from functools import lru_cache

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
REASONS = ("invalid", "unspecified", "loopback", "link_local", "multicast", "private", "reserved", "non_global")


def classify(ip: IPAddress) -> str | None:
    """Why an address is not a public unicast one, or None. Most specific reason first."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        # ::ffff:127.0.0.1 dials 127.0.0.1: judge the IPv4 address it carries.
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link_local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:  # before private: Python counts 240.0.0.0/4 as both
        return "reserved"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        # Shared address space (100.64/10), documentation ranges and friends.
        return "non_global"
    return None


class AddressGuard:
    """check(ip) -> None when the fetcher may connect, else a short reason from REASONS."""

    def __init__(self, allow_networks: Iterable[str] = ()):
        nets = []
        for i, n in enumerate(allow_networks):
            try:
                nets.append(ipaddress.ip_network(str(n).strip(), strict=False))
            except ValueError as exc:
                raise ValueError(f"allow_networks[{i}]: {exc}") from None
        self.allow_networks = tuple(nets)
        self.check = lru_cache(maxsize=65536)(self._check)

    def _check(self, ip: str) -> str | None:
        try:
            addr = ipaddress.ip_address(ip.strip("[]").split("%", 1)[0])
        except ValueError:
            return "invalid"
        reason = classify(addr)
        if reason is None:
            return None
        probe = addr.ipv4_mapped if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped else addr
        for net in self.allow_networks:
            if probe.version == net.version and probe in net:
                return None
        return reason

    def allowed(self, ip: str) -> bool:
        return self.check(ip) is None
