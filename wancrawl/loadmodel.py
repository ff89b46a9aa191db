"""The runtime model both balancers share (docs/balance.md): the consultant's planner
(consultant/balance.py) and the Kademlia mode's (agent/placement/kademlia/balance.py).

Seed 003's objective is the variance of the nodes' predicted runtimes; with a linear model a
node's runtime is t = Q / v (its queue over its rate), and evening out the largest runtimes is
what shortens a crawl. Seed 000's load level decides who is heavy (Q > W) and light (Q < W).
Pure arithmetic on numbers, so neither service depends on the other's types.
"""

from __future__ import annotations


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
