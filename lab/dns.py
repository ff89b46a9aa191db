"""The lab's authoritative DNS server (issue 37): the topology's names over UDP and TCP on a
loopback port, with TTLs, names that do not exist, names that never answer, and CNAME chains.

`Zone` is the pure part: what the server answers for a name (computed from the topology on
demand, so a zone costs nothing per host). `DnsServer` carries it over asyncio sockets, with
dnslib for the wire format; `DnsThread` runs one on its own loop thread for tests and benches.
The server is the whole DNS of the emulated internet: it answers every name itself (never
recursing, never forwarding), so no query reaches a server outside this machine; a name it does
not know is NXDOMAIN (the hostile dead-names site's `.invalid` names among them).

Which normal sites misbehave is drawn from a hash of the host name and `dns.seed`
(topology.DnsSpec): a share answers NXDOMAIN, a share is never answered (a resolver times out:
a temporary failure), a share is reached through a chain of `cname_depth` CNAMEs
(`c1.HOST.cname.DOMAIN` -> `c2...` -> the A record). The web server still serves those sites;
only their names misbehave, and lab/truth.py's `resolves` leaves them out of the truth.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import socket
import struct
import threading
from dataclasses import dataclass

from dnslib import CNAME, DNSRecord, QTYPE, RCODE, RR, SOA, A, DNSError  # type: ignore[import-untyped]

from lab.topology import Topology

log = logging.getLogger("lab.dns")

# What a name does, by kind. Every kind but RESOLVES is a failure a crawler must handle.
RESOLVES, NXDOMAIN, TIMEOUT = "resolves", "nxdomain", "timeout"
CNAME_LABEL = "cname"  # chain names: cK.HOST.cname.DOMAIN


@dataclass(frozen=True)
class Answer:
    """What the zone says of a name: `rcode` (0 NOERROR, 3 NXDOMAIN; None: no answer at all),
    the CNAME chain [(name, target, ttl)] and the address with its TTL (None: no A record)."""

    rcode: int | None
    chain: tuple[tuple[str, str, int], ...] = ()
    ip: str | None = None
    ttl: int = 0


class Zone:
    """The names of a topology as DNS answers (pure; no sockets). `kind(host)` says what a
    site's name does; `resolves(host)` is what a crawler can reach; `answer(name)` is the
    server's reply to an A query."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.spec = topology.spec.dns
        self.domain = topology.spec.sites.domain.lower().strip(".")
        self.soa_name = self.domain + "."

    def kind(self, host: str) -> str:
        """RESOLVES, NXDOMAIN or TIMEOUT for a site's host name (hostile and unknown names:
        RESOLVES and NXDOMAIN, as the name exists or not)."""
        h = host.lower().rstrip(".")
        site = self.topology.site(h)
        if site is None:
            return NXDOMAIN
        if site.hostile:
            return RESOLVES
        d = self.spec
        u = self._draw(h, "kind")
        if u < d.nxdomain_ratio:
            return NXDOMAIN
        if u < d.nxdomain_ratio + d.timeout_ratio:
            return TIMEOUT
        return RESOLVES

    def resolves(self, host: str) -> bool:
        return self.kind(host) == RESOLVES

    def has_chain(self, host: str) -> bool:
        """The site's name is answered through a CNAME chain (drawn apart from the kind)."""
        d = self.spec
        if d.cname_depth == 0 or d.cname_ratio == 0:
            return False
        u = self._draw(host.lower().rstrip("."), "kind")
        lo = d.nxdomain_ratio + d.timeout_ratio
        return lo <= u < lo + d.cname_ratio

    def _draw(self, host: str, what: str) -> float:
        digest = hashlib.blake2b(f"{self.spec.seed}:{what}:{host}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0**64

    def chain_names(self, host: str) -> list[str]:
        """The CNAME targets of a chained site, in order (the last one holds the A record)."""
        return [f"c{k}.{host}.{CNAME_LABEL}.{self.domain}" for k in range(1, self.spec.cname_depth + 1)]

    def _chain_owner(self, name: str) -> tuple[str, int] | None:
        """(site host, position 1..depth) of a chain name, else None."""
        suffix = f".{CNAME_LABEL}.{self.domain}"
        if not name.endswith(suffix) or not name.startswith("c"):
            return None
        first, _, host = name[: -len(suffix)].partition(".")
        if not first[1:].isdigit() or not 1 <= int(first[1:]) <= self.spec.cname_depth:
            return None
        if not self.has_chain(host) or self.kind(host) != RESOLVES:
            return None
        return host, int(first[1:])

    def answer(self, name: str) -> Answer:
        """The reply to an A query for `name` (case-insensitive, trailing dot ignored)."""
        n = name.lower().rstrip(".")
        d = self.spec
        owner = self._chain_owner(n)
        if owner is not None:
            host, k = owner
            chain = self.chain_names(host)[k - 1:]
        else:
            kind = self.kind(n)
            if kind == TIMEOUT:
                return Answer(None)
            if kind == NXDOMAIN:
                return Answer(int(RCODE.NXDOMAIN))
            host = n
            chain = [n] + self.chain_names(n) if self.has_chain(n) else [n]
        site = self.topology.site(host)
        assert site is not None  # kind RESOLVES or a chain owner: a site of the plan
        links = tuple((chain[i], chain[i + 1], d.cname_ttl) for i in range(len(chain) - 1))
        return Answer(0, links, site.ip, d.ttl)


def reply(zone: Zone, data: bytes, whole_chains: bool = True) -> bytes | None:
    """The wire reply to one query message, or None (no answer: a TIMEOUT name, or garbage).
    `whole_chains` False: a chain's first CNAME only, as a server that is not authoritative for
    the target answers; the resolver must ask for the rest."""
    try:
        q = DNSRecord.parse(data)
    except (DNSError, struct.error, IndexError, ValueError):
        return None
    if q.header.qr or not q.questions:
        return None
    r = q.reply()  # qr, aa, rd, ra set; the question echoed
    r.header.ra = 0  # authoritative only: nothing is recursed
    qname, qtype = str(q.q.qname), q.q.qtype
    a = zone.answer(qname)
    if a.rcode is None:
        return None
    soa = RR(zone.soa_name, QTYPE.SOA, ttl=zone.spec.negative_ttl,
             rdata=SOA(f"ns.{zone.soa_name}", f"hostmaster.{zone.soa_name}", (1, 3600, 600, 86400, zone.spec.negative_ttl)))
    if a.rcode:
        r.header.rcode = a.rcode
        r.add_auth(soa)
        return r.pack()
    for name, target, ttl in a.chain if whole_chains else a.chain[:1]:
        r.add_answer(RR(name + ".", QTYPE.CNAME, ttl=ttl, rdata=CNAME(target + ".")))
    if a.chain and not whole_chains:
        return r.pack()
    if qtype in (QTYPE.A, QTYPE.ANY) and a.ip is not None:
        last = a.chain[-1][1] if a.chain else qname.rstrip(".")
        r.add_answer(RR(last + ".", QTYPE.A, ttl=a.ttl, rdata=A(a.ip)))
    elif qtype != QTYPE.CNAME or not a.chain:
        r.add_auth(soa)  # NODATA: the name exists, with no record of this type (AAAA: the lab is IPv4)
    return r.pack()


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: DnsServer):
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        out = self.server.handle(data)
        if out is not None and self.transport is not None:
            self.transport.sendto(out, addr)


RECEIVE_BUFFER = 8 << 20


def _big_receive_buffer(sock: socket.socket) -> None:
    """Room for a burst of queries (a crawler's resolver keeps hundreds in flight): with the
    default ~200 KB a loaded machine drops datagrams and the resolver waits out its timeout.
    SO_RCVBUFFORCE passes net.core.rmem_max when the lab runs as root; else what it allows."""
    for opt in (getattr(socket, "SO_RCVBUFFORCE", None), socket.SO_RCVBUF):
        if opt is None:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, RECEIVE_BUFFER)
            return
        except OSError:
            continue


class DnsServer:
    """The zone on UDP and TCP at host:port (port 0: a free one, the same for both). `queries`
    counts the messages read, `unanswered` those left without a reply (TIMEOUT names)."""

    def __init__(self, zone: Zone, host: str = "127.0.0.1", port: int = 0, *, whole_chains: bool = True):
        self.zone = zone
        self.whole_chains = whole_chains
        self.host = host
        self.port = port
        self.queries = 0
        self.unanswered = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def handle(self, data: bytes) -> bytes | None:
        self.queries += 1
        out = reply(self.zone, data, self.whole_chains)
        self.unanswered += out is None
        return out

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        for _ in range(20):
            port = self.port or random.randint(20000, 60000)
            try:
                self._udp, _ = await loop.create_datagram_endpoint(lambda: _Udp(self), local_addr=(self.host, port))
                _big_receive_buffer(self._udp.get_extra_info("socket"))
            except OSError as exc:
                last = exc
                if self.port:
                    raise
                continue
            try:
                self._tcp = await asyncio.start_server(self._tcp_client, self.host, port)
            except OSError as exc:
                last = exc
                self._udp.close()
                if self.port:
                    raise
                continue
            self.port = port
            return
        raise OSError(f"no free port for the lab DNS server on {self.host}: {last}")

    async def _tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # RFC 1035 4.2.2: each message after a two-byte length; several on one connection.
        try:
            while True:
                head = await reader.readexactly(2)
                data = await reader.readexactly(struct.unpack("!H", head)[0])
                out = self.handle(data)
                if out is not None:
                    writer.write(struct.pack("!H", len(out)) + out)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()


class DnsThread:
    """A DnsServer on its own event loop thread (tests, benches): `with DnsThread(zone) as d:
    d.address` is "127.0.0.1:PORT"."""

    def __init__(self, zone: Zone, host: str = "127.0.0.1", port: int = 0, *, whole_chains: bool = True):
        self.server = DnsServer(zone, host, port, whole_chains=whole_chains)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="lab-dns")

    def __enter__(self) -> DnsThread:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def address(self) -> str:
        return self.server.address


def blocking_stub(address: str, timeout: float = 1.0):  # type: ignore[no-untyped-def]
    """A getaddrinfo-shaped coroutine function that asks the lab server `address` ("IP:PORT")
    with blocking sockets in the loop's thread pool, as the C library's stub resolver would if
    it could be pointed at a port: hostres.SystemLookup's getaddrinfo in tests and benches (the
    real one asks the machine's servers, which no test may do). Follows CNAMEs; NXDOMAIN is
    EAI_NONAME, no address EAI_NODATA, no answer EAI_AGAIN."""
    ip, _, port = address.rpartition(":")

    def ask(name: str) -> list:
        for _ in range(8):
            try:
                raw = DNSRecord.question(name, "A").send(ip, int(port), timeout=timeout)
            except (socket.timeout, OSError):
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution") from None
            r = DNSRecord.parse(raw)
            if r.header.rcode == RCODE.NXDOMAIN:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            if r.header.rcode != RCODE.NOERROR:
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
            addrs = [str(rr.rdata) for rr in r.rr if rr.rtype == QTYPE.A]
            if addrs:
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in addrs]
            cnames = [str(rr.rdata) for rr in r.rr if rr.rtype == QTYPE.CNAME]
            if not cnames:
                break
            name = cnames[-1]
        raise socket.gaierror(socket.EAI_NODATA, "No address associated with hostname")

    async def getaddrinfo(host: str, port: object = None, **_: object) -> list:
        return await asyncio.get_running_loop().run_in_executor(None, ask, host)

    return getaddrinfo


async def serve(topology: Topology, host: str, port: int) -> None:
    """`lab dns`: serve until cancelled."""
    srv = DnsServer(Zone(topology), host, port)
    await srv.start()
    log.info("lab dns on %s (udp, tcp)", srv.address)
    try:
        await asyncio.Event().wait()
    finally:
        await srv.close()


__all__ = ["Answer", "blocking_stub", "DnsServer", "DnsThread", "NXDOMAIN", "RESOLVES", "TIMEOUT", "Zone", "reply", "serve"]
