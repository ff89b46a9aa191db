"""Geographic partitioning (seed 002): the agent nearest the site's IP by great-circle distance."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from consultant.partition.base import AgentView, Partitioner, Placement, Scored, Site, register, top_candidates
from consultant.partition.rendezvous import HashPlacement
from wancrawl.geo import great_circle_km


@dataclass(frozen=True)
class GeoOptions:
    # Agents within this many km of each other count as equally near (ties broken by hash),
    # so agents in one city share that city's sites.
    tie_km: float = 1.0

    def __post_init__(self) -> None:
        if self.tie_km < 0:
            raise ValueError("geo.tie_km must be >= 0")


_EXACT = float(1 << 53)  # buckets beyond this are not all exact as float64: ranked in pure Python


class GeoPlacement:
    """Agents ordered by distance to the site, in buckets of `tie_km`; within a bucket (e.g.
    agents of one city) by rendezvous hash, so co-located agents share the city's sites.

    Agents without coordinates come after every located agent; a site without coordinates
    (unknown IP, not in the DB) is ranked by hash alone. Each agent's key depends only on
    the site and that agent, so membership changes move only what they must.

    The buckets are a NumPy array per site location (cached), the hash scores one NumPy call
    per host; only the agents of the nearest buckets are sorted, by the pure key
    (bucket, -score, index), so the ranking is the pure implementation's exactly.
    """

    def __init__(self, agents: Sequence[AgentView], tie_km: float):
        self.agents = list(agents)
        self.tie_km = tie_km
        self.hash = HashPlacement(agents, "")
        self.everyone = self.hash.everyone
        # Per site location, every agent's bucket (None: not exact as float64). About 8 bytes
        # per agent per location: bounded to some 160 MB whatever the number of agents.
        self._bucket_cache: dict[tuple[float, float], np.ndarray | None] = {}
        self._cache_max = min(100_000, max(1_000, 20_000_000 // max(1, len(self.agents))))

    def distances(self, site: Site) -> list[float] | None:
        if site.lat is None or site.lon is None:
            return None
        return [
            great_circle_km(site.lat, site.lon, a.lat, a.lon) if a.lat is not None and a.lon is not None else math.inf
            for a in self.agents
        ]

    def _buckets(self, d: list[float]) -> list[float]:
        tie = self.tie_km
        return [math.floor(x / tie) if tie > 0 and x != math.inf else x for x in d]

    def bucket_array(self, site: Site) -> np.ndarray | None:
        """Every agent's bucket for this site's location; None when the site has none, or a
        bucket is too large for a float64 to hold exactly."""
        if site.lat is None or site.lon is None:
            return None
        key = (site.lat, site.lon)
        if key in self._bucket_cache:
            return self._bucket_cache[key]
        b = np.array(self._buckets(self.distances(site) or []), dtype=np.float64)
        arr = None if np.any(np.abs(b[np.isfinite(b)]) >= _EXACT) else b
        if len(self._bucket_cache) >= self._cache_max:
            self._bucket_cache.clear()
        self._bucket_cache[key] = arr
        return arr

    def _keys(self, site: Site) -> tuple[list[float] | None, list[tuple[float, int]]]:
        h = self.hash.scores(site)
        d = self.distances(site)
        if d is None:
            return None, [(0.0, -x) for x in h]
        return d, [(b, -x) for b, x in zip(self._buckets(d), h)]

    def rank(self, site: Site, k: int) -> list[int]:
        if k == 1 and self.agents and (site.lat is None or site.lon is None):
            return [int(self.hash.score_array(site).argmax())]  # the first of equal maxima
        return self.rank_among(site, k, self.everyone)

    def rank_among(self, site: Site, k: int, among: np.ndarray) -> list[int]:
        """`rank(site, len(agents))` restricted to the indices `among` (ascending), first k."""
        if k <= 0 or not len(among):
            return []
        h = self.hash.score_array(site)[among]
        if site.lat is None or site.lon is None:
            pos = top_candidates(h, k)
            order = np.lexsort((among[pos], ~h[pos]))
        else:
            b = self.bucket_array(site)
            if b is None:  # a tie_km so small the buckets overflow a float64's integers
                _, keys = self._keys(site)
                return sorted(among.tolist(), key=keys.__getitem__)[:k]
            bb = b[among]
            pos = top_candidates(-bb, k)  # the k nearest buckets, every agent in them
            order = np.lexsort((among[pos], ~h[pos], bb[pos]))
        return among[pos][order[:k]].tolist()

    def explain(self, site: Site) -> list[Scored]:
        d, keys = self._keys(site)
        order = sorted(range(len(keys)), key=keys.__getitem__)
        out = []
        for i in order:
            if d is None:
                out.append(Scored(i, -keys[i][1] / 2.0**64, "site location unknown: rendezvous hash"))
            elif d[i] == math.inf:
                out.append(Scored(i, -math.inf, "agent location unknown: after every located agent"))
            else:
                out.append(Scored(i, -d[i], f"{d[i]:.1f} km from the site ({self.agents[i].city or 'unnamed place'})"))
        return out


@register("geo")
class GeoPartitioner(Partitioner):
    Options = GeoOptions
    options: GeoOptions
    needs = frozenset({"ip", "geo"})

    def bind(self, agents: Sequence[AgentView]) -> Placement:
        return GeoPlacement(agents, self.options.tie_km)
