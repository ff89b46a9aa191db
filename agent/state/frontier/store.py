"""The frontier's SQLite file: its tables, their schema versions, and every statement the frontier
runs. The only module of the frontier that talks to SQLite; it holds no state of its own but the
connection (what is queued, counted or scheduled is the other parts' to know). A flush is ONE
transaction (`write`); the whole-host deletes (`clear_queue`, `drop_host`) run on their own, as
they always have."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from agent.state.frontier.item import AddRow, origin_of
from agent.state.keyindex import IndexRead, IndexSql, read_key_range, read_moving
from agent.state.revisit import FIELDS as RV_FIELDS
from agent.state.storable import write_all
from wancrawl.kademlia.xorspace import host_prefix

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

_ADD = "INSERT OR REPLACE INTO queue VALUES (?,?,?,?,?,?)"
_UPDATE = "UPDATE queue SET not_before=? WHERE host=? AND depth=? AND seq=?"
_DELETE = "DELETE FROM queue WHERE host=? AND depth=? AND seq=?"
_PAGES = "INSERT OR REPLACE INTO pages VALUES (?, ?)"
_META = "INSERT OR REPLACE INTO meta VALUES ('next_seq', ?)"
_KEY = "INSERT OR IGNORE INTO hostkey VALUES (?, ?)"
_RV_PUT = f"INSERT OR REPLACE INTO revisit VALUES ({','.join('?' * len(RV_FIELDS))})"
_RV_COLS = ", ".join(RV_FIELDS)
_KEY_SQL = IndexSql(
    seek="SELECT min(hkey) FROM hostkey WHERE hkey >= ?",
    range="SELECT host FROM hostkey WHERE hkey BETWEEN ? AND ?",
    scan="SELECT hkey, host FROM hostkey WHERE hkey >= ? ORDER BY hkey",
)

QueueRow = tuple[int, int, str, str, float]
"""A queue row as read back: (depth, seq, url, via, not_before)."""

Rejected = list[list[tuple[int, BaseException]]]
"""Per statement of a flush (adds, updates, deletes, pages, meta, keys, revisits): the rows
write_each left out, as (index, error)."""


class Store:
    """The connection and its statements. `db` is the connection (tests put a failing one in
    its place); nothing else of the frontier holds it."""

    def __init__(self, path: Path, *, synchronous: str, cache_kib: int, wal_pages: int) -> None:
        # NORMAL in WAL mode: a commit survives a process crash (kill -9); FULL also survives power
        # loss at the cost of an fsync per flush.
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
        # Adds spread over many hosts dirty one leaf page per host; a larger WAL lets a page dirtied
        # by several flushes reach the main file once per checkpoint instead of once per flush.
        # But the checkpoint runs inside the flush that crosses the mark, on the agent's event
        # loop: 16,384 pages (64 MB) cost that one flush 41-65 ms of CPU on the bench machine,
        # 4,096 cost 21-30 ms, with the same total flush CPU over 600,000 new URLs
        # (docs/benchmarks.md "Session 10"): the busy loop-lag target is 100 ms per sample.
        self.db.execute(f"PRAGMA wal_autocheckpoint={int(wal_pages)}")
        self.db.executescript(_SCHEMA)
        self.db.create_function("origin", 1, origin_of, deterministic=True)
        self._migrate()

    def _migrate(self) -> None:
        """Bring an older database to SCHEMA_VERSION (see _MIGRATIONS), each step in one
        transaction with its version bump, so a crash mid-way leaves the old version whole."""
        db = self.db
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

    # -- the flush: one transaction -------------------------------------------------------------
    def write(self, adds: list[AddRow], updates: list[tuple], deletes: list[tuple], pages: list[tuple[str, int]],
              seq: int, keys: list[tuple[int, str]], revisits: list[tuple]) -> Rejected:
        """Write a flush's rows in ONE transaction (write_all: rows whose own values fail are left
        out and returned, per statement in this order); any other failure writes nothing and raises."""
        return write_all(self.db, [(_ADD, adds), (_UPDATE, updates), (_DELETE, deletes), (_PAGES, pages),
                                   (_META, [(seq,)]), (_KEY, keys), (_RV_PUT, revisits)])

    # -- queue ----------------------------------------------------------------------------------
    def next_seq(self) -> int:
        row = self.db.execute("SELECT v FROM meta WHERE k='next_seq'").fetchone()
        return row[0] if row else 0

    def max_seq(self) -> int | None:
        row = self.db.execute("SELECT max(seq) FROM queue").fetchone()
        return row[0] if row else None

    def queued_by_origin(self) -> Iterator[tuple[str, str, int]]:
        """(host, origin, rows) of the whole queue table (a restart's one scan)."""
        return iter(self.db.execute("SELECT host, origin(url), count(*) FROM queue GROUP BY host, origin(url)"))

    def queue_from(self, host: str, bound: tuple[int, int], origin: str | None, limit: int) -> list[QueueRow]:
        """Up to limit rows of the host (of one origin when given) with key >= bound, by key."""
        where, extra = ("", ()) if origin is None else (" AND origin(url) = ?", (origin,))
        return self.db.execute(
            f"SELECT depth, seq, url, via, not_before FROM queue WHERE host=? AND (depth, seq) >= (?, ?){where} "
            "ORDER BY depth, seq LIMIT ?",
            (host, bound[0], bound[1], *extra, limit),
        ).fetchall()

    def queue_of(self, host: str) -> Iterator[QueueRow]:
        """Every row of the host, by key (one range scan)."""
        return iter(self.db.execute(
            "SELECT depth, seq, url, via, not_before FROM queue WHERE host=? ORDER BY depth, seq", (host,)))

    def clear_queue(self, host: str, keep: list[int]) -> int:
        """Delete the host's rows but those of the seqs in keep (one range delete); rows deleted."""
        marks = ",".join("?" * len(keep))
        cur = self.db.execute(f"DELETE FROM queue WHERE host=?{f' AND seq NOT IN ({marks})' if keep else ''}", (host, *keep))
        return cur.rowcount

    def drop_host(self, host: str) -> int:
        """Delete every row of the host: queue, page count, schedule, index. Queue rows deleted."""
        cur = self.db.execute("DELETE FROM queue WHERE host=?", (host,))
        self.db.execute("DELETE FROM pages WHERE host=?", (host,))
        self.db.execute("DELETE FROM revisit WHERE host=?", (host,))
        self.db.execute("DELETE FROM hostkey WHERE hkey=? AND host=?", (host_prefix(host), host))
        return cur.rowcount

    # -- pages ----------------------------------------------------------------------------------
    def all_pages(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT host, n FROM pages"))

    def pages_of(self, host: str) -> int | None:
        row = self.db.execute("SELECT n FROM pages WHERE host=?", (host,)).fetchone()
        return None if row is None else row[0]

    # -- revisit --------------------------------------------------------------------------------
    def scheduled_hosts(self) -> list[str]:
        return [h for (h,) in self.db.execute("SELECT DISTINCT host FROM revisit")]

    def schedule_head(self, host: str, limit: int) -> list[tuple]:
        """The host's scheduled rows (finite due) of smallest due, at most limit."""
        return self.db.execute(f"SELECT {_RV_COLS} FROM revisit WHERE host=? AND due < ? ORDER BY due LIMIT ?",
                               (host, math.inf, limit)).fetchall()

    def schedule_row(self, host: str, url: str) -> tuple | None:
        return self.db.execute(f"SELECT {_RV_COLS} FROM revisit WHERE host=? AND url=?", (host, url)).fetchone()

    def scheduled_of(self, host: str) -> Iterator[tuple]:
        """The host's scheduled rows (finite due), in no order."""
        return iter(self.db.execute(f"SELECT {_RV_COLS} FROM revisit WHERE host=? AND due < ?", (host, math.inf)))

    def schedule_of(self, host: str) -> list[tuple]:
        """Every row of the host's schedule (hints included), by due."""
        return self.db.execute(f"SELECT {_RV_COLS} FROM revisit WHERE host=? ORDER BY due", (host,)).fetchall()

    def schedule_counts(self, now: float) -> tuple[int, float]:
        """(scheduled rows, those due at now): a scan of the schedule."""
        n, due = self.db.execute("SELECT count(*), total(due <= ?) FROM revisit WHERE due < ?", (now, math.inf)).fetchone()
        return n, due

    # -- the host-key index ---------------------------------------------------------------------
    def read_moving(self, me: int, newcomer: int, holds: Callable[[str], bool], buffered: Iterable[str]) -> IndexRead:
        return read_moving(self.db, _KEY_SQL, me, newcomer, holds, buffered)

    def read_key_range(self, lo: int, hi: int, holds: Callable[[str], bool], buffered: Iterable[str]) -> list[str]:
        return read_key_range(self.db, _KEY_SQL, lo, hi, holds, buffered)

    def close(self) -> None:
        self.db.close()
