"""The frontier's use of the host-key index (agent/state/keyindex.py, seed 000's firstdiff): the
index rows of hosts new to the frontier until a flush writes them, and the two reads a join or a
leave makes (the hosts a newcomer takes, the hosts of a key range)."""

from __future__ import annotations

from collections.abc import Callable

from agent.state.frontier.store import Store
from agent.state.keyindex import IndexRead
from wancrawl.kademlia.xorspace import host_prefix


class HostKeys:
    """Invariant (with the table's, at store.py's schema version 1): every host the frontier
    holds has its (hkey, host) row in the table or in `_rows`, written by the next flush
    (INSERT OR IGNORE: the row may be there already). A host gets a row when it enters memory
    from nowhere (its first queued URL, page count or schedule entry): `note`."""

    __slots__ = ("_rows", "_store")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._rows: list[tuple[int, str]] = []

    def note(self, host: str) -> None:
        self._rows.append((host_prefix(host), host))

    def pending(self) -> bool:
        return bool(self._rows)

    def take(self) -> list[tuple[int, str]]:
        """The buffered rows, for the flush (which gives them back with `restore` if it fails)."""
        rows, self._rows = self._rows, []
        return rows

    def restore(self, rows: list[tuple[int, str]]) -> None:
        self._rows[:0] = rows

    def read_moving(self, me: int, newcomer: int, holds: Callable[[str], bool]) -> IndexRead:
        return self._store.read_moving(me, newcomer, holds, (h for _, h in self._rows))

    def in_range(self, lo: int, hi: int, holds: Callable[[str], bool]) -> list[str]:
        return self._store.read_key_range(lo, hi, holds, (h for _, h in self._rows))
