"""The Placement port: what an agent needs of whatever places hosts on agents.

Today the consultant answers it (agent/placement/consultant.py); the consultant-less Kademlia
overlay (seeds 000 and 001) is the second implementation, beside it in this package. Every
implementation passes tests/test_placement_contract.py.

`HostRoute` (a host's ranked preference list: owner first, then its backups, with a TTL and the
epoch it was decided in), `Registration` (the epoch and lease a registration was given) and
`LiveAgents` (who is alive, at which epoch) are the port's answers. They are defined once at the bottom floor (wancrawl/placement.py, shared with
the consultant's client and storage), and the agent reads them from here.
"""

from __future__ import annotations

from typing import Protocol

from wancrawl.placement import HostRoute, LiveAgents, Registration
from wancrawl.v1 import common_pb2

__all__ = ["HostRoute", "LiveAgents", "Placement", "Registration"]


class Placement(Protocol):
    """Join (register), stay (heartbeat: the lease), leave (deregister), ask who owns hosts
    (resolve: one HostRoute per host, in the order asked), who is alive (live_agents: every agent
    a preference list may name now, with their addresses), and close. Epochs only grow; an answer
    for a host that cannot be placed carries its reason in `error` and no agents. A live agent
    may be absent from a host's list (a list names at most preference_length agents, and a move
    can take a host off its owner): only `live_agents` says an agent is gone."""

    async def register(self, agent_id: str, address: str, *, location: common_pb2.Location | None = None,
                       source_ip: str = "", capacity: float = 0.0) -> Registration: ...
    async def heartbeat(self, agent_id: str, load: common_pb2.LoadReport) -> int: ...
    async def deregister(self, agent_id: str) -> int: ...
    async def resolve(self, hosts: list[str]) -> list[HostRoute]: ...
    async def live_agents(self) -> LiveAgents: ...
    async def close(self) -> None: ...
