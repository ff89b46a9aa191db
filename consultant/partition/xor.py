"""Kademlia XOR-distance partitioning (seeds 000 and 001), with virtual ids per agent."""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from consultant.partition.base import AgentView, Partitioner, Placement, Scored, Site, register
from wancrawl.kademlia import xorspace

ID_BITS = 160  # SHA-1 sized ids, as in Kademlia


@dataclass(frozen=True)
class XorOptions:
    # Virtual ids per agent. One id per agent is textbook Kademlia, but with 10 agents the XOR
    # trie cannot split the key space more evenly than 1.25x the mean; 512 ids bring the
    # busiest agent within ~1.1x (measured in docs/partitioners.md).
    virtual_ids: int = 512

    def __post_init__(self) -> None:
        if not 1 <= self.virtual_ids <= 4096:
            raise ValueError("xor.virtual_ids must be between 1 and 4096")


def node_key(text: str) -> int:
    return int.from_bytes(hashlib.sha1(text.encode()).digest(), "big")


host_key = xorspace.host_key  # the same key in both modes (wancrawl/kademlia/xorspace.py)


def xor_order(ids: Sequence[int], key: int, lo: int, hi: int) -> Iterator[int]:
    """Indices of the sorted `ids[lo:hi]` in increasing XOR distance to `key`.

    A walk down the binary trie that the sorted ids form: at each split, the half whose bit
    matches the key's is nearer than every id of the other half. Lazy, so finding the k
    nearest distinct agents touches about log2(len(ids)) + k ids.
    """
    if hi - lo <= 4:
        yield from sorted(range(lo, hi), key=lambda i: ids[i] ^ key)
        return
    # All ids in the range share the bits above the highest bit where the ends differ.
    bit = (ids[lo] ^ ids[hi - 1]).bit_length() - 1
    split = ((ids[lo] >> (bit + 1)) << (bit + 1)) | (1 << bit)
    mid = bisect_left(ids, split, lo, hi)
    if (key >> bit) & 1:
        yield from xor_order(ids, key, mid, hi)
        yield from xor_order(ids, key, lo, mid)
    else:
        yield from xor_order(ids, key, lo, mid)
        yield from xor_order(ids, key, mid, hi)


class XorPlacement:
    """Owner = the agent with a virtual id XOR-closest to the host's key.

    An agent's distance to a host is the smallest over its virtual ids, so removing an agent
    changes no other agent's distance (only its hosts move, to their first backup) and a new
    agent takes only the hosts it is now closest to.
    """

    def __init__(self, agents: Sequence[AgentView], virtual_ids: int):
        self.agents = list(agents)
        pairs = sorted(
            (node_key(a.agent_id if virtual_ids == 1 else f"{a.agent_id}#{v}"), i)
            for i, a in enumerate(self.agents)
            for v in range(virtual_ids)
        )
        self.ids = [p[0] for p in pairs]
        self.owner_of = [p[1] for p in pairs]

    def rank(self, site: Site, k: int) -> list[int]:
        key = host_key(site.host)
        out: list[int] = []
        seen: set[int] = set()
        k = min(k, len(self.agents))
        for vi in xor_order(self.ids, key, 0, len(self.ids)):
            a = self.owner_of[vi]
            if a not in seen:
                seen.add(a)
                out.append(a)
                if len(out) == k:
                    break
        return out

    def explain(self, site: Site) -> list[Scored]:
        key = host_key(site.host)
        best: dict[int, int] = {}
        for vid, a in zip(self.ids, self.owner_of):
            d = vid ^ key
            if a not in best or d < best[a]:
                best[a] = d
        order = self.rank(site, len(self.agents))
        out = []
        for a in order:
            d = best[a]
            log2d = math.log2(d) if d else -1.0
            # Score: leading bits shared with the host key (higher = closer).
            out.append(Scored(a, ID_BITS - (log2d + 1), f"XOR distance 2^{log2d:.2f} (common prefix {ID_BITS - d.bit_length()} bits)"))
        return out


@register("xor")
class XorPartitioner(Partitioner):
    Options = XorOptions
    options: XorOptions

    def bind(self, agents: Sequence[AgentView]) -> Placement:
        return XorPlacement(agents, self.options.virtual_ids)
