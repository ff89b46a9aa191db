"""HostDirectory: the agent's cached view of placement ("who owns this host").

`HostDirectory` is the one way the agent asks a `Placement` (agent/placement/port.py) about
hosts: batched look-ups through the host cache, of which it is the only writer; and who is
alive (`live_agents`), kept per epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from agent.placement.hostcache import HostCache
from agent.placement.port import HostRoute, LiveAgents, Placement
from wancrawl import errors
from wancrawl.stats import Counters

log = logging.getLogger("agent")


@dataclass(slots=True)
class DirectoryCounters(Counters):
    """Resolve and LiveAgents RPCs and the epoch claims of peers checked with the consultant (the
    metric names: agent/metrics.py HELP). SHARED, summed in status: consultant_rpcs with
    membership's."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"consultant_rpcs"})
    consultant_rpcs: int = 0
    live_agents_failures: int = 0
    epoch_claims: int = 0
    epoch_checks: int = 0
    epoch_claims_refuted: int = 0


class HostDirectory:
    """Placement answers for this agent, cached per host (HostCache) and asked in batches of beta.
    Owns the host cache: everything that learns a route or an epoch goes through here.

    Epochs (issue 13): the cache's epoch only ever comes from the consultant (`consultant_epoch`:
    Register, Heartbeat, Deregister and Resolve answers). An epoch a peer sends (PushUrls,
    HandOver, Replicate, Claim and their answers: `saw_epoch`) is a claim: when it is newer than
    the consultant's latest, the next look-up first asks the consultant (a Resolve of one host,
    at most once per `check_interval` seconds) and the cache moves to what the consultant says,
    never to the claimed epoch. A peer that lies about epochs costs one Resolve per interval,
    not the host cache."""

    def __init__(self, self_id: str, placement: Placement, cache: HostCache, *, beta: int, clock: Callable[[], float],
                 check_interval: float = 1.0):
        self.self_id = self_id
        self.placement = placement
        self.cache = cache
        self.beta = beta
        self.clock = clock
        self.check_interval = check_interval
        self._claimed = 0                   # newest epoch a peer claimed, above the consultant's
        self._next_check = float("-inf")    # clock time the next check may be made
        # Who is alive, as placement last said; kept while its epoch is the newest known (only
        # when placement says its membership moves with the epoch: LiveAgents.per_epoch).
        self._live: LiveAgents | None = None
        self.stats = DirectoryCounters()

    @property
    def epoch(self) -> int:
        """The newest epoch the consultant has given this agent."""
        return self.cache.epoch

    def current_epoch(self) -> int:
        """`epoch` as a callable, for a component that reads it when it needs it (the dispatcher)."""
        return self.cache.epoch

    def consultant_epoch(self, epoch: int) -> bool:
        """An epoch from the consultant's own answer; True when it is news (cached routes of older
        epochs are asked again at their next use)."""
        news = self.cache.saw_epoch(epoch)
        if self._claimed and self._claimed <= self.cache.epoch:
            self._claimed = 0  # confirmed
        return news

    def saw_epoch(self, epoch: int) -> bool:
        """An epoch a peer sent. Never adopted as it is: one newer than the consultant's latest
        is checked with the consultant at the next look-up (`check_epoch`). Returns False (no
        news until the consultant says so)."""
        if epoch > self.cache.epoch and epoch > self._claimed:
            self._claimed = epoch
            self.stats.epoch_claims += 1
        return False

    async def check_epoch(self, hosts: list[str]) -> None:
        """A peer claimed a newer epoch: ask the consultant (a Resolve of one of `hosts`, or of a
        cached host) before any cached route is used, at most once per check_interval."""
        if self._claimed <= self.cache.epoch:
            self._claimed = 0
            return
        now = self.clock()
        if now < self._next_check:
            return
        host = hosts[0] if hosts else next(reversed(self.cache.routes), None)
        if host is None:
            return  # nothing cached: the next look-up brings the consultant's epoch anyway
        self._next_check = now + self.check_interval
        self.stats.epoch_checks += 1
        claimed = self._claimed
        if await self.lookup([host]) is None:
            return  # the consultant cannot say now: keep the claim for a later check
        if claimed > self.cache.epoch:
            self.stats.epoch_claims_refuted += 1
            log.warning("a peer claimed epoch %d; the consultant's is %d: not adopted", claimed, self.cache.epoch)
        if self._claimed <= claimed:
            self._claimed = 0

    async def live_agents(self) -> dict[str, str] | None:
        """The agents alive now by placement (agent id -> address), asked once per epoch; None
        when placement cannot be reached. An answer of a newer epoch is news, as a Resolve's."""
        live = self._live
        if live is not None and live.per_epoch and live.epoch >= self.cache.epoch:
            return live.agents
        try:
            self.stats.consultant_rpcs += 1
            live = await self.placement.live_agents()
        except errors.WancrawlError as exc:
            self.stats.live_agents_failures += 1
            log.warning("live agents: placement cannot say now: %s", exc)
            return None
        self.consultant_epoch(live.epoch)
        if live.epoch < self.cache.epoch:
            # A consultant replica behind the epoch this agent's routes came from: an owner it
            # lists may have died since. Not an answer (the caller takes the owner for dead).
            self.stats.live_agents_failures += 1
            return None
        self._live = live
        return live.agents

    def gauges(self) -> dict[str, float]:
        return {"epoch": self.cache.epoch, "host_cache_hit_ratio": self.cache.hit_ratio, "host_cache_size": len(self.cache)}

    def forget(self, host: str) -> None:
        """The cached answer proved wrong (the owner said "not mine", or is unreachable)."""
        self.cache.drop(host)

    async def lookup(self, hosts: list[str]) -> tuple[list[HostRoute], dict[str, str]] | None:
        """One Resolve of at most beta hosts: the routes with agents (now cached) and the per-host
        errors, or None when placement cannot be reached."""
        try:
            self.stats.consultant_rpcs += 1
            answers = await self.placement.resolve(hosts)
        except errors.WancrawlError as exc:
            log.warning("resolve of %d hosts failed: %s", len(hosts), exc)
            return None
        now = self.clock()
        if answers:
            self.consultant_epoch(answers[0].epoch)
        routes = [a for a in answers if not a.error and a.agents]
        for r in routes:
            self.cache.put(r, now)
        return routes, {a.host: a.error for a in answers if a.error}

    async def routes(self, hosts: list[str]) -> dict[str, HostRoute]:
        """Fresh routes for hosts (cached ones first, the rest asked in batches); a host placement
        cannot answer now is absent."""
        if self._claimed:
            await self.check_epoch(hosts)
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
        epoch is checked with the consultant first (see the class): if it confirms it, older
        cached answers are stale."""
        self.saw_epoch(sender_epoch)
        routes = await self.routes(hosts)
        return {h: (routes[h].agents[0][0] == self.self_id if h in routes else None) for h in hosts}
