"""Routing of discovered URLs (seed 002, §1.1-1.2): host cache, batched Resolve, batched pushes.

Pure: `Router` takes URLs, consultant answers and push outcomes, and returns decisions (what
goes to the local frontier, which hosts to resolve, which batches to push). The agent's I/O
shell (agent/routing.py) carries them out. Counters follow the paper's traffic formula
mu*n/alpha + lambda*2m/beta.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from agent.hostcache import HostCache, Route


@dataclass(frozen=True)
class UrlItem:
    url: str       # canonical
    host: str      # canonical host of url
    depth: int = 0
    via: str = ""
    seq: int = 0   # the outbox row holding it while it is not yet delivered (0 = none)


@dataclass
class PushBatch:
    owner_id: str
    address: str
    epoch: int
    items: list[UrlItem]


@dataclass
class Counters:
    discovered: int = 0       # URLs submitted for routing
    local: int = 0            # went straight to the local frontier
    n: int = 0                # URLs sent to other agents (the paper's mu*n)
    m_hosts: set[str] = field(default_factory=set)  # distinct foreign hosts (m)
    hosts: set[str] = field(default_factory=set)    # distinct hosts routed
    pushes: int = 0           # PushUrls RPCs sent
    push_failures: int = 0
    not_mine: int = 0         # URLs bounced by their receiver
    resolves: int = 0         # Resolve RPCs sent
    resolved_hosts: int = 0
    resolve_failures: int = 0


class Router:
    """Invariants: every submitted item is in exactly one place until it is delivered: the
    local result of a call, `waiting` (its host is being or will be resolved), or `outbox`
    (grouped per owner, waiting to be pushed), or a batch handed out by `due_pushes` and not
    yet reported back through `pushed` or `push_failed`."""

    def __init__(self, self_id: str, cache: HostCache, *, alpha: int = 1000, beta: int = 1000, flush_interval: float = 0.2):
        self.self_id = self_id
        self.cache = cache
        self.alpha = alpha
        self.beta = beta
        self.flush_interval = flush_interval
        self.waiting: dict[str, list[UrlItem]] = defaultdict(list)   # host -> items, no fresh route
        self.resolving: set[str] = set()                              # hosts in a Resolve in flight
        self.retry_at: dict[str, float] = {}                          # host -> not before (after failures)
        self.outbox: dict[str, list[UrlItem]] = defaultdict(list)     # owner id -> items
        self.addresses: dict[str, str] = {}                           # owner id -> address
        self.oldest: dict[str, float] = {}                            # owner id -> first item's time
        self.owner_backoff: dict[str, float] = {}                     # owner id -> not before
        self.leaving = False    # set by a drain: nothing is local any more
        self.in_push = 0        # push batches handed out and not yet reported back
        self.in_push_urls = 0
        self.rejected: list[UrlItem] = []  # items of hosts the consultant called malformed (last resolve)
        self.c = Counters()

    # -- input ------------------------------------------------------------------------------
    def submit(self, items: list[UrlItem], now: float) -> list[UrlItem]:
        """Route URLs; returns those of hosts this agent owns (for the local frontier)."""
        self.c.discovered += len(items)
        local: list[UrlItem] = []
        for it in items:
            self.c.hosts.add(it.host)
            self._place(it, now, local)
        self.c.local += len(local)
        return local

    def _place(self, it: UrlItem, now: float, local: list[UrlItem]) -> None:
        route = self.cache.get(it.host, now)
        if route is None:
            self.waiting[it.host].append(it)
            return
        self._to_owner(it, route, now, local)

    def _to_owner(self, it: UrlItem, route: Route, now: float, local: list[UrlItem]) -> None:
        owner = route.owner_id
        if owner == self.self_id:
            if not self.leaving:
                local.append(it)
                return
            # Leaving: the next agent in the preference list is who owns it once we are gone.
            if len(route.agents) < 2:
                self.waiting[it.host].append(it)
                return
            owner = route.agents[1][0]
            self.addresses[owner] = route.agents[1][1]
            box = self.outbox[owner]
            if not box:
                self.oldest[owner] = now
            box.append(it)
            self.c.m_hosts.add(it.host)
            return
        self.addresses[owner] = route.owner_address
        box = self.outbox[owner]
        if not box:
            self.oldest[owner] = now
        box.append(it)
        self.c.m_hosts.add(it.host)

    # -- resolving --------------------------------------------------------------------------
    def hosts_to_resolve(self, now: float, force: bool = False) -> list[str]:
        """Up to beta hosts for one Resolve, or [] if none is due. Hosts are asked once even
        if many URLs wait on them."""
        ready = [h for h in self.waiting if h not in self.resolving and self.retry_at.get(h, 0.0) <= now]
        if not ready:
            return []
        batch = ready[: self.beta]
        self.resolving.update(batch)
        return batch

    def resolved(self, routes: list[Route], now: float, errors: dict[str, str] | None = None) -> list[UrlItem]:
        """A Resolve answered. Returns items that turned out to be local. Hosts with an error
        (malformed) are dropped with their URLs: returned separately through `rejected`."""
        self.c.resolves += 1
        self.c.resolved_hosts += len(routes) + len(errors or {})
        local: list[UrlItem] = []
        for r in routes:
            self.resolving.discard(r.host)
            self.retry_at.pop(r.host, None)
            if not r.agents:
                continue
            self.cache.put(r)
            for it in self.waiting.pop(r.host, []):
                self._to_owner(it, r, now, local)
        self.rejected: list[UrlItem] = []
        for host in errors or {}:
            self.resolving.discard(host)
            self.rejected.extend(self.waiting.pop(host, []))
        self.c.local += len(local)
        return local

    def resolve_failed(self, hosts: list[str], now: float, retry_in: float = 1.0) -> list[UrlItem]:
        """The consultant could not be reached: route by any cached answer, however old (cached
        assignments carry on); hosts never seen wait and are asked again after `retry_in`."""
        self.c.resolve_failures += 1
        local: list[UrlItem] = []
        for h in hosts:
            self.resolving.discard(h)
            r = self.cache.stale(h)
            if r is not None:
                for it in self.waiting.pop(h, []):
                    self._to_owner(it, r, now, local)
            else:
                self.retry_at[h] = now + retry_in
        self.c.local += len(local)
        return local

    # -- pushing ----------------------------------------------------------------------------
    def due_pushes(self, now: float, force: bool = False) -> list[PushBatch]:
        """Batches of at most alpha URLs for owners whose outbox is full or has waited a
        flush interval (or all, with force)."""
        out: list[PushBatch] = []
        for owner in list(self.outbox):
            box = self.outbox[owner]
            if not box:
                continue
            if self.owner_backoff.get(owner, 0.0) > now:
                continue
            if not force and len(box) < self.alpha and now - self.oldest.get(owner, now) < self.flush_interval:
                continue
            while box and (force or len(box) >= self.alpha or now - self.oldest.get(owner, now) >= self.flush_interval):
                chunk, rest = box[: self.alpha], box[self.alpha :]
                out.append(PushBatch(owner, self.addresses[owner], self.cache.epoch, chunk))
                box = rest
                if len(chunk) < self.alpha:
                    break
            if box:
                self.outbox[owner] = box
                self.oldest[owner] = now
            else:
                del self.outbox[owner]
                self.oldest.pop(owner, None)
        self.in_push += len(out)
        self.in_push_urls += sum(len(b.items) for b in out)
        self.c.pushes += len(out)
        return out

    def pushed(self, batch: PushBatch, not_mine: list[int], epoch: int, now: float) -> list[UrlItem]:
        """A push was answered. URLs the receiver says are not its own go back through
        routing with their host's cache entry dropped (re-resolved). Returns delivered items."""
        self.in_push -= 1
        self.in_push_urls -= len(batch.items)
        self.cache.saw_epoch(epoch)
        self.owner_backoff.pop(batch.owner_id, None)
        bounced = set(not_mine)
        self.c.n += len(batch.items) - len(bounced)
        self.c.not_mine += len(bounced)
        delivered = [it for i, it in enumerate(batch.items) if i not in bounced]
        for i in sorted(bounced):
            if 0 <= i < len(batch.items):
                it = batch.items[i]
                self.cache.drop(it.host)
                self.waiting[it.host].append(it)
        return delivered

    def push_failed(self, batch: PushBatch, now: float, retry_in: float = 1.0) -> None:
        """The owner could not be reached: its URLs wait, their hosts are asked again (a dead
        owner's hosts pass to its backup once its lease expires), the owner is left alone for
        `retry_in` seconds."""
        self.in_push -= 1
        self.in_push_urls -= len(batch.items)
        self.c.push_failures += 1
        self.owner_backoff[batch.owner_id] = now + retry_in
        for it in batch.items:
            self.cache.drop(it.host)
            self.waiting[it.host].append(it)
            self.retry_at.setdefault(it.host, now + retry_in)

    # -- state ------------------------------------------------------------------------------
    def pending(self) -> int:
        """URLs not yet delivered (waiting, in outboxes, or in pushes under way)."""
        return sum(map(len, self.waiting.values())) + sum(map(len, self.outbox.values())) + self.in_push_urls

    def idle(self) -> bool:
        return not self.waiting and not any(self.outbox.values()) and self.in_push == 0

    def owns(self, host: str, now: float) -> bool | None:
        """Does this agent own the host? None when no fresh answer is cached."""
        r = self.cache.get(host, now)
        return None if r is None else r.owner_id == self.self_id
