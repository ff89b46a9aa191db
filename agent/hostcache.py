"""The agent's host cache: host -> owner and backups, with the TTL and epoch of the answer (pure)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    """One consultant answer: agents owner first as (agent_id, address), valid until `expires`."""

    host: str
    agents: tuple[tuple[str, str], ...]
    epoch: int
    expires: float

    @property
    def owner_id(self) -> str:
        return self.agents[0][0]

    @property
    def owner_address(self) -> str:
        return self.agents[0][1]


class HostCache:
    """LRU of routes. Invariant: `get` returns a route only while it is fresh, i.e. its TTL has
    not run out and no newer epoch is known (a newer epoch means membership or assignment
    changed; the host is asked again, in the next batched Resolve). `stale` returns any route
    held, for when the consultant cannot be reached: cached assignments carry on."""

    def __init__(self, capacity: int = 1_000_000):
        self.capacity = capacity
        self.routes: OrderedDict[str, Route] = OrderedDict()
        self.epoch = 0  # the newest consultant epoch seen in any reply
        self.hits = 0
        self.misses = 0

    def saw_epoch(self, epoch: int) -> bool:
        """Record an epoch from any consultant reply; True when it is newer than known."""
        if epoch > self.epoch:
            self.epoch = epoch
            return True
        return False

    def get(self, host: str, now: float, count: bool = True) -> Route | None:
        """The fresh route of a host, or None. `count=False` for a second look at the same
        host in one decision, so the hit ratio counts each look-up once."""
        r = self.routes.get(host)
        if r is not None and r.expires > now and r.epoch >= self.epoch:
            self.routes.move_to_end(host)
            self.hits += count
            return r
        self.misses += count
        return None

    def stale(self, host: str) -> Route | None:
        return self.routes.get(host)

    def put(self, route: Route) -> None:
        self.saw_epoch(route.epoch)
        self.routes[route.host] = route
        self.routes.move_to_end(route.host)
        while len(self.routes) > self.capacity:
            self.routes.popitem(last=False)

    def drop(self, host: str) -> None:
        self.routes.pop(host, None)

    def __len__(self) -> int:
        return len(self.routes)

    @property
    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
