"""The frontier's one face (`Frontier`): every caller's method, delegated to the part that owns
the state, and the flush, which gathers every part's buffered rows into ONE SQLite transaction
(the group commit: durability is decided here, nowhere else). The facade holds no queue, count
or schedule of its own: only the parts, the flush listener and what flushes left out."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Container, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from agent.state.frontier.budgets import Budgets
from agent.state.frontier.hostkeys import HostKeys
from agent.state.frontier.inflight import InFlight
from agent.state.frontier.item import AddRow, FlushListener, Item, check_items, check_pages
from agent.state.frontier.queues import Queues
from agent.state.frontier.schedule import Schedule
from agent.state.frontier.store import Rejected, Store
from agent.state.keyindex import IndexRead
from agent.state.revisit import Entry, Planner, Policy

if TYPE_CHECKING:  # not at run time: agent.settings pulls in the fetchers (seconds of imports)
    from agent.settings import RevisitSettings

log = logging.getLogger("agent")


class Frontier:
    """Per-host queues ordered by (depth, arrival): breadth-first within each host.

    Every queued item is a row of `queue` (after flush); memory holds only the first hot_per_host
    items of each host that has been touched (and at most about max_hot_items overall), the rest are
    paged in by key range as the head drains. In-flight items keep their row until done() is
    flushed, so a crash re-queues them: a restart loses nothing and refetches at most what was in
    flight. add/done/retry are buffered; flush() makes them durable in one transaction.

    Poison (issue 21): every buffered row can be written. add() and add_pages() refuse, whole
    and before changing anything, a value SQLite cannot store (item_problem, check_pages); a row
    that still cannot be written is left out by flush() and undone in memory (`_reject`), so one
    bad row never fails every flush after it.

    Parts (each the only writer of its state; calls go down this list): the revisit schedule
    (schedule.py), the host queues (queues.py), the in-flight rows (inflight.py), the page and
    domain budgets (budgets.py), the host-key index rows (hostkeys.py), the SQLite file (store.py).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        hot_per_host: int = 64,
        max_hot_items: int = 200_000,
        synchronous: str = "NORMAL",
        cache_kib: int = 8192,
        wal_pages: int = 4096,
        changes: FlushListener | None = None,
        domain_of: Callable[[str], str] | None = None,
        revisit: RevisitSettings | None = None,
        clock: Callable[[], float] = time.time,
        wake: Callable[[str], None] | None = None,
    ) -> None:
        if hot_per_host < 1:
            raise ValueError("hot_per_host must be >= 1")
        self.path = Path(path)
        self.hot_per_host = hot_per_host
        self.max_hot_items = max_hot_items
        # What each flush made durable goes to `changes` (replication), when there is one.
        self.changes = changes
        self._store = Store(self.path, synchronous=synchronous, cache_kib=cache_kib, wal_pages=wal_pages)
        self._keys = HostKeys(self._store)
        self._budgets = Budgets(self._store, self._keys, domain_of)
        self.domain_of: Callable[[str], str] = self._budgets.domain_of
        self._inflight = InFlight(keep_done=changes is not None)
        self._queues = Queues(self._store, self._inflight, self._budgets, self.flush,
                              hot_per_host=hot_per_host, max_hot_items=max_hot_items)
        planner = Planner(Policy.of(revisit)) if revisit is not None and revisit.enabled else None
        self._revisits = planner is not None
        self._schedule = Schedule(self._store, self._keys, self._budgets, self._queues, self.flush, planner=planner,
                                  discovery_share=revisit.discovery_share if revisit is not None else 1.0,
                                  clock=clock, wake=wake)
        # What flushes left out (unwritable rows), until the commit log takes it; a count for Status.
        self._rejected: list[Item] = []
        self._rejected_hosts: list[str] = []
        self.rejected_rows = 0

    # -- counts -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Queued items (not in flight)."""
        return len(self._queues)

    @property
    def in_flight(self) -> int:
        return len(self._inflight) + self._schedule.in_flight

    @property
    def hot_items(self) -> int:
        """Items held in memory (heads of host queues)."""
        return self._queues.hot_items

    def in_flight_of(self, host: str) -> int:
        """The host's items popped and neither done nor retried."""
        return self._queues.in_flight_of(host) + self._schedule.in_flight_of(host)

    def queue_len(self, host: str) -> int:
        return self._queues.queue_len(host)

    def origins(self, host: str) -> list[str]:
        """The origins the host has queued items of."""
        return self._queues.origins(host)

    def hosts_with_work(self) -> int:
        return self._queues.hosts_with_work()

    def hosts_ready(self) -> Iterator[str]:
        """Hosts with queued items, or revisits scheduled when revisits are on (a snapshot)."""
        if not self._revisits:
            return self._queues.hosts()
        return self._queues.hosts(self._schedule.hosts_scheduled())

    def has_work(self, host: str) -> bool:
        """Queued items, or (revisits on) revisits scheduled, due or not."""
        return self._queues.has_work(host) or (self._revisits and self._schedule.has_work(host))

    def pending(self) -> int:
        """Buffered changes not yet durable."""
        return self._queues.pending() + self._inflight.pending() + self._schedule.pending()

    # -- queue operations ---------------------------------------------------------------------------
    def add(self, items: Iterable[Item | tuple], *, checked: bool = False) -> int:
        """Queue new items (already deduplicated by the seen set). Returns how many were queued.

        Tuples are read as (url, host, depth, via, not_before). Durable after the next flush().
        An item the table could not hold (item_problem) refuses the whole call with Unstorable
        before any of it is queued: the caller (an RPC) fails, nothing it brought stays behind.
        `checked=True`: the caller passes a list of Items each of which item_problem passed
        already (Intake.accept_local checks every URL it takes, whatever way it came in), so the
        check is not made twice on the new-URL path."""
        if checked:
            assert isinstance(items, list)
            its: list[Item] = items
        else:
            its = [it if isinstance(it, Item) else Item(*it) for it in items]
            check_items(its)
        return self._queues.add(its)

    @staticmethod
    def check(items: Iterable[Item]) -> None:
        """Raise Unstorable for the first item add() would refuse (callers that must not change
        anything before a refusal check first: HostLedger.import_)."""
        check_items(items)

    def check_pages(self, host: str, n: int) -> None:
        """Raise Unstorable if add_pages(host, n) would be refused."""
        check_pages(host, n)

    def pop(self, host: str, now: float | None = None, wait: Callable[[str], float] | None = None) -> Item | None:
        """Take the host's first item in BFS order (first with not_before <= now when now is given);
        it is in flight until done() or retry(). `wait(origin)`: when the origin may be fetched
        (its backoff, its robots.txt); with now, origins still waiting are passed over, so the
        first item of any origin that may be fetched now is taken.

        Revisits on (issue 26): a due revisit of the host (`Item.revisit` set) competes with its
        first visits; when both are due, at least `discovery_share` of the host's pops go to
        first visits (a credit balance per host), and either kind alone takes every pop."""
        if self._revisits:
            return self._schedule.pop(host, now, wait)
        return self._queues.pop(host, now, wait)

    def ready_at(self, host: str, wait: Callable[[str], float] | None = None) -> float | None:
        """Earliest time an item of the host may be popped: per origin, the later of wait(origin)
        and the earliest not_before of its head; the earliest over its origins (None: no item).
        Revisits on: the host's first revisit due counts too (its origin's wait applied)."""
        out = self._schedule.ready_at(host, wait) if self._revisits else None
        t = self._queues.ready_at(host, wait)
        return out if t is None else t if out is None else min(out, t)

    def pages(self, host: str) -> int:
        """Pages fetched from the host so far (all time, across restarts)."""
        return self._budgets.pages(host)

    def domain_pages(self, host: str) -> int:
        """Pages fetched here from every host of the host's registered domain."""
        return self._budgets.domain_pages(host)

    def domain_hosts(self, host: str) -> int:
        """Hosts of the host's registered domain this frontier knows (URLs queued or pages counted)."""
        return self._budgets.domain_hosts(host)

    def add_pages(self, host: str, n: int = 1) -> None:
        """Count pages fetched (at once, so the budget holds between commits; durable at the next
        flush: a crash before it can only count a refetched page twice, never let one through).
        A count the table could not hold (beyond 2^63-1, or negative) is refused (Unstorable)."""
        check_pages(host, n)
        self._budgets.add(host, n, self._queues.has(host))

    def done(self, item: Item) -> bool:
        """The item was fetched (or given up): removed for good after the next flush. False if it was
        not in flight (e.g. its host was dropped meanwhile).

        Revisits on (issue 26): a URL fetched with a 2xx answer (`item.visit`) enters the
        revisit schedule; a revisit item is rescheduled by the policy from what it told."""
        if item.revisit is not None:
            return self._schedule.done(item)
        if not self._queues.done(item):
            return False
        v = item.visit
        if v is not None and self._revisits:
            self._schedule.fetched(item, v)
        return True

    def retry(self, item: Item, not_before: float = 0.0) -> bool:
        """Put an in-flight item back at its BFS position (same key), not to be popped before
        not_before. False if it was not in flight. A revisit goes back to its host's schedule,
        due at not_before at the latest (memory only: its row keeps its due)."""
        if item.revisit is not None:
            return self._schedule.retry(item, not_before)
        return self._queues.retry(item, not_before)

    # -- the revisit schedule (issue 26; docs/continuous.md) -------------------------------------------
    def hint(self, host: str, url: str, lastmod: float = 0.0, changefreq: float = 0.0) -> None:
        """A sitemap's <lastmod> (unix time) and <changefreq> (seconds: revisit.changefreq_seconds)
        for a URL of this host (issue 26 item 3, for the sitemap reader). A scheduled URL whose
        lastmod is after its last capture is due now; a changefreq is its prior change rate (and
        its interval until revisits measure one). A URL not fetched yet keeps the hint for its
        first visit (a row with due = inf, not a revisit). Durable at the next flush."""
        self._schedule.hint(host, url, lastmod, changefreq)

    def schedule_of(self, host: str, url: str) -> Entry | None:
        """The URL's revisit entry, or None (tests and the bench read it)."""
        return self._schedule.get(host, url)

    def scheduled(self, host: str, url: str) -> bool:
        """Whether the URL is in the revisit schedule (a sitemap hint alone is not)."""
        e = self._schedule.get(host, url)
        return e is not None and math.isfinite(e.due)

    def export_schedule(self, host: str) -> list[Entry]:
        """The host's whole revisit schedule (hints included), by due; one range scan."""
        self.flush()
        return self._schedule.export(host)

    def import_schedule(self, entries: Iterable[Entry]) -> int:
        """Merge received entries (a handover, a promotion): per URL the one with the later
        capture wins. Returns how many were taken."""
        return self._schedule.import_(entries)

    def revisit_counts(self, now: float) -> dict[str, float]:
        """Scheduled URLs and those due at now (a scan of the schedule: for status, not per page)."""
        self.flush()
        return self._schedule.counts(now)

    # -- handover -----------------------------------------------------------------------------------
    def export_host(self, host: str) -> list[Item]:
        """All of the host's items not done (queued and in flight), in BFS order; a range scan."""
        self.flush()
        return self._queues.export(host)

    def clear_queue(self, host: str) -> int:
        """Drop the host's queued items in one range delete (a host at its budget); items in flight
        stay until done. Returns how many were dropped."""
        self.flush()
        n = self._queues.clear(host)
        if n is None:
            return 0
        if self.changes is not None:
            self.changes.cleared(host)
        return n

    def drop_queued(self, host: str, urls: Container[str]) -> int:
        """Drop the host's queued items whose URL is in `urls`; returns how many went. Items in
        flight stay in flight whatever their URL (their fetch is under way: its end is recorded as
        usual), and are never queued again here: rebuilding the queue from export_host, which
        lists them too, would fetch them twice. Page count and revisit schedule are untouched."""
        self.flush()
        busy = set(self._inflight.seqs_of(host))
        queued = [i for i in self._queues.export(host) if i.seq not in busy]
        if not any(i.url in urls for i in queued):
            return 0
        keep = [Item(i.url, host, i.depth, i.via, i.not_before) for i in queued if i.url not in urls]
        self.clear_queue(host)  # the queued rows only (in-flight rows stay), in one range delete
        self.add(keep)  # new seqs in the same BFS order
        return len(queued) - len(keep)

    def drop_host(self, host: str) -> int:
        """Forget the host (handed over): its rows, head, in-flight items, page count and revisit
        schedule. Returns queue rows deleted."""
        self.flush()
        n = self._store.drop_host(host)
        self._schedule.drop(host)
        self._budgets.drop(host, self._queues.has(host))
        self._queues.drop(host)
        if self.changes is not None:
            self.changes.cleared(host)
        return n

    # -- the host-key index (seed 000's firstdiff) ---------------------------------------------------
    def holds(self, host: str) -> bool:
        """Does the frontier know the host: URLs queued or in flight, or a page count?"""
        return self._queues.holds(host) or self._budgets.counted(host) or self._schedule.knows(host)

    def read_moving(self, me: int, newcomer: int) -> IndexRead:
        """hosts_moving with what the read cost (bench/parts/firstdiff.py)."""
        return self._keys.read_moving(me, newcomer, self.holds)

    def hosts_moving(self, me: int, newcomer: int) -> list[str]:
        """The hosts this frontier knows (holds) whose host_key is strictly closer (XOR) to newcomer
        than to me: what a join of newcomer next to me takes from here. Reads only the index
        ranges that can hold them (agent/state/keyindex.py); flushes nothing."""
        return self.read_moving(me, newcomer).hosts

    def hosts_in_key_range(self, lo: int, hi: int) -> list[str]:
        """The hosts this frontier knows with lo <= host_key(host) <= hi (160-bit keys)."""
        return self._keys.in_range(lo, hi, self.holds)

    # -- durability ---------------------------------------------------------------------------------
    def flush(self) -> int:
        """Make all buffered add/done/retry durable in one transaction. Returns changes written.

        Isolation (issue 21): a row that cannot be written because of its own values (past the
        entry checks: a bug, a value nobody foresaw) does not fail this flush and every one after
        it. The rows are written again one by one in one transaction; the unwritable ones are left
        out, undone in memory (`_reject`) and kept for `take_rejected()` (the commit log answers
        the requests that brought them with an error). Any other failure (disk full, I/O error)
        writes nothing, keeps every change buffered and raises: the next flush retries."""
        queues, inflight, budgets, keys, schedule = self._queues, self._inflight, self._budgets, self._keys, self._schedule
        n = queues.pending() + inflight.pending()
        if not n and not budgets.pending() and not keys.pending() and not schedule.pending():
            return 0
        rv_rows, rv_changed = schedule.take()
        pages = budgets.take()
        key_rows = keys.take()
        adds, updates, seq = queues.take()
        deletes = inflight.take()
        try:
            bad = self._store.write(adds, updates, deletes, pages, seq, key_rows, rv_rows)
        except BaseException:
            # Put the changes back so a later flush can retry them; every host counts as dirty.
            queues.restore(adds, updates)
            inflight.restore(deletes)
            budgets.restore(pages)
            keys.restore(key_rows)
            schedule.restore(rv_rows, rv_changed)
            raise
        if any(bad):
            adds = self._reject(adds, updates, pages, bad)
        done = inflight.flushed()
        if self.changes is not None:
            self.changes.flushed(adds, done, pages, rv_changed)
        return n

    def _reject(self, adds: list[AddRow], updates: list[tuple[float, str, int, int]], pages: list[tuple[str, int]],
                bad: Rejected) -> list[AddRow]:
        """Undo in memory the rows a flush left out (write_each); returns the adds it wrote.

        Invariant kept: memory describes the table plus the buffers. A left-out add leaves the
        queue (head, cold count or in flight) and goes to `_rejected`; a left-out retry's item
        keeps its place, due now (its row keeps the not_before it had); a left-out page count
        goes back to the table's (`_rejected_hosts`); a left-out done mark leaves the row on
        disk, so the page is fetched again after a restart: a repeat, never a loss."""
        # A left-out index row (only a host that cannot be stored, whose queue and page rows are
        # left out too) needs nothing undone: the index may miss only hosts the tables lack.
        # A left-out schedule row keeps the row the table had: the URL is due as it was (a repeat).
        bad_adds, bad_updates, _, bad_pages, _, _, _ = bad
        rows = sum(map(len, bad))
        first = next(e for b in bad for _, e in b)
        log.error("frontier: %d change(s) could not be written and were left out (%s: %s); the rest is committed",
                  rows, type(first).__name__, str(first)[:200])
        self.rejected_rows += rows
        for i, _ in bad_adds:
            host, depth, seq, url, via, nb = adds[i]
            it = Item(url, host, depth, via, nb, seq)
            self._queues.unqueue(it)
            self._rejected.append(it)
        for i, _ in bad_updates:
            _, host, _, seq = updates[i]
            self._queues.due_now(host, seq)
        for i, _ in bad_pages:
            host = pages[i][0]
            self._budgets.reread(host, self._store.pages_of(host), self._queues.has(host))
            self._rejected_hosts.append(host)
        gone = {i for i, _ in bad_adds}
        return [r for i, r in enumerate(adds) if i not in gone]

    def take_rejected(self) -> tuple[list[Item], list[str]]:
        """Items whose add was left out by a flush, and hosts whose page count was, since the
        last call (CommitLog takes them to fail the requests that brought them)."""
        items, hosts = self._rejected, self._rejected_hosts
        self._rejected, self._rejected_hosts = [], []
        return items, hosts

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._store.close()

    def __enter__(self) -> Frontier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
