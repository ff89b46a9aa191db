"""StoredCheck: before fetching again a URL a dead owner may have stored, ask storage.

A backup learns that a page is "done" only after storage acknowledged it (agent/ownership/replicator.py),
and marks "unshipped" the pages the owner fetched but had not yet stored; both marks travel in
replication rounds, so an owner that dies may have stored pages its backup still holds as
queued, marked or not (kill2 in bench/chaos.py: the promoted agent killed in the burst after its
promotion). The promoted agent therefore watches the whole queue it promotes, and the dispatcher
asks here before fetching a watched URL: storage's Lookup says whether it already holds a capture
that completed the URL (a transient status such as 503 does not; the URL is fetched). Lookups of
URLs due at once go to storage in one call.

Only what promotion hands over is watched (at most `max_watched` URLs; beyond, fetched without
asking): a URL not watched costs one set lookup on the fetch path. The watch list is memory
only: after a restart those URLs are fetched (at least once, never lost). If storage cannot
answer, the URL is fetched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Container, Iterable, Sequence
from dataclasses import dataclass

from wancrawl.errors import WancrawlError
from wancrawl.stats import Counters

log = logging.getLogger(__name__)

Lookup = Callable[[Sequence[str]], Awaitable[dict[str, set[int]]]]


@dataclass(slots=True)
class StoredCheckCounters(Counters):
    stored_checks: int = 0           # URLs asked of storage
    refetches_avoided: int = 0       # of them, stored already: not fetched again
    stored_check_errors: int = 0     # Lookup calls that failed (their URLs fetched)
    stored_check_unwatched: int = 0  # URLs past max_watched: fetched without asking


class StoredCheck:
    """`lookup(urls)` -> {url: statuses of its captures} (storage.client.GrpcStorageClient.lookup);
    `transient`: statuses that leave a URL to retry (agent.outcome.RETRY_STATUSES)."""

    def __init__(self, lookup: Lookup, transient: Container[int], *, max_watched: int = 200_000):
        self.lookup = lookup
        self.transient = transient
        self.max_watched = max_watched
        self._watched: set[str] = set()
        self._asked: dict[str, asyncio.Future[int]] = {}  # waiting for the next Lookup call
        self._flush: asyncio.Task | None = None
        self.stats = StoredCheckCounters()

    def watch(self, urls: Iterable[str]) -> None:
        """These URLs may be at storage already: check before fetching them."""
        for u in urls:
            if len(self._watched) >= self.max_watched:
                self.stats.stored_check_unwatched += 1  # fetched without asking: at most a duplicate
                continue
            self._watched.add(u)

    def __contains__(self, url: str) -> bool:
        return url in self._watched

    def __len__(self) -> int:
        return len(self._watched)

    async def stored(self, url: str) -> int:
        """The status of a capture storage holds that completed `url` (do not fetch it; a 2xx if
        it holds one, the revisit schedule wants it), 0 when none. The URL is no longer watched
        either way: a retry later fetches it."""
        if url not in self._watched:
            return 0
        self._watched.discard(url)
        fut = self._asked[url] = asyncio.get_running_loop().create_future()
        if self._flush is None:
            # URLs due together are popped in one pass of the dispatcher: one call for all.
            self._flush = asyncio.create_task(self._ask())
        return await asyncio.shield(fut)

    async def _ask(self) -> None:
        await asyncio.sleep(0)
        asked, self._asked, self._flush = self._asked, {}, None
        self.stats.stored_checks += len(asked)
        try:
            found = await self.lookup(list(asked))
        except WancrawlError as exc:
            log.warning("storage lookup of %d URLs failed (%s): fetching them", len(asked), exc)
            self.stats.stored_check_errors += 1
            found = {}
        for url, fut in asked.items():
            done = [s for s in found.get(url, ()) if s not in self.transient]
            status = max((s for s in done if 200 <= s < 300), default=min(done, default=0))
            self.stats.refetches_avoided += bool(status)
            if not fut.done():
                fut.set_result(status)
