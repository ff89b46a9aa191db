"""URLs owed to other agents, on disk until the owner acknowledges them (crash-safe)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from agent.state.frontier import Item
from agent.state.storable import write_all

log = logging.getLogger("agent")

_ADD = "INSERT INTO outbox (seq, url, host, depth, via) VALUES (?, ?, ?, ?, ?)"
_DEL = "DELETE FROM outbox WHERE seq = ?"


class Outbox:
    """SQLite table of undelivered foreign URLs. Invariant: a URL handed to another agent is
    deleted only after that agent acknowledged it, so kill -9 at any point loses none; after
    a restart `load()` gives them back for routing. Writes are grouped until `flush()`."""

    def __init__(self, path: str | Path):
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, url TEXT NOT NULL,"
            " host TEXT NOT NULL, depth INTEGER NOT NULL, via TEXT NOT NULL)"
        )
        row = self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM outbox").fetchone()
        self._next = int(row[0]) + 1
        self._adds: dict[int, tuple] = {}   # seq -> row, written at the next flush
        self._dels: list[tuple[int]] = []

    def hold(self, it: Item) -> None:
        """Give the item an outbox row (its seq); the row is written at the next flush."""
        seq = it.seq = self._next
        self._next += 1
        self._adds[seq] = (seq, it.url, it.host, it.depth, it.via)

    def delivered(self, items: list[Item]) -> None:
        """These were acknowledged (or turned out local): forget them. A row not yet written is
        simply never written, so URLs delivered within a commit interval cost no disk write."""
        for it in items:
            if it.seq > 0 and self._adds.pop(it.seq, None) is None:
                self._dels.append((it.seq,))

    def flush(self) -> None:
        """Write the buffered rows in one transaction. A failure rolls back and keeps them for
        the next flush (a transaction left open would fail every flush after it). A row that
        cannot be written because of its own values (agent/state/storable.py) is left out and
        logged: its URL is still pushed from memory, only not kept over a crash."""
        if not self._adds and not self._dels:
            return
        stmts = [(_ADD, list(self._adds.values())), (_DEL, self._dels)]
        bad = write_all(self.db, stmts)
        if any(bad):
            first = next(e for b in bad for _, e in b)
            log.error("outbox: %d row(s) could not be written and were left out (%s: %s)", sum(map(len, bad)),
                      type(first).__name__, str(first)[:200])
        self._adds.clear()
        self._dels.clear()

    def load(self) -> list[Item]:
        return [Item(u, h, d, v, 0.0, s) for s, u, h, d, v in self.db.execute("SELECT seq, url, host, depth, via FROM outbox ORDER BY seq")]

    def __len__(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]) + len(self._adds) - len(self._dels)

    def close(self) -> None:
        self.flush()
        self.db.close()
