"""The placement answers every service reads alike: a host's route (its preference list) and a
registration's terms. Values only: no I/O, no client.

One definition at the bottom floor because three parties exchange them: the consultant's client
(consultant/client.py) and the overlay's query client (agent/peers.py) answer Resolve with a
`HostRoute` per host; the agent's Placement port (agent/placement/port.py) hands them to its
rooms; storage's placement check (storage/placement.py) decides an ingest by them. Both modes
answer the same shape, so a reader never asks which one answered. `LiveAgents` is who is alive
(the consultant's LiveAgents RPC, the overlay's members): a replica's owner that is off a host's
new list is not dead when it is in it (agent/ownership/settle.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wancrawl.v1 import common_pb2


@dataclass(frozen=True)
class HostRoute:
    """One host's answer: agents owner first, as (agent_id, address) pairs, then its backups;
    the TTL a holder may cache it for and the epoch it was decided in; empty `agents` with the
    reason in `error` for a host that cannot be placed."""

    host: str
    agents: tuple[tuple[str, str], ...]
    ttl: int
    epoch: int
    error: str = ""
    # Why the answer is not settled (the overlay's disjoint lookups disagreed, issue 36): its
    # agents may be taken as placed, but an agent it leaves out is not known to be unplaced.
    contested: str = ""

    @property
    def owner(self) -> tuple[str, str] | None:
        return self.agents[0] if self.agents else None

    @property
    def agent_ids(self) -> tuple[str, ...]:
        """The preference list's agent ids, owner first (what storage's check compares)."""
        return tuple(a for a, _ in self.agents)


@dataclass
class Registration:
    """What a registration was given: the epoch it joined in, its lease, the location the
    placement recorded and the placement strategy in force."""

    epoch: int
    lease_seconds: float
    location: common_pb2.Location = field(default_factory=common_pb2.Location)
    strategy: str = ""


@dataclass(frozen=True)
class LiveAgents:
    """The agents alive by placement's word: agent id -> address, at `epoch`. `per_epoch`: the
    set changes only with a new epoch, so a holder may keep it until the epoch moves (the
    consultant: a death or a departure is an epoch); False where membership can change without
    one (the overlay: a far node's death takes no epoch here), and the holder asks each time."""

    epoch: int
    agents: dict[str, str]
    per_epoch: bool = True
