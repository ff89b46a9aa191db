"""The live agents of one epoch bound to the strategy: host -> ranked agents, cached. No I/O."""

from __future__ import annotations

from dataclasses import dataclass

from consultant.membership import AgentRecord, Snapshot
from consultant.partition import AgentView, Partitioner, Scored, Site
from consultant.partition.asn import isp_of


@dataclass(frozen=True)
class Ranked:
    """Explain's view of one agent for one host."""

    record: AgentRecord
    rank: int
    score: float
    detail: str


def agent_view(rec: AgentRecord, isps: dict[str, list[int]]) -> AgentView:
    return AgentView(
        agent_id=rec.agent_id,
        address=rec.address,
        city=rec.city,
        lat=rec.lat,
        lon=rec.lon,
        asn=rec.asn,
        isp=isp_of(rec.asn, isps),
        weight=rec.weight,
    )


class Directory:
    """Answers for one epoch. Invariant: `cache` holds only answers computed at `epoch` with
    these agents; a new epoch means a new Directory, so no answer outlives its epoch."""

    def __init__(
        self,
        snapshot: Snapshot,
        partitioner: Partitioner,
        *,
        preference_length: int,
        isps: dict[str, list[int]] | None = None,
        cache_size: int = 1_000_000,
    ):
        self.epoch = snapshot.epoch
        self.snapshot = snapshot
        self.partitioner = partitioner
        self.records = snapshot.alive()
        self.isps = isps or {}
        self.views = [agent_view(r, self.isps) for r in self.records]
        self.index = {r.agent_id: i for i, r in enumerate(self.records)}
        self.placement = partitioner.bind(self.views) if self.records else None
        self.k = min(preference_length, len(self.records))
        # Overrides on dead or unknown agents are ignored until that agent is back.
        self.overrides = {h: self.index[a] for h, a in snapshot.overrides.items() if a in self.index}
        self.cache: dict[str, tuple[int, ...]] = {}
        self.cache_size = cache_size

    @property
    def empty(self) -> bool:
        return not self.records

    def needs(self) -> frozenset[str]:
        return self.partitioner.needs

    def site_isp(self, asn: int) -> str:
        return isp_of(asn, self.isps)

    def answer(self, site: Site) -> tuple[int, ...]:
        """Agent indices for the host, owner first; computed once per epoch."""
        hit = self.cache.get(site.host)
        if hit is not None:
            return hit
        assert self.placement is not None, "answer() on an empty directory"
        pinned = self.overrides.get(site.host)
        if pinned is None:
            ranked = tuple(self.placement.rank(site, self.k))
        else:
            rest = [i for i in self.placement.rank(site, self.k + 1) if i != pinned]
            ranked = tuple([pinned, *rest][: self.k])
        if len(self.cache) >= self.cache_size:
            # Drop the oldest entries (dicts keep insertion order): a bounded, cheap FIFO.
            for old in list(self.cache)[: self.cache_size // 8 or 1]:
                del self.cache[old]
        self.cache[site.host] = ranked
        return ranked

    def explain(self, site: Site) -> list[Ranked]:
        if self.placement is None:
            return []
        scored: list[Scored] = self.placement.explain(site)
        pinned = self.overrides.get(site.host)
        if pinned is not None:
            scored = [s for s in scored if s.index == pinned] + [s for s in scored if s.index != pinned]
            scored[0] = Scored(pinned, scored[0].score, f"override pins this host; strategy says: {scored[0].detail}")
        return [Ranked(self.records[s.index], rank, s.score, s.detail) for rank, s in enumerate(scored)]
