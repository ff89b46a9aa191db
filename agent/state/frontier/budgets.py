"""The page and domain budgets' counts: pages fetched per host (durable, the `pages` table) and,
derived from them and from which hosts the frontier knows, pages and hosts per registered domain
(issue 25; nothing more is stored). The dispatcher and intake read them to stop a host or a domain
at its budget; the queues tell which hosts they hold (`entered`, `left`). It refuses nothing
itself (the facade checks a count first: item.check_pages) and never commits."""

from __future__ import annotations

from collections.abc import Callable

from agent.state.frontier.hostkeys import HostKeys
from agent.state.frontier.item import MAX_PAGES
from agent.state.frontier.store import Store


def _no_domain(host: str) -> str:
    return ""


class Budgets:
    """Pages per host and per domain.

    Invariants: `_pages` is the `pages` table plus the counts in `_dirty` (written by the next
    flush). A host is "present" when it is queued (between the queues' `entered` and `left`) or in
    `_pages`; `_domain_pages[d]` = the sum of `_pages` over the hosts of d, `_domain_hosts[d]` = the
    number of hosts of d present. `domain_of` None: no per-domain counts (every domain reads 0);
    the agent passes wancrawl.domains.registered_domain (agent/node.py)."""

    __slots__ = ("_count_domains", "_dirty", "_domain_hosts", "_domain_pages", "_keys", "_pages", "domain_of")

    def __init__(self, store: Store, keys: HostKeys, domain_of: Callable[[str], str] | None) -> None:
        self._keys = keys
        self._pages: dict[str, int] = store.all_pages()
        self._dirty: set[str] = set()
        self.domain_of: Callable[[str], str] = domain_of or _no_domain
        self._count_domains = domain_of is not None
        self._domain_pages: dict[str, int] = {}
        self._domain_hosts: dict[str, int] = {}
        for host, n in self._pages.items() if self._count_domains else ():
            d = self.domain_of(host)
            self._domain_pages[d] = self._domain_pages.get(d, 0) + n
            self._domain_hosts[d] = self._domain_hosts.get(d, 0) + 1

    # -- reads ----------------------------------------------------------------------------------
    def pages(self, host: str) -> int:
        return self._pages.get(host, 0)

    def counted(self, host: str) -> bool:
        """Has the host a page count (fetched here, or handed over with one)?"""
        return host in self._pages

    def domain_pages(self, host: str) -> int:
        return self._domain_pages.get(self.domain_of(host), 0)

    def domain_hosts(self, host: str) -> int:
        return self._domain_hosts.get(self.domain_of(host), 0)

    # -- presence, told by the queues -----------------------------------------------------------
    def entered(self, host: str, *, indexed: bool = False) -> None:
        """The host got a queue (it had none). indexed: its index row is on disk (a restart)."""
        if host not in self._pages:  # a host in neither has no index row, or a stale one
            if not indexed:
                self._keys.note(host)
            self._present(host, 1)

    def left(self, host: str) -> None:
        """The host's queue went (nothing queued or in flight)."""
        if host not in self._pages:
            self._present(host, -1)

    # -- changes --------------------------------------------------------------------------------
    def add(self, host: str, n: int, queued: bool) -> None:
        """Count n pages of the host (checked by the caller); queued: the host has a queue."""
        if n:
            if host not in self._pages and not queued:
                self._keys.note(host)
                self._present(host, 1)
            # Handed-over counts add up here: each is bounded at the edge, their sum is not.
            self._set(host, min(self._pages.get(host, 0) + n, MAX_PAGES))
            self._dirty.add(host)

    def reread(self, host: str, count: int | None, queued: bool) -> None:
        """A flush left the host's count out: take the table's (count; None: no row) again."""
        if count is None:
            self._set(host, None)
            if not queued:
                self._present(host, -1)
        else:
            self._set(host, count)

    def drop(self, host: str, queued: bool) -> None:
        """Forget the host's count (its row is deleted); queued: it had a queue until now."""
        present = host in self._pages or queued
        self._set(host, None)
        self._dirty.discard(host)
        if present:
            self._present(host, -1)

    # -- the flush ------------------------------------------------------------------------------
    def pending(self) -> bool:
        return bool(self._dirty)

    def take(self) -> list[tuple[str, int]]:
        """The counts to write, for the flush (given back with `restore` if it fails)."""
        pages = [(h, self._pages[h]) for h in self._dirty]
        self._dirty = set()
        return pages

    def restore(self, pages: list[tuple[str, int]]) -> None:
        self._dirty.update(h for h, _ in pages)

    def _present(self, host: str, step: int) -> None:
        """A host entered (step 1) or left (-1) the hosts this frontier knows (queued or counted)."""
        if not self._count_domains:
            return
        d = self.domain_of(host)
        n = self._domain_hosts.get(d, 0) + step
        if n > 0:
            self._domain_hosts[d] = n
        else:
            self._domain_hosts.pop(d, None)
            self._domain_pages.pop(d, None)

    def _set(self, host: str, n: int | None) -> None:
        """_pages[host] = n (None: no entry), with the domain's sum."""
        old = self._pages.get(host, 0)
        if n is None:
            self._pages.pop(host, None)
        else:
            self._pages[host] = n
        if not self._count_domains:
            return
        d = self.domain_of(host)
        if n != old and d in self._domain_hosts:
            self._domain_pages[d] = self._domain_pages.get(d, 0) + (n or 0) - old
