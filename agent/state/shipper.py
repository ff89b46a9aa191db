"""Ships spooled page batches to storage; a storage outage only lets the spool grow."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Container
from pathlib import Path

from agent.state.spool import Spool
from storage.client import Ack, StorageClient
from wancrawl import errors
from wancrawl.v1 import storage_pb2

log = logging.getLogger("agent")


class StorageShipper:
    """Sends the oldest spool files and removes each only once storage acknowledged it
    (resending is safe: record ids make ingest idempotent).

    Pages fetched before this agent's lease last lapsed (a pause, a partition, a restart) may
    have been fetched again meanwhile by the agent that took their host over. Batches holding
    such pages are checked first (storage's Lookup): a capture of a URL storage already holds
    complete is dropped, not stored a second time. While the lease holds, a send must finish
    within it (its deadline): a send that a pause (SIGSTOP) catches under way fails when the
    process resumes after its lease, and is checked like the rest.
    `lease_left()`: seconds the lease still holds (<= 0: lapsed); `lapsed_at()`: wall-clock time
    of its last lapse (agent.gate.Gate); `transient`: statuses that do not complete a URL
    (agent.outcome.RETRY_STATUSES)."""

    def __init__(self, spool: Spool, storage: StorageClient | None, *, retry_seconds: float,
                 lease_left: Callable[[], float] | None = None, lapsed_at: Callable[[], float] | None = None,
                 transient: Container[int] = ()):
        self.spool = spool
        self.storage = storage
        self.retry_seconds = retry_seconds
        self.lease_left = lease_left
        self.lapsed_at = lapsed_at
        self.transient = transient
        self.counters: dict[str, float] = {"spool_batches_sent": 0, "storage_failures": 0,
                                           "storage_batches_rejected": 0, "storage_captures_rejected": 0,
                                           "captures_stored": 0, "captures_superseded": 0}

    def idle(self) -> bool:
        """Nothing waits for storage (without storage, pages stay in the spool by design)."""
        return self.storage is None or len(self.spool) == 0

    async def run(self) -> None:
        while True:
            try:
                sent = await self.send(max_batches=10)
            except Exception:  # noqa: BLE001 - a bug in one send must not stop shipping for good
                log.exception("shipping to storage failed")
                sent = -1
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
        left = self.lease_left() if self.lease_left is not None else math.inf
        # Within the lease: the call's deadline is the lease's end.
        within: dict[str, float] = {"timeout": left} if 0 < left < math.inf else {}
        batches = [self.spool.read(p) for p in paths]
        if self.lapsed_at is not None:
            batches = await self._not_superseded(paths, batches, self.lapsed_at())
        try:
            ack = await self.storage.send(batches, **within)
        except errors.InvalidArgument as exc:
            # Refused as malformed: resending the same bytes fails the same way, so it must not
            # hold the spool up. Alone, the batch is set aside; in a group, each is sent alone.
            if len(paths) == 1:
                return self._set_aside(paths[0], exc)
            sent = 0
            for p, b in zip(paths, batches):
                try:
                    one = await self.storage.send([b], **within)
                except errors.InvalidArgument as exc1:
                    sent += self._set_aside(p, exc1)
                    continue
                except errors.WancrawlError as exc1:
                    return self._failed(exc1) if sent == 0 else sent
                self._acknowledged([p], [b], one)
                sent += 1
            return sent
        except errors.WancrawlError as exc:
            return self._failed(exc)
        self._acknowledged(paths, batches, ack)
        return len(paths)

    async def _not_superseded(self, paths: list[Path], batches: list[storage_pb2.PageBatch],
                              lapsed_at: float) -> list[storage_pb2.PageBatch]:
        """The batches without the captures, fetched before the lease lapsed at `lapsed_at`, of
        URLs storage already holds complete (stored by the agent that held their host
        meanwhile). Storage unreachable: the batches as they are (sending fails the same way; a
        page is never dropped unasked)."""
        assert self.storage is not None
        suspect = [c.url for b in batches for c in b.captures if c.fetched_at < lapsed_at]
        if not suspect:
            return batches
        try:
            found = await self.storage.lookup(suspect)
        except errors.WancrawlError:
            return batches
        done = {u for u, statuses in found.items() if any(s not in self.transient for s in statuses)}
        out = list(batches)
        for i, b in enumerate(batches):
            keep = [c for c in b.captures if not (c.fetched_at < lapsed_at and c.url in done)]
            if len(keep) < len(b.captures):
                self.counters["captures_superseded"] += len(b.captures) - len(keep)
                log.info("%d captures of %s dropped: storage has those URLs from the agent that held their hosts "
                         "while this one's lease had lapsed", len(b.captures) - len(keep), paths[i].name)
                out[i] = storage_pb2.PageBatch(batch_id=b.batch_id, captures=keep)
        return out

    def _failed(self, exc: errors.WancrawlError) -> int:
        self.counters["storage_failures"] += 1
        log.warning("storage unavailable (%s); %d batches stay in the spool", exc, len(self.spool))
        return -1

    def _set_aside(self, path: Path, exc: errors.WancrawlError) -> int:
        dest = self.spool.set_aside(path)
        self.counters["storage_batches_rejected"] += 1
        log.error("storage refused batch %s as invalid, not retried; kept in %s: %s", path.name, dest, exc)
        return 1

    def _acknowledged(self, paths: list[Path], batches: list[storage_pb2.PageBatch], ack: Ack) -> None:
        if ack.rejected:
            self.counters["storage_captures_rejected"] += len(ack.rejected)
            log.warning("storage rejected %d captures (kept in %s): %s", len(ack.rejected), self.spool.rejected_dir,
                        ack.rejected[:3])
            by_id = {b.batch_id: (p, b) for p, b in zip(paths, batches)}
            refused: dict[str, list[int]] = {}
            for batch_id, index, _rid, _reason in ack.rejected:
                refused.setdefault(batch_id, []).append(index)
            for batch_id, idxs in refused.items():
                if batch_id not in by_id:
                    continue
                p, b = by_id[batch_id]
                kept = storage_pb2.PageBatch(batch_id=batch_id, captures=[b.captures[i] for i in idxs if i < len(b.captures)])
                self.spool.keep_rejected(kept, f"{p.stem}-captures.batch")
        self.spool.remove(paths)
        self.counters["spool_batches_sent"] += len(paths)
        self.counters["captures_stored"] += sum(len(b.captures) for b in batches) - len(ack.rejected)

    async def close(self) -> None:
        if self.storage is not None:
            await self.storage.close()
