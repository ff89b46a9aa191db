"""The agent's load level (seed 000 §1.4.1), mapped onto what an agent measures (docs/balance.md).

Seed 000: a node's work area W holds the URLs it will crawl; URLs beyond it are packed into heavy
blocks of H URLs; S is the number of blocks, W_f the free room in W, and L = S - W_f/H: negative
when light (at least -W/H), positive when heavy. Here the queue is the frontier (Q URLs), and
W is what the agent fetches in one balance period T at its peak rate, the paper's W = vT bound
(§1.4.2: "n H + lambda T < v T"). Then S = max(0, Q - W)/H and W_f = max(0, W - Q), so
L = (Q - W)/H in both cases: the backlog beyond one period, in blocks. Which rate is v:
`load_level` says.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agent.settings import LoadSettings


@dataclass(frozen=True)
class Level:
    queue: int
    peak_rate: float    # pages/s: the best recent rate, what the agent can do
    work_area: float    # W = peak_rate * T, in URLs
    level: float        # L = (Q - W) / H


def load_level(queue: int, peak_rate: float, period: float, block: int, rate_now: float = 0.0) -> Level:
    """Pure: seed 000's L for a queue of `queue` URLs. The paper's v in W = vT: an agent whose
    queue exceeds what its peak rate fetches in T is busy, and then its rate now is what it
    does with the hosts it has (one large host left under a politeness delay: slow, whatever
    its peak was); otherwise it is short of work, and its peak is what it could do. The
    consultant's planner models runtimes with the same rate (consultant/balance.py load_of)."""
    busy = queue > peak_rate * period and rate_now > 0
    w = (rate_now if busy else peak_rate) * period
    return Level(queue, peak_rate, w, (queue - w) / block)


def heaviest(hosts: Iterable[str], queue_len: Callable[[str], int], k: int) -> list[tuple[str, int]]:
    """The k longest host queues, longest first (ties by name: the same report twice)."""
    return heapq.nsmallest(k, ((h, queue_len(h)) for h in hosts), key=lambda x: (-x[1], x[0]))


class LoadGauge:
    """Owns the peak-rate memory. The measured rate falls when the queue runs dry, yet the agent
    could still fetch as fast: W must come from the rate it showed, not the rate it has work for
    (an idle agent is light, not "W = 0"). The peak is the highest rate sampled in the last
    `peak_window` seconds (samples are taken at each report, every heartbeat)."""

    def __init__(self, settings: LoadSettings, rate: Callable[[], float], clock: Callable[[], float]):
        self.s = settings
        self.rate = rate
        self.clock = clock
        self.samples: collections.deque[tuple[float, float]] = collections.deque()
        self.last = Level(0, 0.0, 0.0, 0.0)

    def peak(self, rate: float) -> float:
        now = self.clock()
        while self.samples and self.samples[0][0] < now - self.s.peak_window:
            self.samples.popleft()
        # A monotone deque (rates decreasing): the head is the window's maximum.
        while self.samples and self.samples[-1][1] <= rate:
            self.samples.pop()
        self.samples.append((now, rate))
        return self.samples[0][1]

    def measure(self, queue: int) -> Level:
        rate = self.rate()
        self.last = load_level(queue, self.peak(rate), self.s.period, self.s.block, rate)
        return self.last

    def gauges(self) -> dict[str, float]:
        return {"load_level": self.last.level, "work_area": self.last.work_area, "peak_pages_per_second": self.last.peak_rate}


# -- seed 003's node parameters and samples (consultant/capacity/, docs/balance.md) -----------------

def probe_resources(cpuinfo: str = "/proc/cpuinfo") -> dict[str, float]:
    """Cores this process may use, CPU GHz (the first core's current clock; 0 when unknown) and
    memory GB, read once at start."""
    import os

    try:
        cores = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = float(os.cpu_count() or 0)
    ghz = 0.0
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("cpu mhz"):
                    ghz = float(line.split(":", 1)[1]) / 1000.0
                    break
    except (OSError, ValueError):
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        mem = 0.0
    return {"cores": cores, "cpu_ghz": ghz, "memory_gb": float(mem)}


@dataclass(frozen=True)
class Interval:
    pages: int
    seconds: float      # 0: no sample (the queue ran dry at one end: the rate says nothing of capacity)
    mbps: float         # fetch bandwidth over the interval, Mbit/s


class IntervalMeter:
    """One sample per report: pages and bytes fetched since the last report, counted as a sample
    of the agent's capacity only when its queue had work at both ends (a backlogged interval; an
    agent short of work fetches what it has, not what it can). Remembers the best bandwidth of its
    last `keep` samples: the agent's measured fetch bandwidth."""

    def __init__(self, clock: Callable[[], float], keep: int = 32):
        self.clock = clock
        self.last: tuple[float, int, int, bool] | None = None
        self.bandwidths: collections.deque[float] = collections.deque(maxlen=keep)

    def sample(self, pages: int, nbytes: int, queue: int) -> Interval:
        now = self.clock()
        prev, self.last = self.last, (now, pages, nbytes, queue > 0)
        if prev is None or not (prev[3] and queue > 0) or now <= prev[0] or pages < prev[1]:
            return Interval(0, 0.0, 0.0)
        dt = now - prev[0]
        mbps = max(0, nbytes - prev[2]) * 8 / 1e6 / dt
        self.bandwidths.append(mbps)
        return Interval(pages - prev[1], dt, mbps)

    @property
    def bandwidth(self) -> float:
        return max(self.bandwidths, default=0.0)
