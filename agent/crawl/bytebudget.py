"""A limit by bytes on work in flight (the HTML parses of big bodies), not by count."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ByteBudget:
    """At most `limit` bytes held at once; FIFO among waiters.

    Invariant: `used` is the sum of the holds granted and not released; used <= limit, except
    while one hold larger than the limit runs alone (it is let through when nothing else is held,
    so no size can wait forever). A waiter is granted only at the head of the queue: a big hold is
    not starved by a stream of small ones."""

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"a byte budget must be >= 1, got {limit}")
        self.limit = limit
        self.used = 0
        self.peak = 0  # the most bytes held at once (for status and the tests)
        self.waits = 0  # holds that had to wait
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, n: int) -> bool:
        return self.used == 0 or self.used + n <= self.limit

    @asynccontextmanager
    async def hold(self, n: int) -> AsyncIterator[None]:
        """Hold `n` bytes for the body of the `async with`."""
        if self._queue or not self._fits(n):
            self.waits += 1
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._queue.append((n, fut))
            try:
                await fut
            except BaseException:
                if fut.done() and not fut.cancelled():
                    self._release(n)  # granted just as it was cancelled: give it back
                else:
                    self._queue.remove((n, fut))
                    self._grant()  # it may have been the head that held the others back
                raise
        else:
            self._take(n)
        try:
            yield
        finally:
            self._release(n)

    def _take(self, n: int) -> None:
        self.used += n
        self.peak = max(self.peak, self.used)

    def _release(self, n: int) -> None:
        self.used -= n
        self._grant()

    def _grant(self) -> None:
        while self._queue and self._fits(self._queue[0][0]):
            n, fut = self._queue.popleft()
            self._take(n)
            fut.set_result(None)
