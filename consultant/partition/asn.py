"""ISP partitioning (seed 002): agents in the site's ISP first, then a fallback strategy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from consultant.partition.base import AgentView, Partitioner, Placement, Scored, Site, create, register
from consultant.settings import AsnOptions


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

    def rank(self, site: Site, k: int) -> list[int]:
        local = self.by_isp.get(site.isp) if site.isp else None
        if not local:
            return self.fallback.rank(site, k)
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
class AsnPartitioner:
    needs = frozenset({"ip", "asn"})

    def __init__(self, options: AsnOptions | None = None, *, fallback_options: Any = None, **context: Any):
        self.options = options or AsnOptions()
        self.fallback: Partitioner = create(self.options.fallback, fallback_options, **context)
        self.needs = frozenset({"ip", "asn"}) | self.fallback.needs

    def bind(self, agents: Sequence[AgentView]) -> Placement:
        return AsnPlacement(agents, self.fallback.bind(agents))
