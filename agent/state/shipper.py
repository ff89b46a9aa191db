"""Ships spooled page batches to storage; a storage outage only lets the spool grow."""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path

from agent.state.spool import Spool
from storage.client import Ack, Batch, StorageClient
from wancrawl import errors
from wancrawl.stats import Counters
from wancrawl.v1 import storage_pb2

log = logging.getLogger("agent")


@dataclass(slots=True)
class ShipperCounters(Counters):
    """Batches and captures storage acknowledged, refused or superseded, and failed calls (the
    metric names: agent/metrics.py HELP)."""
    spool_batches_sent: int = 0
    storage_failures: int = 0
    storage_batches_rejected: int = 0
    storage_captures_rejected: int = 0
    storage_captures_not_placed: int = 0
    captures_stored: int = 0
    captures_superseded: int = 0


class StorageShipper:
    """Sends the oldest spool files and removes each only once storage acknowledged it
    (resending is safe: record ids make ingest idempotent).

    Pages fetched before this agent's lease last lapsed (a pause, a partition, a restart) may
    have been fetched again meanwhile by the agent that took their host over. Batches holding
    such pages are checked first (storage's Lookup): a capture of a URL storage already holds
    complete is dropped, not stored a second time. While the lease holds, a send must finish
    within it (its deadline): a send that a pause (SIGSTOP) catches under way fails when the
    process resumes after its lease, and is checked like the rest.
    `lease_left(now)`: seconds the lease still holds (<= 0: lapsed); `lapsed_at(now)`: wall-clock
    time of its last lapse (agent/placement/gate.py Gate's own methods); `transient`: statuses that do not complete a URL
    (agent.outcome.RETRY_STATUSES).

    Captures storage refuses as *not placed* (this agent is not on their host's preference list
    by the consultant's answer: storage/placement.py) are not malformed: an honest agent meets
    that while the consultant counts it dead (a pause past its lease, until it registers again)
    or while its placement moves. They stay in the spool, in their batch's file under its seq
    (so the replicas' "done" still waits for them: spool.shipped_through), and are sent again
    after a delay that grows with how long they have been refused (retry_seconds .. hold / 4);
    refused for longer than `not_placed_hold` seconds, they are set aside in spool/rejected like
    malformed ones (the host's owner fetches again what storage does not hold). So a refusal is
    neither resent forever nor final while it can still change. The refusal times live in memory:
    a restart gives the captures a new hold."""

    def __init__(self, spool: Spool, storage: StorageClient | None, *, retry_seconds: float,
                 lease_left: Callable[[float], float] | None = None, lapsed_at: Callable[[float], float] | None = None,
                 transient: Container[int] = (), not_placed_hold: float = 120.0,
                 clock: Callable[[], float] = time.monotonic):
        self.spool = spool
        self.storage = storage
        self.retry_seconds = retry_seconds
        self.lease_left = lease_left
        self.lapsed_at = lapsed_at
        self.transient = transient
        self.not_placed_hold = not_placed_hold
        self.clock = clock
        self._refused_since: dict[str, float] = {}  # record id -> when storage first refused it as not placed
        self._not_before: dict[Path, float] = {}    # spool file -> clock time before which it is not sent again
        self.stats = ShipperCounters()

    def idle(self) -> bool:
        """Nothing waits for storage (without storage, pages stay in the spool by design)."""
        return self.storage is None or len(self.spool) == 0

    async def run(self) -> None:
        while True:
            try:
                sent = await self.send(max_batches=10)
            except Exception:
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
        now = self.clock()
        self._not_before = {p: t for p, t in self._not_before.items() if t > now}
        # Files waiting to be sent again (not placed) are passed over; the rest go oldest first.
        paths = [p for p in self.spool.oldest(max_batches + len(self._not_before)) if p not in self._not_before][:max_batches]
        if not paths:
            return 0
        left = self.lease_left(self.clock()) if self.lease_left is not None else math.inf
        # Within the lease: the call's deadline is the lease's end.
        within: dict[str, float] = {"timeout": left} if 0 < left < math.inf else {}
        # The files' bytes go to storage as they are (a spool file is a serialized PageBatch):
        # parsed only when something must be read in them (issue 24: ~20 us per page).
        batches: list[Batch] = [self.spool.read_bytes(p) for p in paths]
        if self.lapsed_at is not None:
            batches = await self._not_superseded(paths, batches, self.lapsed_at(self.clock()))
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

    async def _not_superseded(self, paths: list[Path], batches: list[Batch], lapsed_at: float) -> list[Batch]:
        """The batches without the captures, fetched before the lease lapsed at `lapsed_at`, of
        URLs storage already holds complete (stored by the agent that held their host
        meanwhile). Storage unreachable: the batches as they are (sending fails the same way; a
        page is never dropped unasked). Only files that may hold such captures are parsed: one
        this process spooled with every capture fetched after the lapse goes as it is."""
        assert self.storage is not None
        maybe = {i: _parsed(batches[i]) for i, p in enumerate(paths)
                 if (since := self.spool.fetched_from(p)) is None or since < lapsed_at}
        suspect = [c.url for b in maybe.values() for c in b.captures if c.fetched_at < lapsed_at]
        if not suspect:
            return batches
        try:
            found = await self.storage.lookup(suspect)
        except errors.WancrawlError:
            return batches
        done = {u for u, statuses in found.items() if any(s not in self.transient for s in statuses)}
        out = list(batches)
        for i, b in maybe.items():
            keep = [c for c in b.captures if not (c.fetched_at < lapsed_at and c.url in done)]
            if len(keep) < len(b.captures):
                self.stats.captures_superseded += len(b.captures) - len(keep)
                log.info("%d captures of %s dropped: storage has those URLs from the agent that held their hosts "
                         "while this one's lease had lapsed", len(b.captures) - len(keep), paths[i].name)
                out[i] = storage_pb2.PageBatch(batch_id=b.batch_id, captures=keep)
        return out

    def _failed(self, exc: errors.WancrawlError) -> int:
        self.stats.storage_failures += 1
        log.warning("storage unavailable (%s); %d batches stay in the spool", exc, len(self.spool))
        return -1

    def _set_aside(self, path: Path, exc: errors.WancrawlError) -> int:
        dest = self.spool.set_aside(path)
        self.stats.storage_batches_rejected += 1
        log.error("storage refused batch %s as invalid, not retried; kept in %s: %s", path.name, dest, exc)
        return 1

    def _acknowledged(self, paths: list[Path], sent: list[Batch], ack: Ack) -> None:
        # What storage stored needs no parsing: only refusals, and refusals being tracked, do.
        batches = [_parsed(b) for b in sent] if ack.not_placed or ack.rejected or self._refused_since else []
        captures = sum(len(b.captures) if isinstance(b, storage_pb2.PageBatch) else self.spool.pages_in(p)
                       for p, b in zip(paths, sent))  # before a refusal replaces a file
        held, retrying = self._not_placed(paths, batches, ack) if ack.not_placed else (set(), set())
        if ack.rejected:
            self.stats.storage_captures_rejected += len(ack.rejected)
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
        self.spool.remove([p for p in paths if p not in held])
        self.stats.spool_batches_sent += len(paths)
        self.stats.captures_stored += captures - len(ack.rejected) - len(ack.not_placed)
        if self._refused_since:
            for b in batches:  # stored (or set aside) now: their refusals are over
                for c in b.captures:
                    if c.record_id not in retrying:
                        self._refused_since.pop(c.record_id, None)

    def _not_placed(self, paths: list[Path], batches: list[storage_pb2.PageBatch], ack: Ack) -> tuple[set[Path], set[str]]:
        """Keep the captures refused as not placed in their spool files, to be sent again later,
        or set them aside once refused for longer than the hold. Returns the files kept and the
        record ids to be sent again."""
        now = self.clock()
        self.stats.storage_captures_not_placed += len(ack.not_placed)
        by_id = {b.batch_id: (p, b) for p, b in zip(paths, batches)}
        refused: dict[str, list[int]] = {}
        for batch_id, index, _rid, _reason in ack.not_placed:
            refused.setdefault(batch_id, []).append(index)
        kept: set[Path] = set()
        retrying: set[str] = set()
        for batch_id, idxs in refused.items():
            if batch_id not in by_id:
                continue
            p, b = by_id[batch_id]
            again: list[storage_pb2.Capture] = []
            give_up: list[storage_pb2.Capture] = []
            first = now
            for i in sorted(set(idxs)):
                if i >= len(b.captures):
                    continue
                c = b.captures[i]
                since = self._refused_since.setdefault(c.record_id, now)
                if now - since >= self.not_placed_hold:
                    give_up.append(c)
                    self._refused_since.pop(c.record_id, None)
                else:
                    again.append(c)
                    first = min(first, since)
            if give_up:
                dest = self.spool.keep_rejected(storage_pb2.PageBatch(batch_id=batch_id, captures=give_up),
                                                f"{p.stem}-not-placed-{uuid.uuid4().hex[:8]}.batch")
                self.stats.storage_captures_rejected += len(give_up)
                log.error("storage refused %d captures of %s as not placed for %.0f s: set aside in %s, not sent again "
                          "(their hosts' owners fetch again what storage lacks)", len(give_up), p.name, self.not_placed_hold, dest)
            if again:
                # Wait as long as they have been refused (at least retry_seconds, at most a quarter of the hold).
                delay = min(max(self.retry_seconds, now - first), max(self.retry_seconds, self.not_placed_hold / 4))
                path = self.spool.replace(p, storage_pb2.PageBatch(batch_id=batch_id, captures=again))
                self._not_before[path] = now + delay
                retrying.update(c.record_id for c in again)
                kept.add(p)
                kept.add(path)
        if retrying:
            reasons = [r for _, _, _, r in ack.not_placed[:3]]
            log.warning("storage refused %d captures as not placed (this agent is not on their hosts' preference lists "
                        "now); %d kept in the spool, sent again later: %s", len(ack.not_placed), len(retrying), reasons)
        return kept, retrying

    async def close(self) -> None:
        if self.storage is not None:
            await self.storage.close()


def _parsed(b: Batch) -> storage_pb2.PageBatch:
    return b if isinstance(b, storage_pb2.PageBatch) else storage_pb2.PageBatch.FromString(b)
