"""The agent's host cache: host -> owner and backups, with the TTL and epoch of the answer (pure)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from agent.placement.port import HostRoute
from wancrawl.stats import Counters

__all__ = ["HostCache", "HostCacheCounters", "HostRoute"]


@dataclass(slots=True)
class HostCacheCounters(Counters):
    """Look-ups answered from the cache and those that needed the consultant (each counted once
    per decision: `get(count=False)` is a second look)."""
    host_cache_hits: int = 0
    host_cache_misses: int = 0


class HostCache:
    """LRU of placement answers (HostRoute: agents owner first, the epoch, the TTL). Invariant:
    `get` returns a route only while it is fresh, i.e. its TTL has not run out and no newer
    epoch is known (a newer epoch means membership or assignment changed; the host is asked
    again, in the next batched Resolve). `stale` returns any route held, for when the
    consultant cannot be reached: cached assignments carry on."""

    def __init__(self, capacity: int = 1_000_000):
        self.capacity = capacity
        self.routes: OrderedDict[str, tuple[HostRoute, float]] = OrderedDict()  # host -> (route, expires)
        self.epoch = 0  # the newest consultant epoch seen in any reply
        self.stats = HostCacheCounters()

    def saw_epoch(self, epoch: int) -> bool:
        """Record an epoch from any consultant reply; True when it is newer than known."""
        if epoch > self.epoch:
            self.epoch = epoch
            return True
        return False

    def get(self, host: str, now: float, count: bool = True) -> HostRoute | None:
        """The fresh route of a host, or None. `count=False` for a second look at the same
        host in one decision, so the hit ratio counts each look-up once."""
        e = self.routes.get(host)
        if e is not None and e[1] > now and e[0].epoch >= self.epoch:
            self.routes.move_to_end(host)
            self.stats.host_cache_hits += count
            return e[0]
        self.stats.host_cache_misses += count
        return None

    def stale(self, host: str) -> HostRoute | None:
        e = self.routes.get(host)
        return None if e is None else e[0]

    def put(self, route: HostRoute, now: float) -> None:
        """Keep an answer with agents (the caller leaves out errors) until now + its TTL."""
        self.saw_epoch(route.epoch)
        self.routes[route.host] = (route, now + route.ttl)
        self.routes.move_to_end(route.host)
        while len(self.routes) > self.capacity:
            self.routes.popitem(last=False)

    def drop(self, host: str) -> None:
        self.routes.pop(host, None)

    def __len__(self) -> int:
        return len(self.routes)

    @property
    def hit_ratio(self) -> float:
        total = self.stats.host_cache_hits + self.stats.host_cache_misses
        return self.stats.host_cache_hits / total if total else 0.0
