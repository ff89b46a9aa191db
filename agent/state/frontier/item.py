"""The frontier's vocabulary, shared by its parts and its callers: a queued URL (`Item`), the row
it is written as (`AddRow`), who is told what each flush made durable (`FlushListener`), a URL's
origin, and what the queue table can store (`item_problem`, `check_items`). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from agent.state.revisit import Entry, Visit
from agent.state.storable import INT64_MAX, Unstorable, text_ok
from wancrawl.checks import MAX_COUNT

# A host's page count saturates at what the edge accepts in a HandOver or Replicate
# (agent/validate.py), so a count this agent hands on is always taken; far below SQLite's
# signed 64-bit INTEGER.
MAX_PAGES = MAX_COUNT


@dataclass(slots=True)
class Item:
    """One queued URL. seq is assigned by Frontier.add (-1 before); (host, depth, seq) is its key.

    Treat items returned by the frontier as read-only: the frontier keeps references to them."""

    url: str
    host: str
    depth: int = 0
    via: str = ""
    not_before: float = 0.0
    seq: int = -1
    force: bool = False  # queue it even if seen (an operator's re-seed); not kept on disk
    # Issue 26 (memory only): a revisit popped from the schedule carries its entry (seq stays -1);
    # the dispatcher sets `visit` (what the fetch told) before the item is finished, and done()
    # schedules the URL's next visit from it.
    revisit: Entry | None = None
    visit: Visit | None = None


AddRow = tuple[str, int, int, str, str, float]
"""A queued URL as the frontier writes it: (host, depth, seq, url, via, not_before)."""


class FlushListener(Protocol):
    """Told what each flush made durable, and of hosts dropped whole (agent/state/changes.py's
    ChangeLog, for replication). The frontier receives one; it does not know who listens."""

    def flushed(self, adds: list[AddRow], done: list[Item], pages: list[tuple[str, int]], revisits: list[Entry]) -> None: ...
    def cleared(self, host: str) -> None: ...


def origin_of(url: str) -> str:
    """scheme://host[:port] of a canonical URL (RFC 9309's unit of robots.txt; a lane's key)."""
    i = url.find("/", 8)  # the path's slash: after "https://h" or "http://h"
    return url if i < 0 else url[:i]


def item_problem(it: Item) -> str | None:
    """Why the frontier could not store the item (None: it can). Pure; the entry check of add()."""
    if not 0 <= it.depth <= INT64_MAX:
        return f"depth {it.depth} is outside 0..2^63-1"
    if it.not_before != it.not_before:
        return "not_before is NaN"
    if not (it.url.isascii() and it.host.isascii() and it.via.isascii()):  # canonical URLs are ASCII
        for name, s in (("url", it.url), ("host", it.host), ("via", it.via)):
            if not text_ok(s):
                return f"{name} is not valid UTF-8"
    return None


def check_items(items: Iterable[Item]) -> None:
    """Raise Unstorable for the first item add() would refuse (callers that must not change
    anything before a refusal check first: HostLedger.import_)."""
    for it in items:
        why = item_problem(it)
        if why is not None:
            raise Unstorable(f"queue item {it.url[:80]!r}: {why}")


def check_pages(host: str, n: int) -> None:
    """Raise Unstorable if add_pages(host, n) would be refused."""
    # A count SQLite cannot hold is refused; a host's sum saturates at MAX_PAGES (add_pages),
    # so adding never overflows either.
    if not 0 <= n <= INT64_MAX:
        raise Unstorable(f"pages {n} of {host[:80]!r}: a page count must be within 0..2^63-1")
