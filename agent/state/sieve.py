"""The seen set on disk: every (host id, fingerprint) pair in one sorted sequence, cut into chunks
stored as packed blobs (BUbiNG's sieve keeps its fingerprints as one sorted run of 64-bit ints,
merged with each new batch; this is that run in pieces that can be rewritten one at a time).

Table `seen_runs (khid, kfp, data)`: chunk j holds the pairs (h, f) with
keys[j] <= (h, f) < keys[j + 1], in order; the first chunk's key is (0, -2**63), below every pair
(host ids start at 1). A chunk's blob: n (int32), the n host ids (int32, ascending), their counts
(int32), then the fingerprints (int64, ascending within each host), all little-endian: 8 bytes a
URL plus 8 a host and chunk. A chunk that grows past 2 * CHUNK pairs is cut in runs of CHUNK;
blobs of 32-64 KB fill SQLite's overflow pages, where rows of a few hundred bytes that grow in
place would leave leaf pages a third empty.

The chunk keys are held in memory (a 16-byte tuple per chunk: 2,500 chunks for 10 million
URLs) and changed only after the transaction that wrote them commits."""

from __future__ import annotations

import sqlite3
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

import numpy as np

SCHEMA = "CREATE TABLE IF NOT EXISTS seen_runs (khid INTEGER NOT NULL, kfp INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (khid, kfp))"
CHUNK = 4096
FIRST = (0, -(1 << 63))
MAX_FP = (1 << 63) - 1
I8 = np.dtype("<i8")
I4 = np.dtype("<i4")
_EMPTY = np.zeros(0, dtype=np.int64)


def encode(h: np.ndarray, f: np.ndarray) -> bytes:
    """Pairs sorted by (h, f) as a chunk's blob."""
    hosts, counts = np.unique(h, return_counts=True)
    return (np.array([len(hosts)], dtype=I4).tobytes() + hosts.astype(I4).tobytes() + counts.astype(I4).tobytes()
            + f.astype(I8).tobytes())


def decode(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's pairs as (host ids, fingerprints), int64 arrays of the same length."""
    n = int.from_bytes(blob[:4], "little")
    hosts = np.frombuffer(blob, dtype=I4, count=n, offset=4).astype(np.int64)
    counts = np.frombuffer(blob, dtype=I4, count=n, offset=4 + 4 * n)
    return np.repeat(hosts, counts), np.frombuffer(blob, dtype=I8, offset=4 + 8 * n).astype(np.int64)


def fingerprints(blob: bytes) -> np.ndarray:
    """A chunk's fingerprints only (loading the set into memory)."""
    n = int.from_bytes(blob[:4], "little")
    return np.frombuffer(blob, dtype=I8, offset=4 + 8 * n)


def union(h: np.ndarray, f: np.ndarray, h2: np.ndarray, f2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of pairs as one, sorted by (h, f), each pair once."""
    h, f = np.concatenate((h, h2)), np.concatenate((f, f2))
    order = np.lexsort((f, h))
    h, f = h[order], f[order]
    if len(h) > 1:
        keep = np.concatenate(([True], (h[1:] != h[:-1]) | (f[1:] != f[:-1])))
        h, f = h[keep], f[keep]
    return h, f


def bound(h: np.ndarray, f: np.ndarray, start: int, key: tuple[int, int]) -> int:
    """The first index >= start of sorted pairs (h, f) whose pair is >= key."""
    lo = start + int(np.searchsorted(h[start:], key[0], "left"))
    hi = start + int(np.searchsorted(h[start:], key[0], "right"))
    return lo + int(np.searchsorted(f[lo:hi], key[1], "left"))


class Runs:
    """The chunks of seen_runs and their keys (module doc). Writes happen inside the caller's
    transaction; `commit()` or `rollback()` after it brings the in-memory keys along."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.keys: list[tuple[int, int]] = [(k, f) for k, f in db.execute("SELECT khid, kfp FROM seen_runs ORDER BY khid, kfp")]
        self._added: list[tuple[int, int]] = []
        self._removed: list[tuple[int, int]] = []

    def commit(self) -> None:
        if self._added or self._removed:
            keys = set(self.keys) - set(self._removed) | set(self._added)
            self.keys = sorted(keys)
        self._added, self._removed = [], []

    def rollback(self) -> None:
        self._added, self._removed = [], []

    def _read(self, key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        row = self.db.execute("SELECT data FROM seen_runs WHERE khid=? AND kfp=?", key).fetchone()
        return decode(row[0]) if row else (_EMPTY, _EMPTY)

    def _write(self, key: tuple[int, int], h: np.ndarray, f: np.ndarray) -> int:
        """The pairs from key on, cut in runs of CHUNK if more than 2 * CHUNK (the first keeps key);
        returns the pairs written."""
        if len(h) <= 2 * CHUNK:
            parts = [(0, len(h))]
        else:
            cuts = list(range(0, len(h), CHUNK))
            if len(h) - cuts[-1] < CHUNK // 2:  # no small tail: it joins the run before
                cuts.pop()
            parts = list(zip(cuts, cuts[1:] + [len(h)]))
        rows = []
        for k, (a, b) in enumerate(parts):
            kk = key if k == 0 else (int(h[a]), int(f[a]))
            rows.append((kk[0], kk[1], encode(h[a:b], f[a:b])))
            if k:
                self._added.append(kk)
        self.db.executemany("INSERT OR REPLACE INTO seen_runs VALUES (?, ?, ?)", rows)
        return len(h)

    def merge(self, h: np.ndarray, f: np.ndarray, start: int, budget: int) -> tuple[int, int]:
        """Merge sorted pairs h[start:], f[start:] into their chunks, chunk by chunk, until about
        `budget` pairs were rewritten. Returns (the index reached, pairs rewritten)."""
        keys = self.keys
        if not keys and not self._added:
            self._added.append(FIRST)
            keys = [FIRST]
            self.db.execute("INSERT OR REPLACE INTO seen_runs VALUES (?, ?, ?)", (*FIRST, encode(_EMPTY, _EMPTY)))
        pos, written = start, 0
        while pos < len(h) and written < budget:
            j = bisect_right(keys, (int(h[pos]), int(f[pos]))) - 1
            end = len(h) if j + 1 == len(keys) else bound(h, f, pos, keys[j + 1])
            oh, of = self._read(keys[j])
            nh, nf = union(oh, of, h[pos:end], f[pos:end])
            written += self._write(keys[j], nh, nf)
            pos = end
        return pos, written

    def _host_chunks(self, hid: int) -> list[tuple[int, int]]:
        j = max(0, bisect_right(self.keys, (hid, FIRST[1])) - 1)
        return self.keys[j:bisect_left(self.keys, (hid, MAX_FP), lo=j) + 1]

    def host(self, hid: int) -> list[int]:
        """The host's fingerprints on disk."""
        out: list[int] = []
        for key in self._host_chunks(hid):
            h, f = self._read(key)
            out += f[h == hid].tolist()
        return out

    def drop(self, hid: int) -> None:
        """Remove the host's pairs (a chunk left empty goes, the first one stays)."""
        for key in self._host_chunks(hid):
            h, f = self._read(key)
            keep = h != hid
            if keep.all():
                continue
            if keep.any() or key == FIRST:
                self.db.execute("UPDATE seen_runs SET data=? WHERE khid=? AND kfp=?", (encode(h[keep], f[keep]), *key))
            else:
                self.db.execute("DELETE FROM seen_runs WHERE khid=? AND kfp=?", key)
                self._removed.append(key)

    def write_sorted(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Fill an empty table from pairs in (h, f) order (a migration), CHUNK at a time."""
        buf: list[tuple[int, int]] = []
        key: tuple[int, int] | None = FIRST
        for p in pairs:
            if key is None:
                key = (int(p[0]), int(p[1]))
            buf.append(p)
            if len(buf) == CHUNK:
                self._put(key, buf)
                buf, key = [], None
        if key is not None:
            self._put(key, buf)

    def _put(self, key: tuple[int, int], buf: list[tuple[int, int]]) -> None:
        a = np.array(buf, dtype=np.int64).reshape(-1, 2)
        self.db.execute("INSERT INTO seen_runs VALUES (?, ?, ?)", (*key, encode(a[:, 0], a[:, 1])))
        self._added.append(key)

    def every(self) -> Iterable[np.ndarray]:
        """Every fingerprint on disk, a chunk at a time."""
        for (blob,) in self.db.execute("SELECT data FROM seen_runs"):
            yield fingerprints(blob)
