"""Persistent seen set: 64-bit URL fingerprints in a compact open-addressing table, recorded per host on disk."""

from __future__ import annotations

import sqlite3
from array import array
from collections.abc import Iterable
from hashlib import blake2b
from pathlib import Path

from agent.state.keyindex import IndexRead, IndexSql, read_key_range, read_moving
from agent.state.storable import Unstorable, text_ok
from wancrawl.xorspace import host_prefix

_SCHEMA = """
CREATE TABLE IF NOT EXISTS hosts (hid INTEGER PRIMARY KEY, host TEXT NOT NULL UNIQUE, hkey INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS seen (hid INTEGER NOT NULL, fp INTEGER NOT NULL, PRIMARY KEY (hid, fp)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS seen_log (hid INTEGER NOT NULL, fp INTEGER NOT NULL);
"""

# Schema versions (PRAGMA user_version), each step once, in one transaction with the bump (the
# agents' data dirs survive upgrades):
#   1 (issue 22): hosts.hkey, the host's 64-bit key prefix (agent/state/keyindex.py), filled for
#     the hosts already there, and the index hosts_hkey on (hkey, host) that a join reads by range.
#     A new database gets the column from _SCHEMA and only the index and the bump here.
#     Invariant: every row of `hosts` has hkey = host_prefix(host).
SCHEMA_VERSION = 1
_KEY_SQL = IndexSql(
    seek="SELECT min(hkey) FROM hosts WHERE hkey >= ?",
    range="SELECT host FROM hosts WHERE hkey BETWEEN ? AND ?",
    scan="SELECT hkey, host FROM hosts WHERE hkey >= ? ORDER BY hkey",
)

_MAX_LOAD = 0.75
_MIN_CAP = 1 << 10


def fingerprint(url: str) -> int:
    """Signed 64-bit blake2b fingerprint of a canonical URL, never 0 (0 marks an empty slot).

    Among n distinct URLs the chance of any collision is about n^2 / 2^65: 2.7e-6 for 10 million.
    A collision makes one URL look seen (it is not fetched), nothing worse."""
    return int.from_bytes(blake2b(url.encode(), digest_size=8).digest(), "little", signed=True) or 1


def _table(cap: int) -> array:
    return array("q", bytes(8 * cap))


class SeenSet:
    """URLs already queued or fetched by this agent, for the hosts it owns.

    Memory: one signed 64-bit slot per entry in a linear-probing table of power-of-two capacity at
    most 75% full (8-14 bytes per URL), grown by rehash. Disk: `seen(hid, fp)` clustered by host so
    a handover reads or deletes one key range, plus an append-only `seen_log` that flush() writes
    (a group commit touches only the log's last pages, not one page per active host); the log is
    merged into `seen` in big sorted batches once it holds merge_rows rows. A flushed fingerprint is
    in `seen` or `seen_log`; an unflushed one only in memory.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        capacity: int = 0,
        merge_rows: int = 1_000_000,
        synchronous: str = "NORMAL",
        cache_kib: int = 8192,
    ) -> None:
        self.path = Path(path)
        self.merge_rows = merge_rows
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
        # A merge writes many pages to the WAL; do not keep a huge WAL file around afterwards.
        self._db.execute("PRAGMA journal_size_limit=67108864")
        self._db.executescript(_SCHEMA)
        self._migrate()
        self._hid: dict[str, int] = dict((h, i) for i, h in self._db.execute("SELECT hid, host FROM hosts"))
        self._next_hid = max(self._hid.values(), default=0) + 1
        self._new_hosts: list[tuple[int, str, int]] = []  # (hid, host, hkey) rows not flushed
        self._pending: list[tuple[int, int]] = []
        self._log_rows = self._db.execute("SELECT count(*) FROM seen_log").fetchone()[0]
        n = self._db.execute("SELECT count(*) FROM seen").fetchone()[0] + self._log_rows
        # Invariants: _table has _mask + 1 (a power of two) slots; 0 = empty; every fingerprint in
        # memory sits in the probe run starting at fp & _mask with no empty slot before it; _n counts
        # the non-zero slots and stays <= _MAX_LOAD * capacity.
        cap = _MIN_CAP
        while cap * _MAX_LOAD < max(n, capacity):
            cap <<= 1
        self._t = _table(cap)
        self._mask = cap - 1
        self._n = 0
        self._grow_at = int(cap * _MAX_LOAD)
        for (fp,) in self._db.execute("SELECT fp FROM seen UNION ALL SELECT fp FROM seen_log"):
            self._insert(fp)

    def _migrate(self) -> None:
        """Bring an older database to SCHEMA_VERSION in one transaction (a crash leaves it whole)."""
        db = self._db
        if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = [r[1] for r in db.execute("PRAGMA table_info(hosts)")]
            if "hkey" not in columns:
                db.execute("ALTER TABLE hosts ADD COLUMN hkey INTEGER NOT NULL DEFAULT 0")
                rows = db.execute("SELECT hid, host FROM hosts").fetchall()
                db.executemany("UPDATE hosts SET hkey=? WHERE hid=?", [(host_prefix(h), hid) for hid, h in rows])
            db.execute("CREATE INDEX IF NOT EXISTS hosts_hkey ON hosts (hkey, host)")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    # -- in-memory table ----------------------------------------------------------------------------
    def _slot(self, fp: int) -> int:
        """Index of fp in the table, or of the empty slot where it would go (linear probing)."""
        t, mask = self._t, self._mask
        i = fp & mask
        while True:
            v = t[i]
            if v == fp or not v:
                return i
            i = (i + 1) & mask

    def _insert(self, fp: int) -> bool:
        i = self._slot(fp)
        if self._t[i]:
            return False
        self._t[i] = fp
        self._n += 1
        if self._n > self._grow_at:
            self._grow()
        return True

    def _has(self, fp: int) -> bool:
        return bool(self._t[self._slot(fp)])

    def _grow(self) -> None:
        old = self._t
        cap = (self._mask + 1) * 2
        t = _table(cap)
        mask = cap - 1
        for fp in old:
            if fp:
                i = fp & mask
                while t[i]:
                    i = (i + 1) & mask
                t[i] = fp
        self._t, self._mask, self._grow_at = t, mask, int(cap * _MAX_LOAD)

    def _remove(self, fp: int) -> bool:
        t, mask = self._t, self._mask
        i = self._slot(fp)
        if not t[i]:
            return False
        # Backward-shift deletion: pull later members of the run into the hole when their home slot
        # does not lie cyclically in (hole, j], so every run stays contiguous without tombstones.
        t[i] = 0
        j = i
        while True:
            j = (j + 1) & mask
            v = t[j]
            if not v:
                break
            k = v & mask
            if (i <= j and (k <= i or k > j)) or (i > j and k <= i and k > j):
                t[i] = v
                t[j] = 0
                i = j
        self._n -= 1
        return True

    # -- API ----------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def capacity(self) -> int:
        return self._mask + 1

    def memory_bytes(self) -> int:
        """Bytes of the fingerprint table (the part that grows with the number of URLs)."""
        return self._t.itemsize * len(self._t)

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
        t, mask = self._t, self._mask
        try:
            for url in urls:
                fp = from_bytes(blake2b(url.encode(), digest_size=8).digest(), "little", signed=True) or 1
                # Inlined probe (the hot path of the agent's link handling).
                i = fp & mask
                while True:
                    v = t[i]
                    if v == fp:
                        append(False)
                        break
                    if not v:
                        t[i] = fp
                        self._n += 1
                        pend((hid, fp))
                        append(True)
                        if self._n > self._grow_at:
                            self._grow()
                            t, mask = self._t, self._mask
                        break
                    i = (i + 1) & mask
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
        """Append the fingerprints recorded since the last flush to the log in one transaction."""
        rows, hosts = self._pending, self._new_hosts
        if not rows and not hosts:
            return 0
        self._pending, self._new_hosts = [], []
        db = self._db
        db.execute("BEGIN")
        try:
            if hosts:
                db.executemany("INSERT INTO hosts (hid, host, hkey) VALUES (?, ?, ?)", hosts)
            if rows:
                db.executemany("INSERT INTO seen_log VALUES (?, ?)", rows)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._pending[:0], self._new_hosts[:0] = rows, hosts
            raise
        self._log_rows += len(rows)
        if self._log_rows >= self.merge_rows:
            self.merge()
        return len(rows)

    def merge(self) -> None:
        """Move the log into the host-clustered table: one sorted pass, each leaf page written once."""
        db = self._db
        db.execute("BEGIN")
        try:
            db.execute("INSERT OR IGNORE INTO seen SELECT hid, fp FROM seen_log ORDER BY hid, fp")
            db.execute("DELETE FROM seen_log")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._log_rows = 0
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- handover (by host: cost proportional to the host's URLs, after merging the log) -----------
    def export_host(self, host: str) -> list[int]:
        """The host's fingerprints (signed 64-bit ints), for a new owner's import_host: those on
        disk and those not flushed yet. Nothing is flushed here (the group commit orders flushes:
        frontier before seen set)."""
        hid = self._hid.get(host)
        if hid is None:
            return []
        if self._log_rows:
            self.merge()
        fps = [fp for (fp,) in self._db.execute("SELECT fp FROM seen WHERE hid=?", (hid,))]
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
        db.execute("BEGIN")
        db.execute("DELETE FROM seen WHERE hid=?", (hid,))
        db.execute("DELETE FROM hosts WHERE hid=?", (hid,))
        db.execute("COMMIT")
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
