"""Delegations: what the load balancing of the Kademlia mode knows (docs/kademlia.md, "Load
balancing in this mode"). No I/O: the overlay feeds it what Pings carry and sends what it says.

The XOR owner of a host is the authority for it. A move is a delegation: the owner says "host
key -> delegate node", and the host's preference list puts a live delegate first, then the XOR
list (agent/placement/kademlia/placement.py). The owner announces its whole set of delegations
in every Ping it sends and answers, so every node that pings it (its neighbourhood, the delegate
included: the owner pings its delegates with each heartbeat) holds the same set. A node consults,
for a key, only the set of the node that is the key's XOR owner in its own view, so a node that
announces delegations for hosts it does not own moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.placement.kademlia.balance import NodeLoad
from wancrawl.kademlia.table import Contact


@dataclass(frozen=True)
class Announce:
    """What a Ping carries besides the sender and the epoch (agent.proto NodeLoad, Delegation)."""

    load: NodeLoad | None = None
    delegations: tuple[tuple[int, Contact], ...] = ()  # (host key, delegate), at most 256


EMPTY = Announce()


class Delegations:
    """Owns this node's own delegations (key -> delegate, when made), the sets its peers
    announced (owner id -> {key: delegate}), the neighbours' loads (node id -> (load, when heard))
    and this node's own last load (set at each heartbeat)."""

    def __init__(self, me: Contact, *, limit: int = 64):
        self.me = me
        self.limit = limit
        self.own: dict[int, tuple[Contact, float]] = {}
        self.peers: dict[int, dict[int, Contact]] = {}
        self.loads: dict[int, tuple[NodeLoad, float]] = {}
        self.my_load: NodeLoad | None = None
        # Hysteresis: host key -> when it was last delegated or taken back; node id -> when this
        # node last delegated to it (its load heard before that predates the move).
        self.moved_at: dict[int, float] = {}
        self.touched_at: dict[int, float] = {}

    def announce(self) -> Announce:
        return Announce(self.my_load, tuple((k, d) for k, (d, _t) in sorted(self.own.items())))

    def heard(self, sender: int, a: Announce, now: float) -> bool:
        """A verified peer's Ping or answer. True when its announced delegations changed (the
        caller takes a new epoch, so every cached route is asked again)."""
        if a.load is not None:
            self.loads[sender] = (a.load, now)
        new = {k: d for k, d in a.delegations}
        if new == self.peers.get(sender, {}):
            return False
        if new:
            self.peers[sender] = new
        else:
            self.peers.pop(sender, None)
        return True

    def forget(self, node_id: int) -> bool:
        """node_id is dead or left: its load and announcements go, and so do this node's own
        delegations to it (the hosts return to XOR placement). True when a delegation went."""
        self.loads.pop(node_id, None)
        self.touched_at.pop(node_id, None)
        changed = self.peers.pop(node_id, None) is not None
        gone = [k for k, (d, _t) in self.own.items() if d.node_id == node_id]
        for k in gone:
            del self.own[k]
        return changed or bool(gone)

    def delegate(self, key: int, to: Contact, now: float) -> None:
        self.own[key] = (to, now)
        self.moved_at[key] = now
        self.touched_at[to.node_id] = now

    def take_back(self, keys: list[int], now: float) -> bool:
        """Own delegations of keys this node no longer owns by XOR (a closer node joined: the
        key's new owner decides now). True when any went."""
        for k in keys:
            self.own.pop(k, None)
            self.moved_at[k] = now
        return bool(keys)

    def delegate_of(self, key: int, owner: int) -> Contact | None:
        """The delegate of `key` as its XOR owner `owner` announced it (None: not delegated)."""
        if owner == self.me.node_id:
            d = self.own.get(key)
            return d[0] if d is not None else None
        return self.peers.get(owner, {}).get(key)

    def neighbour_loads(self, since: float, settle: float) -> dict[int, NodeLoad]:
        """Loads heard after `since`, leaving out a node this node delegated to less than
        `settle` seconds ago: its load does not show the host yet (the epoch must spread and
        the handover finish), and counting it light again would send it a second host."""
        return {n: load for n, (load, t) in self.loads.items()
                if t >= since and t > self.touched_at.get(n, -settle) + settle}

    def gauges(self) -> dict[str, float]:
        return {"overlay_delegations_out": len(self.own),
                "overlay_delegations_in": sum(1 for s in self.peers.values() for d in s.values() if d.node_id == self.me.node_id)}
