"""ISP partitioning (seed 002): agents in the site's ISP first, then a fallback strategy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from consultant.partition.base import PARTITIONERS, AgentView, Partitioner, Placement, Scored, Site, create, register


@dataclass(frozen=True)
class AsnOptions:
    # ISP name -> the AS numbers that make it up, e.g. telecom = [4134, 4809].
    isps: dict[str, list[int]] = field(default_factory=dict)
    # How agents are ordered within the site's ISP, and all agents when none is in it: another
    # strategy, with its own options (its own config table).
    fallback: str = "hash"

    def __post_init__(self) -> None:
        if self.fallback == "asn":
            raise ValueError("asn.fallback cannot be 'asn'")
        if self.fallback not in PARTITIONERS:
            raise ValueError(f"asn.fallback: unknown strategy {self.fallback!r} (known: {', '.join(sorted(PARTITIONERS))})")
        seen: dict[int, str] = {}
        for isp, asns in self.isps.items():
            for a in asns:
                if a in seen:
                    raise ValueError(f"asn.isps: AS{a} is in both {seen[a]!r} and {isp!r}")
                seen[a] = isp


def isp_of(asn: int, isps: dict[str, list[int]]) -> str:
    """The configured ISP group of an ASN, or "AS<n>" when no group lists it ("" if unknown)."""
    if not asn:
        return ""
    for name, members in isps.items():
        if asn in members:
            return name
    return f"AS{asn}"


class AsnPlacement:
    """The fallback's ranking with the site's ISP's agents moved to the front (stable).

    Within the ISP the fallback's order holds (hash: spread evenly; geo: nearest first).
    With no agent in that ISP, or an unknown ASN, the fallback's ranking is the answer.
    """

    def __init__(self, agents: Sequence[AgentView], fallback: Placement):
        self.agents = list(agents)
        self.fallback = fallback
        self.by_isp: dict[str, set[int]] = {}
        for i, a in enumerate(self.agents):
            if a.isp:
                self.by_isp.setdefault(a.isp, set()).add(i)
        # A fallback that ranks a subset of the agents (hash, weighted, geo) answers the ISP's
        # agents, then the others, without ranking every agent: (ISP's, others') indices.
        self.rank_among = getattr(fallback, "rank_among", None)
        self.split = {
            isp: (np.array(sorted(local), dtype=np.intp), np.array([i for i in range(len(self.agents)) if i not in local], dtype=np.intp))
            for isp, local in self.by_isp.items()
        } if self.rank_among is not None else {}

    def rank(self, site: Site, k: int) -> list[int]:
        local = self.by_isp.get(site.isp) if site.isp else None
        if not local:
            return self.fallback.rank(site, k)
        if self.rank_among is not None:
            ours, others = self.split[site.isp]
            first: list[int] = self.rank_among(site, k, ours)
            return first + self.rank_among(site, k - len(first), others) if len(first) < k else first
        full = self.fallback.rank(site, len(self.agents))
        return ([i for i in full if i in local] + [i for i in full if i not in local])[:k]

    def explain(self, site: Site) -> list[Scored]:
        local = self.by_isp.get(site.isp, set()) if site.isp else set()
        fb = self.fallback.explain(site)
        first = [s for s in fb if s.index in local]
        rest = [s for s in fb if s.index not in local]
        out = [Scored(s.index, 1.0, f"same ISP {site.isp}; then {s.detail}") for s in first]
        for s in rest:
            if local:
                detail = f"other ISP ({self.agents[s.index].isp or 'unknown'}); then {s.detail}"
            else:
                detail = f"no agent in the site's ISP ({site.isp or 'unknown'}): fallback, {s.detail}"
            out.append(Scored(s.index, 0.0, detail))
        return out


@register("asn")
class AsnPartitioner(Partitioner):
    Options = AsnOptions
    options: AsnOptions

    def __init__(self, options: AsnOptions, fallback: Partitioner):
        """`fallback` is the strategy that `options.fallback` names, built with its options."""
        super().__init__(options)
        self.fallback = fallback
        self.needs = frozenset({"ip", "asn"}) | fallback.needs

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Partitioner:
        own = options.get(cls.name) or AsnOptions()
        # The fallback is built by name from the same options: its own table, not asn's.
        return cls(own, create(own.fallback, options))

    def bind(self, agents: Sequence[AgentView]) -> Placement:
        return AsnPlacement(agents, self.fallback.bind(agents))

    # Within an ISP and outside it the fallback ranks, so its weights are the agents' weights.
    def weight_of(self, agent: AgentView) -> float:
        return self.fallback.weight_of(agent)

    @property
    def reweight_threshold(self) -> float | None:
        return self.fallback.reweight_threshold

    @property
    def weights_from_model(self) -> bool:
        return self.fallback.weights_from_model

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "fallback": asdict(self.fallback.options)}
