"""Per-host and per-IP politeness: pure scheduling decisions from fetch events (no I/O, no await)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable

# Statuses after which a host is left alone for a while. 429 and 503 carry Retry-After by RFC 9110;
# other 5xx and transport failures (status None) get exponential backoff only.
RETRY_AFTER_STATUSES = frozenset({429, 503})


def _wants_backoff(status: int | None) -> bool:
    return status is None or status == 429 or status >= 500


class _Host:
    # Invariants: 0 <= active <= max_per_host whenever the caller only starts after ready();
    # last_start/last_end are -inf until the first event; backoff_until is an absolute time
    # (0 = none) and level counts consecutive failures since the last success.
    __slots__ = ("active", "backoff_until", "delay", "last_end", "last_start", "level")

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.active = 0
        self.last_start = float("-inf")
        self.last_end = float("-inf")
        self.backoff_until = 0.0
        self.level = 0


class _Ip:
    __slots__ = ("active", "last_start")

    def __init__(self) -> None:
        self.active = 0
        self.last_start = float("-inf")


class Politeness:
    """Tracks fetch starts/ends per host and per IP and says when a host may be fetched again.

    Rules (all must hold for a start at time t):
      * t >= last_start(host) + delay(host) and t >= last_end(host) + delay(host): the delay is both
        start-to-start (caps the rate, also with several fetches in flight) and end-to-start (the
        server rests between requests even when responses are slow);
      * t >= backoff_until(host) (Retry-After or exponential backoff after 429/5xx/errors);
      * fewer than max_per_host fetches in flight to the host, fewer than max_per_ip to its IP;
      * t >= last_start(ip) + ip_delay (many virtual hosts on one server share its capacity).
    delay(host) = max(default_delay, min(crawl_delay, max_delay)) when robots.txt set a Crawl-delay.
    """

    def __init__(
        self,
        default_delay: float = 1.0,
        *,
        max_per_host: int = 1,
        max_per_ip: int = 2,
        ip_delay: float = 0.0,
        max_delay: float = 60.0,
        backoff_base: float | None = None,
        max_backoff: float = 3600.0,
        max_retry_after: float = 3600.0,
        rng: random.Random | None = None,
    ) -> None:
        if default_delay < 0 or ip_delay < 0 or max_per_host < 1 or max_per_ip < 1:
            raise ValueError("delays must be >= 0 and concurrency caps >= 1")
        self.default_delay = default_delay
        self.max_per_host = max_per_host
        self.max_per_ip = max_per_ip
        self.ip_delay = ip_delay
        self.max_delay = max(max_delay, default_delay)
        # Backoff starts at the host's delay (at least 1 s) so a failing host is asked less often
        # than a healthy one from the first failure on.
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.rng = rng if rng is not None else random.Random()
        self._hosts: dict[str, _Host] = {}
        self._ips: dict[str, _Ip] = {}

    # -- state access -----------------------------------------------------------------------------
    def _host(self, host: str) -> _Host:
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = _Host(self.default_delay)
        return h

    def _ip(self, ip: str) -> _Ip:
        s = self._ips.get(ip)
        if s is None:
            s = self._ips[ip] = _Ip()
        return s

    def delay(self, host: str) -> float:
        h = self._hosts.get(host)
        return h.delay if h is not None else self.default_delay

    def active(self, host: str) -> int:
        h = self._hosts.get(host)
        return h.active if h is not None else 0

    def active_ip(self, ip: str) -> int:
        s = self._ips.get(ip)
        return s.active if s is not None else 0

    def backoff_level(self, host: str) -> int:
        h = self._hosts.get(host)
        return h.level if h is not None else 0

    def host_full(self, host: str) -> bool:
        return self.active(host) >= self.max_per_host

    def ip_full(self, ip: str) -> bool:
        return self.active_ip(ip) >= self.max_per_ip

    # -- configuration ----------------------------------------------------------------------------
    def set_delay(self, host: str, seconds: float | None) -> float:
        """Apply a robots.txt Crawl-delay (None = back to default); returns the delay in force."""
        h = self._host(host)
        if seconds is None or seconds != seconds or seconds < 0:  # None, NaN or negative: ignore
            h.delay = self.default_delay
        else:
            h.delay = max(self.default_delay, min(float(seconds), self.max_delay))
        return h.delay

    # -- decisions --------------------------------------------------------------------------------
    def next_time(self, host: str, ip: str | None = None) -> float:
        """Earliest time the delay/backoff rules allow a start (concurrency caps not included)."""
        h = self._hosts.get(host)
        t = 0.0
        if h is not None:
            t = max(h.last_start + h.delay, h.last_end + h.delay, h.backoff_until, 0.0)
        if ip is not None and self.ip_delay > 0:
            s = self._ips.get(ip)
            if s is not None:
                t = max(t, s.last_start + self.ip_delay)
        return t

    def ready(self, host: str, ip: str, now: float) -> bool:
        if self.active(host) >= self.max_per_host or self.active_ip(ip) >= self.max_per_ip:
            return False
        return now >= self.next_time(host, ip)

    # -- events -----------------------------------------------------------------------------------
    def started(self, host: str, ip: str, now: float) -> None:
        h = self._host(host)
        s = self._ip(ip)
        h.active += 1
        s.active += 1
        h.last_start = max(h.last_start, now)
        s.last_start = max(s.last_start, now)

    def finished(
        self, host: str, ip: str, now: float, status: int | None, retry_after: float | None = None
    ) -> None:
        """A fetch ended: status None means a transport failure (timeout, reset, DNS) that backs
        the host off; 0 leaves its backoff as it is."""
        h = self._host(host)
        s = self._ip(ip)
        if h.active <= 0 or s.active <= 0:
            raise ValueError(f"finished() without a matching started() for {host} / {ip}")
        h.active -= 1
        s.active -= 1
        h.last_end = max(h.last_end, now)
        if status == 0:
            return  # no verdict on the host (e.g. a transport failure its origin answers for)
        if _wants_backoff(status):
            self.backoff(host, retry_after if status in RETRY_AFTER_STATUSES else None, now)
        else:
            h.level = 0
            h.backoff_until = 0.0

    def backoff(self, host: str, retry_after: float | None, now: float) -> float:
        """Leave the host alone: Retry-After seconds when given, else exponential with jitter.

        Returns the absolute time before which the host is not fetched. The exponential wait for the
        n-th consecutive failure is base * 2**n * U(0.5, 1]: it never shrinks from one failure to the
        next (U <= 1 then U >= 0.5 of the doubled value) and desynchronises agents.
        """
        h = self._host(host)
        if retry_after is not None and retry_after == retry_after and retry_after >= 0:
            wait = min(float(retry_after), self.max_retry_after)
        else:
            base = self.backoff_base if self.backoff_base is not None else max(h.delay, 1.0)
            wait = min(base * (2.0 ** min(h.level, 62)), self.max_backoff)
            wait *= 1.0 - 0.5 * self.rng.random()  # (0.5, 1.0]
        h.level += 1
        h.backoff_until = max(h.backoff_until, now + wait)
        return h.backoff_until

    def backoff_state(self, host: str) -> tuple[float, int]:
        """(backoff_until, level) of a host, for a handover; (0, 0) when untracked."""
        h = self._hosts.get(host)
        return (h.backoff_until, h.level) if h is not None else (0.0, 0)

    def restore_backoff(self, host: str, until: float, level: int) -> None:
        """Take over a handed host's backoff (the later of both, the higher level)."""
        if until <= 0 and level <= 0:
            return
        h = self._host(host)
        h.backoff_until = max(h.backoff_until, until)
        h.level = max(h.level, level)

    def tracks(self, host: str) -> bool:
        """Whether the host has state here (delay, backoff, fetches under way)."""
        return host in self._hosts

    def forget(self, host: str) -> None:
        """Drop an idle host's state (e.g. after a handover); in-flight hosts are kept."""
        h = self._hosts.get(host)
        if h is not None and h.active == 0:
            del self._hosts[host]


class OriginBackoff:
    """Backoff after transport failures (connect, timeout, TLS...), keyed by origin (scheme, host,
    port): https://h refusing connections must not hold back http://h:8181, which answers. Rates
    stay per host and IP (Politeness). Exponential with jitter, as Politeness.backoff."""

    def __init__(self, base: float = 1.0, max_backoff: float = 3600.0, rng: random.Random | None = None):
        self.base = base
        self.max_backoff = max_backoff
        self.rng = rng if rng is not None else random.Random()
        # origin -> (until, consecutive failures, first of them)
        self._o: dict[str, tuple[float, int, float]] = {}

    def failed(self, origin: str, now: float) -> float:
        until, level, since = self._o.get(origin, (0.0, 0, now))
        wait = min(self.base * 2.0 ** min(level, 62), self.max_backoff) * (1.0 - 0.5 * self.rng.random())
        until = max(until, now + wait)
        self._o[origin] = (until, level + 1, since)
        return until

    def ok(self, origin: str) -> None:
        self._o.pop(origin, None)

    def until(self, origin: str) -> float:
        e = self._o.get(origin)
        return 0.0 if e is None else e[0]

    def level(self, origin: str) -> int:
        """Consecutive transport failures of the origin."""
        e = self._o.get(origin)
        return 0 if e is None else e[1]

    def failing_for(self, origin: str, now: float) -> float:
        """Seconds since the first of the origin's current run of transport failures (0: none)."""
        e = self._o.get(origin)
        return 0.0 if e is None else now - e[2]

    def forget_host(self, host: str) -> None:
        for o in [o for o in self._o if origin_host(o) == host]:
            del self._o[o]


def origin_of(url: str) -> str:
    """scheme://host[:port] of a canonical URL."""
    return "/".join(url.split("/", 3)[:3])


def origin_host(origin: str) -> str:
    return origin.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")


class Scheduler:
    """Picks the next host to fetch among hosts with work, in O(log n) per pick.

    A heap of (earliest start, seq, host) holds each waiting host at most once as a live entry
    (`_due[host]` is the time of the live entry; older entries are skipped when popped). Hosts whose
    own concurrency cap is reached wait in `_parked_host`, hosts whose IP is saturated in
    `_parked_ip[ip]`; `finished()` puts them back, so a pick never scans the waiting hosts.
    Usage: wake(host, ip) when a host gains work; pop_ready(now) -> host (removed from the heap);
    started(); after taking a URL, wake() again if the host still has work; finished() on the end.
    """

    def __init__(self, politeness: Politeness) -> None:
        self.p = politeness
        self._heap: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}  # host -> time of its live heap entry
        self._ip_of: dict[str, str] = {}  # hosts known to the scheduler (waiting or parked)
        self._floor: dict[str, float] = {}  # host -> not_before from the frontier head
        self._parked_host: set[str] = set()
        self._parked_ip: dict[str, set[str]] = {}
        self._seq = 0

    def __len__(self) -> int:
        """Hosts waiting (in the heap or parked)."""
        return len(self._due) + len(self._parked_host) + sum(len(s) for s in self._parked_ip.values())

    def _push(self, host: str, t: float) -> None:
        self._due[host] = t
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, host))

    def wake(self, host: str, ip: str, not_before: float | None = None) -> None:
        """The host has work (idempotent). not_before: the earliest its queue may give a URL (the
        frontier's ready_at, origins' waits included); it replaces the one known, earlier or
        later; None keeps it."""
        self._ip_of[host] = ip
        if not_before is not None:
            if not_before > 0:
                self._floor[host] = not_before
            else:
                self._floor.pop(host, None)
        if host in self._parked_host:
            return
        parked = self._parked_ip.get(ip)
        if parked is not None and host in parked:
            return
        t = max(self.p.next_time(host, ip), self._floor.get(host, 0.0))
        due = self._due.get(host)
        if due is not None and due <= t:
            return  # a later floor is applied when the entry comes up (peek)
        self._push(host, t)  # new, or sooner than its entry: the old entry goes stale

    def remove(self, host: str) -> None:
        """The host has no more work (or was handed over)."""
        self._due.pop(host, None)  # its heap entry becomes stale
        self._parked_host.discard(host)
        ip = self._ip_of.pop(host, None)
        self._floor.pop(host, None)
        if ip is not None and ip in self._parked_ip:
            self._parked_ip[ip].discard(host)

    def peek(self, now: float) -> tuple[str, float] | None:
        """The host that may start first and when (<= now: it may start now); None when nothing can
        start until some fetch finishes."""
        heap = self._heap
        while heap:
            t, _, host = heap[0]
            if self._due.get(host) != t:
                heapq.heappop(heap)  # stale
                continue
            ip = self._ip_of[host]
            if self.p.host_full(host):
                heapq.heappop(heap)
                del self._due[host]
                self._parked_host.add(host)
                continue
            if self.p.ip_full(ip):
                heapq.heappop(heap)
                del self._due[host]
                self._parked_ip.setdefault(ip, set()).add(host)
                continue
            actual = max(self.p.next_time(host, ip), self._floor.get(host, 0.0))
            if actual > t:  # delay/backoff moved since it was pushed (e.g. IP delay, backoff)
                heapq.heappop(heap)
                self._push(host, actual)
                continue
            return host, t
        return None

    def pop_ready(self, now: float) -> str | None:
        """Remove and return a host that may start now, or None (see next_wakeup)."""
        top = self.peek(now)
        if top is None or top[1] > now:
            return None
        host = top[0]
        heapq.heappop(self._heap)
        del self._due[host]
        self._floor.pop(host, None)
        return host

    def next_wakeup(self, now: float) -> float | None:
        top = self.peek(now)
        return None if top is None else top[1]

    def started(self, host: str, ip: str, now: float) -> None:
        self.p.started(host, ip, now)

    def finished(
        self,
        host: str,
        ip: str,
        now: float,
        status: int | None,
        retry_after: float | None = None,
        *,
        has_work: bool | None = None,
    ) -> None:
        """Record the end of a fetch and requeue the hosts it was blocking.

        has_work: whether the host still has URLs (None: requeue it only if it was parked)."""
        self.p.finished(host, ip, now, status, retry_after)
        if host in self._parked_host:
            self._parked_host.discard(host)
            if has_work is not False:
                self.wake(host, self._ip_of.get(host, ip))
        elif has_work:
            self.wake(host, ip)
        waiting = self._parked_ip.pop(ip, None)
        if waiting:
            for h in waiting:
                self.wake(h, self._ip_of.get(h, ip))

    def hosts(self) -> Iterable[str]:
        return self._ip_of.keys()

    def waiting(self) -> Iterable[tuple[str, float]]:
        """(host, earliest start) of every host in the heap (not those held by a concurrency cap)."""
        for host in list(self._due):
            ip = self._ip_of[host]
            yield host, max(self.p.next_time(host, ip), self._floor.get(host, 0.0))
