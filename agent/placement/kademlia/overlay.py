"""Overlay: this node's membership of the Kademlia overlay (seed 001 §2.1-2.4, the Kademlia
paper §2): its routing table of verified contacts, the view epoch, the neighbourhood pings that
are its lease, failure detection, join, leave, and the PING / FIND_NODE / LEAVE answers.

Decisions (docs/kademlia.md says why):

* A contact enters the routing table only after it answered a Ping over a channel that verified
  its id (TLS with the id's name, wancrawl/kademlia/xorspace.py id_san): a node cannot put a contact that
  is not its own certificate's into another's table, so nobody sits at an id next to a victim's
  hosts. A caller's own contact is checked against its certificate on every call
  (`check_caller`, in the server).
* The epoch is a Lamport clock over view changes: a node that adds or removes a neighbour takes
  max(epochs seen) + 1, and every message carries it; after the overlay settles every node
  answers the same epoch. Only changes among the k closest to this node bump it (the ones that
  can move this node's hosts and replicas): at internet scale a far bucket's churn costs nothing.
* The lease: with every heartbeat (a third of the lease) the node pings its k closest contacts; the lease is renewed
  (to the round's send time + lease) only when every one of them answered. A neighbour silent
  for `dead_after` (>= the lease, on the neighbour's clock from the last message it got) is
  declared dead, so the owner's fence has closed before its backup promotes. A node that hears
  from nobody declares nobody dead (it is the one cut off) and keeps its lease lapsed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from agent.placement.kademlia.balance import NodeLoad
from agent.peers import AnsweredAt
from agent.placement.kademlia.delegation import Announce, Delegations
from agent.settings import KademliaSettings
from wancrawl import errors
from wancrawl.kademlia import xorspace
from wancrawl.kademlia.disjoint import lookup_disjoint
from wancrawl.kademlia.lookup import LookupStats
from wancrawl.kademlia.table import Contact, RoutingTable
from wancrawl.stats import Counters
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")

FIND_BATCH = 1_000  # targets per FindNode (agent/validate.py MAX_FIND_TARGETS)
VIEW_LOG = 1_000    # view changes kept for changes_since (older: a full look at every host)
PENDING_MAX = 1_000  # contacts heard of and waiting to be verified
PENDING_TRIES = 10   # failed pings before such a contact is forgotten


@dataclass(frozen=True)
class ViewChanges:
    """The changes of this node's view after a given seq: newcomers, and whether any node went.
    A host can change place for this node only if a newcomer is closer to it than this node
    (it moves there), or a node went (this node may promote a replica or need a new backup)."""

    seq: int
    me: int
    joined: tuple[int, ...]
    removed: bool


class Transport(Protocol):
    """The RPCs the overlay sends (the gRPC one is agent/placement/kademlia/grpc.py; tests run
    nodes in memory). Every call raises errors.WancrawlError when the contact does not answer
    as itself."""

    async def ping(self, to: Contact, me: Contact, epoch: int, said: Announce) -> tuple[Contact, int, Announce]: ...
    async def find_node(self, to: Contact, me: Contact, targets: list[int], count: int,
                        epoch: int) -> tuple[list[list[Contact]], int]: ...
    async def leave(self, to: Contact, me: Contact) -> None: ...
    async def bootstrap_ping(self, address: str, me: Contact, epoch: int,
                             said: Announce) -> tuple[Contact, int, Announce]: ...
    async def close(self) -> None: ...


def to_proto(c: Contact) -> agent_pb2.Contact:
    return agent_pb2.Contact(node_id=xorspace.id_bytes(c.node_id), agent_id=c.agent_id, address=c.address)


def from_proto(c: agent_pb2.Contact) -> Contact:
    return Contact(xorspace.id_from_bytes(c.node_id), c.agent_id, c.address)


def announce_to_proto(a: Announce, msg: agent_pb2.PingRequest | agent_pb2.PingResponse) -> None:
    """Fill a Ping message's load and delegations from `a`."""
    if a.load is not None:
        msg.load.CopyFrom(agent_pb2.NodeLoad(load_level=a.load.level, work_area=a.load.work_area,
                                             queue_length=a.load.queue, rate=a.load.rate))
    msg.delegations.extend(agent_pb2.Delegation(key=xorspace.id_bytes(k), delegate=to_proto(d)) for k, d in a.delegations)


def announce_from_proto(msg: agent_pb2.PingRequest | agent_pb2.PingResponse) -> Announce:
    """The Announce of a Ping message whose fields were checked (agent/validate.py ping_announce)."""
    load = None
    if msg.HasField("load"):
        m = msg.load
        load = NodeLoad(queue=m.queue_length, work_area=m.work_area, rate=m.rate, level=m.load_level)
    return Announce(load, tuple((xorspace.id_from_bytes(d.key), from_proto(d.delegate)) for d in msg.delegations))


@dataclass
class Round:
    """What one ping round of the neighbourhood found."""

    sent: float
    asked: int
    answered: int
    dead: list[Contact]

    @property
    def complete(self) -> bool:
        """Every neighbour answered, or was silent long enough to be declared dead now."""
        return self.answered + len(self.dead) == self.asked


@dataclass(slots=True)
class OverlayCounters(Counters):
    """The overlay's RPCs, contacts admitted, lost and refused, lookups and delegations (the metric
    names: agent/metrics.py HELP)."""
    overlay_pings: int = 0
    overlay_find_nodes: int = 0
    overlay_rpc_failures: int = 0
    overlay_dead: int = 0
    overlay_joined: int = 0
    overlay_find_nodes_answered: int = 0
    overlay_left: int = 0
    overlay_refused_ids: int = 0
    overlay_lookups: int = 0
    overlay_delegations: int = 0


class Overlay:
    """Owns the routing table, when each contact was last heard from, the view epoch and whether
    this node has left. Inbound messages (`pinged`, `find`, `left_by`) and outbound rounds
    (`join`, `ping_round`, `refresh`, `leave`) are the only writers."""

    def __init__(self, me: Contact, settings: KademliaSettings, transport: Transport, *,
                 clock: Callable[[], float], rng: random.Random | None = None):
        self.me = me
        self.s = settings
        self.transport = transport
        self.clock = clock
        self.rng = rng or random.Random(me.node_id)
        self.table = RoutingTable(me.node_id, k=settings.k)
        self.epoch = 0
        self.joined = False
        self.left = False
        # node id -> clock time of the last message from it (an answer, or a call it made).
        self._heard: dict[int, float] = {}
        # Contacts being verified (a Ping under way): not asked twice at once.
        self._verifying: set[int] = set()
        # Contacts heard of but not (yet) verified: in FindNode answers, or whose ping back
        # failed (a slow moment). Each ping round tries a few again, so a pair of nodes that
        # missed each other once still meet (nothing else would: neither pings the other).
        # node id -> (contact, tries so far); bounded.
        self._pending: dict[int, tuple[Contact, int]] = {}
        # Load balancing (docs/kademlia.md): loads and delegations heard in Pings, and this node's own.
        self.balancing = Delegations(me, limit=settings.balance_max_delegations)
        self.lookup_stats = LookupStats()  # the batched lookups' calls and rounds, since start
        # The view's changes, for ownership to look only at the hosts they can move (seed 000's
        # firstdiff, agent/state/keyindex.py): (seq, "join" | "remove" | "reset", node id).
        # "reset" (this node joined or came back): anything may have moved.
        self.seq = 0
        self._log: collections.deque[tuple[int, str, int]] = collections.deque(maxlen=VIEW_LOG)
        self.stats = OverlayCounters()

    def gauges(self) -> dict[str, float]:
        """Verified contacts, the view epoch and the delegations now (docs/kademlia.md)."""
        return {"overlay_contacts": len(self.table), "overlay_epoch": self.epoch, **self.balancing.gauges()}

    # -- the view ---------------------------------------------------------------------------------
    def neighbourhood(self) -> list[Contact]:
        """The k contacts closest to this node: the ones that can take its hosts over."""
        return self.table.closest(self.me.node_id, self.s.k)

    def members(self) -> list[Contact]:
        """Every live contact this node knows, itself first (unless it left)."""
        return ([] if self.left else [self.me]) + self.table.contacts()

    def saw_epoch(self, epoch: int) -> None:
        self.epoch = max(self.epoch, epoch)

    def _near(self, c: Contact) -> bool:
        """Is c one of this node's k closest (can it hold this node's hosts or replicas)?"""
        near = self.table.closest(self.me.node_id, self.s.k)
        return len(near) < self.s.k or (c.node_id ^ self.me.node_id) <= (near[-1].node_id ^ self.me.node_id)

    def _admit(self, c: Contact, now: float) -> None:
        """c answered as itself: into the table (or refreshed there)."""
        if c.node_id == self.me.node_id:
            return
        new = c.node_id not in self.table
        self._heard[c.node_id] = now
        lrs = self.table.touch(c, now)
        if new and c.node_id in self.table:
            self._note("join", c.node_id)
            # No new epoch here: the newcomer took one when it joined (or came back) and carries
            # it in its messages, which every node adopts; so one change is one epoch everywhere.
            self.stats.overlay_joined += 1
        elif lrs is not None:
            # Full bucket: the least-recently seen contact is kept if it still answers
            # (Kademlia §2.2: old contacts that are alive are the most likely to stay).
            asyncio.get_running_loop().create_task(self._check_lrs(lrs))

    def _remove(self, c: Contact, why: str) -> None:
        """c is dead or left. Every node that sees it goes from the same settled epoch to the
        next one, so they agree again without a message. Delegations to or by it go with it (its
        hosts return to XOR placement), and that too is a change of placement."""
        near = self._near(c)
        if self.table.remove(c.node_id) is not None:
            self._heard.pop(c.node_id, None)
            if why == "dead":
                self.stats.overlay_dead += 1
            else:
                self.stats.overlay_left += 1
            log.info("overlay: %s (%s) %s", c.agent_id, xorspace.id_hex(c.node_id)[:8], why)
            self._note("remove", c.node_id)
            if self.balancing.forget(c.node_id):
                self.placement_changed()
            elif near:
                self.epoch += 1

    def placement_changed(self) -> None:
        """Delegations changed (load balancing): hosts may move anywhere in this node's view, so a
        new epoch and a full look at every host (no firstdiff range says which)."""
        self.epoch += 1
        self._note("reset", self.me.node_id)

    def _note(self, kind: str, node_id: int) -> None:
        self.seq += 1
        self._log.append((self.seq, kind, node_id))

    def changes_since(self, seq: int) -> ViewChanges | None:
        """What changed after `seq`; None when it cannot say exactly (a reset, or older than the
        log keeps): then every host must be looked at."""
        if seq >= self.seq:
            return ViewChanges(self.seq, self.me.node_id, (), False)
        if not self._log or self._log[0][0] > seq + 1:
            return None
        joined: list[int] = []
        removed = False
        for n, kind, node in self._log:
            if n <= seq:
                continue
            if kind == "reset":
                return None
            if kind == "join":
                joined.append(node)
            else:
                removed = True
        return ViewChanges(self.seq, self.me.node_id, tuple(joined), removed)

    def learned(self, sender: int, epoch: int, said: Announce) -> None:
        """A verified node's epoch and announcements. When its delegations changed, this node's
        epoch must go up (so its cached routes are asked again and its hosts settle): to the
        sender's epoch when that is newer (the sender took it for this change), else by one."""
        before = self.epoch
        self.saw_epoch(epoch)
        if self.balancing.heard(sender, said, self.clock()):
            if self.epoch == before:
                self.epoch += 1
            self._note("reset", sender)

    async def _check_lrs(self, lrs: Contact) -> None:
        try:
            who, epoch, said = await self.transport.ping(lrs, self.me, self.epoch, self.balancing.announce())
        except errors.WancrawlError:
            self.stats.overlay_rpc_failures += 1
            self._remove(lrs, "dead")
            return
        self.saw_epoch(epoch)
        if who == lrs:
            self.learned(lrs.node_id, epoch, said)
        self._heard[lrs.node_id] = self.clock()
        self.table.touch(lrs, self.clock())

    async def verify(self, c: Contact) -> bool:
        """Ping c over a channel that checks its id; admit it when it answers as itself."""
        if c.node_id == self.me.node_id or c.node_id in self._verifying or self.left:
            return c.node_id in self.table
        self._verifying.add(c.node_id)
        try:
            self.stats.overlay_pings += 1
            who, epoch, said = await self.transport.ping(c, self.me, self.epoch, self.balancing.announce())
        except errors.WancrawlError:
            self.stats.overlay_rpc_failures += 1
            self._candidate(c, failed=True)
            return False
        finally:
            self._verifying.discard(c.node_id)
        if who != c:
            self.stats.overlay_refused_ids += 1
            self._pending.pop(c.node_id, None)  # another key answers there: never this contact
            return False
        self._pending.pop(c.node_id, None)
        self._admit(c, self.clock())
        self.learned(c.node_id, epoch, said)
        return True

    def _candidate(self, c: Contact, *, failed: bool = False) -> None:
        """Remember a contact to verify in a later round (at most PENDING_TRIES tries)."""
        if c.node_id == self.me.node_id or c.node_id in self.table or self.left:
            return
        _, tries = self._pending.get(c.node_id, (c, 0))
        tries += failed
        if tries >= PENDING_TRIES:
            self._pending.pop(c.node_id, None)
        elif c.node_id in self._pending or len(self._pending) < PENDING_MAX:
            self._pending[c.node_id] = (c, tries)

    async def verify_pending(self) -> None:
        """Try again up to k contacts heard of but not verified yet."""
        for node_id in [n for n in self._pending if n in self.table]:
            del self._pending[node_id]  # admitted meanwhile (it called, or a lookup reached it)
        batch = [c for c, _ in list(self._pending.values())[: self.s.k]]
        if batch:
            await asyncio.gather(*(self.verify(c) for c in batch))

    # -- inbound ----------------------------------------------------------------------------------
    async def heard_from(self, sender: Contact, epoch: int, said: Announce | None = None) -> None:
        """A verified caller (its id checked against its certificate by the server): known
        contacts are refreshed; a new one (or one at a new address) is pinged back before it
        enters the table, since its address must answer with its id: a caller naming an address
        that does not answer would otherwise sit among the k closest and stall every lease.

        The call is answered after that, and the epoch it carries adopted after it: a joiner's
        announcement (agent/placement/kademlia/overlay.py join) then always finds it admitted,
        so the new epoch's settle sees the newcomer. What a Ping says (load, delegations; None
        for the other calls) is taken from a contact in the table only."""
        if not self.left and sender.node_id != self.me.node_id:
            known = self.table.get(sender.node_id)
            if known == sender:
                self._heard[sender.node_id] = self.clock()
                self.table.touch(sender, self.clock())
            else:
                await self.verify(sender)
            if said is not None and self.table.get(sender.node_id) == sender:
                self.learned(sender.node_id, epoch, said)
                return
        self.saw_epoch(epoch)

    def find(self, targets: Iterable[int], count: int) -> list[list[Contact]]:
        """FIND_NODE: the `count` closest this node knows to each target, itself included."""
        self.stats.overlay_find_nodes_answered += 1
        out = []
        for t in targets:
            near = self.table.closest(t, count)
            if not self.left:
                near.append(self.me)
                near.sort(key=lambda c: c.node_id ^ t)
                near = near[:count]
            out.append(near)
        return out

    def left_by(self, sender: Contact) -> None:
        """LEAVE: the sender is gone for good."""
        self._remove(sender, "left")

    # -- outbound ---------------------------------------------------------------------------------
    async def join(self) -> bool:
        """Join through the bootstrap peers (Kademlia §2.3): ping them, look up this node's own
        id, then refresh every bucket farther than the closest neighbour. True when some peer
        answered, or when there is nobody to join (the first node)."""
        self.left = False
        others = [a for a in self.s.bootstrap if a != self.me.address]
        answered = False
        for addr in others:
            try:
                self.stats.overlay_pings += 1
                who, epoch, _said = await self.transport.bootstrap_ping(addr, self.me, self.epoch, self.balancing.announce())
            except errors.WancrawlError as exc:
                log.info("overlay: bootstrap %s does not answer (%s)", addr, exc)
                continue
            self.saw_epoch(epoch)
            answered = await self.verify(who) or answered
        if others and not answered and len(self.table) == 0:
            return False
        await self.lookup([self.me.node_id], force=True)
        await self.refresh(force=True)
        # A join is one change: this node takes the next epoch and tells its neighbourhood,
        # which adopts it (they admitted this node while it was looking up).
        self.epoch += 1
        self.joined = True
        self._note("reset", self.me.node_id)
        await asyncio.gather(*(self._ping(c) for c in self.neighbourhood()))
        return True

    @property
    def complete(self) -> bool:
        """The table holds every node of the overlay: fewer than k contacts. Then every node that
        knows this one is among its k closest and pings it with each heartbeat (and a joiner
        looks up its own id among its k closest), so this node has admitted all of them, and a
        lookup could only find what the table holds."""
        return len(self.table) < self.s.k

    async def lookup(self, keys: list[int], *, force: bool = False) -> dict[int, list[Contact]]:
        """Iterative FIND_NODE for every key at once (batched per contact); the contacts that
        answered are verified and join the table. Results exclude this node. Skipped (empty
        results: the table answers) while the table is complete, unless forced (join, refresh)."""
        if not keys or len(self.table) == 0 or (self.complete and not force):
            return {k: [] for k in keys}
        self.stats.overlay_lookups += 1
        now = self.clock()
        for k in keys:
            self.table.refreshed(k, now)
        # Over disjoint paths (wancrawl/kademlia/disjoint.py): with a partial table, one lying
        # contact's answers feed one path at most, and the result is the union of the paths'.
        # One node per address: a contact at a verified contact's address with another id (a
        # liar's made-up one) fails without a call (agent/peers.py AnsweredAt).
        seen_at = AnsweredAt()
        for c in self.table.contacts():
            seen_at.answered(c)

        async def find_nodes(to: Contact, targets: list[int]) -> dict[int, list[Contact]]:
            seen_at.check(to)
            return await self._find_nodes(to, targets)

        found = await lookup_disjoint(keys, lambda t: self.table.closest(t, self.s.k), find_nodes, k=self.s.k,
                                      alpha=self.s.alpha, paths=self.s.paths, stats=self.lookup_stats)
        return {t: lk.result() for t, lk in found.items()}

    async def _find_nodes(self, to: Contact, targets: list[int]) -> dict[int, list[Contact]]:
        out: dict[int, list[Contact]] = {}
        for i in range(0, len(targets), FIND_BATCH):
            part = targets[i : i + FIND_BATCH]
            self.stats.overlay_find_nodes += 1
            try:
                found, epoch = await self.transport.find_node(to, self.me, part, self.s.k, self.epoch)
            except errors.WancrawlError:
                self.stats.overlay_rpc_failures += 1
                self._failed(to)
                raise
            self.saw_epoch(epoch)
            self._admit(to, self.clock())  # it answered over a channel that checked its id
            for t, cs in zip(part, found):
                out[t] = [c for c in cs if c.node_id != self.me.node_id]
                for c in out[t]:
                    if c.node_id not in self.table:
                        self._candidate(c)
        return out

    def _failed(self, c: Contact) -> None:
        """An RPC to c failed. A neighbour is judged by the ping rounds (dead_after); any other
        contact goes at once (Kademlia: stale contacts are dropped when they fail)."""
        if c.node_id in self.table and c not in self.neighbourhood():
            self._remove(c, "dead")

    async def ping_round(self) -> Round:
        """Ping the k closest; declare dead those silent for dead_after, unless nobody at all
        answered (then this node is the one cut off, and it waits)."""
        near = self.neighbourhood()
        sent = self.clock()
        quiet = sent - max(self._heard.values(), default=sent)
        # This node's delegates are pinged too (not part of the lease): they learn the
        # delegations from these pings, and a silent one is dropped (its host goes back).
        ids = {c.node_id for c in near}
        delegates = list({d.node_id: d for d, _t in self.balancing.own.values()
                          if d.node_id not in ids and d.node_id in self.table}.values())
        results = await asyncio.gather(*(self._ping(c) for c in near))
        far = await asyncio.gather(*(self._ping(c) for c in delegates))
        now = self.clock()
        for c, ok in zip(delegates, far):
            if not ok and now - self._heard.get(c.node_id, now) >= self.s.dead_after:
                self._remove(c, "dead")
        answered = sum(results)
        if answered == len(near):
            if quiet > self.s.lease_seconds and self.joined:
                # Heard from nobody for more than a lease (paused, partitioned): the others may
                # have moved this node's hosts. Coming back is a change, like a join.
                self.epoch += 1
                self._note("reset", self.me.node_id)
        dead: list[Contact] = []
        if answered or not near:
            now = self.clock()
            for c, ok in zip(near, results):
                if not ok and now - self._heard.get(c.node_id, now) >= self.s.dead_after:
                    dead.append(c)
                    self._remove(c, "dead")
        return Round(sent, len(near), answered, dead)

    async def _ping(self, c: Contact) -> bool:
        self.stats.overlay_pings += 1
        try:
            who, epoch, said = await self.transport.ping(c, self.me, self.epoch, self.balancing.announce())
        except errors.WancrawlError:
            self.stats.overlay_rpc_failures += 1
            return False
        if who != c:
            self.stats.overlay_refused_ids += 1
            return False
        self._admit(c, self.clock())
        self.learned(c.node_id, epoch, said)
        return True

    async def announce(self) -> None:
        """Tell the neighbourhood and the delegates now (after this node delegated hosts), rather
        than at the next heartbeat."""
        near = {c.node_id: c for c in self.neighbourhood()}
        for d, _t in self.balancing.own.values():
            if d.node_id in self.table:
                near.setdefault(d.node_id, d)
        await asyncio.gather(*(self._ping(c) for c in near.values()))

    async def refresh(self, force: bool = False) -> None:
        """Bucket refresh (Kademlia §2.3): a lookup of a random id in each bucket not looked up
        within refresh_interval (all of them beyond the closest neighbour when joining)."""
        interval = 0.0 if force else self.s.refresh_interval
        targets = self.table.refresh_targets(self.clock(), interval, self.rng)
        if targets:
            await self.lookup(targets, force=True)

    async def leave(self) -> None:
        """Graceful leave (seed 001 §2.4.2): tell every contact; they drop this node at once."""
        self.left = True
        self.joined = False
        contacts = self.table.contacts()
        await asyncio.gather(*(self._leave(c) for c in contacts))
        self.epoch += 1

    async def _leave(self, c: Contact) -> None:
        try:
            await self.transport.leave(c, self.me)
        except errors.WancrawlError:
            pass  # it learns from the silence (dead_after)
