"""The frontier's revisit schedule (issue 26; docs/continuous.md): one entry per URL fetched (the
`revisit` table), each host's earliest entries in memory, revisits popped in competition with the
host's first visits, and the next visit planned when one is done. What an entry becomes after a
visit is agent/state/revisit.py's (pure); this part keeps the entries and their order. Reads the
table through the store only and never commits: its entries are written by the facade's flush."""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable, Iterable

from agent.state.frontier.budgets import Budgets
from agent.state.frontier.hostkeys import HostKeys
from agent.state.frontier.item import Item, origin_of
from agent.state.frontier.queues import Queues
from agent.state.frontier.store import Store
from agent.state.revisit import Entry, Planner, Policy, Visit, entry_of

_RV_HEAD = 64  # entries paged in per host


def _due(e: Entry) -> float:
    return e.due


class _RvHost:
    # One host's revisit schedule in memory (issue 26). Invariants ("scheduled" = a row of
    # `revisit` or a buffered write, finite due, not in flight):
    #   head     = the host's scheduled entries of smallest due, sorted by due (a prefix: every
    #              scheduled entry not in head has due >= head[-1].due);
    #   complete = head holds every scheduled entry of the host (nothing on disk only);
    #   dirty    = the flush epoch in which an entry of the host not in head was buffered;
    #   inflight = url -> entry of revisits popped, neither done nor retried (their rows keep
    #              their old due: a crash leaves them due);
    #   credit   = the discovery share's balance: > 0 prefers first visits (Schedule.pop).
    __slots__ = ("complete", "credit", "dirty", "head", "inflight")

    def __init__(self, complete: bool) -> None:
        self.head: list[Entry] = []
        self.complete = complete
        self.dirty = -1
        self.inflight: dict[str, Entry] = {}
        self.credit = 0.0


class Schedule:
    """The revisit schedule, kept whatever the settings (a host handed over keeps its schedule);
    popped, and written by done(), only when revisits are on (`planner`).

    `_rv` holds an _RvHost for every host with a schedule row or a buffered entry; `_writes` the
    entries not yet flushed (the latest per URL), `_changed` every entry written since the last
    flush (for the flush listener), `_inflight` the revisits popped of all hosts. The optimal
    policy's plans: `_since` = revisits of a host since its last plan, `_size` = its pages then.
    `_epoch` counts the flushes that took this part's rows (`take`).

    Pops first visits from the queues (a host's revisits and first visits compete: `pop`).
    `flush` is the frontier's: a page-in of a host with entries still buffered, and a plan (a
    range read of the host's schedule), make them durable first. `wake(host)`: told of a host
    whose earliest revisit moved earlier (a page just fetched is scheduled at its commit, after the
    dispatcher let the host go idle): the agent's HostSignal.wake."""

    __slots__ = ("_budgets", "_changed", "_epoch", "_flush", "_inflight", "_keys", "_queues", "_rv", "_since", "_size",
                 "_store", "_writes", "clock", "discovery_share", "planner", "wake")

    def __init__(self, store: Store, keys: HostKeys, budgets: Budgets, queues: Queues, flush: Callable[[], object], *,
                 planner: Planner | None, discovery_share: float, clock: Callable[[], float],
                 wake: Callable[[str], None] | None) -> None:
        self._store = store
        self._keys = keys
        self._budgets = budgets
        self._queues = queues
        self._flush = flush
        self.planner = planner
        self.discovery_share = discovery_share
        self.clock = clock
        self.wake = wake
        self._rv: dict[str, _RvHost] = {h: _RvHost(False) for h in store.scheduled_hosts()}
        self._writes: dict[tuple[str, str], Entry] = {}
        self._inflight = 0
        self._changed: list[Entry] = []
        self._since: dict[str, int] = {}
        self._size: dict[str, int] = {}
        self._epoch = 0

    # -- reads ----------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return self._inflight

    def in_flight_of(self, host: str) -> int:
        rh = self._rv.get(host)
        return 0 if rh is None else len(rh.inflight)

    def knows(self, host: str) -> bool:
        return host in self._rv

    def hosts_scheduled(self) -> set[str]:
        """Hosts with revisits scheduled, due or not."""
        return {h for h, rh in self._rv.items() if rh.head or not rh.complete}

    def has_work(self, host: str) -> bool:
        rh = self._rv.get(host)
        return rh is not None and bool(rh.head or not rh.complete)

    def ready_at(self, host: str, wait: Callable[[str], float] | None) -> float | None:
        """When the host's first revisit is due (its origin's wait applied); None: none scheduled."""
        rh = self._rv.get(host)
        e = self._first(host, rh) if rh is not None else None
        if e is None:
            return None
        return e.due if wait is None else max(e.due, wait(origin_of(e.url)))

    def get(self, host: str, url: str) -> Entry | None:
        """The URL's entry (buffered, in flight, in the head or on disk), or None."""
        e = self._writes.get((host, url))
        if e is not None:
            return e
        rh = self._rv.get(host)
        if rh is None:
            return None
        e = rh.inflight.get(url) or next((x for x in rh.head if x.url == url), None)
        if e is not None:
            return e
        row = self._store.schedule_row(host, url)
        return None if row is None else entry_of(row)

    def export(self, host: str) -> list[Entry]:
        """The host's rows (after a flush: its whole schedule), by due."""
        return [entry_of(r) for r in self._store.schedule_of(host)]

    def counts(self, now: float) -> dict[str, float]:
        n, due = self._store.schedule_counts(now)
        return {"revisits_scheduled": float(n), "revisits_due": float(due)}

    # -- pop ------------------------------------------------------------------------------------
    def pop(self, host: str, now: float | None, wait: Callable[[str], float] | None) -> Item | None:
        """Revisits on: a due revisit of the host competes with its first visits; when both are
        due, at least `discovery_share` of the host's pops go to first visits (a credit balance
        per host), and either kind alone takes every pop."""
        rh = self._rv.get(host)
        if rh is None:
            return self._queues.pop(host, now, wait)
        share = self.discovery_share
        if rh.credit > 0:  # first visits' turn
            it = self._queues.pop(host, now, wait)
            if it is not None:
                rh.credit -= 1.0 - share
                return it
            return self._pop_revisit(host, rh, now, wait)
        it = self._pop_revisit(host, rh, now, wait)
        if it is not None:
            if self._queues.has_work(host):  # a first visit was waiting (due or not): the revisit used its turn
                rh.credit += share
            return it
        return self._queues.pop(host, now, wait)

    def _pop_revisit(self, host: str, rh: _RvHost, now: float | None, wait: Callable[[str], float] | None) -> Item | None:
        """The host's first revisit due at now whose origin may be fetched (in flight until done)."""
        if self._first(host, rh) is None:
            return None
        t = self.clock() if now is None else now
        for i, e in enumerate(rh.head):
            if e.due > t:
                return None
            if wait is not None and wait(origin_of(e.url)) > t:
                continue
            del rh.head[i]
            rh.inflight[e.url] = e
            self._inflight += 1
            return Item(e.url, host, e.depth, revisit=e)
        return None

    def _first(self, host: str, rh: _RvHost) -> Entry | None:
        if not rh.head and not rh.complete:
            self._page_in(host, rh)
        return rh.head[0] if rh.head else None

    def _page_in(self, host: str, rh: _RvHost) -> None:
        """Fill an empty head with the host's scheduled entries of smallest due (one index range)."""
        if rh.dirty == self._epoch:
            self._flush()
        skip = rh.inflight
        limit = _RV_HEAD + len(skip)
        rows = self._store.schedule_head(host, limit)
        rh.head = [e for e in map(entry_of, rows) if e.url not in skip]
        rh.complete = len(rows) < limit

    # -- finish ---------------------------------------------------------------------------------
    def done(self, item: Item) -> bool:
        """A revisit was fetched (or given up): its next visit is planned from what it told."""
        rh = self._rv.get(item.host)
        e = rh.inflight.pop(item.url, None) if rh is not None else None
        if rh is None or e is None:
            return False  # dropped meanwhile (handed over)
        self._inflight -= 1
        if self.planner is None:
            self._place(rh, e, buffered=False)
            return True
        v = item.visit
        now = v.at if v is not None and v.at else self.clock()
        nxt = self.planner.next(e, v, now)
        if self.planner.p.policy == "optimal":
            self._plan(nxt, now)
        self._put(nxt)
        return True

    def retry(self, item: Item, not_before: float) -> bool:
        """A revisit back to its host's schedule, due at not_before at the latest (memory only:
        its row keeps its due). False if it was not in flight."""
        rh = self._rv.get(item.host)
        e = rh.inflight.pop(item.url, None) if rh is not None else None
        if e is None or rh is None:
            return False
        self._inflight -= 1
        e.due = max(e.due, not_before) if not_before else e.due
        self._place(rh, e, buffered=False)
        return True

    def fetched(self, item: Item, v: Visit) -> None:
        """A first visit was fetched (revisits on): a 2xx answer enters the URL in the schedule."""
        assert self.planner is not None
        if 200 <= v.status < 300:
            old = self.get(item.host, item.url)
            if old is not None and math.isfinite(old.due):  # scheduled already (came with a handover)
                self._put(self.planner.next(old, v, v.at))
            else:
                self._put(self.planner.first(item.url, item.host, item.depth, v, old))

    def _plan(self, e: Entry, now: float) -> None:
        """The optimal policy: (re)plan the host's mu from its pages' estimated rates when it has
        none, or after visits of a quarter of its pages (at least 8) since the last plan (one
        range read of its schedule); then e's interval from it."""
        planner = self.planner
        assert planner is not None
        host = e.host
        since = self._since.get(host, 0) + 1
        if host not in planner.mu or since >= max(8, self._size.get(host, 0) // 4):
            self._flush()
            pages = [x for x in map(entry_of, self._store.scheduled_of(host)) if x.url != e.url] + [e]
            planner.plan_host(host, pages)
            self._size[host] = len(pages)
            since = 0
        self._since[host] = since
        e.interval = planner.interval_of(e)
        e.due = now + e.interval

    # -- entries --------------------------------------------------------------------------------
    def hint(self, host: str, url: str, lastmod: float, changefreq: float) -> None:
        """A sitemap's hints for a URL (scheduled, or kept for its first visit: due = inf)."""
        old = self.get(host, url)
        now = self.clock()
        if old is None:
            old = Entry(url, host, math.inf, 0.0)
        planner = self.planner or Planner(Policy())
        self._put(planner.hinted(old, lastmod, changefreq, now))

    def import_(self, entries: Iterable[Entry]) -> int:
        """Merge received entries: per URL the one with the later capture wins. Returns how many
        were taken."""
        n = 0
        for e in entries:
            old = self.get(e.host, e.url)
            if old is not None and (old.last > e.last or (old.last == e.last and math.isfinite(old.due))):
                continue
            self._put(e)
            n += 1
        return n

    def _put(self, e: Entry) -> None:
        """Schedule e (new, or replacing the URL's entry); durable at the next flush."""
        rh = self._rv.get(e.host)
        if rh is None:
            rh = self._rv[e.host] = _RvHost(True)  # new here: nothing of it on disk
        self._unplace(rh, e.url)
        self._writes[(e.host, e.url)] = e
        self._changed.append(e)
        if e.url not in rh.inflight:
            self._place(rh, e, buffered=True)
        if not self._budgets.counted(e.host) and not self._queues.has(e.host):
            self._keys.note(e.host)

    def _place(self, rh: _RvHost, e: Entry, *, buffered: bool) -> None:
        """Put a scheduled entry where the head invariant wants it (head, or on disk only)."""
        if not math.isfinite(e.due):
            return  # a hint only: not a revisit
        head = rh.head
        if rh.complete or (head and e.due <= head[-1].due):
            insort(head, e, key=_due)
            if head[0] is e and self.wake is not None and self.planner is not None:
                self.wake(e.host)
            if len(head) > 2 * _RV_HEAD:
                head.pop()
                rh.complete = False
                rh.dirty = self._epoch  # the evicted entry's write may still be buffered
        else:
            rh.complete = False
            if buffered:
                rh.dirty = self._epoch

    @staticmethod
    def _unplace(rh: _RvHost, url: str) -> None:
        for i, x in enumerate(rh.head):
            if x.url == url:
                del rh.head[i]
                return

    def drop(self, host: str) -> None:
        """Forget the host's schedule (its rows are deleted), its revisits in flight and its plan."""
        rh = self._rv.pop(host, None)
        if rh is not None:
            self._inflight -= len(rh.inflight)
        self._since.pop(host, None)
        self._size.pop(host, None)
        if self.planner is not None:
            self.planner.mu.pop(host, None)

    # -- the flush ------------------------------------------------------------------------------
    def pending(self) -> int:
        return len(self._writes)

    def take(self) -> tuple[list[tuple], list[Entry]]:
        """The entries to write and those written since the last flush; a new flush epoch begins."""
        rows = [e.row() for e in self._writes.values()]
        changed, self._writes, self._changed = self._changed, {}, []
        self._epoch += 1
        return rows, changed

    def restore(self, rows: list[tuple], changed: list[Entry]) -> None:
        """The flush failed: its entries are buffered again, and every host counts as dirty."""
        for row in rows:
            e = entry_of(row)
            self._writes.setdefault((e.host, e.url), e)
        self._changed[:0] = changed
        for rh in self._rv.values():
            rh.dirty = self._epoch
