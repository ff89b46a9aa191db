"""Routing of discovered URLs (seed 002, §1.1-1.2): host cache, batched Resolve, batched pushes.

Pure: `Router` takes URLs, consultant answers and push outcomes, and returns decisions (what
goes to the local frontier, which hosts to resolve, which batches to push). The agent's I/O
shell (agent/routing/service.py) carries them out. It reads the host cache and never writes it
(agent/placement/directory.py HostDirectory does). Counters follow the paper's traffic formula
mu*n/alpha + lambda*2m/beta.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.placement.hostcache import HostCache, HostRoute
from agent.state.frontier import Item

# While an item is routed, Item.seq is its outbox row (0 = none): what is owed to a peer.


@dataclass
class PushBatch:
    owner_id: str
    address: str
    epoch: int
    items: list[Item]


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
    local result of a call, `waiting` (no fresh route for its host yet), `batches` (grouped per
    owner, waiting to be pushed), or a batch handed out by `due_pushes` and not yet reported
    back through `pushed` or `push_failed`. Every host in `waiting` is in exactly one of
    `resolving` (in a Resolve under way), `_to_ask` (next Resolve) or `_later` (asked again
    after a failure), so picking the next batch costs O(beta), not O(hosts waiting)."""

    def __init__(self, self_id: str, cache: HostCache, *, alpha: int = 1000, beta: int = 1000, flush_interval: float = 0.2):
        self.self_id = self_id
        self.cache = cache
        self.alpha = alpha
        self.beta = beta
        self.flush_interval = flush_interval
        self.waiting: dict[str, list[Item]] = {}                   # host -> items, no fresh route
        self.resolving: set[str] = set()
        self._to_ask: dict[str, None] = {}                            # oldest first
        self._later: list[tuple[float, str]] = []                     # heap of (not before, host)
        self.batches: dict[str, list[Item]] = {}                    # owner id -> items
        self.addresses: dict[str, str] = {}                           # owner id -> address
        self.oldest: dict[str, float] = {}                            # owner id -> first item's time
        self.owner_backoff: dict[str, float] = {}                     # owner id -> not before
        self.in_push = 0        # push batches handed out and not yet reported back
        self.in_push_urls = 0
        self.c = Counters()

    # -- input ------------------------------------------------------------------------------
    def submit(self, items: list[Item], now: float, hold: Callable[[Item], None] | None = None) -> list[Item]:
        """Route URLs; returns those of hosts this agent owns (for the local frontier). `hold`
        is called on every item that stays with the router (foreign or unknown host) before it
        is kept: the caller makes it durable as owed to a peer (its outbox row)."""
        self.c.discovered += len(items)
        local: list[Item] = []
        for it in items:
            self.c.hosts.add(it.host)
            route = self.cache.get(it.host, now)
            if route is not None and route.agents[0][0] == self.self_id:
                local.append(it)
                continue
            if hold is not None:
                hold(it)
            if route is None:
                self._wait(it)
            else:
                self._to_owner(it, route, now, local)
        self.c.local += len(local)
        return local

    def _wait(self, it: Item, not_before: float = 0.0) -> None:
        """Park an item until its host has a route; a host new to `waiting` is queued to be asked."""
        items = self.waiting.get(it.host)
        if items is not None:
            items.append(it)
            return
        self.waiting[it.host] = [it]
        if not_before > 0:
            heapq.heappush(self._later, (not_before, it.host))
        else:
            self._to_ask[it.host] = None

    def _to_owner(self, it: Item, route: HostRoute, now: float, local: list[Item]) -> None:
        owner, address = route.agents[0]
        if owner == self.self_id:
            local.append(it)
            return
        self.addresses[owner] = address
        box = self.batches.setdefault(owner, [])
        if not box:
            self.oldest[owner] = now
        box.append(it)
        self.c.m_hosts.add(it.host)

    # -- resolving --------------------------------------------------------------------------
    def hosts_to_resolve(self, now: float) -> list[str]:
        """Up to beta hosts for one Resolve, or [] if none is due. Hosts are asked once even
        if many URLs wait on them."""
        while self._later and self._later[0][0] <= now:
            _, host = heapq.heappop(self._later)
            if host in self.waiting and host not in self.resolving:
                self._to_ask[host] = None
        batch = list(itertools.islice(self._to_ask, self.beta))
        for h in batch:
            del self._to_ask[h]
        self.resolving.update(batch)
        return batch

    def resolved(
        self, asked: list[str], routes: list[HostRoute], now: float, errors: dict[str, str] | None = None, retry_in: float = 1.0
    ) -> tuple[list[Item], list[Item]]:
        """A Resolve of `asked` answered (the routes are in the cache already). Returns (items
        that turned out to be local, items of hosts the consultant called malformed: dropped). A
        host asked but not answered with an agent is asked again after `retry_in`."""
        errors = errors or {}
        self.c.resolves += 1
        self.c.resolved_hosts += len(asked)
        answered = {r.host: r for r in routes if r.agents}
        local: list[Item] = []
        rejected: list[Item] = []
        for host in asked:
            self.resolving.discard(host)
            r = answered.get(host)
            if r is not None:
                for it in self.waiting.pop(host, []):
                    self._to_owner(it, r, now, local)
            elif host in errors:
                rejected.extend(self.waiting.pop(host, []))
            elif host in self.waiting:
                heapq.heappush(self._later, (now + retry_in, host))
        self.c.local += len(local)
        return local, rejected

    def resolve_failed(self, hosts: list[str], now: float, retry_in: float = 1.0) -> list[Item]:
        """The consultant could not be reached: route by any cached answer, however old (cached
        assignments carry on); hosts never seen wait and are asked again after `retry_in`."""
        self.c.resolve_failures += 1
        local: list[Item] = []
        for h in hosts:
            self.resolving.discard(h)
            r = self.cache.stale(h)
            if r is not None:
                for it in self.waiting.pop(h, []):
                    self._to_owner(it, r, now, local)
            elif h in self.waiting:
                heapq.heappush(self._later, (now + retry_in, h))
        self.c.local += len(local)
        return local

    # -- pushing ----------------------------------------------------------------------------
    def due_pushes(self, now: float, force: bool = False, limit: int | None = None) -> list[PushBatch]:
        """Batches of at most alpha URLs for owners whose batch is full or has waited a flush
        interval (or all, with force); at most `limit` batches (the rest wait their turn)."""
        out: list[PushBatch] = []
        for owner in list(self.batches):
            if limit is not None and len(out) >= limit:
                break
            box = self.batches[owner]
            if self.owner_backoff.get(owner, 0.0) > now:
                continue
            due = force or now - self.oldest[owner] >= self.flush_interval
            # Full batches go at once; a partial one only when due (flush interval or force).
            cut = len(box) if due else len(box) - len(box) % self.alpha
            if limit is not None:
                cut = min(cut, (limit - len(out)) * self.alpha)
            for i in range(0, cut, self.alpha):
                out.append(PushBatch(owner, self.addresses[owner], self.cache.epoch, box[i : min(i + self.alpha, cut)]))
            if cut == len(box):
                del self.batches[owner]
                del self.oldest[owner]
            elif cut:
                self.batches[owner] = box[cut:]
                self.oldest[owner] = now
        self.in_push += len(out)
        self.in_push_urls += sum(len(b.items) for b in out)
        self.c.pushes += len(out)
        return out

    def pushed(self, batch: PushBatch, not_mine: list[int], epoch: int, now: float) -> list[Item]:
        """A push was answered. URLs the receiver says are not its own wait for a new route
        (the caller makes their hosts' cached answers stale). Returns delivered items."""
        self.in_push -= 1
        self.in_push_urls -= len(batch.items)
        self.owner_backoff.pop(batch.owner_id, None)
        bounced = set(not_mine)
        self.c.n += len(batch.items) - len(bounced)
        self.c.not_mine += len(bounced)
        delivered = [it for i, it in enumerate(batch.items) if i not in bounced]
        for i in sorted(bounced):
            if 0 <= i < len(batch.items):
                self._wait(batch.items[i])
        return delivered

    def push_failed(self, batch: PushBatch, now: float, retry_in: float = 1.0) -> None:
        """The owner could not be reached: its URLs wait, their hosts are asked again (a dead
        owner's hosts pass to its backup once its lease expires), the owner is left alone for
        `retry_in` seconds (the caller makes their hosts' cached answers stale)."""
        self.in_push -= 1
        self.in_push_urls -= len(batch.items)
        self.c.push_failures += 1
        self.owner_backoff[batch.owner_id] = now + retry_in
        for it in batch.items:
            self._wait(it, now + retry_in)

    # -- state ------------------------------------------------------------------------------
    def pending(self) -> int:
        """URLs not yet delivered (waiting, in outboxes, or in pushes under way)."""
        return sum(map(len, self.waiting.values())) + sum(map(len, self.batches.values())) + self.in_push_urls

    def idle(self) -> bool:
        return not self.waiting and not any(self.batches.values()) and self.in_push == 0
