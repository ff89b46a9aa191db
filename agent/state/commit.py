"""Group commit: spool, outbox, frontier, seen set, in that order, as one object."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from agent.state.frontier import Frontier, Item
from agent.state.outbox import Outbox
from agent.state.progress import ProgressWatch
from agent.state.seen import SeenSet
from agent.state.spool import Spool
from agent.state.storable import Unstorable
from storage.client import make_batch
from wancrawl import errors
from wancrawl.stats import Counters
from wancrawl.warcrecords import Capture

log = logging.getLogger("agent")


class Durable(Protocol):
    """CommitLog.barrier as the components that wait for a commit receive it."""

    def __call__(self, hosts: Collection[str] | None = None) -> Awaitable[None]: ...


@dataclass(slots=True)
class CommitCounters(Counters):
    """Frontier changes left out of a commit (poison rows) (the metric names: agent/metrics.py
    HELP)."""
    rows_rejected: int = 0


class CommitLog:
    """Crash safety rests on one rule kept here: a page counts as done (its frontier row goes)
    only after its capture is in the spool and its links are durable (local frontier, or the
    outbox). `commit` writes outbox first, then the frontier (links added and pages done in one
    transaction), then the seen set: a crash between steps can only cause a repeat (a page
    fetched again, a URL pushed again and deduplicated by its owner), never a loss.

    Invariant: every finished item is in exactly one of `_finished` (its capture is buffered,
    not yet spooled) and `_spooled` (its capture is in the spool: done at the next commit).

    Isolation (issue 21): a frontier flush that had to leave out rows it could not write
    (Frontier.flush) does not stop the commit. The rest is committed; the left-out URLs are
    taken back out of the seen set (a resend is queued, not taken for a duplicate); and the
    waiters that may have brought them are failed instead of answered. A waiter that named the
    hosts it added data for (`barrier(hosts)`) fails only if one of them had a row left out
    (Unstorable: INVALID_ARGUMENT); one that named none fails if any row was left out
    (Unavailable: resend). Acknowledging a request whose data was dropped would lose it;
    failing one whose data was committed only makes its sender resend, and the seen set
    deduplicates that. Invariant: `_rejected` holds the hosts with rows left out since the
    pending waiters were last answered.

    Every commit's outcome goes to `progress` (agent/state/progress.py): an agent whose commits
    keep failing reports itself unhealthy and stops heartbeating."""

    def __init__(self, frontier: Frontier, seen: SeenSet, outbox: Outbox, spool: Spool, *, batch_pages: int,
                 flush_interval: float, clock: Callable[[], float], progress: ProgressWatch | None = None):
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
        self._waiters: list[tuple[asyncio.Future[None], frozenset[str] | None]] = []
        self._rejected: set[str] = set()
        self.progress = progress
        self.stats = CommitCounters()

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
        try:
            self._commit(force)
        except Exception as exc:
            if self.progress is not None:
                self.progress.failed(exc)
            raise
        if self.progress is not None:
            self.progress.committed()
        waiters, self._waiters = self._waiters, []
        rejected, self._rejected = self._rejected, set()
        for w, hosts in waiters:
            if w.done():
                continue
            hit = rejected if hosts is None else rejected & hosts
            if not hit:
                w.set_result(None)
            elif hosts is None:
                w.set_exception(errors.Unavailable(
                    f"a commit left out changes it could not write (hosts {_some(hit)}); resend"))
            else:
                w.set_exception(Unstorable(f"this agent could not write the data of hosts {_some(hit)}: refused"))

    def _commit(self, force: bool) -> None:
        self._flush_captures(force)
        self.outbox.flush()
        for it in self._spooled:
            self.frontier.done(it)
        self._spooled = []
        self.frontier.flush()
        items, hosts = self.frontier.take_rejected()
        if items or hosts:
            urls: dict[str, list[str]] = {}
            for it in items:
                urls.setdefault(it.host, []).append(it.url)
            for host, us in urls.items():
                self.seen.forget(host, us)  # before the seen set's flush, in this same commit
            self._rejected.update(urls, hosts)
            self.stats.rows_rejected = self.frontier.rejected_rows
        self.seen.flush()

    async def barrier(self, hosts: Collection[str] | None = None) -> None:
        """Return after the next commit: what was accepted before the call is durable. Raises
        instead if rows the caller may have brought were left out as unwritable: `hosts` are
        the hosts the caller added data for (None: not known, any left-out row fails it)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, None if hosts is None else frozenset(hosts)))
        await fut

    def busy(self) -> bool:
        """Finished pages not yet done for good."""
        return bool(self._captures or self._finished or self._spooled)

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.commit()
            except Exception as exc:
                # The first failure in a row with its traceback, then a line now and then: the
                # progress watch says loudly when failures last (commit_stall_seconds).
                n = self.progress.failures if self.progress is not None else 1
                if n == 1:
                    log.exception("commit failed")
                elif n % 100 == 0:
                    log.error("commit failed %d times in a row: %s: %s", n, type(exc).__name__, exc)


def _some(hosts: Collection[str], n: int = 5) -> str:
    """At most n host names, for an error message."""
    first = sorted(hosts)[:n]
    return ", ".join(h[:80] for h in first) + (f" and {len(hosts) - n} more" if len(hosts) > n else "")
