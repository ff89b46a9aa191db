"""KademliaPlacement: the Placement port (agent/placement/port.py) answered by the agents' own
overlay, with no consultant (seeds 000 and 001; docs/kademlia.md).

Register is joining the overlay, a heartbeat is a ping round of the node's k closest (the lease
holds only when all of them answered), deregister is a graceful leave, and a host's preference
list is its key's closest live nodes: the owner, then `backups` backups (seed 001's neighbour
backups and seed 000's second-hash backup become one list, as in consultant mode). A resolve is
a batched iterative FIND_NODE; the agent's host cache amortises it exactly as in consultant mode.

Who is live is this node's own view (the routing table): a lookup's answers add contacts, but
only the ping rounds remove a neighbour (dead_after), so a slow answer never moves a host.
"""

from __future__ import annotations

from agent.client import AgentPool
from agent.placement.kademlia.identity import node_id_for
from agent.placement.kademlia.overlay import Overlay
from agent.placement.kademlia.table import Contact
from agent.placement.kademlia.wire import GrpcTransport
from agent.placement.port import HostRoute, Registration
from agent.settings import AgentSettings
from wancrawl import checks, errors, grpcutil, xorspace
from wancrawl.urls import canonical_host
from wancrawl.v1 import common_pb2

MAX_NAME = 253  # a DNS name


class KademliaPlacement:
    """Implements agent.placement.port.Placement over an Overlay (the only writer of the view)."""

    def __init__(self, overlay: Overlay, *, backups: int):
        self.overlay = overlay
        self.preference_length = 1 + backups
        self.ttl = overlay.s.route_ttl

    async def register(self, agent_id: str, address: str, *, location: common_pb2.Location | None = None,
                       source_ip: str = "", capacity: float = 0.0) -> Registration:
        if not await self.overlay.join():
            raise errors.Unavailable("kademlia: no bootstrap peer answers (kademlia.bootstrap)")
        return Registration(self.overlay.epoch, self.overlay.s.lease_seconds, strategy="kademlia")

    async def heartbeat(self, agent_id: str, load: common_pb2.LoadReport) -> int:
        """One ping round of the neighbourhood (and a bucket refresh when one is due). Raises
        Unavailable when a neighbour did not answer: the lease is not renewed until it does or is
        declared dead."""
        if not self.overlay.joined:
            raise errors.NotFound(f"kademlia: {agent_id} is not in the overlay (never joined, or left)")
        r = await self.overlay.ping_round()
        await self.overlay.refresh()
        if not r.complete:
            raise errors.Unavailable(f"kademlia: {r.asked - r.answered} of {r.asked} neighbours did not answer")
        return self.overlay.epoch

    async def deregister(self, agent_id: str) -> int:
        if not self.overlay.joined and not self.overlay.left:
            raise errors.NotFound(f"kademlia: {agent_id} is not in the overlay (never joined)")
        if not self.overlay.left:
            await self.overlay.leave()
        return self.overlay.epoch

    async def resolve(self, hosts: list[str]) -> list[HostRoute]:
        if not hosts:
            raise errors.InvalidArgument("resolve: no hosts")
        for i, h in enumerate(hosts):
            if len(h) > checks.MAX_HOST:
                raise errors.InvalidArgument(f"hosts[{i}] is {len(h)} characters long; at most {checks.MAX_HOST}")
        names: list[str | None] = []
        errs: dict[int, str] = {}
        for i, h in enumerate(hosts):
            try:
                name = canonical_host(h)
                if len(name) > MAX_NAME:
                    raise errors.InvalidArgument(f"host name is {len(name)} characters long; at most {MAX_NAME}")
                names.append(name)
            except errors.InvalidArgument as exc:
                names.append(None)
                errs[i] = f"hosts[{i}]: {exc}"
        keys = {n: xorspace.host_key(n) for n in names if n is not None}
        found = await self.overlay.lookup(sorted(set(keys.values())))
        epoch = self.overlay.epoch
        out: list[HostRoute] = []
        for i, (h, n) in enumerate(zip(hosts, names)):
            if n is None:
                out.append(HostRoute(h, (), 0, epoch, errs[i]))
                continue
            agents = self.preference(keys[n], found.get(keys[n], []))
            out.append(HostRoute(n, tuple((c.agent_id, c.address) for c in agents), self.ttl, epoch))
        return out

    def preference(self, key: int, looked_up: list[Contact]) -> list[Contact]:
        """The key's closest live nodes by this node's view: what the lookup found, what the table
        holds (a neighbour stays until the ping rounds declare it dead), and this node."""
        ov = self.overlay
        cands = {c.node_id: c for c in (*looked_up, *ov.table.closest(key, self.preference_length))}
        if not ov.left:
            cands[ov.me.node_id] = ov.me
        return sorted(cands.values(), key=lambda c: c.node_id ^ key)[: self.preference_length]

    async def close(self) -> None:
        await self.overlay.transport.close()


def kademlia_placement(settings: AgentSettings, address: str, *, clock) -> KademliaPlacement:
    """The overlay node of this agent (its own client pool: overlay channels verify node ids)."""
    tls = grpcutil.effective_tls(settings.tls)
    me = Contact(node_id_for(settings), settings.agent_id, address)
    transport = GrpcTransport(AgentPool(tls=settings.tls), secure=not tls.insecure,
                              timeout=min(2.0, settings.kademlia.lease_seconds / 5))
    return KademliaPlacement(Overlay(me, settings.kademlia, transport, clock=clock),
                             backups=settings.replication.backups)
