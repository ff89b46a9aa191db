"""The routing shell: carries out Router's decisions (batched Resolve calls, PushUrls to owners)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from agent.client import AgentPool
from agent.placement.directory import HostDirectory
from agent.routing.router import PushBatch, Router
from agent.state.frontier import Item
from agent.state.outbox import Outbox
from agent.waker import Waker
from wancrawl import errors
from wancrawl.stats import Counters
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")


@dataclass(slots=True)
class RoutingCounters(Counters):
    """Pushed URLs refused as invalid and the Agent-service RPCs made to peers (the metric names:
    agent/metrics.py HELP). SHARED, summed in status: invalid_urls with the dispatcher's links,
    agent_rpcs with the intake's."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"agent_rpcs", "invalid_urls"})
    invalid_urls: int = 0
    agent_rpcs: int = 0


class RoutingService:
    """Sends discovered URLs on their way: own hosts to `accept_local` (the intake), the rest to
    their owners in batches. Every URL that stays here gets an outbox row first, so what is owed
    to a peer is on disk at the next commit; the row goes when the owner acknowledged it. At
    most `max_pushes_in_flight` PushUrls are under way at once."""

    def __init__(
        self,
        self_id: str,
        router: Router,
        outbox: Outbox,
        directory: HostDirectory,
        peers: AgentPool,
        accept_local: Callable[[list[Item]], int],
        *,
        retry_seconds: float,
        max_pushes_in_flight: int,
        clock: Callable[[], float],
    ):
        self.self_id = self_id
        self.router = router
        self.outbox = outbox
        self.directory = directory
        self.peers = peers
        self.accept_local = accept_local
        self.retry_seconds = retry_seconds
        self.max_pushes = max_pushes_in_flight
        self.clock = clock
        self._pushes: set[asyncio.Task] = set()
        self._poke = Waker()
        self.stats = RoutingCounters()

    def route(self, items: list[Item]) -> None:
        if not items:
            return
        self.accept_local(self.router.submit(items, self.clock(), hold=self.outbox.hold))
        self._poke.set()

    def restore(self) -> None:
        """After a restart: the URLs still owed to peers go back through routing."""
        owed = self.outbox.load()
        self._local(self.router.submit(owed, self.clock()))

    def _local(self, items: list[Item]) -> None:
        """Held items that turned out to be this agent's own: their outbox rows go."""
        if items:
            self.outbox.delivered(items)
            self.accept_local(items)

    def idle(self) -> bool:
        return self.router.idle()

    def pending(self) -> int:
        return self.router.pending()

    def counts(self) -> dict[str, float]:
        """The router's counts (they only grow; `gauges` has the levels)."""
        c = self.router.c
        return dict(
            routed=c.discovered, routed_local=c.local, n=c.n, m=len(c.m_hosts), hosts_routed=len(c.hosts), pushes=c.pushes,
            push_failures=c.push_failures, not_mine_received=c.not_mine, resolves=c.resolves, resolved_hosts=c.resolved_hosts,
            resolve_failures=c.resolve_failures,
        )

    def gauges(self) -> dict[str, float]:
        c = self.router.c
        out = dict(
            router_pending=self.pending(), alpha=self.router.alpha, beta=self.router.beta,
            # Seed 002's coefficients: mu = share of discovered URLs sent to other agents,
            # lambda = share of distinct hosts that needed a consultant answer.
            mu=(c.n / c.discovered) if c.discovered else 0.0,
        )
        out["lambda"] = (c.resolved_hosts / len(c.hosts)) if c.hosts else 0.0
        return out

    async def run(self, flush_interval: float) -> None:
        interval = max(0.01, min(0.05, flush_interval / 2))
        while True:
            await self._poke.wait(interval)
            try:
                await self.flush(force=False)
            except Exception:
                log.exception("routing step failed")

    async def flush(self, force: bool, deadline: float | None = None) -> None:
        """Resolve what waits, start due pushes; with force, partial batches too and, until
        `deadline`, wait for everything to be delivered."""
        while True:
            hosts = self.router.hosts_to_resolve(self.clock())
            while hosts:
                await self._resolve(hosts)
                hosts = self.router.hosts_to_resolve(self.clock())
            room = self.max_pushes - len(self._pushes)
            for b in self.router.due_pushes(self.clock(), force=force, limit=max(0, room)):
                t = asyncio.get_running_loop().create_task(self._push(b))
                self._pushes.add(t)
                t.add_done_callback(self._pushes.discard)
            if not force or deadline is None or self.router.idle() or self.clock() > deadline:
                return
            if self._pushes:
                await asyncio.wait(self._pushes, timeout=0.05)
            else:
                await asyncio.sleep(0.05)

    async def _resolve(self, hosts: list[str]) -> None:
        answer = await self.directory.lookup(hosts)
        now = self.clock()
        if answer is None:
            self._local(self.router.resolve_failed(hosts, now, self.retry_seconds))
            return
        routes, errs = answer
        local, rejected = self.router.resolved(hosts, routes, now, errs, self.retry_seconds)
        if rejected:
            self.stats.invalid_urls += len(rejected)
            self.outbox.delivered(rejected)
        self._local(local)

    async def _push(self, batch: PushBatch) -> None:
        urls = [agent_pb2.UrlItem(url=i.url, depth=i.depth, via=i.via, force=i.force) for i in batch.items]
        try:
            self.stats.agent_rpcs += 1
            resp = await self.peers.get(batch.address).push(self.self_id, batch.epoch, urls)
        except errors.WancrawlError as exc:
            log.warning("push of %d URLs to %s failed: %s", len(batch.items), batch.owner_id, exc)
            for it in batch.items:
                self.directory.forget(it.host)  # a dead owner's hosts pass to its backup
            self.router.push_failed(batch, self.clock(), self.retry_seconds)
            return
        self.directory.saw_epoch(resp.epoch)
        for i in resp.not_mine:
            if 0 <= i < len(batch.items):
                self.directory.forget(batch.items[i].host)
        self.outbox.delivered(self.router.pushed(batch, resp.not_mine, resp.epoch, self.clock()))
        if resp.not_mine:
            self._poke.set()
