"""Waker: a flag a loop sleeps on with a timeout; HostSignal: hosts that got work, for the dispatcher."""

from __future__ import annotations

import asyncio


class Waker:
    """A flag a loop sleeps on with a timeout. Unlike wait_for(Event.wait()), no inner task is
    made, so cancelling the loop at shutdown is immediate (3.11's wait_for could hang there)."""

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None
        self._flag = False

    def set(self) -> None:
        self._flag = True
        f = self._fut
        if f is not None and not f.done():
            f.set_result(None)

    async def wait(self, timeout: float) -> None:
        if self._flag:
            self._flag = False
            return
        loop = asyncio.get_running_loop()
        f = self._fut = loop.create_future()

        def expire() -> None:
            if not f.done():
                f.set_result(None)

        h = loop.call_later(timeout, expire)
        try:
            await f
        finally:
            h.cancel()
            self._fut = None
            self._flag = False


class HostSignal:
    """Hosts that got work since the dispatcher last looked. Intake and the ledger write it, the
    dispatcher drains it: work flows one way and nobody calls the dispatcher back."""

    def __init__(self) -> None:
        self.waker = Waker()
        self._hosts: dict[str, None] = {}

    def wake(self, host: str) -> None:
        self._hosts[host] = None
        self.waker.set()

    def poke(self) -> None:
        """Something else changed (a fetch ended): the dispatcher looks again."""
        self.waker.set()

    async def wait(self, timeout: float) -> None:
        await self.waker.wait(timeout)

    def pending(self) -> bool:
        return bool(self._hosts)

    def take(self) -> list[str]:
        hosts, self._hosts = list(self._hosts), {}
        return hosts
