"""Rendezvous (highest random weight) hashing, plain and capacity-weighted."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from consultant.partition.base import (
    AgentView, Partitioner, Placement, Scored, Site, hrw_array, key64, register, top_candidates,
)

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

    The scores are computed for all agents at once in NumPy (`hrw_array`: the same 64-bit
    integers as `hrw_scores`); only the few candidates for the first k places are sorted in
    Python, by the same key as ever, so the ranking is the pure implementation's exactly
    (tests/test_partition_vectorized.py holds it to that).
    """

    def __init__(self, agents: Sequence[AgentView], salt: str):
        self.agents = list(agents)
        self.salt = salt
        self.keys = [key64(a.agent_id, salt) for a in self.agents]
        self.key_array = np.array(self.keys, dtype=np.uint64)
        self.everyone = np.arange(len(self.agents))
        # Ties in a 64-bit score are practically impossible; the id breaks them anyway.
        self._tiebreak = [a.agent_id for a in self.agents]

    def score_array(self, site: Site) -> np.ndarray:
        return hrw_array(key64(site.host, self.salt), self.key_array)

    def scores(self, site: Site) -> list[int]:
        return self.score_array(site).tolist()

    def rank(self, site: Site, k: int) -> list[int]:
        s = self.score_array(site)
        if k == 1 and len(s):
            return [int(s.argmax())]  # the first of equal maxima, as max() over the indices
        return self._best(s, k, self.everyone)

    def rank_among(self, site: Site, k: int, among: np.ndarray) -> list[int]:
        """`rank(site, len(agents))` restricted to the indices `among` (ascending), first k."""
        return self._best(self.score_array(site), k, among)

    def _best(self, s: np.ndarray, k: int, among: np.ndarray) -> list[int]:
        """The k largest of s[among] by (score, agent id), best first."""
        if k <= 0 or not len(among):
            return []
        vals = s[among]
        pos = top_candidates(vals, k)
        cand, cv, tb = among[pos].tolist(), vals[pos].tolist(), self._tiebreak
        order = sorted(range(len(cand)), key=lambda j: (cv[j], tb[cand[j]]), reverse=True)[:k]
        return [cand[j] for j in order]

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


# A weighted score from NumPy's log may differ from math.log's by a few ulps: candidates within
# this relative margin of the k-th are rescored exactly, so the ranking is math.log's.
_LOG_MARGIN = 1e-9


def _weighted(x: int, w: float) -> float:
    # (x + 0.5) / 2^64 is strictly inside (0, 1), so the log is finite and negative.
    return -w / math.log((x + 0.5) / _TWO64)


class WeightedPlacement(HashPlacement):
    """Weighted rendezvous: score = -w / ln(u), u uniform in (0,1) from the HRW hash.

    An agent of weight w owns w / sum(w) of the hosts in expectation (Schindelhauer and
    Schomaker's weighted distributed hash tables); equal weights reduce to plain HRW.
    """

    def __init__(self, agents: Sequence[AgentView], salt: str, weights: Sequence[float]):
        super().__init__(agents, salt)
        self.weights = list(weights)
        self.weight_array = np.array(self.weights, dtype=np.float64)

    def wscores(self, site: Site) -> list[float]:
        return [_weighted(x, w) for x, w in zip(self.scores(site), self.weights)]

    def rank(self, site: Site, k: int) -> list[int]:
        return self.rank_among(site, k, self.everyone)

    def rank_among(self, site: Site, k: int, among: np.ndarray) -> list[int]:
        if k <= 0 or not len(among):
            return []
        raw = self.score_array(site)[among]
        with np.errstate(divide="ignore"):
            approx = -self.weight_array[among] / np.log((raw.astype(np.float64) + 0.5) / _TWO64)
        pos = top_candidates(approx, k, _LOG_MARGIN)
        cand, xs, tb, ws = among[pos].tolist(), raw[pos].tolist(), self._tiebreak, self.weights
        exact = [_weighted(x, ws[i]) for x, i in zip(xs, cand)]
        order = sorted(range(len(cand)), key=lambda j: (exact[j], tb[cand[j]]), reverse=True)[:k]
        return [cand[j] for j in order]

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
