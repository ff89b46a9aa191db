"""The host-key index the frontier and the seen set keep (seed 000's firstdiff, issue 22): each
host's 64-bit key prefix (wancrawl.kademlia.xorspace.key_prefix) in an SQLite index, and the reads a join
or a leave makes of it: the hosts closer to a newcomer than to this node, reading only the index
ranges that can hold them, instead of every host.

Pure of state: each store hands in its connection, its two queries and what it holds in memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agent.state.storable import INT64_MAX
from wancrawl.kademlia.xorspace import (
    KEY_PREFIX_OFFSET,
    KEY_PREFIX_SHIFT,
    firstdiff,
    host_key,
    moves_to,
    moving_ranges,
    prefix_moves,
)


@dataclass(slots=True)
class IndexRead:
    """What one read of the index found and cost: hosts (exact), seeks (index probes that found
    where the next present prefix is) and rows (index entries read)."""

    hosts: list[str] = field(default_factory=list)
    seeks: int = 0
    rows: int = 0


@dataclass(frozen=True, slots=True)
class IndexSql:
    """A store's three reads of its index (a column hkey of prefixes beside the host):
    seek "SELECT min(hkey) ... WHERE hkey >= ?", range "SELECT host ... WHERE hkey BETWEEN ? AND ?",
    scan "SELECT hkey, host ... WHERE hkey >= ? ORDER BY hkey"."""

    seek: str
    range: str
    scan: str


# The skip-scan gives way to one ordered read of the rest of the index when blocks are small: a
# seek (one query) costs about as much as reading ten-odd rows, so after SCAN_AFTER_SEEKS seeks
# that found fewer than ROWS_PER_SEEK rows each, the movers are spread thin (a newcomer splitting
# deep inside this node's share: 2^k blocks for k bits shared below the share's boundary) and
# reading every remaining row with the bit test bounds the cost near a full scan's.
SCAN_AFTER_SEEKS = 32
ROWS_PER_SEEK = 8


def read_moving(db: sqlite3.Connection, sql: IndexSql, me: int, newcomer: int,
                holds: Callable[[str], bool], unflushed: Iterable[str] = ()) -> IndexRead:
    """The hosts `holds` accepts whose key is strictly closer (XOR) to newcomer than to me.

    The skip-scan (xorspace.moving_ranges) reads the moving block of each present prefix above the
    moving bit, and falls back to one ordered read when blocks are small (SCAN_AFTER_SEEKS). The
    full key decides when the moving bit lies below the prefix's last (firstdiff < 96: two ids
    sharing their top 64 bits); `holds` drops rows the index keeps of hosts the store no longer
    holds. `unflushed`: hosts whose index rows are still buffered (checked in memory)."""
    out = IndexRead()

    def seek(v: int) -> int | None:
        out.seeks += 1
        row = db.execute(sql.seek, (v - KEY_PREFIX_OFFSET,)).fetchone()
        return None if row is None or row[0] is None else row[0] + KEY_PREFIX_OFFSET

    found: set[str] = set()

    def take(host: str, moves: bool | None) -> None:
        # moves: what the prefix says (None: it cannot say, hash the host's full key).
        if host not in found and holds(host) and (moves or (moves is None and moves_to(host_key(host), me, newcomer))):
            found.add(host)
            out.hosts.append(host)

    # With the moving bit within the prefix (firstdiff >= 96: ids differing in their top 64 bits,
    # all but 2^-64 of pairs) every row of a range moves: no key to hash.
    exact: bool | None = True if firstdiff(me, newcomer) >= KEY_PREFIX_SHIFT else None
    rest: int | None = None  # where the ordered read starts, if the skip-scan gave way
    for lo, hi in moving_ranges(me, newcomer, seek, shift=KEY_PREFIX_SHIFT):
        for (host,) in db.execute(sql.range, (lo - KEY_PREFIX_OFFSET, hi - KEY_PREFIX_OFFSET)):
            out.rows += 1
            take(host, exact)
        if out.seeks >= SCAN_AFTER_SEEKS and out.rows < ROWS_PER_SEEK * out.seeks:
            rest = hi + 1
            break
    if rest is not None and rest - KEY_PREFIX_OFFSET <= INT64_MAX:
        for v, host in db.execute(sql.scan, (rest - KEY_PREFIX_OFFSET,)):
            out.rows += 1
            m = prefix_moves(v + KEY_PREFIX_OFFSET, me, newcomer, shift=KEY_PREFIX_SHIFT)
            if m is not False:
                take(host, m)
    for host in unflushed:
        take(host, None)
    return out


def read_key_range(db: sqlite3.Connection, sql: IndexSql, lo: int, hi: int, holds: Callable[[str], bool],
                   unflushed: Iterable[str] = ()) -> list[str]:
    """The hosts `holds` accepts with lo <= host_key <= hi (full 160-bit keys): one index range of
    prefixes, then the full key at the two boundary prefixes."""
    if lo > hi:
        return []
    found: dict[str, None] = {}
    rows = db.execute(sql.range, ((lo >> KEY_PREFIX_SHIFT) - KEY_PREFIX_OFFSET, (hi >> KEY_PREFIX_SHIFT) - KEY_PREFIX_OFFSET))
    for (host,) in [*rows, *((h,) for h in unflushed)]:
        if host not in found and holds(host) and lo <= host_key(host) <= hi:
            found[host] = None
    return list(found)


def full_scan(hosts: Iterable[str], me: int, newcomer: int) -> list[str]:
    """The same answer as read_moving by brute force: every host hashed and compared (the
    baseline bench/parts/firstdiff.py measures, and what settling did before the index)."""
    return [h for h in hosts if moves_to(host_key(h), me, newcomer)]
