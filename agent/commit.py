"""Group commit (spool, outbox, frontier, seen set, in that order) and shipping the spool to storage."""

from __future__ import annotations

import asyncio
import logging

from storage.client import make_batch
from wancrawl import errors

log = logging.getLogger("agent")


class Commit:
    """Part of AgentNode. A crash between two steps of `_commit` can only repeat work (a page
    fetched again, a URL pushed again and deduplicated by its owner), never lose any."""

    def _flush_captures(self, force: bool) -> None:
        due = self.captures and (force or self.clock() - self.captures_since >= self.s.storage_out.flush_interval)
        if due:
            self.spool.put(make_batch(self.captures))
            self.captures = []
        if due or not self.captures:
            # Every finished page's capture is in the spool now (or it had none).
            self.spooled_items.extend(self.finished_items)
            self.finished_items = []

    def _commit(self) -> None:
        """Outbox first, then the frontier (links added and pages done in one transaction), then
        the seen set: a crash between steps can only cause a repeat, never a loss."""
        self._flush_captures(force=False)
        self.outbox.flush()
        for it in self.spooled_items:
            self.frontier.done(it)
        self.spooled_items = []
        self.frontier.flush()
        self.seen.flush()
        waiters, self.commit_waiters = self.commit_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def commit_barrier(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.commit_waiters.append(fut)
        await fut

    async def _commit_loop(self) -> None:
        last_snapshot = last_purge = self.clock()
        while True:
            await asyncio.sleep(self.s.commit_interval)
            try:
                self._commit()
            except Exception:  # noqa: BLE001
                log.exception("commit failed")
            if self.clock() - last_purge >= 60.0:
                # Parsed robots.txt of hosts not crawled for a TTL: memory stays bounded.
                self.robots.purge(self.clock())
                last_purge = self.clock()
            if self.s.metrics_listen and self.clock() - last_snapshot >= 1.0:
                # Prometheus scrapes from its own thread: it reads this copy, made on the loop.
                self.metrics_snapshot = self.status_counters()
                last_snapshot = self.clock()

    # -- storage --------------------------------------------------------------------------------
    async def _storage_loop(self) -> None:
        while True:
            sent = await self._send_spool(max_batches=10)
            retry = self.s.storage_out.retry_seconds
            if sent > 0:
                await asyncio.sleep(0.05)       # more may be waiting
            elif sent == 0:
                await asyncio.sleep(retry / 4)  # nothing to send: look again soon
            else:
                await asyncio.sleep(retry)      # storage is down

    async def _send_spool(self, max_batches: int) -> int:
        """Send the oldest spooled batches; how many were acknowledged, or -1 if storage failed."""
        if self.storage is None:
            return 0
        paths = self.spool.oldest(max_batches)
        if not paths:
            return 0
        batches = [self.spool.read(p) for p in paths]
        try:
            ack = await self.storage.send(batches)
        except errors.WancrawlError as exc:
            self.counters["storage_failures"] += 1
            log.warning("storage unavailable (%s); %d batches stay in the spool", exc, len(self.spool))
            return -1
        if ack.rejected:
            log.warning("storage rejected %d captures: %s", len(ack.rejected), ack.rejected[:3])
        self.spool.remove(paths)
        self.counters["spool_batches_sent"] += len(paths)
        return len(paths)
