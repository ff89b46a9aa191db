"""Where an agent is: from what the consultant can verify, not from what the agent says.

An agent's location decides which hosts it owns (geo, asn), so a location is a claim on other
agents' hosts: an agent that registers with another's `source_ip` takes that agent's hosts.
The consultant therefore places an agent by, first match wins (docs/security.md, "Where an
agent is"):

1. the operator's word: the agent's `[agents.<id>]` table in the consultant's config (agents
   behind NAT or in containers, whose address says nothing the consultant can check);
2. under mutual TLS, the source address bound in the agent's certificate
   (`wancrawl pki issue DIR agent ID --source-ip ADDR`);
3. under mutual TLS, the address the connection comes from.

In plaintext (tests, `[tls] insecure`) nothing is verified, anyone may call anything: the
agent's own claims are taken as before (service.py keeps that path; rule 1 still applies).

A `source_ip` or location the agent sends is only checked against what was settled: when it
disagrees the Register is refused (PERMISSION_DENIED naming the field), so a misconfigured
agent is told at once instead of being placed somewhere nobody meant. Plain decisions: the DB
lookup is passed in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from consultant.settings import AgentLocation
from wancrawl.errors import PermissionDenied

# A claimed lat/lon agrees with the verified one within this many degrees (about 1 km): the
# same city's coordinates written by hand, not a bit-exact float.
COORD_TOLERANCE = 0.01

_FIX = ("behind NAT or connecting from another address than it fetches from, the operator binds its address in its "
        "certificate (`wancrawl pki issue DIR agent {id} --source-ip ADDR`) or states its location in the consultant's "
        "[agents.{id}] table (docs/security.md)")


@dataclass(frozen=True)
class Evidence:
    """What the consultant knows of a Register's caller besides the request."""

    verified: bool = False  # mutual TLS checked the caller's certificate (False: plaintext, nothing checked)
    certificate_ips: frozenset[str] = frozenset()  # source addresses its certificate binds
    connection_ip: str = ""  # the remote address of the connection ("" for a unix socket)


@dataclass(frozen=True)
class Place:
    """A location as the partitioners use it; empty fields are unknown."""

    city: str = ""
    country: str = ""
    lat: float | None = None
    lon: float | None = None
    asn: int = 0

    def over(self, base: Place) -> Place:
        """This place's fields, `base`'s where this one has none."""
        has = self.lat is not None
        return Place(self.city or base.city, self.country or base.country, self.lat if has else base.lat,
                     self.lon if has else base.lon, self.asn or base.asn)


@dataclass(frozen=True)
class Settled:
    """Where the consultant places an agent, and what it learnt that from."""

    ip: str  # the address the place was looked up for ("" none)
    origin: str  # "its certificate", "the connection", "the consultant's [agents.ID] table"
    place: Place


def normal_ip(ip: str) -> str:
    """`ip` in one spelling (IPv4-mapped IPv6 as IPv4), or "" when it is not an address."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def connection_ip(peer: str) -> str:
    """The remote address of a gRPC peer ("ipv4:203.0.113.7:51234", "ipv6:[::1]:51234");
    "" for anything else (a unix socket)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return ""
    return normal_ip(rest.rpartition(":")[0].strip("[]"))


def _verified_ip(agent_id: str, evidence: Evidence) -> tuple[str, str]:
    bound = sorted({normal_ip(ip) for ip in evidence.certificate_ips} - {""})
    if len(bound) > 1:
        raise PermissionDenied(f"agent {agent_id}'s certificate binds several source addresses ({', '.join(bound)}): "
                               "issue it with one --source-ip")
    if bound:
        return bound[0], "its certificate"
    return evidence.connection_ip, "the connection"


def settle(agent_id: str, claimed_ip: str, claim: Place, evidence: Evidence, configured: AgentLocation | None,
           lookup: Callable[[str], Place]) -> Settled:
    """Where to place `agent_id` (rules 1 and 2 above); PermissionDenied when its claimed
    `source_ip` or location disagrees. `lookup` gives an address's place from the DBs."""
    if configured is not None:
        stated = Place(configured.city, configured.country, configured.lat, configured.lon, configured.asn)
        ip = normal_ip(configured.ip) if configured.ip else ""
        # The agent's own source_ip is not checked here: behind NAT it is a private address
        # that says nothing, and the operator's table decides the place anyway.
        settled = Settled(ip, f"the consultant's [agents.{agent_id}] table", stated.over(lookup(ip)) if ip else stated)
    else:
        ip, origin = _verified_ip(agent_id, evidence)
        if claimed_ip and normal_ip(claimed_ip) != ip:
            raise PermissionDenied(
                f"source_ip {claimed_ip!r} is not agent {agent_id}'s verified address ({ip or 'none'}, from {origin}): "
                f"an agent is located where the consultant can check, not where it says; "
                + _FIX.format(id=agent_id))
        settled = Settled(ip, origin, lookup(ip) if ip else Place())
    check_claim(agent_id, claim, settled)
    return settled


def check_claim(agent_id: str, claim: Place, settled: Settled) -> None:
    """Every location field the agent sent must agree with the settled place."""
    got = settled.place
    wrong: list[tuple[str, object, object]] = []
    for name in ("city", "country"):
        mine, theirs = getattr(claim, name), getattr(got, name)
        if mine and mine.casefold() != theirs.casefold():
            wrong.append((f"location.{name}", mine, theirs))
    if claim.asn and claim.asn != got.asn:
        wrong.append(("location.asn", claim.asn, got.asn))
    if claim.lat is not None and (got.lat is None or got.lon is None or abs(claim.lat - got.lat) > COORD_TOLERANCE
                                  or abs((claim.lon or 0.0) - got.lon) > COORD_TOLERANCE):
        wrong.append(("location.lat/lon", (claim.lat, claim.lon), (got.lat, got.lon) if got.lat is not None else None))
    if wrong:
        field, mine, theirs = wrong[0]
        where = f"{settled.ip} from {settled.origin}" if settled.ip else settled.origin
        raise PermissionDenied(
            f"{field} {mine!r} disagrees with agent {agent_id}'s verified location ({theirs!r}: {where}): an agent's own "
            f"location counts only when it agrees; " + _FIX.format(id=agent_id))


__all__ = ["COORD_TOLERANCE", "Evidence", "Place", "Settled", "check_claim", "connection_ip", "normal_ip", "settle"]
