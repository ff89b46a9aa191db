"""wancrawl/runtime/eventloop.py: a service's `event_loop` setting picks the loop its serve() runs on; the
agent's own process runs on it (the lab's agents: tests/test_e2e.py reads their start-up line)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest
import uvloop

from agent.settings import AgentSettings, load_settings
from wancrawl.runtime import eventloop
from wancrawl.errors import ConfigError

from conftest import REPO


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_run_picks_the_loop_by_name():
    on_uv = eventloop.run(_running_loop(), "uvloop")
    on_aio = eventloop.run(_running_loop(), "asyncio")
    # Independent of loop_name: the loops' own classes.
    assert isinstance(on_uv, uvloop.Loop)
    assert isinstance(on_aio, asyncio.BaseEventLoop) and not isinstance(on_aio, uvloop.Loop)
    assert on_uv.is_closed() and on_aio.is_closed()  # the Runner closed each
    assert eventloop.loop_name(on_uv) == "uvloop" and eventloop.loop_name(on_aio) == "asyncio"


def test_an_unknown_loop_is_refused_before_anything_runs():
    coro = _running_loop()
    with pytest.raises(ValueError, match="event_loop must be one of uvloop, asyncio, got 'trio'"):
        eventloop.run(coro, "trio")
    coro.close()
    with pytest.raises(ValueError, match="got 'trio'"):
        AgentSettings(event_loop="trio")


def test_uvloop_missing_is_a_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    with pytest.raises(ConfigError, match="event_loop = \"asyncio\""):
        eventloop.loop_factory("uvloop")
    assert eventloop.loop_factory("asyncio") is None


def test_agent_setting_default_and_file(tmp_path):
    assert AgentSettings().event_loop == "uvloop"
    cfg = tmp_path / "a.toml"
    cfg.write_text('agent_id = "x"\nevent_loop = "asyncio"\n')
    assert load_settings(cfg).event_loop == "asyncio"
    assert load_settings(cfg, {"event_loop": "uvloop"}).event_loop == "uvloop"  # --event-loop


@pytest.mark.parametrize("name", eventloop.EVENT_LOOPS)
def test_the_agents_loop_machinery_works_on_each_loop(name):
    """What the agent asks of its loop beside gRPC (the lab's agents run gRPC with TLS on uvloop,
    tests/test_e2e.py): a signal handler, a thread executor, the pass budget's order."""
    from wancrawl.runtime.looplag import PassBudget

    async def main() -> tuple[bool, int, int]:
        loop = asyncio.get_running_loop()
        got = asyncio.Event()
        loop.add_signal_handler(signal.SIGUSR2, got.set)
        try:
            signal.raise_signal(signal.SIGUSR2)
            await asyncio.wait_for(got.wait(), 10)
        finally:
            loop.remove_signal_handler(signal.SIGUSR2)
        n = await loop.run_in_executor(None, sum, range(1000))
        # PassBudget counts on call_soon's order: a callback queued in a pass runs before the
        # tasks deferred in that pass (asyncio's contract, uvloop's too). One tick per clock
        # call, a budget of 1.5 ticks: pieces 0 and 1 go in the first pass, 2 and 3 are put off
        # once each and go in the next (were the pass's reset callback run after them, they
        # would be put off again).
        clock = iter(range(100)).__next__
        budget = PassBudget(1.5, clock=lambda: float(clock()))
        order: list[int] = []

        async def piece(i: int) -> None:
            await budget.turn()
            order.append(i)

        await asyncio.gather(*(piece(i) for i in range(4)))
        return got.is_set(), n, budget.deferred if order == [0, 1, 2, 3] else -1

    signalled, n, deferred = eventloop.run(main(), name)
    assert signalled and n == sum(range(1000))
    assert deferred == 2  # -1: the pieces lost their order


def test_the_agent_cli_refuses_an_unknown_loop(tmp_path):
    cfg = tmp_path / "a.toml"
    cfg.write_text('agent_id = "x"\nlisten = "127.0.0.1:0"\n')
    p = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--config", str(cfg), "--data-dir", str(tmp_path / "d"),
                        "--event-loop", "trio"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2 and "event_loop must be one of uvloop, asyncio" in p.stderr


def test_consultant_and_storage_take_the_key_asyncio_by_default():
    from consultant.settings import ConsultantSettings
    from storage.config import StorageSettings

    assert ConsultantSettings().event_loop == "asyncio" and StorageSettings().event_loop == "asyncio"
    assert ConsultantSettings(event_loop="uvloop").event_loop == "uvloop"
    for make in (ConsultantSettings, StorageSettings):
        with pytest.raises(ValueError, match="got 'trio'"):
            make(event_loop="trio")
