"""The runtime model both balancers share (docs/balance.md): the consultant's planner
(consultant/balance.py) and the Kademlia mode's (agent/placement/kademlia/balance.py).

Seed 003's objective is the variance of the nodes' predicted runtimes; with a linear model a
node's runtime is t = Q / v (its queue over its rate), and evening out the largest runtimes is
what shortens a crawl. Seed 000's load level decides who is heavy (Q > W) and light (Q < W).
Pure arithmetic on numbers, so neither service depends on the other's types.
"""

from __future__ import annotations

import math


def model_rate(queue: int, work_area: float, rate_now: float, peak: float) -> float:
    """The rate the runtime model uses. A heavy node is busy, so its rate now is what it does
    with the hosts it has (fewer hosts left, each under its politeness delay: slower, though its
    peak was higher); a light node is idle for want of work, so its peak is what it could do."""
    return rate_now if queue > work_area and rate_now > 0 else peak


def worth(src_runtime: float, dst_runtime: float, min_gap: float, min_ratio: float) -> bool:
    """Hysteresis: the imbalance between two nodes is large enough to pay for a handover."""
    return src_runtime - dst_runtime >= min_gap and src_runtime >= min_ratio * dst_runtime


def peak_after(src_queue: int, src_rate: float, dst_queue: int, dst_rate: float, urls: int) -> float:
    """The larger of the two runtimes once a host with `urls` queued moved from src to dst."""
    return max((src_queue - urls) / src_rate, (dst_queue + urls) / dst_rate)


def improves(src_queue: int, src_rate: float, dst_queue: int, dst_rate: float, urls: int) -> bool:
    """The larger runtime of the pair goes down: the model's maximum never goes up."""
    return peak_after(src_queue, src_rate, dst_queue, dst_rate, urls) < max(src_queue / src_rate, dst_queue / dst_rate)


def split(queues: list[int], rates: list[float]) -> list[float | None]:
    """Each node's share of all the queued URLs at the runtime model's rates: Q_total * v_i / sum v,
    the split at which every node finishes at once. It is what seed 003's allocator returns for
    runtimes linear in the tasks (consultant/capacity/allocate.py gives the integer counts and
    handles any monotone model; a Kademlia node, with no consultant, splits its neighbourhood's
    queues this way). Nodes with no known rate get None; fewer than two known rates, all None."""
    known = [i for i, r in enumerate(rates) if r > 0 and math.isfinite(r)]
    total_rate = sum(rates[i] for i in known)
    if len(known) < 2 or total_rate <= 0:
        return [None] * len(rates)
    level = sum(queues[i] for i in known) / total_rate
    out: list[float | None] = [None] * len(rates)
    for i in known:
        out[i] = rates[i] * level
    return out


def nearer_targets(src_queue: int, src_target: float | None, dst_queue: int, dst_target: float | None, urls: int) -> bool:
    """With the allocator's targets (phase 2, docs/balance.md): the source is over its target,
    the destination under its own, and the move leaves the pair nearer them:
    |Q_s - u - n_s| + |Q_d + u - n_d| < |Q_s - n_s| + |Q_d - n_d|, which for over = Q_s - n_s > 0
    and under = n_d - Q_d > 0 is u < over + under (a whole host may overshoot a little).
    Without targets, True: phase 1's rules alone."""
    if src_target is None or dst_target is None:
        return True
    over, under = src_queue - src_target, dst_target - dst_queue
    return over > 0 and under > 0 and urls < over + under
