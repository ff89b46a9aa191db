"""Agents, leases and the epoch as plain data, and the decisions about them (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

ALIVE, DEAD, LEFT = "alive", "dead", "left"


@dataclass(frozen=True)
class AgentRecord:
    """One agent as the state holds it. `state` is alive, dead (lease expired) or left."""

    agent_id: str
    address: str
    city: str = ""
    country: str = ""
    lat: float | None = None
    lon: float | None = None
    asn: int = 0
    source_ip: str = ""
    capacity: float = 0.0
    weight: float = 1.0
    state: str = ALIVE
    registered_at: float = 0.0
    last_heartbeat: float = 0.0
    lease_expires: float = 0.0
    load_json: str = "{}"

    def placement_key(self) -> tuple:
        """What partitioners see of this agent: a change here is an assignment change."""
        return (self.address, self.city, self.lat, self.lon, self.asn, self.weight)


@dataclass(frozen=True)
class Snapshot:
    """The state at one epoch: every agent ever registered and the overrides (`balanced`: the
    hosts whose override the balancer set, not an operator; `balanced_at`: when it set each, so
    every consultant replica sees the same cooldown)."""

    epoch: int
    agents: dict[str, AgentRecord] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)
    balanced: frozenset[str] = frozenset()
    balanced_at: dict[str, float] = field(default_factory=dict)

    def alive(self) -> list[AgentRecord]:
        # Sorted by id: every replica binds partitioners to the same order.
        return sorted((a for a in self.agents.values() if a.state == ALIVE), key=lambda a: a.agent_id)


def register_bumps(old: AgentRecord | None, new: AgentRecord) -> bool:
    """Does (re-)registering `new` change membership or assignment?"""
    if old is None or old.state != ALIVE:
        return True
    return old.placement_key() != new.placement_key()


def merged_registration(old: AgentRecord | None, new: AgentRecord, now: float, lease: float) -> AgentRecord:
    """The record to store for a Register: keeps the first registration time."""
    return replace(
        new,
        state=ALIVE,
        registered_at=old.registered_at if old is not None and old.state == ALIVE else now,
        last_heartbeat=now,
        lease_expires=now + lease,
        load_json=old.load_json if old is not None else new.load_json,
    )


def weight_changed(old: float, new: float, threshold: float) -> bool:
    """A reported capacity moves the weight only beyond a relative threshold (no churn)."""
    if old <= 0:
        return new > 0
    return abs(new - old) / old > threshold
