"""LoopLag (wancrawl/looplag.py): wall and busy lag of the event loop, and the agent setting."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from agent.settings import AgentSettings
from wancrawl.looplag import LoopLag


def test_record_keeps_the_longest_and_counts_only_busy_stalls():
    lag = LoopLag(0.01, stall=0.1)
    lag.record(0.5, 0.02)   # late but not busy: the process was not scheduled
    lag.record(0.15, 0.12)  # the loop itself held for 120 ms
    lag.record(0.01, 0.0)
    assert lag.gauges() == {"loop_lag_max": 0.5, "loop_busy_max": 0.12}
    assert lag.counters == {"loop_stalls": 1, "loop_late": 2}


def test_run_measures_a_sample_from_its_clocks():
    # Clocks given by the test: every reading 0.31 s of wall time and 0.21 s of the loop thread's
    # CPU after the last, so each sample's wall lag is 0.3 s and its busy lag 0.2 s.
    walls, cpus = itertools.count(0.0, 0.31), itertools.count(1.0, 0.21)
    lag = LoopLag(0.01, clock=lambda: next(walls), cpu=lambda: next(cpus))

    async def first_sample() -> None:
        task = asyncio.create_task(lag.run())
        while not lag.counters["loop_late"]:
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(first_sample())
    assert lag.longest == pytest.approx(0.3) and lag.busiest == pytest.approx(0.2)
    assert lag.counters["loop_stalls"] == lag.counters["loop_late"] >= 1


def test_setting_is_off_by_default_and_refuses_a_negative_interval():
    assert AgentSettings(agent_id="a").loop_lag_interval == 0.0
    with pytest.raises(ValueError, match="loop_lag_interval"):
        AgentSettings(agent_id="a", loop_lag_interval=-1)
    with pytest.raises(ValueError):
        LoopLag(0)
