"""Membership: register with the consultant, heartbeat with load figures, register again when forgotten."""

from __future__ import annotations

import asyncio
import logging

from agent.settings import bind_ip
from wancrawl import errors
from wancrawl.v1 import common_pb2

log = logging.getLogger("agent")


class Membership:
    """Part of AgentNode (agent/node.py holds the state it uses). A consultant outage never
    stops the crawl: heartbeats fail, cached routes carry on, the agent registers again when
    the consultant answers that it does not know it."""

    async def register(self) -> None:
        loc = self.s.location
        location = common_pb2.Location(city=loc.city, country=loc.country, asn=loc.asn)
        if loc.lat is not None:
            location.lat, location.lon, location.has_coordinates = loc.lat, loc.lon, True  # type: ignore[assignment]
        self.counters["consultant_rpcs"] += 1
        reg = await self.consultant.register(self.id, self.address, location=location, source_ip=bind_ip(self.s), capacity=self.s.capacity)
        self.registered = True
        self.lease = reg.lease_seconds
        self._saw_epoch(reg.epoch)
        log.info("registered %s at %s (epoch %d, lease %.0fs)", self.id, self.address, reg.epoch, reg.lease_seconds)

    def load_report(self) -> common_pb2.LoadReport:
        now = self.clock()
        while self.rate_window and self.rate_window[0] < now - 10:
            self.rate_window.popleft()
        return common_pb2.LoadReport(
            queue_length=len(self.frontier), in_flight=self.in_flight,
            pages_per_second=len(self.rate_window) / 10.0, errors=int(self.counters["errors"]),
            hosts_owned=self.frontier.hosts_with_work(), capacity=self.s.capacity,
            pages_fetched=int(self.counters["pages"]), spool_pages=self.spool.pages,
        )

    async def _membership_loop(self) -> None:
        while True:
            interval = self.s.heartbeat_interval or max(0.5, self.lease / 3)
            await asyncio.sleep(interval)
            if self.router.leaving:
                return
            try:
                if not self.registered:
                    await self.register()
                    continue
                self.counters["consultant_rpcs"] += 1
                self._saw_epoch(await self.consultant.heartbeat(self.id, self.load_report()))
            except errors.NotFound:
                log.info("consultant forgot %s (restart or expiry): registering again", self.id)
                self.registered = False
            except errors.WancrawlError as exc:
                log.warning("heartbeat failed (%s); crawling on cached routes", exc)

    def _saw_epoch(self, epoch: int) -> None:
        if self.cache.saw_epoch(epoch):
            self.route_wakeup.set()  # cached routes of older epochs are asked again
