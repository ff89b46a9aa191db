"""The frontier's in-flight rows: first visits popped and not yet finished, and the done marks
buffered for the next flush. An item in flight keeps its queue row until its done mark is
flushed, so a crash queues it again: a restart refetches at most what was in flight."""

from __future__ import annotations

from collections.abc import Mapping

from agent.state.frontier.item import Item


class InFlight:
    """Invariants: `_items` maps the seq of every item popped from the queues and neither done
    nor retried to it; `_deletes` are the done marks (host, depth, seq) not yet flushed, and
    `deleted` their seqs: rows still in the table that a page-in must pass over. `_done` keeps
    the finished items for the flush listener (only when there is one: `keep_done`).

    Revisits in flight are the schedule's (schedule.py): they have no queue row."""

    __slots__ = ("_deletes", "_done", "_items", "_keep_done", "deleted")

    def __init__(self, keep_done: bool) -> None:
        self._items: dict[int, Item] = {}
        self._deletes: list[tuple[str, int, int]] = []
        self.deleted: set[int] = set()
        self._done: list[Item] = []
        self._keep_done = keep_done

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, seq: int) -> bool:
        return seq in self._items

    def seqs(self) -> Mapping[int, Item]:
        """The items in flight by seq, to read (a page-in passes over their rows)."""
        return self._items

    def seqs_of(self, host: str) -> list[int]:
        """The host's seqs in flight (a scan: for whole-host operations, not per page)."""
        return [s for s, it in self._items.items() if it.host == host]

    def took(self, it: Item) -> None:
        self._items[it.seq] = it

    def done(self, it: Item) -> bool:
        """The item finished: its row goes at the next flush. False if it was not in flight."""
        if self._items.pop(it.seq, None) is None:
            return False
        self._deletes.append((it.host, it.depth, it.seq))
        self.deleted.add(it.seq)
        if self._keep_done:
            self._done.append(it)
        return True

    def back(self, it: Item) -> bool:
        """The item goes back to its queue (retry, or its add was left out). False if not in flight."""
        return self._items.pop(it.seq, None) is not None

    def drop(self, host: str) -> None:
        """Forget the host's items in flight (the host was dropped: its rows are gone)."""
        for seq in self.seqs_of(host):
            del self._items[seq]

    # -- the flush ------------------------------------------------------------------------------
    def pending(self) -> int:
        return len(self._deletes)

    def take(self) -> list[tuple[str, int, int]]:
        deletes, self._deletes = self._deletes, []
        return deletes

    def restore(self, deletes: list[tuple[str, int, int]]) -> None:
        self._deletes[:0] = deletes

    def flushed(self) -> list[Item]:
        """The flush committed: the deleted rows are gone. Returns the items it finished."""
        self.deleted.clear()
        done, self._done = self._done, []
        return done
