"""Group commit: spool, outbox, frontier, seen set, in that order, as one object."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agent.state.frontier import Frontier, Item
from agent.state.outbox import Outbox
from agent.state.seen import SeenSet
from agent.state.spool import Spool
from storage.client import make_batch
from wancrawl.warcrecords import Capture

log = logging.getLogger("agent")


class CommitLog:
    """Crash safety rests on one rule kept here: a page counts as done (its frontier row goes)
    only after its capture is in the spool and its links are durable (local frontier, or the
    outbox). `commit` writes outbox first, then the frontier (links added and pages done in one
    transaction), then the seen set: a crash between steps can only cause a repeat (a page
    fetched again, a URL pushed again and deduplicated by its owner), never a loss.

    Invariant: every finished item is in exactly one of `_finished` (its capture is buffered,
    not yet spooled) and `_spooled` (its capture is in the spool: done at the next commit)."""

    def __init__(self, frontier: Frontier, seen: SeenSet, outbox: Outbox, spool: Spool, *, batch_pages: int,
                 flush_interval: float, clock: Callable[[], float]):
        self.frontier = frontier
        self.seen = seen
        self.outbox = outbox
        self.spool = spool
        self.batch_pages = batch_pages
        self.flush_interval = flush_interval
        self.clock = clock
        self._captures: list[Capture] = []
        self._captures_since = 0.0
        self._finished: list[Item] = []
        self._spooled: list[Item] = []
        self._waiters: list[asyncio.Future[None]] = []

    def finish(self, item: Item | None, capture: Capture | None = None) -> None:
        """The item is finished (fetched, given up or refused), with its capture if it has one.
        item None: a capture alone (a response to a try that will be retried)."""
        if capture is not None:
            if not self._captures:
                self._captures_since = self.clock()
            self._captures.append(capture)
        if item is not None:
            self._finished.append(item)
        if len(self._captures) >= self.batch_pages:
            self._flush_captures(force=True)

    def _flush_captures(self, force: bool) -> None:
        due = self._captures and (force or self.clock() - self._captures_since >= self.flush_interval)
        if due:
            self.spool.put(make_batch(self._captures))
            self._captures = []
        if due or not self._captures:
            # Every finished page's capture is in the spool now (or it had none).
            self._spooled.extend(self._finished)
            self._finished = []

    def commit(self, force: bool = False) -> None:
        """One group commit (force: spool partial capture batches at once, e.g. at stop)."""
        self._flush_captures(force)
        self.outbox.flush()
        for it in self._spooled:
            self.frontier.done(it)
        self._spooled = []
        self.frontier.flush()
        self.seen.flush()
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def barrier(self) -> None:
        """Return after the next commit: what was accepted before the call is durable."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut

    def busy(self) -> bool:
        """Finished pages not yet done for good."""
        return bool(self._captures or self._finished or self._spooled)

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.commit()
            except Exception:  # noqa: BLE001 - the next commit tries again (buffers are kept)
                log.exception("commit failed")
