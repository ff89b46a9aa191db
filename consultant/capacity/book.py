"""The consultant's record of what each agent can do (seed 003 §2.2): samples from heartbeats in,
a fitted runtime model out. The only writer of its samples; the service feeds it each heartbeat's
load report, and when an operator lists the agents it refits (at most every REFIT_SECONDS, in a
thread: the candidates include a small network, seconds of CPU) and shows the last fit.

In memory, per consultant replica: each replica hears its own agents' heartbeats, and a fit from a
few minutes of samples is cheap to redo after a restart (nothing an agent's ownership depends on
lives here).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from consultant.capacity import allocate as A
from consultant.capacity.model import Choice, Resources, Sample, select
from wancrawl import loadmodel

KEEP = 64          # samples per agent: about a minute of heartbeats at the default interval
MIN_SAMPLES = 4    # fewer, and no model is fitted (cross-validation needs folds)
MIN_AGENT_SAMPLES = 3  # an agent's rate comes from the model once it has this many samples of its own
PROBE_PAGES = 100  # predicted_rate is the model's pages/s for this many pages
REFIT_SECONDS = 30.0  # the fit (cross-validated, a small network among the candidates) at most this often
MIN_WEIGHT = 0.01     # a weighted-rendezvous weight must be > 0: an agent the allocator gives nothing gets this
MAX_STEP = 2.0        # a weight moves at most this factor per reweight (hosts moved per round, capped)


@dataclass(frozen=True)
class AgentCapacity:
    samples: int
    measured_rate: float    # pages/s over its samples
    predicted_rate: float   # the model's, for PROBE_PAGES pages (0: no model)


def resources_of(load: Mapping) -> Resources:
    r = load.get("resources") or {}
    return Resources(*(float(r.get(k, 0.0) or 0.0) for k in ("cores", "cpu_ghz", "memory_gb", "bandwidth_mbps", "disk_mbps")))


class CapacityBook:
    def __init__(self, keep: int = KEEP):
        self.samples: dict[str, collections.deque[Sample]] = {}
        self.keep = keep
        self._fit: Choice | None = None
        self._stale = True
        self._fitted_at = float("-inf")
        self.reported: dict[str, tuple[float, int]] = {}  # agent -> (the load report's rate, URLs queued)
        self._shares: dict[str, float] = {}
        self._shares_key: tuple[frozenset[str], float] = (frozenset(), float("-inf"))

    def record(self, agent_id: str, load: Mapping) -> bool:
        """A heartbeat's load report (as a dict, proto field names). True when it carried a sample."""
        queue = int(load.get("queue_length", 0) or 0)
        rate = loadmodel.model_rate(queue, float(load.get("work_area", 0) or 0), float(load.get("pages_per_second", 0) or 0),
                                    float(load.get("peak_pages_per_second", 0) or 0))
        self.reported[agent_id] = (rate, queue)
        seconds = float(load.get("interval_seconds", 0.0) or 0.0)
        pages = int(load.get("interval_pages", 0) or 0)
        if seconds <= 0:
            return False
        q = self.samples.setdefault(agent_id, collections.deque(maxlen=self.keep))
        q.append(Sample(agent_id, resources_of(load), pages, seconds))
        self._stale = True
        return True

    def forget(self, agent_id: str) -> None:
        if self.samples.pop(agent_id, None) is not None:
            self._stale = True

    def due(self, now: float) -> list[Sample] | None:
        """The samples to fit when a refit is due (new samples, and REFIT_SECONDS since the last
        one), else None. Taken here, on the caller's loop: the fit itself may run in a thread."""
        if not self._stale or now - self._fitted_at < REFIT_SECONDS:
            return None
        every = [s for q in self.samples.values() for s in q]
        self._stale, self._fitted_at = False, now
        return every

    def adopt(self, choice: Choice | None) -> None:
        self._fit = choice

    def fit(self) -> Choice | None:
        """The last model chosen by cross-validation (None before MIN_SAMPLES samples)."""
        return self._fit

    @staticmethod
    def fit_samples(samples: list[Sample]) -> Choice | None:
        return select(samples) if len(samples) >= MIN_SAMPLES else None

    def rate(self, agent_id: str, tasks: int) -> float | None:
        """The model's pages/s for the agent given `tasks` pages (PROBE_PAGES when it has none):
        tasks over the predicted runtime, with the resources of its last sample. None without a
        fitted model or with fewer than MIN_AGENT_SAMPLES samples of this agent: the balancer
        then takes the load report's rate (consultant/balance.py)."""
        q = self.samples.get(agent_id)
        choice = self.fit()
        if choice is None or q is None or len(q) < MIN_AGENT_SAMPLES:
            return None
        n = tasks if tasks > 0 else PROBE_PAGES
        t = float(choice.model.predict(agent_id, q[-1].resources, np.array(n)))
        return n / t if t > 0 and np.isfinite(t) else None

    def shares(self, alive: list[str], now: float) -> dict[str, float]:
        """The weighted strategy's weights with source = "model" (docs/balance.md): our allocator's
        counts (allocate.bisect) of the expected pages, the URLs the agents report queued (at
        least 100 per agent, so shares do not round to nothing on an idle cluster), at each
        agent's rate: the model's when it has MIN_AGENT_SAMPLES of the agent, its load report's
        otherwise; scaled to a mean of 1. Agents with neither are left out (the strategy's
        default weight). Recomputed when the alive set changes or REFIT_SECONDS passed."""
        key = frozenset(alive)
        if key == self._shares_key[0] and now - self._shares_key[1] < REFIT_SECONDS:
            return self._shares
        rates: dict[str, float] = {}
        queued = 0
        for a in sorted(key):
            reported, queue = self.reported.get(a, (0.0, 0))
            r = self.rate(a, queue) or reported
            if r > 0 and np.isfinite(r):
                rates[a] = r
                queued += queue
        out: dict[str, float] = {}
        if rates:
            n = max(queued, 100 * len(rates))
            counts = A.bisect(A.linear([1.0 / r for r in rates.values()]), len(rates), n).counts
            out = {a: max(c * len(rates) / n, MIN_WEIGHT) for a, c in zip(rates, counts)}
        self._shares, self._shares_key = out, (key, now)
        return out

    @staticmethod
    def step(current: float, target: float) -> float:
        """The weight to set this round: `target`, but at most MAX_STEP times (or 1/MAX_STEP of)
        the current one, so one reweight moves a bounded share of the hosts."""
        if current <= 0:
            return target
        return min(max(target, current / MAX_STEP), current * MAX_STEP)

    def agent(self, agent_id: str, resources: Resources) -> AgentCapacity:
        q = self.samples.get(agent_id, ())
        secs = sum(s.seconds for s in q)
        measured = sum(s.tasks for s in q) / secs if secs > 0 else 0.0
        choice = self.fit()
        predicted = 0.0
        if choice is not None:
            t = float(choice.model.predict(agent_id, resources, np.array(PROBE_PAGES)))
            predicted = PROBE_PAGES / t if t > 0 and np.isfinite(t) else 0.0
        return AgentCapacity(len(q), measured, predicted)
