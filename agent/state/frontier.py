"""Persistent per-host BFS frontier: SQLite (WAL) on disk, only each host's head in memory, group commit."""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from bisect import insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agent.state.keyindex import IndexRead, IndexSql, read_key_range, read_moving
from agent.state.revisit import FIELDS as RV_FIELDS, Entry, Planner, Policy, Visit, entry_of
from agent.state.storable import INT64_MAX, Unstorable, text_ok, write_all
from wancrawl.checks import MAX_COUNT
from wancrawl.kademlia.xorspace import host_prefix

if TYPE_CHECKING:  # not at run time: agent.settings pulls in the fetchers (seconds of imports)
    from agent.settings import RevisitSettings

log = logging.getLogger("agent")

# A host's page count saturates at what the edge accepts in a HandOver or Replicate
# (agent/validate.py), so a count this agent hands on is always taken; far below SQLite's
# signed 64-bit INTEGER.
MAX_PAGES = MAX_COUNT

# A key lower than any real (depth, seq): "everything of this host is on disk only".
_MIN_KEY = (-(1 << 62), 0)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    url TEXT NOT NULL,
    via TEXT NOT NULL,
    not_before REAL NOT NULL,
    PRIMARY KEY (host, depth, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pages (host TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
"""

# Schema versions (PRAGMA user_version), each step run once, in one transaction with the bump, on
# a database of the version before: the agents' data dirs survive upgrades.
#   1 (issue 22): `hostkey`, the host-key index (agent/state/keyindex.py): one row per host, its
#     64-bit key prefix first so a range of keys is a range of the table. Filled from the hosts
#     of `queue` and `pages`. Invariant: every host with a row in `queue` or `pages` has one
#     (written in the flush that writes its first such row); it may keep rows of hosts that
#     drained (read and dropped by the holds() check, removed with drop_host).
#   2, 3 (issue 26): `revisit`, the revisit schedule (agent/state/revisit.py Entry, one row per URL
#     fetched, kept after its queue row goes), and its (host, due) index. Every host with a row in
#     `revisit` has a `pages` row (its URL was fetched, or came with a handover that carries the
#     count), hence a `hostkey` row.
_MIGRATIONS: list[str] = [
    "CREATE TABLE IF NOT EXISTS hostkey (hkey INTEGER NOT NULL, host TEXT NOT NULL, PRIMARY KEY (hkey, host)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS revisit (host TEXT NOT NULL, url TEXT NOT NULL, due REAL NOT NULL, interval REAL NOT NULL, "
    "last REAL NOT NULL, digest TEXT NOT NULL, etag TEXT NOT NULL, modified TEXT NOT NULL, length INTEGER NOT NULL, "
    "visits INTEGER NOT NULL, changes INTEGER NOT NULL, span REAL NOT NULL, depth INTEGER NOT NULL, lastmod REAL NOT NULL, "
    "changefreq REAL NOT NULL, PRIMARY KEY (host, url)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS revisit_due ON revisit (host, due)",
]
SCHEMA_VERSION = len(_MIGRATIONS)


@dataclass(slots=True)
class Item:
    """One queued URL. seq is assigned by Frontier.add (-1 before); (host, depth, seq) is its key.

    Treat items returned by the frontier as read-only: the frontier keeps references to them."""

    url: str
    host: str
    depth: int = 0
    via: str = ""
    not_before: float = 0.0
    seq: int = -1
    force: bool = False  # queue it even if seen (an operator's re-seed); not kept on disk
    # Issue 26 (memory only): a revisit popped from the schedule carries its entry (seq stays -1);
    # the dispatcher sets `visit` (what the fetch told) before the item is finished, and done()
    # schedules the URL's next visit from it.
    revisit: Entry | None = None
    visit: Visit | None = None


AddRow = tuple[str, int, int, str, str, float]
"""A queued URL as the frontier writes it: (host, depth, seq, url, via, not_before)."""


class FlushListener(Protocol):
    """Told what each flush made durable, and of hosts dropped whole (agent/state/changes.py's
    ChangeLog, for replication). The frontier receives one; it does not know who listens."""

    def flushed(self, adds: list[AddRow], done: list[Item], pages: list[tuple[str, int]], revisits: list[Entry]) -> None: ...
    def cleared(self, host: str) -> None: ...


def origin_of(url: str) -> str:
    """scheme://host[:port] of a canonical URL (RFC 9309's unit of robots.txt; a lane's key)."""
    i = url.find("/", 8)  # the path's slash: after "https://h" or "http://h"
    return url if i < 0 else url[:i]


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


def _no_domain(host: str) -> str:
    return ""


class _HostQ:
    # lanes: origin -> its lane (only lanes with queued items); every queued item of the host is
    # in exactly the lane of origin_of(its url). inflight = the host's items popped and neither
    # done nor retried.
    __slots__ = ("inflight", "lanes")

    def __init__(self) -> None:
        self.lanes: dict[str, _Lane] = {}
        self.inflight = 0

    def queued(self) -> int:
        return sum(len(ln.hot) + ln.cold for ln in self.lanes.values())


class _RvHost:
    # One host's revisit schedule in memory (issue 26). Invariants ("scheduled" = a row of
    # `revisit` or a buffered write, finite due, not in flight):
    #   head     = the host's scheduled entries of smallest due, sorted by due (a prefix: every
    #              scheduled entry not in head has due >= head[-1].due);
    #   complete = head holds every scheduled entry of the host (nothing on disk only);
    #   dirty    = the flush epoch in which an entry of the host not in head was buffered;
    #   inflight = url -> entry of revisits popped, neither done nor retried (their rows keep
    #              their old due: a crash leaves them due);
    #   credit   = the discovery share's balance: > 0 prefers first visits (Frontier.pop).
    __slots__ = ("complete", "credit", "dirty", "head", "inflight")

    def __init__(self, complete: bool) -> None:
        self.head: list[Entry] = []
        self.complete = complete
        self.dirty = -1
        self.inflight: dict[str, Entry] = {}
        self.credit = 0.0


_RV_HEAD = 64  # entries paged in per host
_RV_PUT = f"INSERT OR REPLACE INTO revisit VALUES ({','.join('?' * len(RV_FIELDS))})"
_RV_COLS = ", ".join(RV_FIELDS)


def _due(e: Entry) -> float:
    return e.due


def _key(it: Item) -> tuple[int, int]:
    return (it.depth, it.seq)


def item_problem(it: Item) -> str | None:
    """Why the frontier could not store the item (None: it can). Pure; the entry check of add()."""
    if not 0 <= it.depth <= INT64_MAX:
        return f"depth {it.depth} is outside 0..2^63-1"
    if it.not_before != it.not_before:
        return "not_before is NaN"
    if not (it.url.isascii() and it.host.isascii() and it.via.isascii()):  # canonical URLs are ASCII
        for name, s in (("url", it.url), ("host", it.host), ("via", it.via)):
            if not text_ok(s):
                return f"{name} is not valid UTF-8"
    return None


_ADD = "INSERT OR REPLACE INTO queue VALUES (?,?,?,?,?,?)"
_UPDATE = "UPDATE queue SET not_before=? WHERE host=? AND depth=? AND seq=?"
_DELETE = "DELETE FROM queue WHERE host=? AND depth=? AND seq=?"
_PAGES = "INSERT OR REPLACE INTO pages VALUES (?, ?)"
_META = "INSERT OR REPLACE INTO meta VALUES ('next_seq', ?)"
_KEY = "INSERT OR IGNORE INTO hostkey VALUES (?, ?)"
_KEY_SQL = IndexSql(
    seek="SELECT min(hkey) FROM hostkey WHERE hkey >= ?",
    range="SELECT host FROM hostkey WHERE hkey BETWEEN ? AND ?",
    scan="SELECT hkey, host FROM hostkey WHERE hkey >= ? ORDER BY hkey",
)


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
        # Page in when the head falls to a quarter, so one range query serves many pops.
        self._low_water = hot_per_host // 4
        # NORMAL in WAL mode: a commit survives a process crash (kill -9); FULL also survives power
        # loss at the cost of an fsync per flush.
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
        # Adds spread over many hosts dirty one leaf page per host; a larger WAL lets a page dirtied
        # by several flushes reach the main file once per checkpoint instead of once per flush.
        # But the checkpoint runs inside the flush that crosses the mark, on the agent's event
        # loop: 16,384 pages (64 MB) cost that one flush 41-65 ms of CPU on the bench machine,
        # 4,096 cost 21-30 ms, with the same total flush CPU over 600,000 new URLs
        # (docs/benchmarks.md "Session 10"): the busy loop-lag target is 100 ms per sample.
        self._db.execute(f"PRAGMA wal_autocheckpoint={int(wal_pages)}")
        self._db.executescript(_SCHEMA)
        self._db.create_function("origin", 1, origin_of, deterministic=True)
        self._migrate()
        self._hosts: dict[str, _HostQ] = {}
        self._work: set[str] = set()  # hosts with queued items (hot or cold)
        self._inflight: dict[int, Item] = {}  # seq -> item
        self._queued = 0
        self._hot_total = 0
        self._adds: list[tuple] = []
        self._updates: list[tuple] = []
        self._deletes: list[tuple] = []
        self._deleted: set[int] = set()  # seqs of buffered deletes: rows still in the table
        self._epoch = 0  # flushes so far
        # What each flush made durable goes to `changes` (replication), when there is one.
        self.changes = changes
        self._done_items: list[Item] = []
        # Pages fetched per host (the page budget), durable with the done marks that count them.
        self._pages: dict[str, int] = dict(self._db.execute("SELECT host, n FROM pages"))
        self._pages_dirty: set[str] = set()
        # Per registered domain (the per-domain budgets, issue 25), derived from the per-host state
        # above, so nothing more is stored. Invariants: _domain_pages[d] = sum of _pages over the
        # hosts of d; _domain_hosts[d] = number of hosts of d "present": in _hosts or in _pages.
        # domain_of None: no per-domain counts (every domain reads 0); the agent passes
        # wancrawl.domains.registered_domain (agent/node.py).
        self.domain_of: Callable[[str], str] = domain_of or _no_domain
        self._count_domains = domain_of is not None
        self._domain_pages: dict[str, int] = {}
        self._domain_hosts: dict[str, int] = {}
        for host, n in self._pages.items() if self._count_domains else ():
            d = self.domain_of(host)
            self._domain_pages[d] = self._domain_pages.get(d, 0) + n
            self._domain_hosts[d] = self._domain_hosts.get(d, 0) + 1
        # Host-key index rows (hkey, host) of hosts that entered memory (_hosts or _pages) from
        # neither, until the next flush writes them (INSERT OR IGNORE: the row may exist already).
        self._key_rows: list[tuple[int, str]] = []
        # What flushes left out (unwritable rows), until the commit log takes it; a count for Status.
        self._rejected: list[Item] = []
        self._rejected_hosts: list[str] = []
        self.rejected_rows = 0
        row = self._db.execute("SELECT v FROM meta WHERE k='next_seq'").fetchone()
        self._seq = row[0] if row else 0
        # The revisit schedule (issue 26): kept whatever the settings (a host handed over keeps
        # its schedule); popped, and written by done(), only when revisits are on.
        self.clock = clock
        # Told of a host whose earliest revisit moved earlier (a page just fetched is scheduled at
        # its commit, after the dispatcher let the host go idle): the agent's HostSignal.wake.
        self.wake = wake
        self.planner = Planner(Policy.of(revisit)) if revisit is not None and revisit.enabled else None
        self.discovery_share = revisit.discovery_share if revisit is not None else 1.0
        self._rv: dict[str, _RvHost] = {h: _RvHost(False) for (h,) in self._db.execute("SELECT DISTINCT host FROM revisit")}
        self._rv_writes: dict[tuple[str, str], Entry] = {}
        self._rv_inflight = 0  # revisits popped, neither done nor retried (every host's)
        self._rv_changed: list[Entry] = []
        # The optimal policy's plans: host -> revisits since its last plan, and its pages then.
        self._rv_since: dict[str, int] = {}
        self._rv_size: dict[str, int] = {}
        self._recover()

    def _migrate(self) -> None:
        """Bring an older database to SCHEMA_VERSION (see _MIGRATIONS), each step in one
        transaction with its version bump, so a crash mid-way leaves the old version whole."""
        db = self._db
        version = db.execute("PRAGMA user_version").fetchone()[0]
        for v in range(version, SCHEMA_VERSION):
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(_MIGRATIONS[v])
                if v == 0:  # the host-key index: every host the tables hold
                    hosts = db.execute("SELECT DISTINCT host FROM queue UNION SELECT host FROM pages").fetchall()
                    db.executemany(_KEY, [(host_prefix(h), h) for (h,) in hosts])
                db.execute(f"PRAGMA user_version={v + 1}")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _recover(self) -> None:
        # Everything on disk is queued again, including what was in flight at the crash; nothing is
        # loaded into memory until a host is popped.
        for host, origin, n in self._db.execute("SELECT host, origin(url), count(*) FROM queue GROUP BY host, origin(url)"):
            if host not in self._hosts and host not in self._pages:
                self._present(host, 1)
            q = self._q(host)
            lane = q.lanes[origin] = _Lane()
            lane.bound = _MIN_KEY
            lane.cold = n
            self._work.add(host)
            self._queued += n
        # Seqs only grow, even if meta lagged (it is written in the same transaction, but be safe).
        row = self._db.execute("SELECT max(seq) FROM queue").fetchone() if self._queued else None
        if row and row[0] is not None and row[0] > self._seq:
            self._seq = row[0]

    # -- counts -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Queued items (not in flight)."""
        return self._queued

    @property
    def in_flight(self) -> int:
        return len(self._inflight) + self._rv_inflight

    @property
    def hot_items(self) -> int:
        """Items held in memory (heads of host queues)."""
        return self._hot_total

    def in_flight_of(self, host: str) -> int:
        """The host's items popped and neither done nor retried."""
        q = self._hosts.get(host)
        rh = self._rv.get(host)
        return (q.inflight if q is not None else 0) + (len(rh.inflight) if rh is not None else 0)

    def queue_len(self, host: str) -> int:
        q = self._hosts.get(host)
        return 0 if q is None else q.queued()

    def origins(self, host: str) -> list[str]:
        """The origins the host has queued items of."""
        q = self._hosts.get(host)
        return [] if q is None else list(q.lanes)

    def hosts_with_work(self) -> int:
        return len(self._work)

    def hosts_ready(self) -> Iterator[str]:
        """Hosts with queued items, or revisits scheduled when revisits are on (a snapshot)."""
        if self.planner is None:
            return iter(list(self._work))
        return iter(list(self._work | {h for h, rh in self._rv.items() if rh.head or not rh.complete}))

    def has_work(self, host: str) -> bool:
        """Queued items, or (revisits on) revisits scheduled, due or not."""
        if host in self._work:
            return True
        rh = self._rv.get(host) if self.planner is not None else None
        return rh is not None and bool(rh.head or not rh.complete)

    def pending(self) -> int:
        """Buffered changes not yet durable."""
        return len(self._adds) + len(self._updates) + len(self._deletes) + len(self._rv_writes)

    # -- queue operations ---------------------------------------------------------------------------
    def _q(self, host: str) -> _HostQ:
        q = self._hosts.get(host)
        if q is None:
            q = self._hosts[host] = _HostQ()
        return q

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
            self.check(its)
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
                    if host not in self._pages:  # a host in neither has no index row, or a stale one
                        self._key_rows.append((host_prefix(host), host))
                        self._present(host, 1)
                place(host, q, it)
                n += 1
        finally:  # seqs only grow, whatever happened (a seq given out twice would overwrite a row)
            self._seq = seq
            self._queued += n
        return n

    @staticmethod
    def check(items: Iterable[Item]) -> None:
        """Raise Unstorable for the first item add() would refuse (callers that must not change
        anything before a refusal check first: HostLedger.import_)."""
        for it in items:
            why = item_problem(it)
            if why is not None:
                raise Unstorable(f"queue item {it.url[:80]!r}: {why}")

    def check_pages(self, host: str, n: int) -> None:
        """Raise Unstorable if add_pages(host, n) would be refused."""
        # A count SQLite cannot hold is refused; a host's sum saturates at MAX_PAGES (add_pages),
        # so adding never overflows either.
        if not 0 <= n <= INT64_MAX:
            raise Unstorable(f"pages {n} of {host[:80]!r}: a page count must be within 0..2^63-1")

    def _page_in(self, host: str, q: _HostQ, origin: str, lane: _Lane) -> None:
        # Rows of this lane's cold items may still be buffered: then make the table the truth first.
        # Rows of done items not yet deleted are skipped below, so most page-ins need no flush.
        if lane.dirty == self._epoch:
            self.flush()
        want = self.hot_per_host - len(lane.hot)
        room = self.max_hot_items - self._hot_total
        if room < want:
            want = max(room, min(want, 16))  # a drained host still gets a useful page
        deleted = self._deleted
        inflight = self._inflight
        hot = lane.hot
        # A host of one origin (nearly all) reads its range as it is; with several, the lane's rows
        # are picked from the host's range (each row is passed over once per lane: the bound moves on).
        where = "" if len(q.lanes) == 1 else " AND origin(url) = ?"
        extra: tuple[str, ...] = () if len(q.lanes) == 1 else (origin,)
        # In-flight rows and rows of buffered deletes in the range are skipped; loop in the rare case
        # that a whole page was skipped so a lane with cold items never looks empty.
        limit = want + q.inflight + min(len(deleted), self.hot_per_host)
        while True:
            b = lane.bound
            assert b is not None  # a page-in only happens while the lane has cold items
            rows = self._db.execute(
                f"SELECT depth, seq, url, via, not_before FROM queue WHERE host=? AND (depth, seq) >= (?, ?){where} "
                "ORDER BY depth, seq LIMIT ?",
                (host, b[0], b[1], *extra, limit),
            ).fetchall()
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

    def pop(self, host: str, now: float | None = None, wait: Callable[[str], float] | None = None) -> Item | None:
        """Take the host's first item in BFS order (first with not_before <= now when now is given);
        it is in flight until done() or retry(). `wait(origin)`: when the origin may be fetched
        (its backoff, its robots.txt); with now, origins still waiting are passed over, so the
        first item of any origin that may be fetched now is taken.

        Revisits on (issue 26): a due revisit of the host (`Item.revisit` set) competes with its
        first visits; when both are due, at least `discovery_share` of the host's pops go to
        first visits (a credit balance per host), and either kind alone takes every pop."""
        rh = self._rv.get(host) if self.planner is not None else None
        if rh is None:
            return self._pop_queue(host, now, wait)
        share = self.discovery_share
        if rh.credit > 0:  # first visits' turn
            it = self._pop_queue(host, now, wait)
            if it is not None:
                rh.credit -= 1.0 - share
                return it
            return self._pop_revisit(host, rh, now, wait)
        it = self._pop_revisit(host, rh, now, wait)
        if it is not None:
            if host in self._work:  # a first visit was waiting (due or not): the revisit used its turn
                rh.credit += share
            return it
        return self._pop_queue(host, now, wait)

    def _pop_queue(self, host: str, now: float | None, wait: Callable[[str], float] | None) -> Item | None:
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
        self._inflight[it.seq] = it
        if not lane.hot and not lane.cold:
            del q.lanes[origin]
            if not q.lanes:
                self._work.discard(host)
        return it

    def ready_at(self, host: str, wait: Callable[[str], float] | None = None) -> float | None:
        """Earliest time an item of the host may be popped: per origin, the later of wait(origin)
        and the earliest not_before of its head; the earliest over its origins (None: no item).
        Revisits on: the host's first revisit due counts too (its origin's wait applied)."""
        out = None
        rh = self._rv.get(host) if self.planner is not None else None
        if rh is not None:
            e = self._rv_first(host, rh)
            if e is not None:
                out = e.due if wait is None else max(e.due, wait(origin_of(e.url)))
        q = self._hosts.get(host)
        if q is None:
            return out
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

    def pages(self, host: str) -> int:
        """Pages fetched from the host so far (all time, across restarts)."""
        return self._pages.get(host, 0)

    def domain_pages(self, host: str) -> int:
        """Pages fetched here from every host of the host's registered domain."""
        return self._domain_pages.get(self.domain_of(host), 0)

    def domain_hosts(self, host: str) -> int:
        """Hosts of the host's registered domain this frontier knows (URLs queued or pages counted)."""
        return self._domain_hosts.get(self.domain_of(host), 0)

    def _present(self, host: str, step: int) -> None:
        """A host entered (step 1) or left (-1) the hosts this frontier knows (_hosts or _pages)."""
        if not self._count_domains:
            return
        d = self.domain_of(host)
        n = self._domain_hosts.get(d, 0) + step
        if n > 0:
            self._domain_hosts[d] = n
        else:
            self._domain_hosts.pop(d, None)
            self._domain_pages.pop(d, None)

    def _set_pages(self, host: str, n: int | None) -> None:
        """_pages[host] = n (None: no entry), with the domain's sum."""
        old = self._pages.get(host, 0)
        if n is None:
            self._pages.pop(host, None)
        else:
            self._pages[host] = n
        if not self._count_domains:
            return
        d = self.domain_of(host)
        if n != old and d in self._domain_hosts:
            self._domain_pages[d] = self._domain_pages.get(d, 0) + (n or 0) - old

    def add_pages(self, host: str, n: int = 1) -> None:
        """Count pages fetched (at once, so the budget holds between commits; durable at the next
        flush: a crash before it can only count a refetched page twice, never let one through).
        A count the table could not hold (beyond 2^63-1, or negative) is refused (Unstorable)."""
        self.check_pages(host, n)
        if n:
            if host not in self._pages and host not in self._hosts:
                self._key_rows.append((host_prefix(host), host))
                self._present(host, 1)
            # Handed-over counts add up here: each is bounded at the edge, their sum is not.
            self._set_pages(host, min(self._pages.get(host, 0) + n, MAX_PAGES))
            self._pages_dirty.add(host)

    def done(self, item: Item) -> bool:
        """The item was fetched (or given up): removed for good after the next flush. False if it was
        not in flight (e.g. its host was dropped meanwhile).

        Revisits on (issue 26): a URL fetched with a 2xx answer (`item.visit`) enters the
        revisit schedule; a revisit item is rescheduled by the policy from what it told."""
        if item.revisit is not None:
            return self._rv_done(item)
        if self._inflight.pop(item.seq, None) is None:
            return False
        self._deletes.append((item.host, item.depth, item.seq))
        self._deleted.add(item.seq)
        if self.changes is not None:
            self._done_items.append(item)
        q = self._hosts.get(item.host)
        if q is not None:
            q.inflight -= 1
            if not q.inflight and not q.lanes:
                del self._hosts[item.host]  # idle hosts cost no memory
                if item.host not in self._pages:
                    self._present(item.host, -1)
        v = item.visit
        if self.planner is not None and v is not None and 200 <= v.status < 300:
            old = self._rv_get(item.host, item.url)
            if old is not None and math.isfinite(old.due):  # scheduled already (came with a handover)
                self._rv_put(self.planner.next(old, v, v.at))
            else:
                self._rv_put(self.planner.first(item.url, item.host, item.depth, v, old))
        return True

    def retry(self, item: Item, not_before: float = 0.0) -> bool:
        """Put an in-flight item back at its BFS position (same key), not to be popped before
        not_before. False if it was not in flight. A revisit goes back to its host's schedule,
        due at not_before at the latest (memory only: its row keeps its due)."""
        if item.revisit is not None:
            rh = self._rv.get(item.host)
            e = rh.inflight.pop(item.url, None) if rh is not None else None
            if e is None or rh is None:
                return False
            self._rv_inflight -= 1
            e.due = max(e.due, not_before) if not_before else e.due
            self._rv_place(rh, e, buffered=False)
            return True
        if self._inflight.pop(item.seq, None) is None:
            return False
        item.not_before = not_before
        self._updates.append((not_before, item.host, item.depth, item.seq))
        q = self._q(item.host)
        q.inflight -= 1
        self._queued += 1
        self._place(item.host, q, item)
        return True

    # -- the revisit schedule (issue 26; docs/continuous.md) -------------------------------------------
    def _rv_host(self, host: str) -> _RvHost:
        rh = self._rv.get(host)
        if rh is None:
            rh = self._rv[host] = _RvHost(True)  # new here: nothing of it on disk
        return rh

    def _rv_page_in(self, host: str, rh: _RvHost) -> None:
        """Fill an empty head with the host's scheduled entries of smallest due (one index range)."""
        if rh.dirty == self._epoch:
            self.flush()
        skip = rh.inflight
        limit = _RV_HEAD + len(skip)
        rows = self._db.execute(f"SELECT {_RV_COLS} FROM revisit WHERE host=? AND due < ? ORDER BY due LIMIT ?",
                                (host, math.inf, limit)).fetchall()
        rh.head = [e for e in map(entry_of, rows) if e.url not in skip]
        rh.complete = len(rows) < limit

    def _rv_first(self, host: str, rh: _RvHost) -> Entry | None:
        if not rh.head and not rh.complete:
            self._rv_page_in(host, rh)
        return rh.head[0] if rh.head else None

    def _rv_place(self, rh: _RvHost, e: Entry, *, buffered: bool) -> None:
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

    def _rv_unplace(self, rh: _RvHost, url: str) -> None:
        for i, x in enumerate(rh.head):
            if x.url == url:
                del rh.head[i]
                return

    def _rv_put(self, e: Entry) -> None:
        """Schedule e (new, or replacing the URL's entry); durable at the next flush."""
        rh = self._rv_host(e.host)
        self._rv_unplace(rh, e.url)
        self._rv_writes[(e.host, e.url)] = e
        self._rv_changed.append(e)
        if e.url not in rh.inflight:
            self._rv_place(rh, e, buffered=True)
        if e.host not in self._pages and e.host not in self._hosts:
            self._key_rows.append((host_prefix(e.host), e.host))

    def _rv_get(self, host: str, url: str) -> Entry | None:
        """The URL's entry (buffered, in flight, in the head or on disk), or None."""
        e = self._rv_writes.get((host, url))
        if e is not None:
            return e
        rh = self._rv.get(host)
        if rh is None:
            return None
        e = rh.inflight.get(url) or next((x for x in rh.head if x.url == url), None)
        if e is not None:
            return e
        row = self._db.execute(f"SELECT {_RV_COLS} FROM revisit WHERE host=? AND url=?", (host, url)).fetchone()
        return None if row is None else entry_of(row)

    def _pop_revisit(self, host: str, rh: _RvHost, now: float | None, wait: Callable[[str], float] | None) -> Item | None:
        """The host's first revisit due at now whose origin may be fetched (in flight until done)."""
        if self._rv_first(host, rh) is None:
            return None
        t = self.clock() if now is None else now
        for i, e in enumerate(rh.head):
            if e.due > t:
                return None
            if wait is not None and wait(origin_of(e.url)) > t:
                continue
            del rh.head[i]
            rh.inflight[e.url] = e
            self._rv_inflight += 1
            return Item(e.url, host, e.depth, revisit=e)
        return None

    def _rv_done(self, item: Item) -> bool:
        rh = self._rv.get(item.host)
        e = rh.inflight.pop(item.url, None) if rh is not None else None
        if rh is None or e is None:
            return False  # dropped meanwhile (handed over)
        self._rv_inflight -= 1
        if self.planner is None:
            self._rv_place(rh, e, buffered=False)
            return True
        v = item.visit
        now = v.at if v is not None and v.at else self.clock()
        nxt = self.planner.next(e, v, now)
        if self.planner.p.policy == "optimal":
            self._rv_plan(nxt, now)
        self._rv_put(nxt)
        return True

    def _rv_plan(self, e: Entry, now: float) -> None:
        """The optimal policy: (re)plan the host's mu from its pages' estimated rates when it has
        none, or after visits of a quarter of its pages (at least 8) since the last plan (one
        range read of its schedule); then e's interval from it."""
        planner = self.planner
        assert planner is not None
        host = e.host
        since = self._rv_since.get(host, 0) + 1
        if host not in planner.mu or since >= max(8, self._rv_size.get(host, 0) // 4):
            self.flush()
            rows = self._db.execute(f"SELECT {_RV_COLS} FROM revisit WHERE host=? AND due < ?", (host, math.inf))
            pages = [x for x in map(entry_of, rows) if x.url != e.url] + [e]
            planner.plan_host(host, pages)
            self._rv_size[host] = len(pages)
            since = 0
        self._rv_since[host] = since
        e.interval = planner.interval_of(e)
        e.due = now + e.interval

    def hint(self, host: str, url: str, lastmod: float = 0.0, changefreq: float = 0.0) -> None:
        """A sitemap's <lastmod> (unix time) and <changefreq> (seconds: revisit.changefreq_seconds)
        for a URL of this host (issue 26 item 3, for the sitemap reader). A scheduled URL whose
        lastmod is after its last capture is due now; a changefreq is its prior change rate (and
        its interval until revisits measure one). A URL not fetched yet keeps the hint for its
        first visit (a row with due = inf, not a revisit). Durable at the next flush."""
        old = self._rv_get(host, url)
        now = self.clock()
        if old is None:
            old = Entry(url, host, math.inf, 0.0)
        planner = self.planner or Planner(Policy())
        self._rv_put(planner.hinted(old, lastmod, changefreq, now))

    def schedule_of(self, host: str, url: str) -> Entry | None:
        """The URL's revisit entry, or None (tests and the bench read it)."""
        return self._rv_get(host, url)

    def scheduled(self, host: str, url: str) -> bool:
        """Whether the URL is in the revisit schedule (a sitemap hint alone is not)."""
        e = self._rv_get(host, url)
        return e is not None and math.isfinite(e.due)

    def export_schedule(self, host: str) -> list[Entry]:
        """The host's whole revisit schedule (hints included), by due; one range scan."""
        self.flush()
        rows = self._db.execute(f"SELECT {_RV_COLS} FROM revisit WHERE host=? ORDER BY due", (host,)).fetchall()
        return [entry_of(r) for r in rows]

    def import_schedule(self, entries: Iterable[Entry]) -> int:
        """Merge received entries (a handover, a promotion): per URL the one with the later
        capture wins. Returns how many were taken."""
        n = 0
        for e in entries:
            old = self._rv_get(e.host, e.url)
            if old is not None and (old.last > e.last or (old.last == e.last and math.isfinite(old.due))):
                continue
            self._rv_put(e)
            n += 1
        return n

    def revisit_counts(self, now: float) -> dict[str, float]:
        """Scheduled URLs and those due at now (a scan of the schedule: for status, not per page)."""
        self.flush()
        n, due = self._db.execute("SELECT count(*), total(due <= ?) FROM revisit WHERE due < ?", (now, math.inf)).fetchone()
        return {"revisits_scheduled": float(n), "revisits_due": float(due)}

    # -- handover -----------------------------------------------------------------------------------
    def export_host(self, host: str) -> list[Item]:
        """All of the host's items not done (queued and in flight), in BFS order; a range scan."""
        self.flush()
        return [
            Item(url, host, depth, via, nb, seq)
            for depth, seq, url, via, nb in self._db.execute(
                "SELECT depth, seq, url, via, not_before FROM queue WHERE host=? ORDER BY depth, seq", (host,)
            )
        ]

    def clear_queue(self, host: str) -> int:
        """Drop the host's queued items in one range delete (a host at its budget); items in flight
        stay until done. Returns how many were dropped."""
        self.flush()
        q = self._hosts.get(host)
        if q is None or not q.lanes:
            return 0
        inflight = [s for s, it in self._inflight.items() if it.host == host]
        marks = ",".join("?" * len(inflight))
        cur = self._db.execute(
            f"DELETE FROM queue WHERE host=?{f' AND seq NOT IN ({marks})' if inflight else ''}", (host, *inflight))
        n = cur.rowcount
        self._queued -= q.queued()
        self._hot_total -= sum(len(ln.hot) for ln in q.lanes.values())
        q.lanes = {}
        self._work.discard(host)
        if not q.inflight:
            del self._hosts[host]
            if host not in self._pages:
                self._present(host, -1)
        if self.changes is not None:
            self.changes.cleared(host)
        return n

    def drop_host(self, host: str) -> int:
        """Forget the host (handed over): its rows, head, in-flight items, page count and revisit
        schedule. Returns queue rows deleted."""
        self.flush()
        cur = self._db.execute("DELETE FROM queue WHERE host=?", (host,))
        self._db.execute("DELETE FROM pages WHERE host=?", (host,))
        self._db.execute("DELETE FROM revisit WHERE host=?", (host,))
        rh = self._rv.pop(host, None)
        if rh is not None:
            self._rv_inflight -= len(rh.inflight)
        self._rv_since.pop(host, None)
        self._rv_size.pop(host, None)
        if self.planner is not None:
            self.planner.mu.pop(host, None)
        self._db.execute("DELETE FROM hostkey WHERE hkey=? AND host=?", (host_prefix(host), host))
        present = host in self._pages or host in self._hosts
        self._set_pages(host, None)
        self._pages_dirty.discard(host)
        n = cur.rowcount
        q = self._hosts.pop(host, None)
        if present:
            self._present(host, -1)
        if q is not None:
            self._queued -= q.queued()
            self._hot_total -= sum(len(ln.hot) for ln in q.lanes.values())
        if q is not None and q.inflight:
            for seq in [s for s, it in self._inflight.items() if it.host == host]:
                del self._inflight[seq]
        self._work.discard(host)
        if self.changes is not None:
            self.changes.cleared(host)
        return n

    # -- the host-key index (seed 000's firstdiff) ---------------------------------------------------
    def holds(self, host: str) -> bool:
        """Does the frontier know the host: URLs queued or in flight, or a page count?"""
        q = self._hosts.get(host)
        return (q is not None and bool(q.lanes or q.inflight)) or host in self._pages or host in self._rv

    def read_moving(self, me: int, newcomer: int) -> IndexRead:
        """hosts_moving with what the read cost (bench/parts/firstdiff.py)."""
        return read_moving(self._db, _KEY_SQL, me, newcomer, self.holds, (h for _, h in self._key_rows))

    def hosts_moving(self, me: int, newcomer: int) -> list[str]:
        """The hosts this frontier knows (holds) whose host_key is strictly closer (XOR) to newcomer
        than to me: what a join of newcomer next to me takes from here. Reads only the index
        ranges that can hold them (agent/state/keyindex.py); flushes nothing."""
        return self.read_moving(me, newcomer).hosts

    def hosts_in_key_range(self, lo: int, hi: int) -> list[str]:
        """The hosts this frontier knows with lo <= host_key(host) <= hi (160-bit keys)."""
        return read_key_range(self._db, _KEY_SQL, lo, hi, self.holds, (h for _, h in self._key_rows))

    # -- durability ---------------------------------------------------------------------------------
    def flush(self) -> int:
        """Make all buffered add/done/retry durable in one transaction. Returns changes written.

        Isolation (issue 21): a row that cannot be written because of its own values (past the
        entry checks: a bug, a value nobody foresaw) does not fail this flush and every one after
        it. The rows are written again one by one in one transaction; the unwritable ones are left
        out, undone in memory (`_reject`) and kept for `take_rejected()` (the commit log answers
        the requests that brought them with an error). Any other failure (disk full, I/O error)
        writes nothing, keeps every change buffered and raises: the next flush retries."""
        adds, updates, deletes = self._adds, self._updates, self._deletes
        n = len(adds) + len(updates) + len(deletes)
        if not n and not self._pages_dirty and not self._key_rows and not self._rv_writes:
            return 0
        rv_rows = [e.row() for e in self._rv_writes.values()]
        rv_changed, self._rv_writes, self._rv_changed = self._rv_changed, {}, []
        pages = [(h, self._pages[h]) for h in self._pages_dirty]
        keys = self._key_rows
        self._adds, self._updates, self._deletes, self._pages_dirty, self._key_rows = [], [], [], set(), []
        self._epoch += 1
        db = self._db
        if len(adds) > 1:
            adds.sort()  # key order: inserts walk each host's B-tree range once
        stmts: list[tuple[str, list[tuple]]] = [
            (_ADD, adds), (_UPDATE, updates), (_DELETE, deletes), (_PAGES, pages), (_META, [(self._seq,)]), (_KEY, keys),
            (_RV_PUT, rv_rows)]
        try:
            bad = write_all(db, stmts)
        except BaseException:
            # Put the changes back so a later flush can retry them; every host counts as dirty.
            self._adds[:0], self._updates[:0], self._deletes[:0] = adds, updates, deletes
            self._pages_dirty.update(h for h, _ in pages)
            self._key_rows[:0] = keys
            for row in rv_rows:
                e = entry_of(row)
                self._rv_writes.setdefault((e.host, e.url), e)
            self._rv_changed[:0] = rv_changed
            for rh in self._rv.values():
                rh.dirty = self._epoch
            for q in self._hosts.values():
                for ln in q.lanes.values():
                    ln.dirty = self._epoch
            raise
        if any(bad):
            adds = self._reject(stmts, bad)
        self._deleted.clear()
        if self.changes is not None:
            done, self._done_items = self._done_items, []
            self.changes.flushed(adds, done, pages, rv_changed)
        return n

    def _reject(self, stmts: list[tuple[str, list[tuple]]], bad: list[list[tuple[int, BaseException]]]) -> list[tuple]:
        """Undo in memory the rows a flush left out (write_each); returns the adds it wrote.

        Invariant kept: memory describes the table plus the buffers. A left-out add leaves the
        queue (head, cold count or in flight) and goes to `_rejected`; a left-out retry's item
        keeps its place, due now (its row keeps the not_before it had); a left-out page count
        goes back to the table's (`_rejected_hosts`); a left-out done mark leaves the row on
        disk, so the page is fetched again after a restart: a repeat, never a loss."""
        (_, adds), (_, updates), _, (_, pages), _, _, _ = stmts
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
            self._unqueue(it)
            self._rejected.append(it)
        for i, _ in bad_updates:
            _, host, _, seq = updates[i]
            q = self._hosts.get(host)
            for it in (x for ln in q.lanes.values() for x in ln.hot) if q is not None else ():
                if it.seq == seq:
                    it.not_before = 0.0
        for i, _ in bad_pages:
            host = pages[i][0]
            row = self._db.execute("SELECT n FROM pages WHERE host=?", (host,)).fetchone()
            if row is None:
                self._set_pages(host, None)
                if host not in self._hosts:
                    self._present(host, -1)
            else:
                self._set_pages(host, row[0])
            self._rejected_hosts.append(host)
        gone = {i for i, _ in bad_adds}
        return [r for i, r in enumerate(adds) if i not in gone]

    def _unqueue(self, it: Item) -> None:
        """Take an added item out of memory: its row was never written."""
        if it.seq in self._deleted:
            return  # popped and done already: it left memory then
        host = it.host
        q = self._hosts.get(host)
        if q is None:
            return
        if self._inflight.pop(it.seq, None) is not None:
            q.inflight -= 1
        else:
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
        if not q.lanes:
            self._work.discard(host)
            if not q.inflight:
                del self._hosts[host]
                if host not in self._pages:
                    self._present(host, -1)

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
            self._db.close()

    def __enter__(self) -> Frontier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
