"""LoopLag (wancrawl/runtime/looplag.py): wall and busy lag of the event loop, and the agent setting."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import time

import pytest

from agent.settings import AgentSettings
from wancrawl.runtime.looplag import LoopLag, PassBudget


def test_record_keeps_the_longest_and_counts_only_busy_stalls():
    lag = LoopLag(0.01, stall=0.1)
    lag.record(0.5, 0.02)   # late but not busy: the process was not scheduled
    lag.record(0.15, 0.12)  # the loop itself held for 120 ms
    lag.record(0.01, 0.0)
    assert lag.gauges() == {"loop_lag_max": 0.5, "loop_busy_max": 0.12, "loop_gc_max": 0.0, "loop_gc_full_max": 0.0}
    assert lag.stats.as_dict() == {"loop_stalls": 1, "loop_late": 2, "loop_gc_full": 0}


def test_collector_passes_are_timed_by_generation():
    ticks = iter([1.0, 1.03, 2.0, 2.25, 3.0, 3.1])
    lag = LoopLag(0.01, gc_clock=lambda: next(ticks))
    lag.collected("start", {"generation": 0})
    lag.collected("stop", {"generation": 0})   # 30 ms, young
    lag.collected("start", {"generation": 2})
    lag.collected("stop", {"generation": 2})   # 250 ms, full
    lag.collected("start", {"generation": 2})
    lag.collected("stop", {"generation": 2})   # 100 ms, full
    assert lag.gc_longest == pytest.approx(0.25) and lag.gc_full_longest == pytest.approx(0.25)
    assert lag.stats.loop_gc_full == 2


def test_run_times_the_collections_made_while_it_runs_and_only_those():
    lag = LoopLag(0.01)

    async def collect_while_running() -> None:
        task = asyncio.create_task(lag.run())
        await asyncio.sleep(0)  # run() has started and hooked the collector
        gc.collect(2)
        gc.collect(2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(collect_while_running())
    full = lag.stats.loop_gc_full
    assert full >= 2 and lag.gc_full_longest > 0  # at least our two (asyncio.run may add its own)
    gc.collect(2)  # after run() ended: not counted
    assert lag.stats.loop_gc_full == full and lag.collected not in gc.callbacks


def test_run_measures_a_sample_from_its_clocks():
    # Clocks given by the test: every reading 0.31 s of wall time and 0.21 s of the loop thread's
    # CPU after the last, so each sample's wall lag is 0.3 s and its busy lag 0.2 s.
    walls, cpus = itertools.count(0.0, 0.31), itertools.count(1.0, 0.21)
    lag = LoopLag(0.01, clock=lambda: next(walls), cpu=lambda: next(cpus))

    async def first_sample() -> None:
        task = asyncio.create_task(lag.run())
        while not lag.stats.loop_late:
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(first_sample())
    assert lag.longest == pytest.approx(0.3) and lag.busiest == pytest.approx(0.2)
    assert lag.stats.loop_stalls == lag.stats.loop_late >= 1


def test_setting_is_off_by_default_and_refuses_a_negative_interval():
    assert AgentSettings(agent_id="a").loop_lag_interval == 0.0
    with pytest.raises(ValueError, match="loop_lag_interval"):
        AgentSettings(agent_id="a", loop_lag_interval=-1)
    with pytest.raises(ValueError):
        LoopLag(0)


# -- PassBudget: page work per loop pass --------------------------------------------------------
class _Passes:
    """Runs a coroutine on a loop whose passes (BaseEventLoop._run_once: poll I/O, run due timers,
    run every ready callback) it counts in `n`."""

    def __init__(self) -> None:
        self.n = 0

    def run(self, coro) -> None:
        # asyncio's own loop whatever the suite's policy (WANCRAWL_TEST_EVENT_LOOP): _run_once is
        # its internals; tests/test_eventloop.py holds the budget's order on uvloop too.
        loop = asyncio.SelectorEventLoop()
        one_pass = loop._run_once  # type: ignore[attr-defined]

        def counted() -> None:
            self.n += 1
            one_pass()

        loop._run_once = counted  # type: ignore[attr-defined]
        try:
            loop.run_until_complete(coro)
        finally:
            loop.close()


def test_pass_budget_spreads_work_ready_together_over_passes_and_keeps_every_piece():
    # A clock given by the test: each piece of work takes 5 ms of it, a budget of 19 ms: the
    # first piece of a pass starts it, three more fit, the rest go to later passes.
    now = [0.0]
    budget = PassBudget(0.019, clock=lambda: now[0])
    passes = _Passes()
    done: list[tuple[int, int]] = []  # (piece, pass it ran in)

    async def piece(i: int) -> None:
        await budget.turn()
        done.append((i, passes.n))
        now[0] += 0.005

    async def main() -> None:
        await asyncio.gather(*(piece(i) for i in range(64)))

    passes.run(main())
    assert sorted(i for i, _ in done) == list(range(64)), "every piece ran once"
    per_pass: dict[int, int] = {}
    for _, p in done:
        per_pass[p] = per_pass.get(p, 0) + 1
    assert max(per_pass.values()) <= 4, per_pass
    assert len(per_pass) >= 16
    assert [i for i, _ in done] == sorted(i for i, _ in done), "the pieces keep their order"
    assert budget.deferred > 0
    with pytest.raises(ValueError):
        PassBudget(0)


def _hold_the_loop(lag: LoopLag, cpu_seconds: float, *, until_taken: bool) -> None:
    # Holds the loop's thread with CPU work (not a sleep: the busy lag counts CPU); with
    # until_taken, also until the watchdog has taken this sample's stack (the event awaited;
    # given up after 5 s of CPU so a missing watchdog fails the test instead of hanging it).
    c0 = time.thread_time()
    while time.thread_time() - c0 < cpu_seconds or (until_taken and time.thread_time() - c0 < 5
                                                       and (lag._taken is None or lag._taken[0] != lag._mark[0])):
        pass


def test_a_stall_over_the_mark_is_logged_with_where_the_loop_was(caplog):
    lag = LoopLag(0.01, stall=0.1)

    async def stall_once() -> None:
        task = asyncio.create_task(lag.run())
        await asyncio.sleep(0)  # run() has begun its first sample
        _hold_the_loop(lag, 0.02, until_taken=False)  # a short hold: no stack, no log
        while lag._mark[0] < 2:  # that sample is over
            await asyncio.sleep(0.001)
        _hold_the_loop(lag, 0.15, until_taken=True)
        while not lag.stats.loop_stalls:
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="wancrawl.runtime.looplag"):
        asyncio.run(stall_once())
    held = [r.getMessage() for r in caplog.records if "the event loop was held" in r.getMessage()]
    assert len(held) == 1 and "_hold_the_loop" in held[0] and "stall_once" in held[0], held
