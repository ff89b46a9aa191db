"""Event-loop lag: how late a short sleep wakes up, sampled every `interval` seconds.

A callback that holds the loop (a pure-Python rehash, a big SQLite merge, a long parse) delays
every other task by as much; a sleep that should take `interval` and takes longer measures it.
Two figures per sample: the wall-clock lag, and the busy lag, the loop thread's CPU time during
the sample beyond `interval`. On a shared machine a process that is not scheduled is late
without holding its loop; only the busy lag says the loop itself was held (an fsync that blocks
it shows in the wall lag alone).
The services run it when asked (the agent's `loop_lag_interval`), so bench/scale.py can read the
longest stall of a long crawl from Status without a profiler.
While it runs it also times the cyclic collector's passes (gc.callbacks): a full collection walks
every tracked object of the process on the loop's thread, so its pause is the one stall whose
size grows with the crawl's live objects; the longest pass and the longest full one are gauges
beside the lags, so a busy-lag sample can be told apart from a collection (passes are timed in
the loop thread's CPU, like the busy lag).
And a watchdog thread reads the loop thread's CPU clock while a sample runs: a sample that has
held the loop for half of `stall` gets the loop thread's stack taken then, mid-stall, and a
sample whose busy lag ends over `stall` is logged with that stack (a long run's one 104 ms
sample in a million pages says nothing without where the loop was)."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from wancrawl.stats import Counters

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoopLagCounters(Counters):
    """Lag samples over the stall bound (busy, wall clock) and full collections timed (the metric
    names: agent/metrics.py HELP)."""
    loop_stalls: int = 0
    loop_late: int = 0
    loop_gc_full: int = 0


class LoopLag:
    """Samples the running loop's lag. Invariants: `longest` and `busiest` are the largest wall
    and busy lags sampled since start; `stats.loop_stalls` counts the samples whose busy
    lag exceeded `stall`, `stats.loop_late` those whose wall lag did; `gc_longest` and
    `gc_full_longest` are the longest collector pass and full (generation 2) pass timed while run()
    runs, `stats.loop_gc_full` counts the full passes. `_mark` = (sample number, the loop
    thread's CPU clock at its start) is written by the loop only; `_taken` = (sample number, stack)
    by the watchdog only (each a tuple swapped whole, so either side reads a consistent pair)."""

    def __init__(self, interval: float = 0.01, *, stall: float = 0.1, clock: Callable[[], float] = time.perf_counter,
                 cpu: Callable[[], float] = time.thread_time, gc_clock: Callable[[], float] = time.thread_time,
                 stacks: bool = True):
        if interval <= 0:
            raise ValueError(f"loop lag interval must be > 0, got {interval}")
        self.interval = interval
        self.stall = stall
        self.clock = clock
        self.cpu = cpu
        self.gc_clock = gc_clock  # its own: a collection inside a sample must not take the sample's readings
        self.longest = self.busiest = 0.0
        self.gc_longest = self.gc_full_longest = 0.0
        self.stats = LoopLagCounters()
        self._gc_start = 0.0
        self.stacks = stacks and hasattr(time, "pthread_getcpuclockid")
        self._mark: tuple[int, float] = (0, 0.0)
        self._taken: tuple[int, str] | None = None

    def record(self, lag: float, busy: float) -> None:
        self.longest = max(self.longest, lag)
        self.busiest = max(self.busiest, busy)
        if busy > self.stall:
            self.stats.loop_stalls += 1
        if lag > self.stall:
            self.stats.loop_late += 1

    def collected(self, phase: str, info: dict[str, int]) -> None:
        """gc.callbacks' signature: a pass starts or stops (passes do not nest)."""
        if phase == "start":
            self._gc_start = self.gc_clock()
            return
        took = self.gc_clock() - self._gc_start
        self.gc_longest = max(self.gc_longest, took)
        if info.get("generation") == 2:
            self.gc_full_longest = max(self.gc_full_longest, took)
            self.stats.loop_gc_full += 1

    def gauges(self) -> dict[str, float]:
        return {"loop_lag_max": self.longest, "loop_busy_max": self.busiest,
                "loop_gc_max": self.gc_longest, "loop_gc_full_max": self.gc_full_longest}

    def _watch(self, tid: int, stop: threading.Event) -> None:
        # The watchdog thread: every interval, the loop thread's CPU since the current sample began;
        # past half of `stall` (plus the sample's own interval), its stack, once per sample.
        clk = time.pthread_getcpuclockid(tid)
        limit = self.stall / 2 + self.interval
        while not stop.wait(self.interval):
            seq, c0 = self._mark
            if (self._taken is None or self._taken[0] != seq) and time.clock_gettime(clk) - c0 > limit:
                frame = sys._current_frames().get(tid)
                if frame is not None:
                    self._taken = (seq, "".join(traceback.format_stack(frame, limit=16)))

    async def run(self) -> None:
        clock, cpu, interval = self.clock, self.cpu, self.interval
        gc.callbacks.append(self.collected)
        stop = threading.Event()
        if self.stacks:
            threading.Thread(target=self._watch, args=(threading.get_ident(), stop), name="loop-watchdog",
                             daemon=True).start()
        seq = 0
        try:
            while True:
                seq += 1
                self._mark = (seq, time.thread_time())
                t, c = clock(), cpu()
                await asyncio.sleep(interval)
                busy = max(0.0, cpu() - c - interval)
                self.record(max(0.0, clock() - t - interval), busy)
                taken = self._taken
                if busy > self.stall and taken is not None and taken[0] == seq:
                    log.warning("the event loop was held %.0f ms (loop thread CPU); where it was mid-way:\n%s",
                                busy * 1000, taken[1])
        finally:
            stop.set()
            gc.callbacks.remove(self.collected)


class PassBudget:
    """Caps the work of one kind done in one pass of the event loop. asyncio runs every callback
    that is ready in one pass: 64 fetches whose responses arrive together are 64 pages parsed and
    recorded before any timer, RPC or heartbeat runs (bench/scale.py measured 180-230 ms stalls).
    A task calls `await turn()` before its piece of work: the first in a pass goes at once, the
    next ones too while the pass has spent less than `budget` seconds since the first, and the
    rest wait for a later pass (asyncio.sleep(0) puts a task behind everything already ready;
    the loop polls I/O and runs due timers in between). The longest pass is then `budget` plus
    one piece of work; nothing is dropped and the pieces keep their order.
    Invariant: `deferred` counts the turns put off to a later pass."""

    def __init__(self, budget: float = 0.02, *, clock: Callable[[], float] = time.perf_counter):
        if budget <= 0:
            raise ValueError(f"pass budget must be > 0, got {budget}")
        self.budget = budget
        self.clock = clock
        self.deferred = 0
        self._start: float | None = None  # when this pass's first piece of work began

    def _new_pass(self) -> None:
        self._start = None

    async def turn(self) -> None:
        while True:
            now = self.clock()
            if self._start is None:
                # The first piece in this pass: the callback, queued now, runs early in the next
                # pass (before the tasks deferred from this one) and opens a fresh budget.
                self._start = now
                asyncio.get_running_loop().call_soon(self._new_pass)
                return
            if now - self._start < self.budget:
                return
            self.deferred += 1
            await asyncio.sleep(0)
