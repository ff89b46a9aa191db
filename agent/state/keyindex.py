"""The host-key index the frontier and the seen set keep (seed 000's firstdiff, issue 22): each
host's 64-bit key prefix (wancrawl.xorspace.key_prefix) in an SQLite index, and the reads a join
or a leave makes of it: the hosts closer to a newcomer than to this node, reading only the index
ranges that can hold them, instead of every host.

Pure of state: each store hands in its connection, its two queries and what it holds in memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from wancrawl.xorspace import KEY_PREFIX_OFFSET, KEY_PREFIX_SHIFT, host_key, moves_to, moving_ranges


@dataclass(slots=True)
class IndexRead:
    """What one read of the index found and cost: hosts (exact), seeks (index probes that found
    where the next present prefix is) and rows (index entries read in the ranges)."""

    hosts: list[str] = field(default_factory=list)
    seeks: int = 0
    rows: int = 0


def read_moving(db: sqlite3.Connection, seek_sql: str, range_sql: str, me: int, newcomer: int,
                holds: Callable[[str], bool], unflushed: Iterable[str] = ()) -> IndexRead:
    """The hosts `holds` accepts whose key is strictly closer (XOR) to newcomer than to me.

    seek_sql: "SELECT min(hkey) ... WHERE hkey >= ?" over the index; range_sql: "SELECT host ...
    WHERE hkey BETWEEN ? AND ?". The skip-scan (xorspace.moving_ranges) reads the moving block of
    each present prefix above the moving bit; the full key decides at the end, for the moving bit
    below the prefix's last (firstdiff < 96: two ids sharing their top 64 bits) and for rows the
    index keeps of hosts the store no longer holds. `unflushed`: hosts whose index rows are still
    buffered (checked in memory)."""
    out = IndexRead()

    def seek(v: int) -> int | None:
        out.seeks += 1
        row = db.execute(seek_sql, (v - KEY_PREFIX_OFFSET,)).fetchone()
        return None if row is None or row[0] is None else row[0] + KEY_PREFIX_OFFSET

    seen: set[str] = set()
    for lo, hi in moving_ranges(me, newcomer, seek, shift=KEY_PREFIX_SHIFT):
        for (host,) in db.execute(range_sql, (lo - KEY_PREFIX_OFFSET, hi - KEY_PREFIX_OFFSET)):
            out.rows += 1
            if host not in seen and holds(host) and moves_to(host_key(host), me, newcomer):
                seen.add(host)
                out.hosts.append(host)
    for host in unflushed:
        if host not in seen and holds(host) and moves_to(host_key(host), me, newcomer):
            seen.add(host)
            out.hosts.append(host)
    return out


def read_key_range(db: sqlite3.Connection, range_sql: str, lo: int, hi: int, holds: Callable[[str], bool],
                   unflushed: Iterable[str] = ()) -> list[str]:
    """The hosts `holds` accepts with lo <= host_key <= hi (full 160-bit keys): one index range of
    prefixes, then the full key at the two boundary prefixes."""
    if lo > hi:
        return []
    found: dict[str, None] = {}
    rows = db.execute(range_sql, ((lo >> KEY_PREFIX_SHIFT) - KEY_PREFIX_OFFSET, (hi >> KEY_PREFIX_SHIFT) - KEY_PREFIX_OFFSET))
    for (host,) in [*rows, *((h,) for h in unflushed)]:
        if host not in found and holds(host) and lo <= host_key(host) <= hi:
            found[host] = None
    return list(found)


def full_scan(hosts: Iterable[str], me: int, newcomer: int) -> list[str]:
    """The same answer as read_moving by brute force: every host hashed and compared (the
    baseline bench/firstdiff.py measures, and what settling did before the index)."""
    return [h for h in hosts if moves_to(host_key(h), me, newcomer)]
