"""How many tasks each agent gets (seed 003 §2.3-2.4), pure: predicted runtimes in, counts out.

The problem, as the paper states it: M agents, N tasks; agent i given n_i tasks runs for
f_i(n_i) seconds (the runtime model, consultant/capacity/model.py). Choose integers n_i >= 0 with
sum n_i = N that minimise the variance of the f_i(n_i) (its formula 7-10). What a crawl waits for
is the largest of them, the makespan; both are printed by the benches.

Two solvers behind one signature, `(runtimes, n_total) -> Allocation`:

* `pso`: the paper's particle swarm (30 particles, inertia 0.8, c1 = c2 = 2, positions moved by
  the ceiling of the velocity so they stay integers, the constraints as the penalty terms of its
  formula 11). Kept as the reference the paper measured; it is stochastic (a seeded generator)
  and its answer may miss sum n = N by a few tasks when the penalties do not pull it all the way.
* `bisect`: ours. When every f_i is non-decreasing in n (a runtime model is: more tasks never take
  less time), the agents can all finish by T exactly when sum_i n_i(T) >= N, where n_i(T) is
  the most tasks agent i finishes by T. That sum is non-decreasing in T, so a bisection on T
  finds the smallest feasible makespan, T*, in O(M log N log(1/eps)) evaluations; the surplus
  sum n_i(T*) - N is taken from the agents that finish last. Then single-task moves that lower
  the variance polish the answer for the paper's objective (each move is from the agent whose
  runtime is largest, or to the one whose runtime is smallest). Deterministic and exact for the
  makespan (tests/test_capacity.py holds it against brute force).

A runtime function takes an integer array of shape (..., M) and returns runtimes of that shape;
`tabulate` turns any model into one that is monotone and cheap to call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Runtimes = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Allocation:
    counts: tuple[int, ...]
    runtimes: tuple[float, ...]
    seconds: float          # CPU-clock time the solver took
    solver: str

    @property
    def makespan(self) -> float:
        return max(self.runtimes) if self.runtimes else 0.0

    @property
    def variance(self) -> float:
        return float(np.var(self.runtimes)) if self.runtimes else 0.0

    def feasible(self, n_total: int) -> bool:
        return sum(self.counts) == n_total and min(self.counts, default=0) >= 0


def variance(t: np.ndarray) -> np.ndarray:
    """The paper's objective (formula 7): the population variance over the last axis."""
    return np.var(t, axis=-1)


def tabulate(f: Runtimes, m: int, n_total: int) -> Runtimes:
    """A table of f over 0..n_total for each agent, made non-decreasing in n (a learnt model can
    wiggle; a runtime cannot go down with more work, and `bisect` relies on it). Counts outside
    0..n_total are clipped (the swarm visits negative positions; its penalty charges for them)."""
    grid = np.arange(n_total + 1)
    table = f(np.repeat(grid[:, None], m, axis=1))          # (N+1, M)
    table = np.maximum.accumulate(np.asarray(table, dtype=float), axis=0)
    cols = np.arange(m)

    def look(n: np.ndarray) -> np.ndarray:
        return table[np.clip(n, 0, n_total), cols]
    return look


def linear(seconds_per_task: list[float] | np.ndarray, overhead: list[float] | np.ndarray | None = None) -> Runtimes:
    """f_i(n) = overhead_i + n * seconds_per_task_i: the per-agent rate model's shape."""
    a = np.asarray(seconds_per_task, dtype=float)
    b = np.zeros_like(a) if overhead is None else np.asarray(overhead, dtype=float)

    def f(n: np.ndarray) -> np.ndarray:
        return b + np.maximum(n, 0) * a
    return f


# -- ours: bisection on the common finishing time ----------------------------------------------------

def _most_by(f: Runtimes, n_total: int, t: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """n_i(t) for each t of `t` (shape (K, 1)) and agent i: the most tasks (0..n_total) agent i
    finishes by t, -1 if even 0 tasks take longer; shape (K, M). A vectorised binary search over
    n (f non-decreasing in n) between `lo`, counts known to finish by every t, and `hi`, counts
    known not to (-1 and n_total + 1 at first; n_i(t) is monotone in t, so the counts at a smaller
    and a larger t bound the search)."""
    lo = np.broadcast_to(lo, (len(t), lo.shape[-1])).copy()   # invariant: f(lo) <= t (or lo = -1)
    hi = np.broadcast_to(hi, lo.shape).copy()                  # invariant: f(hi) > t (or hi = n_total + 1)
    while True:
        active = hi - lo > 1
        if not active.any():
            return lo
        mid = (lo + hi) >> 1
        ok = f(np.minimum(np.maximum(mid, 0), n_total)) <= t
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid, hi)


def bisect(f: Runtimes, m: int, n_total: int, *, polish: int | None = None, fan: int = 32) -> Allocation:
    """Ours (see the module docstring). Each round tries `fan` finishing times across the
    bracket at once (one vectorised search), so the bracket shrinks `fan` + 1 times per round.
    `polish`: the most single-task moves tried for the variance once the makespan is optimal
    (default 4 * M + 16)."""
    start = time.process_time()
    if m == 0:
        return Allocation((), (), 0.0, "bisect")
    # the smallest T with sum n_i(T) >= N lies in [max f_i(0), max_i f_i(N)] (everyone at N is feasible)
    lo = float(f(np.zeros(m, dtype=np.int64)).max())
    hi = float(f(np.full(m, n_total, dtype=np.int64)).max())
    ends = _most_by(f, n_total, np.array([[lo], [hi]]), np.full(m, -1), np.full(m, n_total + 1))
    n_lo, n = ends[0], ends[1]
    if n_lo.clip(0).sum() >= n_total:
        hi, n = lo, n_lo
    # done when no runtime value lies between lo and hi (the counts at both ends agree), or the
    # bracket is down to rounding
    while not (n_lo == n).all() and hi - lo > 1e-9 * max(1.0, hi):
        ts = np.linspace(lo, hi, fan + 2)[1:-1]
        counts = _most_by(f, n_total, ts[:, None], n_lo, n + 1)
        ok = counts.clip(0).sum(axis=1) >= n_total
        j = int(np.argmax(ok)) if ok.any() else fan
        if j < fan:
            hi, n = float(ts[j]), counts[j]
        if j > 0:
            lo, n_lo = float(ts[j - 1]), counts[j - 1]
    n = n.clip(0)
    surplus = int(n.sum()) - n_total
    if surplus > 4 * m:  # flat runtimes give many agents all N: cut in proportion first (cheap)
        n = n - (n * surplus) // max(int(n.sum()), 1)
        surplus = int(n.sum()) - n_total
    while surplus > 0:  # then one at a time from whoever finishes last (never raises the makespan)
        t = np.where(n > 0, f(n), -np.inf)
        n[int(np.argmax(t))] -= 1
        surplus -= 1
    n = _polish(f, n, polish if polish is not None else 4 * m + 16)
    t = f(n)
    return Allocation(tuple(int(x) for x in n), tuple(float(x) for x in t), time.process_time() - start, "bisect")


def _polish(f: Runtimes, n: np.ndarray, rounds: int) -> np.ndarray:
    """Single-task moves, each time the one that lowers the variance most without raising the
    makespan; stops when none helps (a local optimum of the paper's objective among the
    makespan-optimal allocations). Moves out of the slowest agent or into the fastest are tried
    first (2(M - 1) of them, where nearly every gain is); all M(M - 1) pairs only when those fail."""
    m = len(n)
    if m < 2:
        return n

    def table(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        mv = np.zeros((len(src), m), dtype=np.int64)
        mv[np.arange(len(src)), src] -= 1
        mv[np.arange(len(src)), dst] += 1
        return mv
    every = table(*np.nonzero(~np.eye(m, dtype=bool)))
    others = np.arange(m)
    for _ in range(rounds):
        t = f(n)
        top, bottom = int(np.argmax(t)), int(np.argmin(t))
        near = table(np.concatenate([np.full(m, top), others]), np.concatenate([others, np.full(m, bottom)]))
        for moves in (near, every):
            trial = n + moves
            legal = (trial >= 0).all(axis=1) & (moves != 0).any(axis=1)
            tt = f(np.maximum(trial, 0))
            v = np.where(legal & (tt.max(axis=1) <= t.max() + 1e-12), np.var(tt, axis=1), np.inf)
            k = int(np.argmin(v))
            if v[k] < float(np.var(t)) - 1e-12:
                n = trial[k]
                break
        else:
            return n
    return n


# -- the paper's particle swarm ------------------------------------------------------------------------

def pso(f: Runtimes, m: int, n_total: int, *, particles: int = 30, iterations: int = 1000, inertia: float = 0.8,
        c1: float = 2.0, c2: float = 2.0, seed: int = 0, patience: int = 200) -> Allocation:
    """Seed 003's solver as written: positions start at floor(N/M), velocities in [0, 1]; the
    fitness is the variance plus (sum n - N)^2 plus (sum(|n| - n))^2 (formula 11); a particle
    moves by the ceiling of its velocity (formula 13). Stops after `iterations`, or `patience`
    iterations without a better global best (the paper gives no stopping rule; 200 is where, on
    its own case, longer runs stopped finding better answers). The best particle seen is
    returned as found."""
    start = time.process_time()
    rng = np.random.default_rng(seed)
    x = np.full((particles, m), n_total // max(m, 1), dtype=np.int64)
    v = rng.random((particles, m))

    def fitness(pos: np.ndarray) -> np.ndarray:
        t = f(np.clip(pos, 0, None))
        g = (pos.sum(axis=1) - n_total).astype(float) ** 2
        h = (np.abs(pos) - pos).sum(axis=1).astype(float) ** 2
        return variance(t) + g + h

    fit = fitness(x)
    pbest, pfit = x.copy(), fit.copy()
    gi = int(np.argmin(pfit))
    gbest, gfit = pbest[gi].copy(), float(pfit[gi])
    still = 0
    for _ in range(iterations):
        r1, r2 = rng.random((particles, m)), rng.random((particles, m))
        v = inertia * v + c1 * r1 * (pbest - x) + c2 * r2 * (gbest - x)
        x = x + np.ceil(v).astype(np.int64)
        fit = fitness(x)
        better = fit < pfit
        pbest[better], pfit[better] = x[better], fit[better]
        gi = int(np.argmin(pfit))
        if pfit[gi] < gfit - 1e-12:
            gbest, gfit, still = pbest[gi].copy(), float(pfit[gi]), 0
        else:
            still += 1
            if still >= patience:
                break
    t = f(np.clip(gbest, 0, None))
    return Allocation(tuple(int(c) for c in gbest), tuple(float(c) for c in t), time.process_time() - start, "pso")


def equal(f: Runtimes, m: int, n_total: int) -> Allocation:
    """The paper's baseline: the same count for everyone (the remainder to the first agents), as a
    hash partition gives on average."""
    n = np.full(m, n_total // max(m, 1))
    n[: n_total - int(n.sum())] += 1
    t = f(n)
    return Allocation(tuple(int(x) for x in n), tuple(float(x) for x in t), 0.0, "equal")


SOLVERS: dict[str, Callable[..., Allocation]] = {"bisect": bisect, "pso": pso, "equal": equal}
