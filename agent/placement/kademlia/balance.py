"""Load balancing by diffusion among k-bucket regions (seed 000 §1.4.2), pure: loads in, moves out.

Each node plans for itself only, from what its Pings told it (docs/kademlia.md, "Load balancing in
this mode"): there is no global view, as in the paper ("节点只知道局部的节点负载情况"). A heavy
node (seed 000's L > 0, i.e. its queue Q above its work area W) walks its routing table's
regions from near to far, bucket i being the contacts whose firstdiff with its id is i (distance
in [2^i, 2^(i+1))). A region takes a host only if it is light as a whole with it: the region's
free room, -sum(Q - W), exceeds the host's queued URLs (the paper's L_k + L < 0 for the one block
that moves). In the first region that can help, the move that leaves the pair most even goes
(the consultant's rule, consultant/balance.py, on the shared runtime model wancrawl/loadmodel.py:
runtime t = Q / v; a move needs the source's runtime `min_gap` above the target's and
`min_ratio` times it, and must lower the larger of the two). So every move is from a heavier
node to a lighter one and the model's maximum never goes up. The unit that moves is a host.

Phase 2 (docs/balance.md), as far as a node without a consultant can take it: the allocator's
answer for runtimes linear in the tasks, each node's share of its neighbourhood's queued URLs in
proportion to the rates (`targets`, wancrawl/loadmodel.py `split`), computed once per round
over this node and the neighbours its Pings reported; a move then also goes from over its
target to under it and brings the pair nearer both (loadmodel.nearer_targets). No capacity
model here: the rates are the load reports' (the model is fitted by the consultant).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from wancrawl import loadmodel
from wancrawl.kademlia import xorspace


@dataclass(frozen=True)
class NodeLoad:
    """One node's load as its Pings carry it (agent.proto NodeLoad)."""

    queue: int          # Q: URLs queued
    work_area: float    # W: URLs it fetches in one balance period
    rate: float         # v: pages/s of the runtime model (wancrawl/loadmodel.py model_rate)
    level: float = 0.0  # seed 000's L = (Q - W)/H, as reported (shown; the plan works in URLs)

    @property
    def excess(self) -> float:
        """E = Q - W = L * H: > 0 heavy, < 0 light."""
        return self.queue - self.work_area

    @property
    def runtime(self) -> float:
        return self.queue / self.rate if self.rate > 0 else math.inf


@dataclass(frozen=True)
class Neighbour:
    node_id: int
    load: NodeLoad


@dataclass(frozen=True)
class Host:
    """A host this node may delegate: it is its XOR owner and has not delegated it yet."""

    name: str
    key: int
    urls: int   # queued here
    # The nodes it may be delegated to: its key's XOR preference list (owner and backups), the
    # list storage checks a capture's sender against in this mode (it knows no delegations, so a
    # delegate outside it has every page refused: docs/balance.md). None: any node.
    placed: frozenset[int] | None = None


@dataclass(frozen=True)
class Move:
    host: str
    key: int
    target: int   # node id
    urls: int
    bucket: int   # the target's region: firstdiff(self id, target id)


@dataclass(frozen=True)
class Policy:
    max_moves: int = 4
    min_gap: float = 5.0
    min_ratio: float = 1.5
    min_urls: int = 1


def regions(self_id: int, neighbours: Iterable[Neighbour]) -> list[tuple[int, list[Neighbour]]]:
    """The neighbours grouped by k-bucket, nearest bucket first; each group by XOR distance."""
    groups: dict[int, list[Neighbour]] = {}
    for n in neighbours:
        if n.node_id != self_id:
            groups.setdefault(xorspace.firstdiff(self_id, n.node_id), []).append(n)
    return [(b, sorted(groups[b], key=lambda n: n.node_id ^ self_id)) for b in sorted(groups)]


Targets = dict[int, float | None]  # node id -> its share of the neighbourhood's queued URLs (None: unknown)


def targets(self_id: int, me: NodeLoad, neighbours: Iterable[Neighbour]) -> Targets:
    """Each node's share of the queued URLs of this node and its neighbours, in proportion to
    their rates (loadmodel.split: the allocator's answer for linear runtimes)."""
    nodes = [(self_id, me)] + [(n.node_id, n.load) for n in neighbours if n.node_id != self_id]
    shares = loadmodel.split([lo.queue for _, lo in nodes], [lo.rate for _, lo in nodes])
    return {i: t for (i, _), t in zip(nodes, shares)}


def candidate(me: NodeLoad, dst: NodeLoad, urls: int, room: float, policy: Policy,
              me_target: float | None = None, dst_target: float | None = None) -> bool:
    """May a host of `urls` URLs go from this node to dst, in a region with `room` free URLs
    (and, given the targets, from over its share to under dst's, nearer both)?"""
    return (me.excess > 0 and dst.excess < 0 and me.rate > 0 and dst.rate > 0 and math.isfinite(dst.rate)
            and urls < room and loadmodel.worth(me.runtime, dst.runtime, policy.min_gap, policy.min_ratio)
            and loadmodel.improves(me.queue, me.rate, dst.queue, dst.rate, urls)
            and loadmodel.nearer_targets(me.queue, me_target, dst.queue, dst_target, urls))


def best_move(self_id: int, me: NodeLoad, hosts: list[Host], neighbours: list[Neighbour], policy: Policy,
              shares: Targets | None = None) -> Move | None:
    """Seed 000's search: the first region, near to far, that is light enough for one of the
    hosts; in it, the light node and host whose move leaves the pair most even (smallest
    larger runtime; then the larger host: more per move)."""
    for bucket, region in regions(self_id, neighbours):
        room = -sum(n.load.excess for n in region)
        best: tuple[float, int, int, str, int] | None = None
        for n in region:
            for h in hosts:
                if h.placed is not None and n.node_id not in h.placed:
                    continue
                if not candidate(me, n.load, h.urls, room, policy, *_pair(shares, self_id, n.node_id)):
                    continue
                peak = loadmodel.peak_after(me.queue, me.rate, n.load.queue, n.load.rate, h.urls)
                key = (peak, -h.urls, n.node_id ^ self_id, h.name, n.node_id)
                if best is None or key < best:
                    best = key
        if best is not None:
            _peak, neg_urls, _d, name, target = best
            h = next(h for h in hosts if h.name == name)
            return Move(name, h.key, target, -neg_urls, bucket)
    return None


def _pair(shares: Targets | None, a: int, b: int) -> tuple[float | None, float | None]:
    return (None, None) if shares is None else (shares.get(a), shares.get(b))


def plan(self_id: int, me: NodeLoad, hosts: Iterable[Host], neighbours: Iterable[Neighbour],
         policy: Policy = Policy(), use_targets: bool = True) -> list[Move]:
    """This node's moves for one round, at most `policy.max_moves`, each host once. The model is
    updated after each move (this node's queue down, the target's up) before the next is planned,
    so a region that took a host may be full for the next one. `use_targets`: the shares of
    `targets`, fixed for the round (False: phase 1's rules alone)."""
    neighbours = list(neighbours)
    shares = targets(self_id, me, neighbours) if use_targets else None
    movable = sorted((h for h in hosts if h.urls >= policy.min_urls), key=lambda h: (-h.urls, h.name))
    model = {n.node_id: n for n in neighbours if n.node_id != self_id}
    moves: list[Move] = []
    while len(moves) < policy.max_moves and movable and me.excess > 0:
        m = best_move(self_id, me, movable, list(model.values()), policy, shares)
        if m is None:
            break
        moves.append(m)
        movable = [h for h in movable if h.name != m.host]
        me = replace(me, queue=me.queue - m.urls)
        t = model[m.target]
        model[m.target] = Neighbour(t.node_id, replace(t.load, queue=t.load.queue + m.urls))
    return moves
