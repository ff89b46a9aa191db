"""What a DNS look-up can say (shared by the resolver and its backends): an address with its
TTL, or one of the reasons below; and how a nameserver is written in the settings."""

from __future__ import annotations

import socket
from dataclasses import dataclass


# Why a name has no address. A *definitive* answer (the name does not exist or has no address,
# or is not in the hosts file when DNS is off) lets a crawler give the host up at once; a
# temporary one (a timeout, SERVFAIL / EAI_AGAIN) is worth asking again.
NXDOMAIN = "no such name (NXDOMAIN)"
NO_ADDRESS = "no address for the name"
NOT_LISTED = "not in the hosts file (system DNS off)"
TEMPORARY = "temporary DNS failure"
DEFINITIVE = frozenset({NXDOMAIN, NO_ADDRESS, NOT_LISTED})
EAI_REASONS = {getattr(socket, n): w for n, w in (("EAI_NONAME", NXDOMAIN), ("EAI_NODATA", NO_ADDRESS),
                                                     ("EAI_ADDRFAMILY", NO_ADDRESS), ("EAI_FAIL", NXDOMAIN))
                   if hasattr(socket, n)}


@dataclass(frozen=True, slots=True)
class Lookup:
    """One answer from a DNS backend: the address (None: none), the TTL the answer carried
    (None: the backend gives none, as getaddrinfo does) and, for a failure, why (one of the
    reasons above)."""

    ip: str | None
    ttl: float | None = None
    why: str | None = None


def split_nameserver(ns: str) -> tuple[str, int]:
    """"IP" -> (IP, 53); "IP:PORT" and "[IPv6]:PORT" -> (IP, PORT)."""
    if ns.startswith("["):
        host, _, rest = ns[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else (53 if not rest else -1)
    if ns.count(":") == 1:
        host, _, port = ns.partition(":")
        return host, int(port) if port.isdigit() else -1
    return ns, 53
