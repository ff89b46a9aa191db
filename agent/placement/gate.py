"""Gate: which hosts this agent may fetch now. The fence that keeps a host fetched by one agent
at a time (issue 12): no fetch without a valid lease, none of a host whose ownership is settling.

The lease: an agent may act as an owner only while the consultant still counts it alive. Its own
conservative view is "the send time of the last answered Register or Heartbeat, plus the lease":
the consultant received that call after it was sent, so it declares the agent dead no earlier than
that. A paused process (SIGSTOP, a long GC, a stalled VM) or a partitioned one therefore stops
starting fetches, and drops the results of fetches that straddled the lapse, before its backup
can have learnt the new epoch and started on its hosts.

A held host: one this agent owns by the consultant's answer but whose state is still on its way
(a claim or a promotion under way, or a handover out in progress). Its URLs wait in the frontier.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from wancrawl.stats import Counters


@dataclass(slots=True)
class GateCounters(Counters):
    """Fetches the fence refused and the lease's lapses (the metric names: agent/metrics.py HELP)."""
    fence_refusals: int = 0
    lease_lapses: int = 0
    lease_ran_out: int = 0


class Gate:
    """Owns the lease deadline and the set of held hosts. Invariant: every host refused since it
    was last woken is in `_refused`, so opening the gate (renew, release) wakes exactly those."""

    def __init__(self, wake: Callable[[str], None], *, fenced: bool = True, wall: Callable[[], float] = time.time):
        self.wake = wake
        self.fenced = fenced          # False: no lease check (a single agent without a consultant)
        self.lease_until = 0.0
        self.wall = wall
        # Wall-clock time of the last lease lapse seen; at first this process's start (while it
        # was down, another agent may have taken its hosts over).
        self._lapse_wall = wall() if fenced else -math.inf
        # Just registered: no fetch until ownership has looked at every host (some may be
        # another agent's by now). Set by registration, cleared by ownership.
        self.settling = False
        self._held: set[str] = set()
        self._refused: set[str] = set()
        self.stats = GateCounters()

    def lease_ok(self, now: float) -> bool:
        return not self.fenced or now < self.lease_until

    def lease_left(self, now: float) -> float:
        """Seconds the lease still holds (<= 0: lapsed; infinite without a fence)."""
        return self.lease_until - now if self.fenced else math.inf

    def lapsed_at(self, now: float) -> float:
        """Wall-clock time of the last lapse of the lease (the lapse under way, if it has lapsed
        now): pages fetched before it may since have been fetched again by the agent that took
        their host over. -inf without a fence."""
        if self.fenced and self.lease_until and now >= self.lease_until:
            return max(self._lapse_wall, self.wall() - (now - self.lease_until))
        return self._lapse_wall

    def allows(self, host: str, now: float) -> bool:
        """May the dispatcher start a fetch of host now? Remembers a refusal."""
        if host in self._held or self.settling or not self.lease_ok(now):
            if host not in self._refused:
                self._refused.add(host)
                self.stats.fence_refusals += 1
            return False
        return True

    def renew(self, until: float, now: float, registered: bool = False) -> None:
        """An answered Register/Heartbeat sent at `until - lease`: the lease runs to `until`.
        registered: it was a Register; hosts stay closed until `settled()`."""
        lapsed = not self.lease_ok(now)
        if lapsed and self.lease_until:
            self.stats.lease_ran_out += 1
            self._lapse_wall = max(self._lapse_wall, self.wall() - (now - self.lease_until))
        self.lease_until = max(self.lease_until, until)
        if registered and self.fenced:
            self.settling = True
        elif lapsed and self.lease_ok(now) and not self.settling:
            self._reopen([h for h in self._refused if h not in self._held])

    def settled(self) -> None:
        """Ownership has held whatever must wait for a claim: the other hosts may go."""
        if self.settling:
            self.settling = False
            self._reopen([h for h in self._refused if h not in self._held])

    def expire(self) -> None:
        """The consultant forgot this agent (or it left): no fetch until it registers again."""
        if self.lease_until:
            self.stats.lease_lapses += 1
            if self.fenced:
                self._lapse_wall = max(self._lapse_wall, self.wall())
        self.lease_until = 0.0

    def held(self, host: str) -> bool:
        return host in self._held

    @property
    def holding(self) -> int:
        return len(self._held)

    def hold(self, hosts: Iterable[str]) -> None:
        self._held.update(hosts)

    def release(self, hosts: Iterable[str]) -> None:
        out = [h for h in hosts if h in self._held]
        self._held.difference_update(out)
        self._reopen([h for h in out if h in self._refused])

    def _reopen(self, hosts: list[str]) -> None:
        for h in hosts:
            self._refused.discard(h)
            self.wake(h)
