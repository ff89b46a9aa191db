"""The frontier's host queues: per host and origin, the queued URLs in BFS order, with only each
lane's head in memory (hot) and the rest on disk (cold), paged in by key range as the head drains.
Buffers the queue rows' adds and retries for the flush; in-flight items are inflight.py's. Reads
the table through the store only and never commits: its rows are written by the facade's flush."""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Iterable, Iterator

from agent.state.frontier.budgets import Budgets
from agent.state.frontier.inflight import InFlight
from agent.state.frontier.item import AddRow, Item, origin_of
from agent.state.frontier.store import Store

# A key lower than any real (depth, seq): "everything of this host is on disk only".
_MIN_KEY = (-(1 << 62), 0)


class _Lane:
    # One origin's queued items of a host (robots.txt, backoff and parking are per origin: a
    # blocked origin's items must not hide another origin's ready ones, so each has its own head).
    # Invariants (key = (depth, seq); "queued" = in the queue table or pending add, not in flight,
    # done not called):
    #   hot   = exactly the lane's queued items with key < bound, sorted by key;
    #   bound = None means +infinity (nothing of the lane is on disk only);
    #   cold  = number of the lane's queued items with key >= bound (on disk only, never in memory);
    #   dirty = the flush epoch in which a cold item of the lane was last buffered (its row may be
    #   missing or stale in the table until that flush).
    # A lane with no queued item is removed from its host.
    __slots__ = ("bound", "cold", "dirty", "hot")

    def __init__(self) -> None:
        self.hot: list[Item] = []
        self.bound: tuple[int, int] | None = None
        self.cold = 0
        self.dirty = -1


class _HostQ:
    # lanes: origin -> its lane (only lanes with queued items); every queued item of the host is
    # in exactly the lane of origin_of(its url). inflight = the host's items popped and neither
    # done nor retried (= its items in InFlight).
    __slots__ = ("inflight", "lanes")

    def __init__(self) -> None:
        self.lanes: dict[str, _Lane] = {}
        self.inflight = 0

    def queued(self) -> int:
        return sum(len(ln.hot) + ln.cold for ln in self.lanes.values())


def _key(it: Item) -> tuple[int, int]:
    return (it.depth, it.seq)


class Queues:
    """Per-host queues ordered by (depth, arrival): breadth-first within each host.

    Every queued item is a row of `queue` (after flush); memory holds only the first hot_per_host
    items of each host that has been touched (and at most about max_hot_items overall), the rest
    are paged in by key range as the head drains. `_hosts` holds a _HostQ for every host with
    items queued or in flight (an idle host costs no memory), `_work` the hosts with queued items
    (hot or cold); `_queued` and `_hot_total` count queued and hot items of all hosts. `_epoch`
    counts the flushes that took this part's rows (`take`). `_seq` is the last seq given out:
    seqs only grow, so a row is never overwritten by another URL's.

    Tells the budgets when a host gets a queue or loses it (presence, for the domain counts),
    and the in-flight rows what it pops. `flush` is the frontier's: a page-in of rows still
    buffered makes them durable first."""

    __slots__ = ("_adds", "_budgets", "_epoch", "_fl", "_flush", "_hosts", "_hot_total", "_low_water", "_queued",
                 "_seq", "_store", "_updates", "_work", "hot_per_host", "max_hot_items")

    def __init__(self, store: Store, inflight: InFlight, budgets: Budgets, flush: Callable[[], object], *,
                 hot_per_host: int, max_hot_items: int) -> None:
        self._store = store
        self._fl = inflight
        self._budgets = budgets
        self._flush = flush
        self.hot_per_host = hot_per_host
        self.max_hot_items = max_hot_items
        # Page in when the head falls to a quarter, so one range query serves many pops.
        self._low_water = hot_per_host // 4
        self._hosts: dict[str, _HostQ] = {}
        self._work: set[str] = set()
        self._queued = 0
        self._hot_total = 0
        self._adds: list[AddRow] = []
        self._updates: list[tuple[float, str, int, int]] = []
        self._epoch = 0
        self._seq = store.next_seq()
        self._recover()

    def _recover(self) -> None:
        # Everything on disk is queued again, including what was in flight at the crash; nothing is
        # loaded into memory until a host is popped.
        for host, origin, n in self._store.queued_by_origin():
            if host not in self._hosts:
                self._budgets.entered(host, indexed=True)
            q = self._q(host)
            lane = q.lanes[origin] = _Lane()
            lane.bound = _MIN_KEY
            lane.cold = n
            self._work.add(host)
            self._queued += n
        # Seqs only grow, even if meta lagged (it is written in the same transaction, but be safe).
        top = self._store.max_seq() if self._queued else None
        if top is not None and top > self._seq:
            self._seq = top

    # -- reads ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._queued

    @property
    def hot_items(self) -> int:
        return self._hot_total

    def has(self, host: str) -> bool:
        """Has the host a queue (items queued or in flight)?"""
        return host in self._hosts

    def holds(self, host: str) -> bool:
        q = self._hosts.get(host)
        return q is not None and bool(q.lanes or q.inflight)

    def in_flight_of(self, host: str) -> int:
        q = self._hosts.get(host)
        return 0 if q is None else q.inflight

    def queue_len(self, host: str) -> int:
        q = self._hosts.get(host)
        return 0 if q is None else q.queued()

    def origins(self, host: str) -> list[str]:
        q = self._hosts.get(host)
        return [] if q is None else list(q.lanes)

    def hosts_with_work(self) -> int:
        return len(self._work)

    def has_work(self, host: str) -> bool:
        return host in self._work

    def hosts(self, also: set[str] | None = None) -> Iterator[str]:
        """The hosts with queued items, and those of `also` (a snapshot)."""
        return iter(list(self._work if also is None else self._work | also))

    def export(self, host: str) -> list[Item]:
        """The host's rows (queued and in flight; after a flush: all of them), in BFS order."""
        return [Item(url, host, depth, via, nb, seq) for depth, seq, url, via, nb in self._store.queue_of(host)]

    # -- add ------------------------------------------------------------------------------------
    def _q(self, host: str) -> _HostQ:
        q = self._hosts.get(host)
        if q is None:
            q = self._hosts[host] = _HostQ()
        return q

    def add(self, its: list[Item]) -> int:
        """Queue items item_problem passed; assigns their seqs. Returns how many were queued."""
        seq = self._seq
        rows = self._adds
        hosts = self._hosts
        place = self._place
        n = 0
        try:
            for it in its:
                seq += 1
                it.seq = seq
                host = it.host
                rows.append((host, it.depth, seq, it.url, it.via, it.not_before))
                q = hosts.get(host)
                if q is None:
                    q = hosts[host] = _HostQ()
                    self._budgets.entered(host)
                place(host, q, it)
                n += 1
        finally:  # seqs only grow, whatever happened (a seq given out twice would overwrite a row)
            self._seq = seq
            self._queued += n
        return n

    def _place(self, host: str, q: _HostQ, it: Item) -> None:
        """Put a queued item in its lane's head (memory) or leave it on disk only."""
        o = origin_of(it.url)
        lane = q.lanes.get(o)
        if lane is None:
            lane = q.lanes[o] = _Lane()
        k = (it.depth, it.seq)
        if lane.bound is not None and k >= lane.bound:
            lane.cold += 1
            lane.dirty = self._epoch
        else:
            hot = lane.hot
            if not hot or k > (hot[-1].depth, hot[-1].seq):
                hot.append(it)
            else:
                insort(hot, it, key=_key)
            self._hot_total += 1
            if len(hot) > self.hot_per_host or self._hot_total > self.max_hot_items:
                e = hot.pop()  # the largest key leaves memory; its row stays on disk
                lane.bound = (e.depth, e.seq)
                lane.cold += 1
                lane.dirty = self._epoch  # its add may still be buffered
                self._hot_total -= 1
        if host not in self._work:
            self._work.add(host)

    # -- paging ---------------------------------------------------------------------------------
    def _page_in(self, host: str, q: _HostQ, origin: str, lane: _Lane) -> None:
        # Rows of this lane's cold items may still be buffered: then make the table the truth first.
        # Rows of done items not yet deleted are skipped below, so most page-ins need no flush.
        if lane.dirty == self._epoch:
            self._flush()
        want = self.hot_per_host - len(lane.hot)
        room = self.max_hot_items - self._hot_total
        if room < want:
            want = max(room, min(want, 16))  # a drained host still gets a useful page
        deleted = self._fl.deleted
        inflight = self._fl.seqs()
        hot = lane.hot
        # A host of one origin (nearly all) reads its range as it is; with several, the lane's rows
        # are picked from the host's range (each row is passed over once per lane: the bound moves on).
        only = None if len(q.lanes) == 1 else origin
        # In-flight rows and rows of buffered deletes in the range are skipped; loop in the rare case
        # that a whole page was skipped so a lane with cold items never looks empty.
        limit = want + q.inflight + min(len(deleted), self.hot_per_host)
        while True:
            b = lane.bound
            assert b is not None  # a page-in only happens while the lane has cold items
            rows = self._store.queue_from(host, b, only, limit)
            taken = 0
            stop = None
            for depth, seq, url, via, nb in rows:
                if seq in inflight or seq in deleted:
                    continue
                if taken == want:
                    stop = (depth, seq)  # the first queued row left on disk
                    break
                hot.append(Item(url, host, depth, via, nb, seq))
                taken += 1
            self._hot_total += taken
            lane.cold -= taken
            if stop is not None:
                lane.bound = stop
                return
            if len(rows) < limit:
                lane.bound = None
                lane.cold = 0  # == 0 already by the invariant; this just keeps a slip from sticking
                return
            last = rows[-1]
            lane.bound = (last[0], last[1] + 1)
            if taken:
                return

    # -- pop ------------------------------------------------------------------------------------
    def pop(self, host: str, now: float | None, wait: Callable[[str], float] | None) -> Item | None:
        """The host's first queued item in BFS order (first due at now; origins whose wait(origin)
        is after now passed over); in flight until done or retry."""
        q = self._hosts.get(host)
        if q is None:
            return None
        lanes = q.lanes
        if len(lanes) == 1:  # nearly every host: no choice to make
            ((origin, lane),) = lanes.items()
            if wait is not None and now is not None and wait(origin) > now:
                return None
            hot = lane.hot
            if len(hot) > self._low_water and (now is None or hot[0].not_before <= now):
                return self._take(host, q, origin, lane, 0)  # the usual case, in short
            i = self._first_due(host, q, origin, lane, now)
            return None if i < 0 else self._take(host, q, origin, lane, i)
        best: tuple[tuple[int, int], str, _Lane, int] | None = None
        for origin, lane in list(lanes.items()):
            if wait is not None and now is not None and wait(origin) > now:
                continue
            i = self._first_due(host, q, origin, lane, now)
            if i >= 0:
                cand = lane.hot[i]
                if best is None or (cand.depth, cand.seq) < best[0]:
                    best = ((cand.depth, cand.seq), origin, lane, i)
        return None if best is None else self._take(host, q, best[1], best[2], best[3])

    def _first_due(self, host: str, q: _HostQ, origin: str, lane: _Lane, now: float | None) -> int:
        """Index of the lane's first item due at now (paged in first if the head is low); -1: none."""
        if len(lane.hot) <= self._low_water and lane.cold:
            self._page_in(host, q, origin, lane)
        hot = lane.hot
        if not hot:
            return -1
        if now is None or hot[0].not_before <= now:
            return 0
        return next((j for j, cand in enumerate(hot) if cand.not_before <= now), -1)

    def _take(self, host: str, q: _HostQ, origin: str, lane: _Lane, i: int) -> Item:
        it = lane.hot.pop(i)
        self._hot_total -= 1
        self._queued -= 1
        q.inflight += 1
        self._fl.took(it)
        if not lane.hot and not lane.cold:
            del q.lanes[origin]
            if not q.lanes:
                self._work.discard(host)
        return it

    def ready_at(self, host: str, wait: Callable[[str], float] | None) -> float | None:
        """Earliest time a queued item of the host may be popped (None: none queued)."""
        q = self._hosts.get(host)
        if q is None:
            return None
        out = None
        for origin, lane in list(q.lanes.items()):
            if not lane.hot and lane.cold:
                self._page_in(host, q, origin, lane)
            if not lane.hot:
                continue
            t = min(it.not_before for it in lane.hot)
            if wait is not None:
                t = max(t, wait(origin))
            out = t if out is None else min(out, t)
        return out

    # -- finish ---------------------------------------------------------------------------------
    def done(self, item: Item) -> bool:
        """The item was fetched or given up; False if it was not in flight."""
        if not self._fl.done(item):
            return False
        q = self._hosts.get(item.host)
        if q is not None:
            q.inflight -= 1
            if not q.inflight and not q.lanes:
                del self._hosts[item.host]  # idle hosts cost no memory
                self._budgets.left(item.host)
        return True

    def retry(self, item: Item, not_before: float) -> bool:
        """The in-flight item back at its key, not before not_before; False if it was not in flight."""
        if not self._fl.back(item):
            return False
        item.not_before = not_before
        self._updates.append((not_before, item.host, item.depth, item.seq))
        q = self._q(item.host)
        q.inflight -= 1
        self._queued += 1
        self._place(item.host, q, item)
        return True

    # -- whole hosts ----------------------------------------------------------------------------
    def clear(self, host: str) -> int | None:
        """Drop the host's queued items (after a flush); those in flight stay until done. Returns
        the rows deleted, None if nothing was queued."""
        q = self._hosts.get(host)
        if q is None or not q.lanes:
            return None
        n = self._store.clear_queue(host, self._fl.seqs_of(host))
        self._queued -= q.queued()
        self._hot_total -= sum(len(ln.hot) for ln in q.lanes.values())
        q.lanes = {}
        self._work.discard(host)
        if not q.inflight:
            del self._hosts[host]
            self._budgets.left(host)
        return n

    def drop(self, host: str) -> None:
        """Forget the host's queue and in-flight items (its rows are deleted; the budgets were told)."""
        q = self._hosts.pop(host, None)
        if q is not None:
            self._queued -= q.queued()
            self._hot_total -= sum(len(ln.hot) for ln in q.lanes.values())
        if q is not None and q.inflight:
            self._fl.drop(host)
        self._work.discard(host)

    # -- the flush ------------------------------------------------------------------------------
    def pending(self) -> int:
        return len(self._adds) + len(self._updates)

    def take(self) -> tuple[list[AddRow], list[tuple[float, str, int, int]], int]:
        """The buffered adds (sorted by key: inserts walk each host's B-tree range once) and
        retries, and the last seq, for a flush; a new flush epoch begins."""
        adds, updates = self._adds, self._updates
        self._adds, self._updates = [], []
        self._epoch += 1
        if len(adds) > 1:
            adds.sort()
        return adds, updates, self._seq

    def restore(self, adds: Iterable[AddRow], updates: Iterable[tuple[float, str, int, int]]) -> None:
        """The flush failed: its rows are buffered again, and every lane counts as dirty."""
        self._adds[:0] = adds
        self._updates[:0] = updates
        for q in self._hosts.values():
            for ln in q.lanes.values():
                ln.dirty = self._epoch

    def unqueue(self, it: Item) -> None:
        """Take an added item out of memory: its row was never written (a flush left it out)."""
        if it.seq in self._fl.deleted:
            return  # popped and done already: it left memory then
        host = it.host
        q = self._hosts.get(host)
        if q is None:
            return
        if self._fl.back(it):
            q.inflight -= 1
        else:
            self._drop_queued(q, it)
        if not q.lanes:
            self._work.discard(host)
            if not q.inflight:
                del self._hosts[host]
                self._budgets.left(host)

    def _drop_queued(self, q: _HostQ, it: Item) -> None:
        o = origin_of(it.url)
        lane = q.lanes.get(o)
        if lane is not None:
            for i, h in enumerate(lane.hot):
                if h.seq == it.seq:
                    del lane.hot[i]
                    self._hot_total -= 1
                    break
            else:
                lane.cold -= 1  # counted as on disk only, where it never got
            if not lane.hot and not lane.cold:
                del q.lanes[o]
        self._queued -= 1

    def due_now(self, host: str, seq: int) -> None:
        """A retry's row was left out: the item keeps its place, due now (its row keeps the
        not_before it had)."""
        q = self._hosts.get(host)
        for it in (x for ln in q.lanes.values() for x in ln.hot) if q is not None else ():
            if it.seq == seq:
                it.not_before = 0.0
