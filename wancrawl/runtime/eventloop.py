"""Which event loop a service runs on: asyncio's own, or uvloop's (libuv, written in Cython).

A service names its loop in its config (`event_loop = "uvloop" | "asyncio"`) and runs its
`serve()` coroutine through `run` here, the one place that picks the loop. uvloop runs the same
asyncio API (tasks, futures, transports, signal handlers, executors, subprocesses), so nothing
else in a service knows which loop it is on; the loop's own work (polling, timers, callbacks,
socket transports) is cheaper in C than in asyncio's pure-Python selector loop
(docs/benchmarks.md "Session 10, branch uvloop" for what that buys the agent).

uvloop is a hard dependency, but it exists for Linux and macOS only: where it cannot be imported,
asking for it is a ConfigError at start (not a silent fall-back to asyncio: the operator chose it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from wancrawl.errors import ConfigError

EVENT_LOOPS = ("uvloop", "asyncio")
DEFAULT_EVENT_LOOP = "uvloop"  # the agent's; the consultant and storage default to "asyncio"

T = TypeVar("T")


def check(name: str) -> str:
    """The loop's name if it is one of EVENT_LOOPS (settings validate with this)."""
    if name not in EVENT_LOOPS:
        raise ValueError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, got {name!r}")
    return name


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What asyncio.Runner builds its loop with: None is asyncio's default loop."""
    if check(name) == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as exc:  # a platform without a uvloop wheel (Windows)
        raise ConfigError(f"event_loop = \"uvloop\" but uvloop cannot be imported ({exc}); "
                          "install it or set event_loop = \"asyncio\"") from None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], name: str) -> T:
    """asyncio.run(main) on the loop called `name`."""
    factory = loop_factory(name)  # before the Runner: a ConfigError must not leave `main` unawaited
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def loop_name(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """Which of EVENT_LOOPS `loop` (default: the running loop) is, by its class's module: the
    independent answer to "did the setting take" (tests, the agent's start-up log line)."""
    loop = loop or asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio"


__all__ = ["DEFAULT_EVENT_LOOP", "EVENT_LOOPS", "check", "loop_factory", "loop_name", "run"]
