"""What an agent's runtime will be for n tasks (seed 003 §2.2), learnt from its own measurements.

Each agent reports its resources (cores, CPU frequency, memory, its measured fetch bandwidth, its
disk write rate) and, per interval, how many pages it fetched and how long that took: a Sample.
Two models fit the samples, behind one small interface (`fit`, `predict`):

* `MlpModel`: the paper's network: the 6 inputs [cores, GHz, memory, bandwidth, disk, n] scaled
  to [0, 1] by the training set's min and max (formula 1), one hidden layer of 6 tanh units
  (formula 2), one linear output (formula 3), trained on squared error (formula 4). The paper
  updates weights by plain back-propagation; scikit-learn's MLPRegressor with L-BFGS reaches the
  same kind of minimum on a few hundred samples without a learning rate to tune.
* `RateModel`: runtime = n / rate_agent, the rate the agent's own samples give (pages over
  seconds), shrunk toward the fleet's rate by `prior_seconds` of pseudo-observation, so an agent
  with one short sample is not trusted alone. An agent with no samples gets the fleet's rate,
  scaled by a linear fit of rate on its resources when enough agents report.

`select` picks by k-fold cross-validated error (mean absolute error in seconds, folds by sample);
the loser's error is kept beside it so `consultant explain --capacity` and the bench can show both.
The fit is pure: samples in, a model out (no I/O, no clock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

RESOURCES = ("cores", "cpu_ghz", "memory_gb", "bandwidth_mbps", "disk_mbps")


@dataclass(frozen=True)
class Resources:
    cores: float
    cpu_ghz: float
    memory_gb: float
    bandwidth_mbps: float
    disk_mbps: float

    def vector(self) -> list[float]:
        return [self.cores, self.cpu_ghz, self.memory_gb, self.bandwidth_mbps, self.disk_mbps]


@dataclass(frozen=True)
class Sample:
    """One interval of one agent: `tasks` pages fetched in `seconds`."""

    agent_id: str
    resources: Resources
    tasks: int
    seconds: float


class RuntimeModel(Protocol):
    name: str

    def fit(self, samples: Sequence[Sample]) -> RuntimeModel: ...

    def predict(self, agent_id: str, resources: Resources, tasks: np.ndarray) -> np.ndarray:
        """Predicted seconds for each count in `tasks` (any shape)."""
        ...


class _MinMax:
    """Formula 1: (x - min) / (max - min) per column; a constant column maps to 0."""

    def __init__(self, x: np.ndarray):
        self.lo = x.min(axis=0)
        span = x.max(axis=0) - self.lo
        self.span = np.where(span > 0, span, 1.0)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x - self.lo) / self.span


@dataclass
class MlpModel:
    hidden: int = 6
    seed: int = 0
    name: str = "mlp"
    _net: object = field(default=None, repr=False)
    _xs: _MinMax | None = field(default=None, repr=False)
    _ys: _MinMax | None = field(default=None, repr=False)

    def fit(self, samples: Sequence[Sample]) -> MlpModel:
        from sklearn.neural_network import MLPRegressor  # imported here: only the consultant's balancer needs it

        x = np.array([s.resources.vector() + [s.tasks] for s in samples], dtype=float)
        y = np.array([[s.seconds] for s in samples], dtype=float)
        self._xs, self._ys = _MinMax(x), _MinMax(y)
        net = MLPRegressor(hidden_layer_sizes=(self.hidden,), activation="tanh", solver="lbfgs",
                           max_iter=2000, random_state=self.seed, alpha=1e-4)
        net.fit(self._xs(x), self._ys(y).ravel())
        self._net = net
        return self

    def predict(self, agent_id: str, resources: Resources, tasks: np.ndarray) -> np.ndarray:
        assert self._net is not None and self._xs is not None and self._ys is not None, "fit first"
        n = np.asarray(tasks, dtype=float)
        flat = n.reshape(-1, 1)
        x = np.hstack([np.tile(resources.vector(), (len(flat), 1)), flat])
        y = self._net.predict(self._xs(x)) * self._ys.span[0] + self._ys.lo[0]  # type: ignore[attr-defined]
        return np.maximum(y, 0.0).reshape(n.shape)


@dataclass
class RateModel:
    # A fifth of a second of fleet-average evidence: it decides only for an agent with almost no
    # samples of its own; more biased every agent toward the fleet (cross-validated on clean
    # linear data: 0.2 s -> 0.05 s error, 2 s -> 0.28 s).
    prior_seconds: float = 0.2
    name: str = "rate"
    rates: dict[str, float] = field(default_factory=dict)
    fleet_rate: float = 0.0
    _coef: np.ndarray | None = field(default=None, repr=False)

    def fit(self, samples: Sequence[Sample]) -> RateModel:
        tasks: dict[str, float] = {}
        secs: dict[str, float] = {}
        res: dict[str, Resources] = {}
        for s in samples:
            tasks[s.agent_id] = tasks.get(s.agent_id, 0.0) + s.tasks
            secs[s.agent_id] = secs.get(s.agent_id, 0.0) + s.seconds
            res[s.agent_id] = s.resources
        total_s = sum(secs.values())
        self.fleet_rate = sum(tasks.values()) / total_s if total_s > 0 else 0.0
        k = self.prior_seconds
        self.rates = {a: (tasks[a] + k * self.fleet_rate) / (secs[a] + k) for a in tasks if secs[a] + k > 0}
        # rate ~ resources, for agents that have not reported yet (least squares, when over-determined)
        agents = sorted(self.rates)
        if len(agents) > len(RESOURCES) + 1:
            x = np.array([[1.0] + res[a].vector() for a in agents])
            self._coef = np.linalg.lstsq(x, np.array([self.rates[a] for a in agents]), rcond=None)[0]
        return self

    def rate(self, agent_id: str, resources: Resources) -> float:
        if agent_id in self.rates:
            return self.rates[agent_id]
        if self._coef is not None:
            guess = float(self._coef @ np.array([1.0] + resources.vector()))
            if guess > 0:
                return guess
        return self.fleet_rate

    def predict(self, agent_id: str, resources: Resources, tasks: np.ndarray) -> np.ndarray:
        r = self.rate(agent_id, resources)
        n = np.asarray(tasks, dtype=float)
        return np.where(n > 0, n / r, 0.0) if r > 0 else np.full(n.shape, np.inf)


def cv_error(make: Callable[[], RuntimeModel], samples: Sequence[Sample], folds: int = 5, seed: int = 0) -> float:
    """Mean absolute error (seconds) of `make()` over `folds` folds of the samples."""
    idx = np.random.default_rng(seed).permutation(len(samples))
    errs: list[float] = []
    for k in range(min(folds, len(samples))):
        test = idx[k::folds]
        train = [samples[i] for i in idx if i not in set(test.tolist())]
        if not train:
            continue
        model = make().fit(train)
        for i in test:
            s = samples[i]
            errs.append(abs(float(model.predict(s.agent_id, s.resources, np.array(s.tasks))) - s.seconds))
    return float(np.mean(errs)) if errs else float("inf")


@dataclass(frozen=True)
class Choice:
    model: RuntimeModel
    errors: dict[str, float]   # cross-validated MAE (s) of every candidate, by name


def select(samples: Sequence[Sample], folds: int = 5) -> Choice:
    """The candidate with the lower cross-validated error, refitted on every sample."""
    if not samples:
        raise ValueError("no samples to fit a runtime model on")
    errors = {"rate": cv_error(RateModel, samples, folds), "mlp": cv_error(MlpModel, samples, folds)}
    best = min(errors, key=lambda name: errors[name])
    model: RuntimeModel = (RateModel() if best == "rate" else MlpModel()).fit(samples)
    return Choice(model, errors)


def runtimes(model: RuntimeModel, agents: Sequence[tuple[str, Resources]]):
    """The allocator's runtime function (consultant/capacity/allocate.py) for these agents, in order."""
    def f(n: np.ndarray) -> np.ndarray:
        n = np.asarray(n)
        out = np.empty(n.shape, dtype=float)
        for i, (aid, res) in enumerate(agents):
            out[..., i] = model.predict(aid, res, n[..., i])
        return out
    return f
