"""Claims: the hosts held while their state is asked for (issue 12; seed 001 §2.3-2.4).

A host this agent owns now but whose state may be elsewhere is held at the gate (not fetched)
until the settle loop (agent/ownership/settle.py) has looked at it and, when another agent may
hold it, until every agent asked has answered its Claim, or its deadline (a settle window) has
passed. The claims run beside the settle loop, one at a time per peer.

What it may do: hold and release hosts at the gate, send Claim RPCs, drop the replicas a
claimed handover superseded and tell the replicator to sync what it made ours. It decides
nothing about a host's route (settle.py's `settle_action` does) and calls nothing above it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from agent.client import AgentPool
from agent.ownership.replica import ReplicaStore
from agent.ownership.replicator import Replicator
from agent.placement.directory import HostDirectory
from agent.placement.gate import Gate
from wancrawl import errors
from wancrawl.stats import Counters

log = logging.getLogger("agent")

Peer = tuple[str, str]  # (agent id, address)

CLAIM_BATCH = 5_000  # hosts per Claim RPC (well under gRPC's 4 MB and the receiver's limit)


@dataclass(slots=True)
class ClaimCounters(Counters):
    """Claims sent, hosts they brought, failures, hosts released unanswered (the metric names:
    agent/metrics.py HELP). SHARED, summed in status with the settle loop's and Outgoing's:
    replicas_dropped (here: the replicas a claimed handover superseded)."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"replicas_dropped"})
    hosts_claimed: int = 0
    claims_sent: int = 0
    claim_failures: int = 0
    claims_timed_out: int = 0
    replicas_dropped: int = 0


class Claims:
    """Owns the hosts held while their state is asked for: those not yet looked at by the settle
    loop, the agents still to answer each claim, a deadline per held host, and the claims under
    way. Invariants: a host enters `_deadline` and `_new` only through `hold`, which holds it at
    the gate, and `_waiting` only through `ask`, for a host the loop took from `_new`; `release`
    is the only way out of all three, and opens the gate for those hosts in the same call (so a
    host is never left held with nobody to release it: its deadline does at the latest)."""

    def __init__(self, self_id: str, address: Callable[[], str], directory: HostDirectory, peers: AgentPool,
                 gate: Gate, replicas: ReplicaStore | None, replicator: Replicator | None, *,
                 window: Callable[[], float], clock: Callable[[], float]):
        self.self_id = self_id
        self.address = address
        self.directory = directory
        self.peers = peers
        self.gate = gate
        self.replicas = replicas
        self.replicator = replicator
        self.window = window  # the settle window (Ownership's): how long a held host waits at most
        self.clock = clock
        self._waiting: dict[str, set[str]] = {}   # held host -> agents still to answer its claim
        self._deadline: dict[str, float] = {}     # held host -> released after this anyway
        self._new: set[str] = set()               # held, not yet looked at
        self._addresses: dict[str, str] = {}      # agent id -> address, from the routes seen
        self._claim_backoff: dict[str, float] = {}  # agent id -> no claim to it before
        self._claiming: dict[str, asyncio.Task] = {}  # agent id -> its claim under way
        self.stats = ClaimCounters()

    # -- what the settle loop holds and looks at ----------------------------------------------------
    def hold(self, hosts: list[str], now: float) -> None:
        """Hold hosts (no fetch) for the settle loop to look at, a settle window at most."""
        self.gate.hold(hosts)
        for h in hosts:
            self._deadline.setdefault(h, now + self.window())
        self._new.update(hosts)

    def has_new(self) -> bool:
        return bool(self._new)

    def pending(self) -> bool:
        """Held hosts not looked at yet, or claims not all answered."""
        return bool(self._new or self._waiting)

    def take_new(self) -> list[str]:
        """The held hosts not looked at yet, sorted; the loop looks at them now."""
        new, self._new = sorted(self._new), set()
        return new

    def look_again(self, host: str) -> None:
        """A held host the loop could not decide now (placement cannot answer): next step."""
        self._new.add(host)

    def ask(self, host: str, peers: tuple[Peer, ...]) -> None:
        """The held host's state may be at these agents: it waits for each one's answer."""
        self._waiting[host] = {p[0] for p in peers}
        for p in peers:
            self._addresses[p[0]] = p[1]

    def release(self, hosts: list[str]) -> None:
        for h in hosts:
            self._waiting.pop(h, None)
            self._deadline.pop(h, None)
            self._new.discard(h)
        self.gate.release(hosts)

    def expire(self, now: float) -> None:
        """Release the held hosts whose deadline passed, their claims unanswered."""
        late = [h for h, t in self._deadline.items() if t <= now]
        if late:
            self.stats.claims_timed_out += len(late)
            log.warning("%d hosts released unsettled after %.0fs (claims unanswered)", len(late), self.window())
            self.release(late)

    # -- the claims, beside the settle loop ---------------------------------------------------------
    async def claim(self) -> None:
        by_peer: dict[str, list[str]] = {}
        for h, agents in self._waiting.items():
            for a in agents:
                by_peer.setdefault(a, []).append(h)
        if not by_peer:
            return
        epoch = self.directory.epoch
        # Each peer's claim runs beside the settle loop, one at a time per peer: a claim to an agent
        # that is stopped (SIGSTOP, a partition) hangs until the RPC's deadline (minutes), and
        # meanwhile this loop must go on settling epochs (a promotion when that agent's lease
        # runs out). A host settled meanwhile (promoted, released) ignores the late answer.
        for a, hosts in by_peer.items():
            t = self._claiming.get(a)
            if t is None or t.done():
                self._claiming[a] = asyncio.create_task(self._claim_one(a, hosts, epoch), name=f"claim {a}")

    async def _claim_one(self, agent_id: str, hosts: list[str], epoch: int) -> None:
        try:
            _, answered = await self._claim_from(agent_id, hosts, epoch)
            self._claimed_by(agent_id, answered)
        except Exception:
            log.exception("claim from %s failed", agent_id)

    def _claimed_by(self, agent_id: str, answered: list[str]) -> None:
        done: list[str] = []
        for h in answered:
            w = self._waiting.get(h)
            if w is not None:
                w.discard(agent_id)
                if not w:
                    done.append(h)
        if done:
            if self.replicas is not None:
                # The owner's handover superseded what this agent had as its backup.
                self.stats.replicas_dropped += self.replicas.drop([h for h in done if self.replicas.owner(h)])
            if self.replicator is not None:
                self.replicator.sync(done)
            self.release(done)

    async def _claim_from(self, agent_id: str, hosts: list[str], epoch: int) -> tuple[str, list[str]]:
        """Ask one agent; returns the hosts it settled (handed over or holds nothing of)."""
        addr = self._addresses.get(agent_id)
        if addr is None or self._claim_backoff.get(agent_id, 0.0) > self.clock():
            return agent_id, []
        self.stats.claims_sent += 1
        try:
            settled: list[str] = []
            for i in range(0, len(hosts), CLAIM_BATCH):  # a restarted agent may claim all it holds
                r = await self.peers.get(addr).claim(self.self_id, self.address(), epoch, hosts[i : i + CLAIM_BATCH])
                self.directory.saw_epoch(r.epoch)
                self.stats.hosts_claimed += len(r.handed)
                settled += list(r.handed) + list(r.not_held)
        except errors.WancrawlError as exc:
            self.stats.claim_failures += 1
            # Unreachable (dead, its lease not yet expired): ask again in a second, not every step.
            self._claim_backoff[agent_id] = self.clock() + 1.0
            log.warning("claim of %d hosts from %s failed: %s", len(hosts), agent_id, exc)
            return agent_id, []
        self._claim_backoff.pop(agent_id, None)
        return agent_id, settled
