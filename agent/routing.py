"""The routing shell: carries out Router's decisions (batched Resolve calls, PushUrls to owners)."""

from __future__ import annotations

import asyncio
import logging

import grpc

from agent.hostcache import Route
from agent.router import PushBatch, UrlItem
from wancrawl import errors
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")


class Routing:
    """Part of AgentNode. Every URL routed gets an outbox row first, so what is owed to a peer is
    on disk at the next commit; a row goes when the owner acknowledged it."""

    def route(self, items: list[UrlItem]) -> None:
        """Send discovered URLs on their way: local ones to the frontier, the rest to outboxes.
        Every URL gets an outbox row first (released at once if it is local), so whatever is
        owed to a peer is on disk at the next commit."""
        if not items:
            return
        local = self.router.submit(self.outbox.add(items), self.clock())
        self._intake_local(local)
        self.route_wakeup.set()

    async def _routing_loop(self) -> None:
        interval = max(0.01, min(0.05, self.s.routing.flush_interval / 2))
        while True:
            await self.route_wakeup.wait(interval)
            try:
                await self._flush_routes(force=False)
            except Exception:  # noqa: BLE001 - routing must go on
                log.exception("routing step failed")

    async def _flush_routes(self, force: bool, deadline: float | None = None) -> None:
        while True:
            now = self.clock()
            hosts = self.router.hosts_to_resolve(now)
            while hosts:
                await self._resolve_batch(hosts)
                hosts = self.router.hosts_to_resolve(self.clock())
            batches = self.router.due_pushes(self.clock(), force=force)
            if batches:
                await asyncio.gather(*(self._push(b) for b in batches))
            if not force or self.router.idle() or deadline is None or self.clock() > deadline:
                return
            await asyncio.sleep(0.05)

    async def _consult(self, hosts: list[str]) -> tuple[list[Route], dict[str, str]] | None:
        """One Resolve: the routes (with their TTL) and the per-host errors, or None if the
        consultant cannot be reached."""
        try:
            self.counters["consultant_rpcs"] += 1
            answers = await self.consultant.resolve(hosts)
        except errors.WancrawlError as exc:
            log.warning("resolve of %d hosts failed: %s", len(hosts), exc)
            return None
        now = self.clock()
        if answers:
            self._saw_epoch(answers[0].epoch)
        routes = [Route(a.host, a.agents, a.epoch, now + a.ttl) for a in answers if not a.error and a.agents]
        return routes, {a.host: a.error for a in answers if a.error}

    async def _resolve_batch(self, hosts: list[str]) -> None:
        answer = await self._consult(hosts)
        if answer is None:
            self._intake_local(self.router.resolve_failed(hosts, self.clock(), self.s.routing.retry_seconds))
            return
        routes, errs = answer
        local, rejected = self.router.resolved(hosts, routes, self.clock(), errs, self.s.routing.retry_seconds)
        if rejected:
            self.counters["invalid_urls"] += len(rejected)
            self.outbox.delivered(rejected)
        self._intake_local(local)

    async def _push(self, batch: PushBatch) -> None:
        req = agent_pb2.PushUrlsRequest(
            sender_id=self.id, epoch=batch.epoch,
            urls=[agent_pb2.UrlItem(url=i.url, depth=i.depth, via=i.via) for i in batch.items],
        )
        try:
            self.counters["agent_rpcs"] += 1
            resp = await self.peers.stub(batch.address).PushUrls(req, timeout=30)
        except Exception as exc:  # noqa: BLE001 - any failure: the URLs stay owed
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else exc
            log.warning("push of %d URLs to %s failed: %s", len(batch.items), batch.owner_id, detail)
            self.router.push_failed(batch, self.clock(), self.s.routing.retry_seconds)
            return
        delivered = self.router.pushed(batch, list(resp.not_mine), resp.epoch, self.clock())
        self.outbox.delivered(delivered)
        if resp.not_mine:
            self.route_wakeup.set()
