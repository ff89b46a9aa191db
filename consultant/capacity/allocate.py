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
  less time), fill every agent to a common level T: n_i(T), the most tasks agent i finishes by T,
  summed over the agents, is non-decreasing in T, so a bisection on T finds the smallest level
  with sum_i n_i(T) >= N. Filled to it, the makespan is max(T, max_i f_i(0)), the least possible.
  The bisection tries `fan` levels at once (one vectorised search), the first round's gathered
  around a straight-line estimate of T, until at most `layers` tasks of any agent lie between the
  bracket's ends; those tasks are then placed in the order they complete until N are placed
  (exact, no surplus to take back). Single-task moves that lower the variance then polish the
  answer for the paper's objective: every move's new variance from two calls of f (a move
  changes two runtimes only), disjoint moves batched in one round. Deterministic, exact for the
  makespan and a local optimum of the variance (tests/test_capacity.py holds both against brute
  force).

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
        return table[np.minimum(np.maximum(n, 0), n_total), cols]
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
    # Each step halves every bracket (rounding up), so this many steps close the widest; a closed
    # bracket (hi = lo + 1) stays as it is: its middle is lo, which finishes by t.
    for _ in range(max(0, int((hi - lo).max()) - 1).bit_length()):
        mid = (lo + hi) >> 1
        ok = f(np.maximum(mid, 0)) <= t
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return lo


def _fill(f: Runtimes, n_total: int, n_lo: np.ndarray, n_hi: np.ndarray) -> np.ndarray:
    """From counts `n_lo` (sum below N, or at least N: then `n_lo` as it is) towards `n_hi`
    (sum at least N): the tasks between them, each at the runtime its agent finishes it, the
    earliest first (ties: the lower count, then the lower agent), until N are placed. f is
    non-decreasing in n, so each agent's tasks come in order and the result is the allocation
    of the smallest makespan between the two. One call of f on (max(n_hi - n_lo), M) counts."""
    need = n_total - int(n_lo.sum())
    if need <= 0:
        return n_lo
    depth = int((n_hi - n_lo).max())
    if depth <= 0:
        return n_hi
    k = n_lo[None, :] + np.arange(1, depth + 1)[:, None]            # (depth, M): the candidate counts
    t = np.where(k <= n_hi[None, :], f(np.minimum(k, n_hi[None, :])), np.inf).ravel()
    chosen = np.argsort(t, kind="stable")[:need]                   # row-major: an agent's tasks in order
    return n_lo + np.bincount(chosen % len(n_lo), minlength=len(n_lo))


def _guess(f: Runtimes, f0: np.ndarray, f_all: np.ndarray, n_total: int, lo: float, hi: float, fan: int) -> np.ndarray:
    """The first round's trial times, sorted, in [lo, hi] and starting at lo: half spread evenly
    over the bracket (whatever the model), half within 20% of T*'s straight-line estimate: with
    f_i(n) ~ f_i(0) + n s_i, every agent that starts before T finishes (T - f_i(0)) / s_i tasks
    by T, so T = (N + sum f_i(0) / s_i) / sum 1 / s_i over those agents; s_i from the chord to N,
    then again from the chord to the count that estimate gives (closer to where T* is)."""
    half = max(fan // 2, 1)
    even = np.linspace(lo, hi, half + 2)[:-1]
    if n_total <= 0:
        return even

    def level(slope: np.ndarray) -> float:
        inv = np.where(slope > 0, 1.0 / np.where(slope > 0, slope, 1.0), 0.0)
        active = np.ones(len(f0), dtype=bool)
        t = hi
        for _ in range(3):
            w = np.where(active, inv, 0.0)
            if w.sum() <= 0:
                return hi
            t = float((n_total + (f0 * w).sum()) / w.sum())
            active = f0 < t
        return t

    t = level((f_all - f0) / n_total)
    est = np.clip(np.floor((t - f0) * np.where(f_all > f0, n_total / np.maximum(f_all - f0, 1e-300), 0.0)), 1, n_total).astype(np.int64)
    t = level((f(est) - f0) / est)
    near = t * (1.0 + np.linspace(-0.2, 0.2, half))
    return np.unique(np.clip(np.concatenate([even, near]), lo, hi))


def bisect(f: Runtimes, m: int, n_total: int, *, polish: int | None = None, fan: int = 16,
           layers: int = 64) -> Allocation:
    """Ours (see the module docstring). Each round tries `fan` finishing times across the
    bracket at once (one vectorised search), so the bracket shrinks `fan` + 1 times per round,
    until at most `layers` tasks of any agent lie between its ends (`_fill` places those).
    `polish`: the most single-task moves tried for the variance once the makespan is optimal
    (default 4 * M + 16)."""
    start = time.process_time()
    if m == 0:
        return Allocation((), (), 0.0, "bisect")
    # The smallest level T with sum_i max(n_i(T), 0) >= N lies in [min_i f_i(0), max_i f_i(N)]
    # (everyone at N is feasible). Filled to it, the makespan is max(T, max_i f_i(0)), the least
    # possible (no agent finishes before f_i(0)); starting below max f_i(0) matters for the
    # variance: agents that start fast are filled to a common level, not each to the slowest
    # starter's.
    f0, f_all = f(np.zeros(m, dtype=np.int64)), f(np.full(m, n_total, dtype=np.int64))
    lo, hi = float(f0.min()), float(f_all.max())
    n_lo, n = np.full(m, -1), np.full(m, n_total)   # n_i(lo) >= -1 (a bound); n_i(hi) = N exactly
    # Narrow the bracket until at most `layers` tasks per agent lie between its ends (or it is
    # down to rounding), then finish exactly: the tasks between the ends, in the order they
    # complete, are added until N are placed; the last one's finishing time is T*. The first
    # round's trial times gather around a straight-line estimate of T* (`_guess`): a runtime
    # model is close to linear, and then one or two rounds do.
    first = True
    while first or ((n - n_lo).max() > layers and hi - lo > 1e-9 * max(1.0, hi)):
        ts = _guess(f, f0, f_all, n_total, lo, hi, fan) if first else np.linspace(lo, hi, fan + 2)[1:-1]
        first = False
        counts = _most_by(f, n_total, ts[:, None], n_lo, n + 1)
        ok = counts.clip(0).sum(axis=1) >= n_total
        j = int(np.argmax(ok)) if ok.any() else len(ts)
        if j < len(ts):
            hi, n = float(ts[j]), counts[j]
            if hi <= lo:                       # N fit by the earliest start: the counts there are exact
                n_lo = n
        if j > 0:
            lo, n_lo = float(ts[j - 1]), counts[j - 1]
    n = _fill(f, n_total, n_lo.clip(0), n.clip(0)) if (n - n_lo).max() <= layers else n
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
    makespan-optimal allocations) or after `rounds` rounds. A round moves one task along each of
    several disjoint pairs at once when that lowers the variance more than the best single move.

    One move i -> j changes two runtimes only, so every pair's new variance comes from the sums
    S = sum t and Q = sum t^2: var' = Q'/M - (S'/M)^2, with t_i' = f_i(n_i - 1) and
    t_j' = f_j(n_j + 1). A round costs two calls of f on M counts and O(M^2) arithmetic, not a
    call of f on every one of the M(M - 1) moved allocations."""
    m = len(n)
    if m < 2:
        return n
    n = n.copy()
    off_diagonal = ~np.eye(m, dtype=bool)
    for _ in range(rounds):
        t = f(n)
        top, c = float(t.max()), float(t.mean())    # centred on the mean: no cancellation in Q/M - (S/M)^2
        down = np.where(n > 0, f(np.maximum(n - 1, 0)), np.nan) - c   # t_i - c once a task leaves i
        up = f(n + 1) - c                                               # t_j - c once a task joins j
        legal = off_diagonal & (n > 0)[:, None] & (up + c <= top + 1e-12)[None, :]
        t = t - c
        s, q = float(t.sum()), float((t * t).sum())
        ds = (down - t)[:, None] + (up - t)[None, :]                    # S' - S for the move i -> j
        dq = (down * down - t * t)[:, None] + (up * up - t * t)[None, :]
        now = q / m - (s / m) ** 2
        v = np.where(legal, (q + dq) / m - ((s + ds) / m) ** 2, np.inf)
        v = np.where(np.isfinite(v), v, np.inf)
        flat = v.ravel()
        top_k = min(flat.size, 4 * m)
        cand = np.argpartition(flat, top_k - 1)[:top_k] if top_k < flat.size else np.arange(flat.size)
        cand = cand[np.argsort(flat[cand], kind="stable")]
        cand = cand[flat[cand] < now - 1e-12]
        if not len(cand):
            return n
        # Disjoint moves (no agent in two of them) add up exactly in S and Q: take the best
        # move, then each next best whose agents are still free, and keep the batch if its
        # variance beats the best single move's.
        busy: set[int] = set()
        batch: list[tuple[int, int]] = []
        for k in cand.tolist():
            i, j = divmod(k, m)
            if i not in busy and j not in busy:
                batch.append((i, j))
                busy.update((i, j))
        src = np.array([i for i, _ in batch])
        dst = np.array([j for _, j in batch])
        v_batch = (q + dq[src, dst].sum()) / m - ((s + ds[src, dst].sum()) / m) ** 2
        if v_batch > flat[cand[0]]:
            src, dst = src[:1], dst[:1]
        n[src] -= 1
        n[dst] += 1
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
