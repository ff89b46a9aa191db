"""The "cares" DNS backend: c-ares through aiodns 4 (pycares 5), asynchronous, with TTLs.

One c-ares channel per configured nameserver, each with at most `max_per_server` queries in
flight (a semaphore); a name goes to the server with the fewest queries in flight and, after a
temporary failure, to the next one. An A query's answer carries the CNAME chain and the address
records with their TTLs (pycares.DNSResult); the kept TTL is the smallest along the chain. A
chain the server did not finish in one answer is followed by asking for its last target, at
most MAX_CHAIN links (a loop or a longer chain is a temporary failure, as resolvers treat it).

c-ares errors become hostres's reasons: ENOTFOUND (NXDOMAIN) and EBADNAME are a name that does
not exist, ENODATA a name without an address (an AAAA query is tried then), anything else
(timeout, SERVFAIL, REFUSED, connection refused) a temporary failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiodns
import pycares

from wancrawl.dns.answers import NO_ADDRESS, NXDOMAIN, TEMPORARY, Lookup, split_nameserver

MAX_CHAIN = 8
_DEFINITIVE = {pycares.errno.ARES_ENOTFOUND: NXDOMAIN, pycares.errno.ARES_EBADNAME: NXDOMAIN,
               pycares.errno.ARES_ENODATA: NO_ADDRESS}


class CaresLookup:
    """Invariant: `_busy[i]` is the number of queries holding server i's semaphore."""

    def __init__(self, nameservers: Sequence[str], *, timeout: float, tries: int = 2, max_per_server: int = 64):
        # "" stands for the system's resolv.conf servers (a channel left as c-ares configures it).
        self.servers = [self._c_ares_form(ns) for ns in nameservers] or [""]
        self.timeout = timeout
        self.tries = tries
        self._channels: list[aiodns.DNSResolver | None] = [None] * len(self.servers)
        self._sems = [asyncio.Semaphore(max_per_server) for _ in self.servers]
        self._busy = [0] * len(self.servers)

    @staticmethod
    def _c_ares_form(ns: str) -> str:
        host, port = split_nameserver(ns)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _channel(self, i: int) -> aiodns.DNSResolver:
        ch = self._channels[i]
        if ch is None:
            # Made in the running loop (aiodns binds one). No search domains: a crawler's names
            # are absolute, and a miss must not be asked again under the machine's domains.
            ch = aiodns.DNSResolver(nameservers=[self.servers[i]] if self.servers[i] else None,
                                    loop=asyncio.get_running_loop(), timeout=self.timeout / self.tries,
                                    tries=self.tries, flags=pycares.ARES_FLAG_NOSEARCH)
            self._channels[i] = ch
        return ch

    async def lookup(self, host: str) -> Lookup:
        order = sorted(range(len(self.servers)), key=lambda i: self._busy[i])
        answer = Lookup(None, None, TEMPORARY)
        for i in order:
            answer = await self._ask(i, host)
            if answer.why != TEMPORARY:
                break
        return answer

    async def _ask(self, i: int, host: str) -> Lookup:
        async with self._sems[i]:
            self._busy[i] += 1
            try:
                # No deadline of ours: c-ares ends every query by its own timeout and tries (its
                # callback always comes), and a wait_for here cost a task per look-up.
                return await self._follow(self._channel(i), host)
            finally:
                self._busy[i] -= 1

    async def _follow(self, ch: aiodns.DNSResolver, host: str) -> Lookup:
        name, ttl = host, float("inf")
        for _ in range(MAX_CHAIN):
            try:
                res = await ch.query_dns(name, "A")
            except aiodns.error.DNSError as exc:
                code = exc.args[0] if exc.args else None
                if code == pycares.errno.ARES_ENODATA:
                    return await self._aaaa(ch, name, ttl)
                return Lookup(None, None, _DEFINITIVE.get(code, TEMPORARY))  # type: ignore[arg-type]
            ip, end, ttl = _walk(res, name, ttl)
            if ip is not None:
                return Lookup(ip, ttl)
            if end == name:
                return Lookup(None, None, NO_ADDRESS)
            name = end  # the chain goes on past this answer: ask for its last target
        return Lookup(None, None, TEMPORARY)

    async def _aaaa(self, ch: aiodns.DNSResolver, name: str, ttl: float) -> Lookup:
        try:
            res = await ch.query_dns(name, "AAAA")
        except aiodns.error.DNSError as exc:
            code = exc.args[0] if exc.args else None
            return Lookup(None, None, NO_ADDRESS if code in _DEFINITIVE else TEMPORARY)
        ip, _, ttl = _walk(res, name, ttl)
        return Lookup(ip, ttl) if ip is not None else Lookup(None, None, NO_ADDRESS)

    async def close(self) -> None:
        for ch in self._channels:
            if ch is not None:
                await ch.close()
        self._channels = [None] * len(self.servers)


def _walk(res: pycares.DNSResult, name: str, ttl: float) -> tuple[str | None, str, float]:
    """(first address of the chain's end or None, the chain's end, smallest TTL seen) from one
    answer: CNAMEs followed from `name` (case-insensitive) as far as the answer goes."""
    cnames: dict[str, tuple[str, int]] = {}
    addrs: dict[str, tuple[str, int]] = {}
    for rec in res.answer:
        owner, data = rec.name.lower().rstrip("."), rec.data
        if isinstance(data, pycares.CNAMERecordData):
            cnames[owner] = (data.cname.lower().rstrip("."), rec.ttl)
        elif isinstance(data, (pycares.ARecordData, pycares.AAAARecordData)):
            addrs.setdefault(owner, (data.addr, rec.ttl))
    end = name.lower().rstrip(".")
    for _ in range(MAX_CHAIN):
        if end not in cnames:
            break
        end, t = cnames[end]
        ttl = min(ttl, t)
    hit = addrs.get(end)
    if hit is None:
        return None, end, ttl
    return hit[0], end, min(ttl, hit[1])
