"""The Kademlia routing table (Kademlia §2.2, seed 001 §1.2 Table 1, seed 000 §1 "K 桶"): one
k-bucket per bit of the 160-bit id space, least-recently-seen eviction with a liveness check.

Bucket i holds the contacts whose firstdiff with self_id is i (xorspace.firstdiff: 159 is the
most significant bit), i.e. whose XOR distance to self lies in [2^i, 2^(i+1)), exactly seed
001's Table 1. Pure: the caller does the I/O (pings, lookups) and passes the clock in.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

from wancrawl.kademlia.xorspace import ID_BITS, firstdiff

# Replacement candidates kept per full bucket (Kademlia §4.1's "replacement cache"). Bounded so a
# flood of new contacts costs O(k) memory per bucket; the newest are the likeliest to be alive.
REPLACEMENTS = 20


@dataclass(frozen=True)
class Contact:
    node_id: int  # 160-bit
    agent_id: str
    address: str  # host:port


class RoutingTable:
    """k-buckets of verified contacts (bucket i holds ids whose firstdiff with self_id is i), least-recently seen first."""

    def __init__(self, self_id: int, *, k: int = 20):
        if k < 1:
            raise ValueError("k must be at least 1")
        self.self_id = self_id
        self.k = k
        # Invariants (checked by tests/test_kademlia_table.py):
        # - _buckets[i] holds at most k contacts, each with firstdiff(self_id, node_id) == i, never
        #   self_id; keyed by node_id, in the order last heard from (least recently seen first:
        #   Kademlia keeps old live contacts, which are the likeliest to stay up).
        # - _seen has exactly the node ids in the buckets (last time heard from).
        # - _replacements[i] holds candidates for bucket i with the time each was last heard from,
        #   newest last, none of them in the bucket;
        #   a contact leaves a full bucket only through remove() (the caller's failed ping or RPC).
        self._buckets: list[OrderedDict[int, Contact]] = [OrderedDict() for _ in range(ID_BITS)]
        self._replacements: list[OrderedDict[int, tuple[Contact, float]]] = [OrderedDict() for _ in range(ID_BITS)]
        self._seen: dict[int, float] = {}
        # Bit i set exactly when _buckets[i] is non-empty: closest() and refresh_targets() visit
        # the buckets in use only (a table of n nodes uses about log2(n) of the 160).
        self._used = 0
        # Time of the last lookup into each bucket's range (Kademlia §2.3's bucket refresh); -inf
        # until one is made, so a fresh table refreshes everything it can reach.
        self._refreshed: list[float] = [float("-inf")] * ID_BITS

    def bucket_of(self, node_id: int) -> int:
        """The bucket index of node_id (its firstdiff with self_id); -1 for self_id itself."""
        return firstdiff(self.self_id, node_id)

    def touch(self, c: Contact, now: float) -> Contact | None:
        """c was heard from (it is verified by the caller). Moves it to the tail of its bucket, or adds it when the bucket has room;
        returns None. When the bucket is full, keeps c as that bucket's replacement candidate and returns the bucket's
        least-recently-seen contact, which the caller should ping: call touch() on it when it answers (candidate stays a
        candidate), remove() when it does not (the newest candidate is admitted). Touching self_id is ignored (returns None).
        A contact whose address or agent_id changed is replaced by the new one."""
        i = self.bucket_of(c.node_id)
        if i < 0:
            return None
        bucket = self._buckets[i]
        if c.node_id in bucket:
            bucket[c.node_id] = c  # a changed address or agent id replaces the old one
            bucket.move_to_end(c.node_id)
            self._seen[c.node_id] = now
            return None
        if len(bucket) < self.k:
            bucket[c.node_id] = c
            self._used |= 1 << i
            self._seen[c.node_id] = now
            self._replacements[i].pop(c.node_id, None)
            return None
        repl = self._replacements[i]
        repl[c.node_id] = (c, now)
        repl.move_to_end(c.node_id)
        if len(repl) > REPLACEMENTS:
            repl.popitem(last=False)
        return next(iter(bucket.values()))

    def remove(self, node_id: int) -> Contact | None:
        """Drops node_id (it failed to answer): returns the removed contact, or None when it was not in the table (a
        replacement candidate with that id is dropped too). Admits the bucket's newest replacement candidate."""
        i = self.bucket_of(node_id)
        if i < 0:
            return None
        self._replacements[i].pop(node_id, None)
        bucket = self._buckets[i]
        c = bucket.pop(node_id, None)
        if c is None:
            return None
        del self._seen[node_id]
        if not bucket and not self._replacements[i]:
            self._used &= ~(1 << i)
        repl = self._replacements[i]
        if repl:
            _, (newest, heard) = repl.popitem(last=True)
            # The bucket stays ordered by the time each contact was last heard from: the candidate
            # goes in at its own time (remove() is rare and a bucket is at most k long).
            rest = list(bucket.items())
            at = sum(1 for nid, _ in rest if self._seen[nid] <= heard)
            rest.insert(at, (newest.node_id, newest))
            bucket.clear()
            bucket.update(rest)
            self._seen[newest.node_id] = heard
        return c

    def get(self, node_id: int) -> Contact | None:
        i = self.bucket_of(node_id)
        return self._buckets[i].get(node_id) if i >= 0 else None

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, int) and node_id in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def contacts(self) -> list[Contact]:
        """Every contact, bucket by bucket from the nearest (bucket 0), least recently seen first within one."""
        return [c for b in self._buckets for c in b.values()]

    def bucket(self, i: int) -> list[Contact]:
        """Bucket i's contacts, least recently seen first."""
        return list(self._buckets[i].values())

    def last_seen(self, node_id: int) -> float:
        return self._seen.get(node_id, float("-inf"))

    def closest(self, key: int, n: int) -> list[Contact]:
        """The n table contacts XOR-closest to key, closest first (never self).

        Walks buckets from the key's own outward instead of sorting the table. With j = firstdiff(self, key) and a
        contact c in bucket i, d(c, key) = d(c, self) ^ d(self, key), so its top bit is: below j when i == j; exactly j
        for every i < j; i when i > j. Hence bucket j holds the closest contacts, then all buckets below j (one group,
        sorted together), then buckets j+1, j+2, ... each farther than the one before."""
        if n <= 0:
            return []
        j = self.bucket_of(key)
        out: list[Contact] = []
        buckets = self._buckets

        def take(members: list[Contact]) -> bool:
            """Appends the group's closest to out; True once out holds n."""
            if len(members) > 1:
                members.sort(key=lambda c: c.node_id ^ key)
            out.extend(members[: n - len(out)])
            return len(out) >= n

        if j >= 0:
            if buckets[j] and take(list(buckets[j].values())):
                return out
            below = self._used & ((1 << j) - 1)
            if below and take([c for i in _bits(below) for c in buckets[i].values()]):
                return out
        above = self._used >> (j + 1) << (j + 1)
        while above:  # the buckets past j, nearest first, one at a time
            low = above & -above
            above ^= low
            if take(list(buckets[low.bit_length() - 1].values())):
                break
        return out

    def refreshed(self, key: int, now: float) -> None:
        """A lookup of key was made: its bucket counts as refreshed."""
        i = self.bucket_of(key)
        if i >= 0:
            self._refreshed[i] = max(self._refreshed[i], now)

    def refresh_targets(self, now: float, interval: float, rng: random.Random) -> list[int]:
        """One random id inside each bucket not refreshed within `interval` (Kademlia's bucket refresh), from the
        nearest bucket in use (the closest neighbour's) out to the farthest (159).

        "Up to the highest bucket in use" counted as libp2p does, by common prefix length: the buckets nearer than the
        closest neighbour's are empty, and a random id in any of them lies in our own neighbourhood, which the lookup
        of the nearest used bucket already covers (Kademlia §2.3's join refreshes "all buckets further away than its
        closest neighbor"). An empty table has nothing to ask: []."""
        if not self._used:
            return []
        out = []
        for i in range(_bits(self._used)[0], ID_BITS):
            if now - self._refreshed[i] >= interval:
                out.append(self.self_id ^ ((1 << i) | rng.getrandbits(i)))
        return out


def _bits(mask: int) -> list[int]:
    """The indices of the set bits of mask, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
