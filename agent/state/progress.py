"""ProgressWatch: is this agent making durable progress? (issue 21, a poison message must not
wedge an agent.)

An agent whose group commits fail (a poison row no check caught, a full or broken disk) or whose
commit loop stopped cannot acknowledge anything: every PushUrls, HandOver and Claim waits for a
commit that never comes. Such an agent must not go on saying it is alive: while it is stalled it
withholds its heartbeats (agent/placement/membership.py) and reports NOT_SERVING on its gRPC
health service (agent/server.py), so the consultant's lease on it expires and its hosts go to
their backups, which do make progress. Its own lease fence (agent/placement/gate.py) stops its
fetches when its lease lapses. When commits succeed again it heartbeats again (the consultant
takes it back like any agent whose lease lapsed) and reports SERVING.

The watch is fed by CommitLog (`committed`, `failed`) and read by Membership and the server
(`stalled`, passed down as a callable). Pure bookkeeping on a clock: no task of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from wancrawl.stats import Counters

log = logging.getLogger("agent")


@dataclass(slots=True)
class ProgressCounters(Counters):
    """Failed group commits and stalls (the metric names: agent/metrics.py HELP)."""
    commit_failures: int = 0
    stalls: int = 0


class ProgressWatch:
    """Owns the agent's durable-progress state. Invariants: `last_ok` is when the last group
    commit completed (construction time before the first); `failures` counts the commits failed
    since then and `error` is the latest one's; the agent is stalled exactly when no commit
    completed for more than `stall_seconds` (a failing commit and a commit loop that stopped
    look the same: the time since the last good commit grows). `reported` is the state last
    announced in the log, so each change is logged once, whoever asks."""

    def __init__(self, stall_seconds: float, clock: Callable[[], float]):
        if stall_seconds <= 0:
            raise ValueError("stall_seconds must be > 0")
        self.stall_seconds = stall_seconds
        self.clock = clock
        self.last_ok = clock()
        self.failures = 0
        self.error = ""
        self.reported = False
        self.stats = ProgressCounters()

    def committed(self) -> None:
        """A group commit completed: what was accepted before it is durable."""
        self.last_ok = self.clock()
        self.failures = 0
        self.error = ""

    def failed(self, exc: BaseException) -> None:
        """A group commit raised (its changes stay buffered for the next one)."""
        self.failures += 1
        self.error = f"{type(exc).__name__}: {exc}"[:300]
        self.stats.commit_failures += 1

    def stalled(self) -> bool:
        """No commit completed for more than stall_seconds. Logs each change of the answer once."""
        since = self.clock() - self.last_ok
        stalled = since > self.stall_seconds
        if stalled != self.reported:
            self.reported = stalled
            if stalled:
                self.stats.stalls += 1
                log.error("NO DURABLE PROGRESS for %.1fs (commit_stall_seconds %.1f; %d failed commits, last: %s): "
                          "reporting NOT_SERVING and withholding heartbeats so this agent's hosts fail over",
                          since, self.stall_seconds, self.failures, self.error or "the commit loop is not running")
            else:
                log.warning("durable progress again: reporting SERVING and heartbeating")
        return stalled

    def gauges(self) -> dict[str, float]:
        return {"stalled": float(self.stalled())}
