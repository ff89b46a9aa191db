"""Rendezvous (highest random weight) hashing, plain and capacity-weighted."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from consultant.partition.base import AgentView, Partitioner, Placement, Scored, Site, hrw_scores, key64, register

_TWO64 = float(1 << 64)


@dataclass(frozen=True)
class HashOptions:
    salt: str = ""  # change to reshuffle every host (a new hash universe)


@dataclass(frozen=True)
class WeightedOptions:
    # "config": weights below; "heartbeat": each agent's reported capacity; "model": each
    # agent's share of the expected pages by the capacity model and our allocator (seed 003,
    # docs/balance.md), computed by the consultant and handed in as the agent's weight.
    source: str = "config"
    weights: dict[str, float] = field(default_factory=dict)
    default_weight: float = 1.0
    # With source = "heartbeat" or "model", a weight changes (and the epoch goes up) only when
    # the new one differs by more than this fraction: no epoch churn from noise.
    reweight_threshold: float = 0.2

    def __post_init__(self) -> None:
        if self.source not in ("config", "heartbeat", "model"):
            raise ValueError(f"weighted.source must be 'config', 'heartbeat' or 'model', not {self.source!r}")
        if self.default_weight <= 0:
            raise ValueError("weighted.default_weight must be > 0")
        for k, w in self.weights.items():
            if w <= 0:
                raise ValueError(f"weighted.weights.{k} must be > 0")


class HashPlacement:
    """Owner = the agent with the highest mix(host_key ^ agent_key); backups follow in order.

    Removing an agent changes no other agent's score, so only its hosts move, each to its
    first backup; a new agent takes about 1/(N+1) of the hosts.
    """

    def __init__(self, agents: Sequence[AgentView], salt: str):
        self.agents = list(agents)
        self.salt = salt
        self.keys = [key64(a.agent_id, salt) for a in self.agents]
        # Ties in a 64-bit score are practically impossible; the id breaks them anyway.
        self._tiebreak = [a.agent_id for a in self.agents]

    def scores(self, site: Site) -> list[int]:
        return hrw_scores(key64(site.host, self.salt), self.keys)

    def rank(self, site: Site, k: int) -> list[int]:
        s = self.scores(site)
        if k == 1 and s:
            return [max(range(len(s)), key=s.__getitem__)]
        return heapq.nlargest(k, range(len(s)), key=lambda i: (s[i], self._tiebreak[i]))

    def explain(self, site: Site) -> list[Scored]:
        s = self.scores(site)
        order = self.rank(site, len(s))
        return [Scored(i, s[i] / _TWO64, f"rendezvous weight {s[i] / _TWO64:.6f}") for i in order]


@register("hash")
class HashPartitioner(Partitioner):
    Options = HashOptions
    options: HashOptions

    def bind(self, agents: Sequence[AgentView]) -> Placement:
        return HashPlacement(agents, self.options.salt)


class WeightedPlacement(HashPlacement):
    """Weighted rendezvous: score = -w / ln(u), u uniform in (0,1) from the HRW hash.

    An agent of weight w owns w / sum(w) of the hosts in expectation (Schindelhauer and
    Schomaker's weighted distributed hash tables); equal weights reduce to plain HRW.
    """

    def __init__(self, agents: Sequence[AgentView], salt: str, weights: Sequence[float]):
        super().__init__(agents, salt)
        self.weights = list(weights)

    def wscores(self, site: Site) -> list[float]:
        raw = self.scores(site)
        # (x + 0.5) / 2^64 is strictly inside (0, 1), so the log is finite and negative.
        return [-w / math.log((x + 0.5) / _TWO64) for x, w in zip(raw, self.weights)]

    def rank(self, site: Site, k: int) -> list[int]:
        s = self.wscores(site)
        return heapq.nlargest(k, range(len(s)), key=lambda i: (s[i], self._tiebreak[i]))

    def explain(self, site: Site) -> list[Scored]:
        s = self.wscores(site)
        order = self.rank(site, len(s))
        return [Scored(i, s[i], f"weight {self.weights[i]:g}, weighted score {s[i]:.4f}") for i in order]


@register("weighted")
class WeightedPartitioner(Partitioner):
    Options = WeightedOptions
    options: WeightedOptions

    def weight_of(self, agent: AgentView) -> float:
        if self.options.source == "config":
            return self.options.weights.get(agent.agent_id, self.options.default_weight)
        return agent.weight if agent.weight > 0 else self.options.default_weight

    @property
    def reweight_threshold(self) -> float | None:
        return self.options.reweight_threshold if self.options.source != "config" else None

    @property
    def weights_from_model(self) -> bool:
        return self.options.source == "model"

    def bind(self, agents: Sequence[AgentView]) -> Placement:
        return WeightedPlacement(agents, "", [self.weight_of(a) for a in agents])
