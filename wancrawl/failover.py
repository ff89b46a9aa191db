"""Ranked-address failover for clients of replicated services: consultant replicas
(consultant/client.py) and storage writers (storage/client.py FailoverStorageClient).

A client is given several addresses of interchangeable servers, best first (the nearest
replica first, say). Each call goes to one address; when that one does not answer (UNAVAILABLE:
refused, reset, shutting down; DEADLINE_EXCEEDED: hung, paused, partitioned), the same call goes
to the next, within the call's own deadline. Any other status is the service's answer and is
returned as it is: another replica over the same state would say the same.

`Ranking` is the decision (pure: addresses in, order out, a clock passed in); `FailoverChannels`
holds one gRPC channel per address and runs a call through the ranking's order.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from wancrawl import errors
from wancrawl.stats import Counters

T = TypeVar("T")

# Statuses that say "this server did not answer", not "the service says no".
FAILOVER_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

# A channel whose server was down retries its connection after a backoff that grows to 120 s
# by default, failing every call meanwhile: a replica back after a minute would stay unusable
# for another minute or two. Failover channels retry within a second or two. (Not
# grpc.min_reconnect_backoff_ms: it is also the connect timeout, 20 s, which a TLS handshake
# over a long WAN path needs.)
RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def parse_addresses(value: str | Sequence[str], *, where: str = "addresses") -> tuple[str, ...]:
    """'a:1,b:2' or ['a:1', 'b:2'] (items may hold commas too) -> ('a:1', 'b:2'); blanks dropped,
    a repeated address is an error naming `where`."""
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if part in out:
                raise errors.ConfigError(f"{where}: {part!r} is listed twice")
            out.append(part)
    return tuple(out)


@dataclass
class Ranking:
    """Which address a call tries first, and then which.

    Rules: an address that has not failed lately ("up") comes before one that has ("down"); up
    addresses keep their given rank; down ones are ordered by when they may be tried again
    (soonest first), and are still tried last in a call, so a call fails only when every address
    failed in it. An address that fails is down for `retry_after` seconds, doubling with each
    failure in a row up to `max_retry_after`; an answer clears that. So a client stays on the
    address that answers and goes back to a better-ranked one once its time is up (one call
    probes it; if it fails again, it waits twice as long). While that probe is under way
    (`trying`) the address counts as down again for the same wait, so calls made meanwhile do not
    all queue behind a server that may still hang.

    Invariant: `_failures[i] == 0` iff `_down_until[i] == 0`."""

    addresses: tuple[str, ...]
    retry_after: float = 5.0
    max_retry_after: float = 60.0
    _down_until: list[float] = field(init=False)
    _failures: list[int] = field(init=False)

    def __post_init__(self) -> None:
        if not self.addresses:
            raise errors.ConfigError("failover: no address given")
        if len(set(self.addresses)) != len(self.addresses):
            raise errors.ConfigError(f"failover: an address is listed twice in {list(self.addresses)}")
        if not 0 < self.retry_after <= self.max_retry_after:
            raise errors.ConfigError("failover: need 0 < retry_after <= max_retry_after")
        self._down_until = [0.0] * len(self.addresses)
        self._failures = [0] * len(self.addresses)

    def order(self, now: float) -> list[int]:
        """Indices of the addresses to try for one call, in order: each once."""
        n = range(len(self.addresses))
        up = [i for i in n if self._down_until[i] <= now]
        down = sorted((i for i in n if self._down_until[i] > now), key=lambda i: (self._down_until[i], i))
        return up + down

    def preferred(self, now: float) -> str:
        """The address the next call goes to first."""
        return self.addresses[self.order(now)[0]]

    def is_down(self, i: int, now: float) -> bool:
        return self._down_until[i] > now

    def _wait(self, i: int) -> float:
        return min(self.max_retry_after, self.retry_after * 2 ** (self._failures[i] - 1))

    def trying(self, i: int, now: float) -> None:
        """A call starts on address i: if it had failed (this is a probe), hold others off it."""
        if self._failures[i]:
            self._down_until[i] = now + self._wait(i)

    def failed(self, i: int, now: float) -> None:
        self._failures[i] += 1
        self._down_until[i] = now + self._wait(i)

    def answered(self, i: int) -> None:
        self._failures[i] = 0
        self._down_until[i] = 0.0



@dataclass(slots=True)
class FailoverCounters(Counters):
    """Calls made on some replica, calls that moved on to another, calls none answered."""
    attempts: int = 0
    failovers: int = 0
    all_failed: int = 0

class FailoverChannels:
    """One channel per address (made on first use by `make_channel`) and calls run through a
    `Ranking`. A call has a deadline (`timeout`); each attempt but the last gets at most
    `attempt_timeout` of it, so a hung server leaves time for the next one. Counts attempts,
    failovers (an attempt after a failed one within a call) and calls that failed on every address."""

    def __init__(self, addresses: Sequence[str], make_channel: Callable[[str], grpc.aio.Channel], *,
                 attempt_timeout: float, retry_after: float = 5.0, max_retry_after: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.ranking = Ranking(tuple(addresses), retry_after, max_retry_after)
        self.make_channel = make_channel
        self.attempt_timeout = attempt_timeout
        self.clock = clock
        self._channels: dict[int, grpc.aio.Channel] = {}
        self.stats = FailoverCounters()
        self.current = 0  # the address that answered last (the one in use)

    @property
    def addresses(self) -> tuple[str, ...]:
        return self.ranking.addresses

    def channel(self, i: int) -> grpc.aio.Channel:
        ch = self._channels.get(i)
        if ch is None:
            ch = self._channels[i] = self.make_channel(self.ranking.addresses[i])
        return ch

    async def call(self, invoke: Callable[[grpc.aio.Channel, float], Awaitable[T]], timeout: float) -> T:
        """`invoke(channel, attempt_timeout)` on the addresses in the ranking's order until one
        answers; its result, or the status it answered when that is not a failover code. Every
        address failed (or the deadline passed): the last failure is raised."""
        start = self.clock()
        order = self.ranking.order(start)
        last: grpc.aio.AioRpcError | None = None
        for k, i in enumerate(order):
            now = self.clock()
            left = timeout - (now - start)
            if left <= 0 and last is not None:
                break
            budget = left if k == len(order) - 1 else min(left, self.attempt_timeout)
            self.stats.attempts += 1
            if last is not None:
                self.stats.failovers += 1
            self.ranking.trying(i, now)
            try:
                result = await invoke(self.channel(i), max(budget, 0.001))
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in FAILOVER_CODES:
                    self.ranking.answered(i)
                    self.current = i
                    raise
                self.ranking.failed(i, self.clock())
                last = exc
                continue
            self.ranking.answered(i)
            self.current = i
            return result
        self.stats.all_failed += 1
        assert last is not None
        raise last

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            await ch.close()
