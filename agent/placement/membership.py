"""Membership: register with placement, keep the lease with heartbeats, register again when forgotten, leave."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from agent.placement.gate import Gate
from agent.placement.port import Placement
from agent.settings import AgentSettings, bind_ip
from wancrawl import errors
from wancrawl.stats import Counters
from wancrawl.v1 import common_pb2

log = logging.getLogger("agent")


def _not_attached() -> common_pb2.LoadReport:
    raise RuntimeError("Membership.attach(load=...) was not called before the first heartbeat")


@dataclass(slots=True)
class MembershipCounters(Counters):
    """Register and heartbeat RPCs, and the heartbeats withheld while stalled (the metric names:
    agent/metrics.py HELP). SHARED, summed in status: consultant_rpcs with the host directory's."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"consultant_rpcs"})
    consultant_rpcs: int = 0
    heartbeats_withheld: int = 0


class Membership:
    """Owns this agent's registration: registered or not, the lease, left for good. A
    consultant outage never stops the crawl: heartbeats fail, cached routes carry on, the agent
    registers again when the consultant answers that it does not know it. Epochs it learns go
    to `saw_epoch`; its heartbeats carry `load()`.

    While `stalled()` (the agent makes no durable progress: agent/state/progress.py) it neither
    heartbeats nor registers: an agent that cannot commit must not keep its lease, or its hosts
    never fail over (issue 21). Heartbeats resume when it commits again."""

    def __init__(self, settings: AgentSettings, placement: Placement, address: str, *,
                 saw_epoch: Callable[[int], object], gate: Gate, clock: Callable[[], float],
                 stalled: Callable[[], bool] = lambda: False):
        self.s = settings
        self.id = settings.agent_id
        self.placement = placement
        self.address = address
        self.saw_epoch = saw_epoch
        self.load: Callable[[], common_pb2.LoadReport] = _not_attached
        self.gate = gate        # the lease this agent's fetches depend on (the fence)
        self.clock = clock
        self.stalled = stalled
        self.registrations = 0  # answered Registers so far (ownership claims its hosts after each)
        self.registered = False
        self.left = False       # deregistered for good (a drain): never registers again
        self.lease = 15.0       # the consultant's lease, learnt at Register
        self.stats = MembershipCounters()

    def attach(self, *, load: Callable[[], common_pb2.LoadReport]) -> None:
        """The node's second wiring phase: what every heartbeat carries (AgentNode.load_report
        reads the dispatcher and the load gauge, built after this). Called once, before start."""
        self.load = load

    def has_left(self) -> bool:
        """Deregistered for good (a drain): intake refuses every push from then on."""
        return self.left

    async def register(self) -> None:
        loc = self.s.location
        location = common_pb2.Location(city=loc.city, country=loc.country, asn=loc.asn)
        if loc.lat is not None and loc.lon is not None:
            location.lat, location.lon, location.has_coordinates = loc.lat, loc.lon, True
        self.stats.consultant_rpcs += 1
        sent = self.clock()
        reg = await self.placement.register(self.id, self.address, location=location, source_ip=bind_ip(self.s),
                                            capacity=self.s.capacity)
        self.registered = True
        self.registrations += 1
        self.lease = reg.lease_seconds
        self.gate.renew(sent + reg.lease_seconds, self.clock(), registered=True)
        self.saw_epoch(reg.epoch)
        log.info("registered %s at %s (epoch %d, lease %.0fs)", self.id, self.address, reg.epoch, reg.lease_seconds)

    async def run(self) -> None:
        while not self.left:
            await asyncio.sleep(self.s.heartbeat_interval or max(0.5, self.lease / 3))
            if self.left:
                return
            await self.beat()

    async def beat(self) -> None:
        """One turn of the loop: register if not registered, else heartbeat; neither while stalled."""
        if self.stalled():
            # No heartbeat: the consultant's lease on this agent runs out and its hosts go to
            # their backups; the gate's lease (the fence) stops this agent's fetches meanwhile.
            self.stats.heartbeats_withheld += 1
            return
        try:
            if not self.registered:
                await self.register()
                return
            self.stats.consultant_rpcs += 1
            sent = self.clock()
            lapsed = not self.gate.lease_ok(sent)
            self.saw_epoch(await self.placement.heartbeat(self.id, self.load()))
            if lapsed:
                # Past its lease the consultant may have declared this agent dead and let
                # others take its hosts (a heartbeat revives a dead agent): settle as after
                # a registration before fetching again.
                self.registrations += 1
            self.gate.renew(sent + self.lease, self.clock(), registered=lapsed)
        except errors.NotFound:
            log.info("consultant forgot %s (restart or expiry): registering again", self.id)
            self.registered = False
            self.gate.expire()
        except errors.WancrawlError as exc:
            log.warning("heartbeat failed (%s); crawling on cached routes", exc)

    async def leave(self) -> None:
        """Deregister for good (the consultant moves this agent's hosts and bumps the epoch)."""
        self.left = True
        if not self.registered:
            return
        try:
            self.stats.consultant_rpcs += 1
            self.saw_epoch(await self.placement.deregister(self.id))
            self.registered = False
        except errors.WancrawlError as exc:
            log.warning("deregister failed: %s", exc)
