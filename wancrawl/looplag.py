"""Event-loop lag: how late a short sleep wakes up, sampled every `interval` seconds.

A callback that holds the loop (a pure-Python rehash, a big SQLite merge, a long parse) delays
every other task by as much; a sleep that should take `interval` and takes longer measures it.
Two figures per sample: the wall-clock lag, and the busy lag, the loop thread's CPU time during
the sample beyond `interval`. On a shared machine a process that is not scheduled is late
without holding its loop; only the busy lag says the loop itself was held (an fsync that blocks
it shows in the wall lag alone).
The services run it when asked (the agent's `loop_lag_interval`), so bench/scale.py can read the
longest stall of a long crawl from Status without a profiler."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class LoopLag:
    """Samples the running loop's lag. Invariants: `longest` and `busiest` are the largest wall
    and busy lags sampled since start; `counters["loop_stalls"]` counts the samples whose busy
    lag exceeded `stall`, `counters["loop_late"]` those whose wall lag did."""

    def __init__(self, interval: float = 0.01, *, stall: float = 0.1, clock: Callable[[], float] = time.perf_counter,
                 cpu: Callable[[], float] = time.thread_time):
        if interval <= 0:
            raise ValueError(f"loop lag interval must be > 0, got {interval}")
        self.interval = interval
        self.stall = stall
        self.clock = clock
        self.cpu = cpu
        self.longest = self.busiest = 0.0
        self.counters: dict[str, float] = {"loop_stalls": 0, "loop_late": 0}

    def record(self, lag: float, busy: float) -> None:
        self.longest = max(self.longest, lag)
        self.busiest = max(self.busiest, busy)
        if busy > self.stall:
            self.counters["loop_stalls"] += 1
        if lag > self.stall:
            self.counters["loop_late"] += 1

    def gauges(self) -> dict[str, float]:
        return {"loop_lag_max": self.longest, "loop_busy_max": self.busiest}

    async def run(self) -> None:
        clock, cpu, interval = self.clock, self.cpu, self.interval
        while True:
            t, c = clock(), cpu()
            await asyncio.sleep(interval)
            self.record(max(0.0, clock() - t - interval), max(0.0, cpu() - c - interval))
