"""KademliaPlacement: the Placement port (agent/placement/port.py) answered by the agents' own
overlay, with no consultant (seeds 000 and 001; docs/kademlia.md).

Register is joining the overlay, a heartbeat is a ping round of the node's k closest (the lease
holds only when all of them answered), deregister is a graceful leave, and a host's preference
list is its key's closest live nodes: the owner, then `backups` backups (seed 001's neighbour
backups and seed 000's second-hash backup become one list, as in consultant mode). A resolve is
a batched iterative FIND_NODE; the agent's host cache amortises it exactly as in consultant mode.

Who is live is this node's own view (the routing table): a lookup's answers add contacts, but
only the ping rounds remove a neighbour (dead_after), so a slow answer never moves a host.

Load balancing (`kademlia.balance`, docs/kademlia.md "Load balancing in this mode"): the load
each heartbeat reports travels in this node's Pings; after a complete ping round a heavy node
delegates some of the hosts it owns by XOR to light neighbours, nearest k-bucket first
(balance.py plans, delegation.py remembers), with a new epoch, and a live delegate goes first in
the host's preference list on every node that heard the owner say so.
"""

from __future__ import annotations

import logging

from agent.client import AgentPool
from agent.placement.kademlia import balance
from agent.placement.kademlia.balance import NodeLoad
from agent.placement.kademlia.identity import node_id_for
from agent.placement.kademlia.overlay import Overlay
from agent.placement.kademlia.wire import GrpcTransport
from agent.placement.port import HostRoute, LiveAgents, Registration
from agent.settings import AgentSettings
from wancrawl import checks, errors, grpcutil, loadmodel
from wancrawl.kademlia import xorspace
from wancrawl.kademlia.table import Contact
from wancrawl.urls import canonical_host
from wancrawl.v1 import common_pb2

log = logging.getLogger("agent")

MAX_NAME = 253  # a DNS name


class KademliaPlacement:
    """Implements agent.placement.port.Placement over an Overlay (the only writer of the view)."""

    def __init__(self, overlay: Overlay, *, backups: int, heartbeat: float = 0.0):
        self.overlay = overlay
        # A node this node delegated to is left out of its plans for three heartbeats: the epoch
        # spreads (at once, by the announce), the handover runs, and the target measures its
        # load with the host and sends it in its next Ping. (0: a lease.)
        self.settle = 3 * heartbeat if heartbeat > 0 else overlay.s.lease_seconds
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
        ov = self.overlay
        ov.balancing.my_load = node_load(load)
        r = await ov.ping_round()
        await ov.refresh()
        await ov.verify_pending()
        if not r.complete:
            raise errors.Unavailable(f"kademlia: {r.asked - r.answered} of {r.asked} neighbours did not answer")
        if ov.s.balance and self.balance_round(load, r.sent):
            await ov.announce()
        return ov.epoch

    def balance_round(self, load: common_pb2.LoadReport, sent: float) -> bool:
        """Seed 000 §1.4.2 for this node: when heavy, delegate some of the hosts it owns by XOR
        to light neighbours, nearest region first (balance.plan). True when its delegations
        changed (it took a new epoch; the caller tells the neighbourhood at once)."""
        ov, d, s = self.overlay, self.overlay.balancing, self.overlay.s
        now = ov.clock()
        d.moved_at = {k: t for k, t in d.moved_at.items() if now - t < s.balance_cooldown}
        # Delegations of keys this node no longer owns by XOR go: the new owner decides.
        changed = d.take_back([k for k in d.own if not self.owns(k)], now)
        me = d.my_load
        if me is None or me.rate <= 0:
            return self._changed(changed)
        hosts = []
        leaving = 0
        for h in load.heavy_hosts:
            key = xorspace.host_key(h.host)
            if key in d.own:
                leaving += h.queue_length  # still queued here, on its way to its delegate
            elif key not in d.moved_at and self.owns(key):
                # only to a node of the key's XOR preference list: storage takes pages from those
                placed = frozenset(c.node_id for c in self.xor_list(key, []))
                hosts.append(balance.Host(h.host, key, h.queue_length, placed))
        me = NodeLoad(max(0, me.queue - leaving), me.work_area, me.rate, me.level)
        # Loads heard in this round (the neighbours' last heartbeats), of live nodes only.
        loads = d.neighbour_loads(since=sent - s.lease_seconds, settle=self.settle)
        neighbours = [balance.Neighbour(n, lo) for n, lo in loads.items() if n in ov.table]
        policy = balance.Policy(max_moves=min(s.balance_max_moves, s.balance_max_delegations - len(d.own)),
                                min_gap=s.balance_min_gap, min_ratio=s.balance_min_ratio)
        moves = balance.plan(ov.me.node_id, me, hosts, neighbours, policy)
        for m in moves:
            to = ov.table.get(m.target)
            if to is not None:
                d.delegate(m.key, to, now)
                ov.stats.overlay_delegations += 1
                log.info("balance: %s (%d URLs) delegated to %s (bucket %d)", m.host, m.urls, to.agent_id, m.bucket)
        return self._changed(changed or bool(moves))

    def owns(self, key: int) -> bool:
        """Is this node the key's XOR owner by its own view (only the XOR owner may delegate)?"""
        xor = self.xor_list(key, [])
        return bool(xor) and xor[0].node_id == self.overlay.me.node_id

    def _changed(self, changed: bool) -> bool:
        """A change of this node's delegations is a change of placement: a new epoch."""
        if changed:
            self.overlay.placement_changed()
        return changed

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

    async def live_agents(self) -> LiveAgents:
        """This node's view: itself (unless it left) and every contact of its routing table (a
        neighbour stays until the ping rounds declare it dead). Not per epoch: a far node's
        death changes the table without an epoch here (Overlay._remove), so it is read each time."""
        members = self.overlay.members()
        return LiveAgents(self.overlay.epoch, {c.agent_id: c.address for c in members}, per_epoch=False)

    def xor_list(self, key: int, looked_up: list[Contact]) -> list[Contact]:
        """The key's closest live nodes by this node's view: what the lookup found, what the table
        holds (a neighbour stays until the ping rounds declare it dead), and this node."""
        ov = self.overlay
        cands = {c.node_id: c for c in (*looked_up, *ov.table.closest(key, self.preference_length))}
        if not ov.left:
            cands[ov.me.node_id] = ov.me
        return sorted(cands.values(), key=lambda c: c.node_id ^ key)[: self.preference_length]

    def preference(self, key: int, looked_up: list[Contact]) -> list[Contact]:
        """The XOR list, with the key's delegate first when its XOR owner (by this node's view:
        nobody else may delegate the key) delegated it to a node that is live here; the owner
        follows, so it is the delegate's first backup and a previous holder the handover takes."""
        xor = self.xor_list(key, looked_up)
        d = self.overlay.balancing.delegate_of(key, xor[0].node_id) if xor else None
        if d is None:
            return xor
        ov = self.overlay
        live = ov.me if d.node_id == ov.me.node_id and not ov.left else ov.table.get(d.node_id)
        if live is None or live.node_id == xor[0].node_id:
            return xor
        return [live, *(c for c in xor if c.node_id != live.node_id)][: self.preference_length]

    async def close(self) -> None:
        await self.overlay.transport.close()


def node_load(r: common_pb2.LoadReport) -> NodeLoad:
    """A heartbeat's LoadReport as this node's Pings carry it (the consultant's runtime model)."""
    rate = loadmodel.model_rate(r.queue_length, r.work_area, r.pages_per_second, r.peak_pages_per_second)
    return NodeLoad(queue=r.queue_length, work_area=r.work_area, rate=rate, level=r.load_level)


def kademlia_placement(settings: AgentSettings, address: str, *, clock) -> KademliaPlacement:
    """The overlay node of this agent (its own client pool: overlay channels verify node ids)."""
    tls = grpcutil.effective_tls(settings.tls)
    me = Contact(node_id_for(settings), settings.agent_id, address)
    transport = GrpcTransport(AgentPool(tls=settings.tls), secure=not tls.insecure,
                              timeout=min(2.0, settings.kademlia.lease_seconds / 5))
    return KademliaPlacement(Overlay(me, settings.kademlia, transport, clock=clock),
                             backups=settings.replication.backups,
                             heartbeat=settings.heartbeat_interval or settings.kademlia.lease_seconds / 3)
