"""Ships spooled page batches to storage; a storage outage only lets the spool grow."""

from __future__ import annotations

import asyncio
import logging

from agent.spool import Spool
from storage.client import StorageClient
from wancrawl import errors

log = logging.getLogger("agent")


class StorageShipper:
    """Sends the oldest spool files and removes each only once storage acknowledged it
    (resending is safe: record ids make ingest idempotent)."""

    def __init__(self, spool: Spool, storage: StorageClient | None, *, retry_seconds: float):
        self.spool = spool
        self.storage = storage
        self.retry_seconds = retry_seconds
        self.counters: dict[str, float] = {"spool_batches_sent": 0, "storage_failures": 0}

    def idle(self) -> bool:
        """Nothing waits for storage (without storage, pages stay in the spool by design)."""
        return self.storage is None or len(self.spool) == 0

    async def run(self) -> None:
        while True:
            sent = await self.send(max_batches=10)
            if sent > 0:
                await asyncio.sleep(0.05)                  # more may be waiting
            elif sent == 0:
                # Nothing to send: look again soon (a replica learns "done" only once a page is
                # at storage, so this delay is part of what a backup lags behind).
                await asyncio.sleep(min(0.05, self.retry_seconds / 4))
            else:
                await asyncio.sleep(self.retry_seconds)      # storage is down

    async def send(self, max_batches: int) -> int:
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

    async def close(self) -> None:
        if self.storage is not None:
            await self.storage.close()
