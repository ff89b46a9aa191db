"""Geographic partitioning (seed 002): the agent nearest the site's IP by great-circle distance."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from consultant.partition.base import AgentView, Partitioner, Placement, Scored, Site, register
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


class GeoPlacement:
    """Agents ordered by distance to the site, in buckets of `tie_km`; within a bucket (e.g.
    agents of one city) by rendezvous hash, so co-located agents share the city's sites.

    Agents without coordinates come after every located agent; a site without coordinates
    (unknown IP, not in the DB) is ranked by hash alone. Each agent's key depends only on
    the site and that agent, so membership changes move only what they must.
    """

    def __init__(self, agents: Sequence[AgentView], tie_km: float):
        self.agents = list(agents)
        self.tie_km = tie_km
        self.hash = HashPlacement(agents, "")
        self._dist_cache: dict[tuple[float, float], list[float]] = {}

    def distances(self, site: Site) -> list[float] | None:
        if site.lat is None or site.lon is None:
            return None
        key = (site.lat, site.lon)
        d = self._dist_cache.get(key)
        if d is None:
            d = [
                great_circle_km(site.lat, site.lon, a.lat, a.lon) if a.lat is not None and a.lon is not None else math.inf
                for a in self.agents
            ]
            if len(self._dist_cache) > 100_000:
                self._dist_cache.clear()
            self._dist_cache[key] = d
        return d

    def _keys(self, site: Site) -> tuple[list[float] | None, list[tuple[float, int]]]:
        h = self.hash.scores(site)
        d = self.distances(site)
        if d is None:
            return None, [(0.0, -x) for x in h]
        tie = self.tie_km
        buckets = [math.floor(x / tie) if tie > 0 and x != math.inf else x for x in d]
        return d, [(b, -x) for b, x in zip(buckets, h)]

    def rank(self, site: Site, k: int) -> list[int]:
        _, keys = self._keys(site)
        return sorted(range(len(keys)), key=keys.__getitem__)[:k]

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
