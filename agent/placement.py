"""The Placement port ("who owns this host") and the agent's cached view of it.

`Placement` is what an agent needs of whatever places hosts on agents: today the consultant
(consultant.client.ConsultantClient implements it); a consultant-less Kademlia overlay later.
`HostDirectory` is the one way the agent asks it about hosts: batched look-ups through the host
cache, of which it is the only writer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from agent.hostcache import HostCache
from consultant.client import HostRoute, Registration
from wancrawl import errors
from wancrawl.v1 import common_pb2

log = logging.getLogger("agent")


class Placement(Protocol):
    async def register(self, agent_id: str, address: str, *, location: common_pb2.Location | None = None,
                       source_ip: str = "", capacity: float = 0.0) -> Registration: ...
    async def heartbeat(self, agent_id: str, load: common_pb2.LoadReport) -> int: ...
    async def deregister(self, agent_id: str) -> int: ...
    async def resolve(self, hosts: list[str]) -> list[HostRoute]: ...


class HostDirectory:
    """Placement answers for this agent, cached per host (HostCache) and asked in batches of beta.
    Owns the host cache: everything that learns a route or an epoch goes through here."""

    def __init__(self, self_id: str, placement: Placement, cache: HostCache, *, beta: int, clock: Callable[[], float]):
        self.self_id = self_id
        self.placement = placement
        self.cache = cache
        self.beta = beta
        self.clock = clock
        self.counters: dict[str, float] = {"consultant_rpcs": 0}

    @property
    def epoch(self) -> int:
        return self.cache.epoch

    def saw_epoch(self, epoch: int) -> bool:
        """An epoch from any reply (consultant or peer); True when it is news (cached routes
        of older epochs are asked again at their next use)."""
        return self.cache.saw_epoch(epoch)

    def gauges(self) -> dict[str, float]:
        return {"epoch": self.cache.epoch, "host_cache_hit_ratio": self.cache.hit_ratio, "host_cache_size": len(self.cache)}

    def forget(self, host: str) -> None:
        """The cached answer proved wrong (the owner said "not mine", or is unreachable)."""
        self.cache.drop(host)

    async def lookup(self, hosts: list[str]) -> tuple[list[HostRoute], dict[str, str]] | None:
        """One Resolve of at most beta hosts: the routes with agents (now cached) and the per-host
        errors, or None when placement cannot be reached."""
        try:
            self.counters["consultant_rpcs"] += 1
            answers = await self.placement.resolve(hosts)
        except errors.WancrawlError as exc:
            log.warning("resolve of %d hosts failed: %s", len(hosts), exc)
            return None
        now = self.clock()
        if answers:
            self.cache.saw_epoch(answers[0].epoch)
        routes = [a for a in answers if not a.error and a.agents]
        for r in routes:
            self.cache.put(r, now)
        return routes, {a.host: a.error for a in answers if a.error}

    async def routes(self, hosts: list[str]) -> dict[str, HostRoute]:
        """Fresh routes for hosts (cached ones first, the rest asked in batches); a host placement
        cannot answer now is absent."""
        now = self.clock()
        out: dict[str, HostRoute] = {}
        unknown: list[str] = []
        for h in hosts:
            r = self.cache.get(h, now)
            if r is None:
                unknown.append(h)
            else:
                out[h] = r
        for i in range(0, len(unknown), self.beta):
            answer = await self.lookup(unknown[i : i + self.beta])
            for r in answer[0] if answer else []:
                out[r.host] = r
        return out

    async def owners(self, hosts: list[str], sender_epoch: int = 0) -> dict[str, bool | None]:
        """Does this agent own each host? None where placement cannot say now. A sender's newer
        epoch makes older cached answers stale first."""
        self.saw_epoch(sender_epoch)
        routes = await self.routes(hosts)
        return {h: (routes[h].agents[0][0] == self.self_id if h in routes else None) for h in hosts}
