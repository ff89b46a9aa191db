"""ChangeLog: the frontier's committed changes, per host, for the replicator (issue 12).

The frontier records here what each flush made durable (URLs added, URLs done, page counts,
revisit schedule entries written: the latest per URL) and
which hosts it cleared or dropped whole; the replicator takes it all at once, each round. Only
committed changes enter, so a replica never runs ahead of the owner's disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.state.frontier import AddRow, Item
from agent.state.revisit import Entry


@dataclass
class HostChanges:
    # Queued (with the owner's seq): the frontier's rows as written, not an Item each (a Python
    # object per queued URL only to be read once into its replication message; issue 24).
    adds: list[AddRow] = field(default_factory=list)
    done: list[Item] = field(default_factory=list)   # fetched or given up
    pages: int | None = None                         # the page count after the flush
    cleared: bool = False                            # queue dropped whole (budget) or host dropped
    revisits: dict[str, Entry] = field(default_factory=dict)  # url -> its schedule after the flush


class ChangeLog:
    """Owns the changes not yet taken. Invariant: per host, changes are in flush order (a
    `cleared` host's adds and dones before the clear were discarded: the clear supersedes them)."""

    def __init__(self) -> None:
        self._hosts: dict[str, HostChanges] = {}
        self.items = 0  # adds + dones held (the replicator bounds this by taking every round)

    def _c(self, host: str) -> HostChanges:
        c = self._hosts.get(host)
        if c is None:
            c = self._hosts[host] = HostChanges()
        return c

    def flushed(self, adds: list[AddRow], done: list[Item], pages: list[tuple[str, int]], revisits: Sequence[Entry] = ()) -> None:
        for e in revisits:
            c = self._c(e.host)
            self.items += e.url not in c.revisits
            c.revisits[e.url] = e
        for row in adds:
            self._c(row[0]).adds.append(row)
        for it in done:
            self._c(it.host).done.append(it)
        for host, n in pages:
            self._c(host).pages = n
        self.items += len(adds) + len(done)

    def cleared(self, host: str) -> None:
        c = self._c(host)
        self.items -= len(c.adds) + len(c.done) + len(c.revisits)
        c.adds, c.done, c.cleared, c.revisits = [], [], True, {}

    def take(self) -> dict[str, HostChanges]:
        out, self._hosts, self.items = self._hosts, {}, 0
        return out
