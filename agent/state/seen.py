"""Persistent seen set: 64-bit URL fingerprints in memory in small sorted buckets under linear hashing
(docs/agent-frontier.md), recorded per host on disk."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from hashlib import blake2b
from pathlib import Path

import numpy as np

from agent.state import sieve
from agent.state.keyindex import IndexRead, IndexSql, read_key_range, read_moving
from agent.state.storable import Unstorable, text_ok
from wancrawl.kademlia.xorspace import host_prefix

_SCHEMA = """
CREATE TABLE IF NOT EXISTS hosts (hid INTEGER PRIMARY KEY, host TEXT NOT NULL UNIQUE, hkey INTEGER NOT NULL DEFAULT 0);
"""
# The fingerprints on disk (schema 2), packed: about 8 bytes a URL, not an SQLite row per URL
# (31 bytes a URL with its index and page slack):
#   seen_runs: every (hid, fp) pair in one sorted sequence cut in chunks of packed blobs
#     (agent/state/sieve.py; BUbiNG's sieve is the model).
#   seen_log: one row per flush (group commit): the host ids (int32) and fingerprints (int64) of
#     the URLs recorded since the last flush, as two packed arrays of the same length.
_SEEN_SCHEMA = sieve.SCHEMA + """;
CREATE TABLE IF NOT EXISTS seen_log (id INTEGER PRIMARY KEY, hids BLOB NOT NULL, fps BLOB NOT NULL);
"""

# Schema versions (PRAGMA user_version), each step once, in one transaction with the bump (the
# agents' data dirs survive upgrades):
#   1 (issue 22): hosts.hkey, the host's 64-bit key prefix (agent/state/keyindex.py), filled for
#     the hosts already there, and the index hosts_hkey on (hkey, host) that a join reads by range.
#     A new database gets the column from _SCHEMA and only the index and the bump here.
#     Invariant: every row of `hosts` has hkey = host_prefix(host).
#   2 (issue 24): the fingerprints packed (_SEEN_SCHEMA) instead of a row per URL: the old
#     `seen (hid, fp)` rows become seen_runs chunks, the old row logs (seen_log, seen_merging) one
#     packed log row each, in the new seen_log (merged later as any log).
SCHEMA_VERSION = 2
_KEY_SQL = IndexSql(
    seek="SELECT min(hkey) FROM hosts WHERE hkey >= ?",
    range="SELECT host FROM hosts WHERE hkey BETWEEN ? AND ?",
    scan="SELECT hkey, host FROM hosts WHERE hkey >= ? ORDER BY hkey",
)

# Linear hashing over sorted buckets: a bucket is split in two once the set holds more than
# _BUCKET fingerprints per bucket on average, one bucket at a time, so growth never rebuilds the
# whole set (the old open-addressing table's rehash held the event loop for seconds at tens of
# millions). 1024 keeps a bucket's insert (bisect + memmove of <= ~16 KB) near a microsecond and
# the per-bucket overhead (array header, allocator, 6% slack) near 0.3 bytes per fingerprint.
_BUCKET = 1024
_MIN_LEVEL = 4

# The log's merge into seen_runs, in steps (_MergeCycle): the set-aside log's entries are read
# _LOAD_ROWS at a time into slices of hid ranges of about _SLICE_LOG_ROWS entries each; then a
# slice's entries, sorted, go into their chunks, a step rewriting at most about _STEP_FPS pairs
# (a few chunks), so even a host with millions of URLs is merged a chunk at a time; each flush
# does steps for about _STEP_SECONDS, and more if the merge would not end before the new log
# fills up (steps spread in proportion to the rows flushed).
_SLICE_LOG_ROWS = 5_000
_LOAD_ROWS = 5_000
_STEP_FPS = 65_536
_STEP_SECONDS = 0.02
_I8 = sieve.I8
_I4 = sieve.I4


def fingerprint(url: str) -> int:
    """Signed 64-bit blake2b fingerprint of a canonical URL, never 0 (0 marked an empty slot of the
    old table; kept so fingerprints on disk and in handovers stay valid).

    Among n distinct URLs the chance of any collision is about n^2 / 2^65: 2.7e-6 for 10 million.
    A collision makes one URL look seen (it is not fetched), nothing worse."""
    return int.from_bytes(blake2b(url.encode(), digest_size=8).digest(), "little", signed=True) or 1


def _bucket_of(fp: int, level: int, split: int) -> int:
    """Linear hashing: the low `level` bits, or `level + 1` for buckets already split."""
    i = fp & ((1 << level) - 1)
    return fp & ((2 << level) - 1) if i < split else i


@contextlib.contextmanager
def _atomic(db: sqlite3.Connection) -> Iterator[None]:
    """One explicit transaction (the connection runs in autocommit): committed at the end,
    rolled back on any exception, cancellation included."""
    db.execute("BEGIN")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _pack_log(rows: list[tuple[int, int]]) -> tuple[bytes, bytes]:
    """(hid, fp) rows as a seen_log row's two packed arrays."""
    a = np.array(rows, dtype=np.int64).reshape(-1, 2)
    return a[:, 0].astype(_I4).tobytes(), a[:, 1].astype(_I8).tobytes()


class _MergeCycle:
    """The set-aside log `seen_merging` into seen_runs, a short transaction per step: first its
    entries are read, _LOAD_ROWS at a time, into one bucket per slice of host ids (`slices` equal
    hid ranges of 1..max_hid); then a slice at a time, sorted by (hid, fp), into the hosts' chunks,
    a step rewriting at most about _STEP_FPS fingerprints; then the table is dropped.

    Invariants: log rows with id <= `loaded` are in `hids`/`fps` (12 bytes an entry: host ids are
    handed out from 1 up, one per host ever held, far below 2^31) or, for slices before `next`
    and the first `pos` entries of slice `next`, in seen_runs. Nothing is deleted before every
    slice is in seen_runs: a crash redoes the cycle from the start, and a merge is a set union, so
    an entry merged twice is the same."""

    def __init__(self, db: sqlite3.Connection, runs: sieve.Runs, slices: int, max_hid: int, on_disk: int, rows: int):
        self.db = db
        self.runs = runs
        self.unloaded = rows  # entries of seen_merging not read yet
        self.slices = slices
        self.width = max(1, -(-max(max_hid, 1) // slices))
        self.hids: list[list[np.ndarray]] = [[] for _ in range(slices)]
        self.fps: list[list[np.ndarray]] = [[] for _ in range(slices)]
        self.loaded = 0
        self.last = db.execute("SELECT max(id) FROM seen_merging").fetchone()[0] or 0
        self.next = 0
        self.cur: tuple[np.ndarray, np.ndarray] | None = None  # slice `next`, sorted by (hid, fp)
        self.pos = 0
        self.rewrite_left = on_disk  # fingerprints of seen_runs still to be rewritten (an estimate)

    def step(self) -> bool:
        """One step; True once the cycle is over (the table dropped)."""
        db = self.db
        if self.loaded < self.last:
            top = self.slices - 1
            entries = 0
            for rid, hb, fb in db.execute("SELECT id, hids, fps FROM seen_merging WHERE id > ? ORDER BY id",
                                          (self.loaded,)):
                h = np.frombuffer(hb, dtype=_I4).astype(np.int64)
                f = np.frombuffer(fb, dtype=_I8)
                k = np.minimum((h - 1) // self.width, top)
                for s in np.unique(k).tolist():
                    m = k == s
                    self.hids[s].append(h[m])
                    self.fps[s].append(f[m])
                self.loaded = rid
                entries += len(h)
                if entries >= _LOAD_ROWS:
                    break
            else:
                self.loaded = self.last
            self.unloaded = 0 if self.loaded >= self.last else max(0, self.unloaded - entries)
            return False
        if self.next >= self.slices:
            with _atomic(db):
                db.execute("DROP TABLE seen_merging")
            return True
        if self.cur is None:
            h = np.concatenate(self.hids[self.next]) if self.hids[self.next] else np.zeros(0, np.int64)
            f = np.concatenate(self.fps[self.next]) if self.fps[self.next] else np.zeros(0, np.int64)
            order = np.lexsort((f, h))
            self.cur, self.pos = (h[order], f[order]), 0
            self.hids[self.next], self.fps[self.next] = [], []
        h, f = self.cur
        try:
            with _atomic(db):
                pos, written = self.runs.merge(h, f, self.pos, _STEP_FPS)
        except BaseException:
            self.runs.rollback()
            raise
        self.runs.commit()
        self.pos = pos
        self.rewrite_left = max(0, self.rewrite_left - written)
        if self.pos >= len(h):
            self.cur = None
            self.next += 1
        return False

    def steps_left(self) -> int:
        """At least the steps the cycle has still to do (the flush spreads them)."""
        loads = 0 if self.loaded >= self.last else 1 + self.unloaded // _LOAD_ROWS
        return loads + (self.slices - self.next) + -(-self.rewrite_left // _STEP_FPS) + 1


def _migrate(db: sqlite3.Connection) -> None:
    """Bring an older database to SCHEMA_VERSION in one transaction (a crash leaves it whole)."""
    db.executescript(_SCHEMA)
    if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        db.executescript(_SEEN_SCHEMA)
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        columns = [r[1] for r in db.execute("PRAGMA table_info(hosts)")]
        if "hkey" not in columns:
            db.execute("ALTER TABLE hosts ADD COLUMN hkey INTEGER NOT NULL DEFAULT 0")
            rows = db.execute("SELECT hid, host FROM hosts").fetchall()
            db.executemany("UPDATE hosts SET hkey=? WHERE hid=?", [(host_prefix(h), hid) for hid, h in rows])
        db.execute("CREATE INDEX IF NOT EXISTS hosts_hkey ON hosts (hkey, host)")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        old_logs = []
        if "seen" in tables:  # schema < 2: a row per URL
            for t in ("seen_log", "seen_merging"):
                if t in tables:
                    db.execute(f"ALTER TABLE {t} RENAME TO {t}_v1")
                    old_logs.append(f"{t}_v1")
        for stmt in _SEEN_SCHEMA.strip().split(";"):
            if stmt.strip():
                db.execute(stmt)
        if "seen" in tables:
            sieve.Runs(db).write_sorted(db.execute("SELECT hid, fp FROM seen ORDER BY hid, fp"))
            db.execute("DROP TABLE seen")
            for t in old_logs:
                rows = db.execute(f"SELECT hid, fp FROM {t} ORDER BY rowid").fetchall()
                if rows:
                    db.execute("INSERT INTO seen_log (hids, fps) VALUES (?, ?)", _pack_log(rows))
                db.execute(f"DROP TABLE {t}")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise



def _every_fingerprint(db: sqlite3.Connection, runs: sieve.Runs, merging: bool) -> np.ndarray:
    """Every fingerprint on disk (seen_runs, the log, a log set aside for merging), sorted, once."""
    parts = list(runs.every())
    parts += [np.frombuffer(b, dtype=_I8) for (b,) in db.execute("SELECT fps FROM seen_log")]
    if merging:
        parts += [np.frombuffer(b, dtype=_I8) for (b,) in db.execute("SELECT fps FROM seen_merging")]
    every = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    del parts
    if len(every) > 1:  # a fingerprint in the log and in seen_runs too (a merge cut short) once
        every = every[np.concatenate(([True], every[1:] != every[:-1]))]
    return every


def _level_for(n: int, bucket: int) -> int:
    """The smallest level whose 2**level buckets of `bucket` fingerprints hold n (at least _MIN_LEVEL)."""
    level = _MIN_LEVEL
    while (bucket << level) < n:
        level += 1
    return level


def _into_buckets(every: np.ndarray, level: int) -> list[array]:
    """The sorted fingerprints into 2**level buckets by their low bits, each bucket sorted (a
    stable sort of a sorted array)."""
    keys = every & ((1 << level) - 1)
    order = np.argsort(keys, kind="stable")
    every = every[order].astype(np.int64)
    del order
    bounds = np.concatenate(([0], np.cumsum(np.bincount(keys, minlength=1 << level))))
    del keys
    out: list[array] = []
    for k in range(1 << level):
        a = array("q")
        a.frombytes(every[bounds[k]:bounds[k + 1]].tobytes())
        out.append(a)
    return out


class SeenSet:
    """URLs already queued or fetched by this agent, for the hosts it owns.

    Memory: the signed 64-bit fingerprints in sorted `array('q')` buckets under linear hashing
    (about 8.4 bytes per URL at any size), grown one bucket split at a time (no rehash stall).
    Disk: `seen_runs`, every (host id, fingerprint) pair in one sorted sequence cut in packed
    chunks (agent/state/sieve.py), so a handover reads or rewrites one key range (about 8 bytes
    per URL), plus an append-only
    `seen_log` of one packed row per flush (12 bytes per URL); once the log holds merge_rows
    fingerprints it is set aside as `seen_merging` and merged into seen_runs a short step per flush
    (_MergeCycle). A flushed fingerprint is in seen_runs, `seen_merging` or `seen_log`; an
    unflushed one only in memory.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        capacity: int = 0,
        merge_rows: int = 500_000,
        synchronous: str = "NORMAL",
        cache_kib: int = 2048,
        bucket: int = _BUCKET,
    ) -> None:
        if bucket < 1:
            raise ValueError(f"bucket must be >= 1, got {bucket}")
        self.path = Path(path)
        self._bucket = bucket
        self.merge_rows = merge_rows
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
        # The WAL is checkpointed every 1,000 pages (4 MB) as usual and the merge's steps are small
        # transactions: after a checkpoint the WAL file is cut back to 4 MB, not left at its
        # largest (it counts in the seen set's bytes per URL on disk).
        self._db.execute("PRAGMA journal_size_limit=4194304")
        _migrate(self._db)
        self._hid: dict[str, int] = dict((h, i) for i, h in self._db.execute("SELECT hid, host FROM hosts"))
        self._next_hid = max(self._hid.values(), default=0) + 1
        self._new_hosts: list[tuple[int, str, int]] = []  # (hid, host, hkey) rows not flushed
        self._pending: list[tuple[int, int]] = []
        self._log_rows = self._db.execute("SELECT coalesce(sum(length(fps)), 0) / 8 FROM seen_log").fetchone()[0]
        # A log set aside for merging when the process stopped: its cycle starts again (below).
        merging = self._db.execute("SELECT 1 FROM sqlite_master WHERE name='seen_merging'").fetchone() is not None
        self._runs = sieve.Runs(self._db)
        every = _every_fingerprint(self._db, self._runs, merging)
        # Invariants: 2**_level + _split buckets (0 <= _split < 2**_level); every fingerprint in
        # memory sits, once, in bucket _bucket_of(fp, _level, _split), each bucket sorted
        # ascending; _n counts them; a split happens when _n > _grow_at = bucket * buckets.
        self._level, self._split = _level_for(max(len(every), capacity), bucket), 0
        self._b: list[array] = _into_buckets(every, self._level)
        self._n = len(every)
        del every
        self._grow_at = bucket * len(self._b)
        while self._n > self._grow_at:
            self._grow()
        self._cycle: _MergeCycle | None = None
        if merging:
            rows = self._db.execute("SELECT coalesce(sum(length(fps)), 0) / 8 FROM seen_merging").fetchone()[0]
            self._cycle = self._new_cycle(rows)

    # -- in-memory buckets ---------------------------------------------------------------------------
    def _where(self, fp: int) -> tuple[array, int, bool]:
        """fp's bucket, its position there (or where it would go), and whether it is there."""
        a = self._b[_bucket_of(fp, self._level, self._split)]
        j = bisect_left(a, fp)
        return a, j, j < len(a) and a[j] == fp

    def _insert(self, fp: int) -> bool:
        a, j, there = self._where(fp)
        if there:
            return False
        a.insert(j, fp)
        self._n += 1
        if self._n > self._grow_at:
            self._grow()
        return True

    def _has(self, fp: int) -> bool:
        return self._where(fp)[2]

    def _grow(self) -> None:
        """Split bucket _split by bit _level (both halves stay sorted): O(one bucket)."""
        bit = 1 << self._level
        old = self._b[self._split]
        self._b[self._split] = array("q", [x for x in old if not x & bit])
        self._b.append(array("q", [x for x in old if x & bit]))
        self._split += 1
        if self._split == bit:
            self._level, self._split = self._level + 1, 0
        self._grow_at = self._bucket * len(self._b)

    def _remove(self, fp: int) -> bool:
        a, j, there = self._where(fp)
        if not there:
            return False
        del a[j]
        self._n -= 1
        return True

    # -- API ----------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def capacity(self) -> int:
        """Fingerprints the buckets hold before the next split."""
        return self._grow_at

    def memory_bytes(self) -> int:
        """Bytes of the buckets (the part that grows with the number of URLs): O(buckets)."""
        return sum(map(sys.getsizeof, self._b)) + sys.getsizeof(self._b)

    def disk_parts(self) -> str:
        """What the database holds, for benches: chunks and fingerprints merged, fingerprints logged."""
        db = self._db
        chunks, size = db.execute("SELECT count(*), coalesce(sum(length(data)), 0) FROM seen_runs").fetchone()
        return f"{size / 1e6:.1f} MB in {chunks:,} chunks, {self._log_rows:,} in the log" + (", a merge under way" if self._cycle else "")

    def _host_id(self, host: str) -> int:
        hid = self._hid.get(host)
        if hid is None:
            if not text_ok(host):
                raise Unstorable(f"host {host[:80]!r} is not valid UTF-8")
            hid = self._hid[host] = self._next_hid
            self._next_hid += 1
            self._new_hosts.append((hid, host, host_prefix(host)))
        return hid

    def add_new(self, host: str, urls: Iterable[str]) -> list[bool]:
        """For each canonical URL of host: True if it was new (it is now recorded), else False.
        A URL repeated within the batch is new only the first time. Durable after flush().
        All or nothing: a URL that cannot be stored (not UTF-8) refuses the call (Unstorable)
        with nothing of it recorded, so no URL is left marked seen that its caller never queued."""
        hid = self._host_id(host)
        out: list[bool] = []
        append = out.append
        mark = len(self._pending)
        pend = self._pending.append
        from_bytes = int.from_bytes
        b, low, split = self._b, (1 << self._level) - 1, self._split
        try:
            for url in urls:
                fp = from_bytes(blake2b(url.encode(), digest_size=8).digest(), "little", signed=True) or 1
                # Inlined _where/_insert (the hot path of the agent's link handling).
                i = fp & low
                a = b[fp & (2 * low + 1) if i < split else i]
                j = bisect_left(a, fp)
                if j < len(a) and a[j] == fp:
                    append(False)
                    continue
                a.insert(j, fp)
                self._n += 1
                pend((hid, fp))
                append(True)
                if self._n > self._grow_at:
                    self._grow()
                    low, split = (1 << self._level) - 1, self._split
        except BaseException as exc:
            for _, fp in self._pending[mark:]:
                self._remove(fp)
            del self._pending[mark:]
            if isinstance(exc, UnicodeEncodeError):
                raise Unstorable(f"a URL of {host[:80]!r} is not valid UTF-8") from None
            raise
        return out

    def hosts(self) -> list[str]:
        """Hosts with fingerprints here (a snapshot): the hosts whose history this agent holds."""
        return list(self._hid)

    def holds(self, host: str) -> bool:
        """Does this set have (or had, until dropped) fingerprints of the host?"""
        return host in self._hid

    def read_moving(self, me: int, newcomer: int) -> IndexRead:
        """hosts_moving with what the read cost (bench/parts/firstdiff.py)."""
        return read_moving(self._db, _KEY_SQL, me, newcomer, self.holds, (r[1] for r in self._new_hosts))

    def hosts_moving(self, me: int, newcomer: int) -> list[str]:
        """The hosts with fingerprints here (hosts()) whose host_key is strictly closer (XOR) to
        newcomer than to me: the histories a join of newcomer next to me takes from here, read
        through the hosts_hkey index ranges that can hold them (agent/state/keyindex.py)."""
        return self.read_moving(me, newcomer).hosts

    def hosts_in_key_range(self, lo: int, hi: int) -> list[str]:
        """The hosts with fingerprints here with lo <= host_key(host) <= hi (160-bit keys)."""
        return read_key_range(self._db, _KEY_SQL, lo, hi, self.holds, (r[1] for r in self._new_hosts))

    def __contains__(self, url: str) -> bool:
        return self._has(fingerprint(url))

    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Append the fingerprints recorded since the last flush to the log in one transaction,
        then move on the merge of an older log into `seen` by a step of at most ~_STEP_SECONDS."""
        rows, hosts = self._pending, self._new_hosts
        if not rows and not hosts:
            self._merge_work()
            return 0
        self._pending, self._new_hosts = [], []
        db = self._db
        db.execute("BEGIN")
        try:
            if hosts:
                db.executemany("INSERT INTO hosts (hid, host, hkey) VALUES (?, ?, ?)", hosts)
            if rows:
                db.execute("INSERT INTO seen_log (hids, fps) VALUES (?, ?)", _pack_log(rows))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._pending[:0], self._new_hosts[:0] = rows, hosts
            raise
        self._log_rows += len(rows)
        self._merge_work(len(rows))
        return len(rows)

    def _merge_work(self, flushed: int = 0) -> None:
        """Once the log holds merge_rows fingerprints it is set aside (renamed `seen_merging`, O(1)) and a
        fresh log begins; the set-aside rows then go into seen_runs a step per flush (_MergeCycle).
        The one big sorted merge this replaces held the event loop for seconds (4.7 s at 1M rows)."""
        if self._cycle is None and self._log_rows >= self.merge_rows:
            self._rotate()
            flushed = 0  # those rows are the ones set aside
        if self._cycle is None:
            return
        # The steps owed for this flush's rows: the cycle ends before the new log fills up. A log
        # that filled up anyway finishes the cycle now (a stall, only if the rows came too fast).
        room = self.merge_rows - self._log_rows
        owed = 1 << 62 if room <= 0 else -(-self._cycle.steps_left() * flushed // room)
        end = time.perf_counter() + _STEP_SECONDS
        done = 0
        while not self._cycle.step():
            done += 1
            if done >= owed and time.perf_counter() >= end:
                return
        self._cycle = None

    def _rotate(self) -> None:
        db = self._db
        with _atomic(db):
            db.execute("ALTER TABLE seen_log RENAME TO seen_merging")
            db.execute("CREATE TABLE seen_log (id INTEGER PRIMARY KEY, hids BLOB NOT NULL, fps BLOB NOT NULL)")
        self._cycle = self._new_cycle(self._log_rows)
        self._log_rows = 0

    def _new_cycle(self, rows: int) -> _MergeCycle:
        slices = max(1, -(-rows // _SLICE_LOG_ROWS))
        return _MergeCycle(self._db, self._runs, slices, self._next_hid - 1, max(self._n - rows, 0), rows)

    def merge(self) -> None:
        """Everything into the host-clustered table now (handover reads one key range): the cycle
        under way to its end, then the log's."""
        for _ in range(2):  # the cycle under way, then the log's
            while self._cycle is not None and not self._cycle.step():
                pass
            self._cycle = None
            if not self._log_rows:
                return
            self._rotate()

    # -- handover (by host: cost proportional to the host's URLs, after merging the log) -----------
    def export_host(self, host: str) -> list[int]:
        """The host's fingerprints (signed 64-bit ints), for a new owner's import_host: those on
        disk and those not flushed yet. Nothing is flushed here (the group commit orders flushes:
        frontier before seen set)."""
        hid = self._hid.get(host)
        if hid is None:
            return []
        if self._log_rows or self._cycle is not None:
            self.merge()
        fps = self._runs.host(hid)
        return fps + [fp for h, fp in self._pending if h == hid]

    def import_host(self, host: str, fps: Iterable[int]) -> int:
        """Record fingerprints received with a host handover; returns how many were new here.
        A fingerprint that is not a signed 64-bit non-zero int refuses the whole call
        (Unstorable) before any is recorded."""
        fps = self.check(fps)
        hid = self._host_id(host)
        n = 0
        pend = self._pending.append
        for fp in fps:
            if self._insert(fp):
                pend((hid, fp))
                n += 1
        # Durable at the next flush: the group commit flushes the frontier first, so a crash never
        # leaves a handed URL seen here but not queued.
        return n

    @staticmethod
    def check(fps: Iterable[int]) -> list[int]:
        """The fingerprints as ints, or Unstorable for the first that is not signed 64-bit non-zero."""
        out = [int(fp) for fp in fps]
        for fp in out:
            if not fp or not -(1 << 63) <= fp < (1 << 63):
                raise Unstorable(f"not a signed 64-bit non-zero fingerprint: {fp}")
        return out

    def forget(self, host: str, urls: Iterable[str]) -> int:
        """Take back URLs recorded since the last flush whose frontier rows could not be written
        (CommitLog, after a flush left them out): a resend must be queued, not taken for a
        duplicate. A fingerprint already on disk stays: it was seen before this batch. Returns
        how many were taken back."""
        hid = self._hid.get(host)
        if hid is None:
            return 0
        drop: set[tuple[int, int]] = set()
        for u in urls:
            try:
                drop.add((hid, fingerprint(u)))
            except UnicodeEncodeError:
                continue  # never recorded: it has no fingerprint
        before = len(self._pending)
        keep = []
        for r in self._pending:
            if r in drop:
                self._remove(r[1])
            else:
                keep.append(r)
        self._pending = keep
        return before - len(keep)

    def drop_host(self, host: str) -> int:
        """Forget the host's fingerprints (it changed owner). Returns how many were removed.

        A fingerprint another host shares (a 64-bit collision) would leave memory too: at worst that
        URL is queued once more."""
        hid = self._hid.get(host)
        if hid is None:
            return 0
        fps = self.export_host(host)
        for fp in fps:
            self._remove(fp)
        self._pending = [r for r in self._pending if r[0] != hid]
        self._new_hosts = [r for r in self._new_hosts if r[0] != hid]
        db = self._db
        try:
            with _atomic(db):
                self._runs.drop(hid)
                db.execute("DELETE FROM hosts WHERE hid=?", (hid,))
        except BaseException:
            self._runs.rollback()
            raise
        self._runs.commit()
        del self._hid[host]
        return len(fps)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._db.close()

    def __enter__(self) -> SeenSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
