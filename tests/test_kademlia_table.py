"""The Kademlia routing table (wancrawl/kademlia/table.py) against independent references:
the bucket of an id computed bit by bit, closest() against a brute-force sort by XOR over the
table's contacts, and a plain model of "who is in, who waits" for least-recently-seen eviction."""

from __future__ import annotations

import random

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from wancrawl.kademlia.table import REPLACEMENTS, Contact, RoutingTable
from wancrawl.kademlia.xorspace import ID_BITS, MAX_ID

SELF = random.Random(7).getrandbits(ID_BITS)


def ref_bucket(a: int, b: int) -> int:
    """The index of the highest differing bit, read bit by bit (not via bit_length)."""
    for i in range(ID_BITS - 1, -1, -1):
        if (a >> i) & 1 != (b >> i) & 1:
            return i
    return -1


# Ids near SELF land in the low buckets, random ones in the top few: both kinds, so small tables
# still fill buckets and exercise eviction.
near = st.integers(1, 2**10).map(lambda x: SELF ^ x)
far = st.integers(0, MAX_ID)
mid = st.tuples(st.integers(0, ID_BITS - 1), st.integers(0, MAX_ID)).map(lambda t: SELF ^ ((1 << t[0]) | (t[1] & ((1 << t[0]) - 1))))
ids = st.one_of(near, far, mid)


def contact(nid: int, gen: int = 0) -> Contact:
    return Contact(nid, f"agent-{nid % 997}-{gen}", f"127.0.0.1:{1000 + gen}")


class TableMachine(RuleBasedStateMachine):
    """Random touches, answered / unanswered pings and removals; after each step the table matches
    the model and keeps its invariants."""

    @initialize(k=st.integers(1, 4))
    def setup(self, k: int) -> None:
        self.k = k
        self.t = RoutingTable(SELF, k=k)
        self.now = 0.0
        self.members: dict[int, list[int]] = {}  # model: bucket -> ids, least recently seen first
        self.waiting: dict[int, list[int]] = {}  # model: bucket -> candidates, newest last
        self.pending: list[int] = []  # ids returned by touch() for a ping
        self.gen: dict[int, int] = {}
        self.heard: dict[int, float] = {}  # model: last time each id was touched

    def _tick(self) -> float:
        self.now += 1.0
        return self.now

    @rule(nid=ids, new_address=st.booleans())
    def touch(self, nid: int, new_address: bool) -> None:
        if new_address:
            self.gen[nid] = self.gen.get(nid, 0) + 1
        c = contact(nid, self.gen.get(nid, 0))
        before = {x.node_id for x in self.t.contacts()}
        out = self.t.touch(c, self._tick())
        self.heard[nid] = self.now
        after = {x.node_id for x in self.t.contacts()}
        assert before <= after  # eviction only through remove()
        if nid == SELF:
            assert out is None and SELF not in self.t
            return
        b = ref_bucket(SELF, nid)
        m = self.members.setdefault(b, [])
        w = self.waiting.setdefault(b, [])
        if nid in m:
            m.remove(nid)
            m.append(nid)
            assert out is None
            assert self.t.get(nid) == c  # a changed address replaces the old contact
        elif len(m) < self.k:
            m.append(nid)
            if nid in w:
                w.remove(nid)
            assert out is None
        else:
            if nid in w:
                w.remove(nid)
            w.append(nid)
            del w[:-REPLACEMENTS]  # the oldest candidates drop out
            assert out is not None and out.node_id == m[0]  # the least recently seen, to ping
            assert nid not in self.t
            self.pending.append(out.node_id)

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), answers=st.booleans())
    def ping_result(self, data: st.DataObject, answers: bool) -> None:
        nid = data.draw(st.sampled_from(self.pending))
        self.pending.remove(nid)
        if nid not in self.t:
            return
        if answers:
            self.touch(nid, False)
        else:
            self.remove(nid)

    @rule(nid=ids)
    def remove_any(self, nid: int) -> None:
        self.remove(nid)

    @precondition(lambda self: any(self.members.values()))
    @rule(data=st.data())
    def remove_member(self, data: st.DataObject) -> None:
        nid = data.draw(st.sampled_from(sorted(x for m in self.members.values() for x in m)))
        self.remove(nid)

    def remove(self, nid: int) -> None:
        c = self.t.get(nid)
        out = self.t.remove(nid)
        assert out == c
        b = ref_bucket(SELF, nid)
        m = self.members.get(b, [])
        w = self.waiting.get(b, [])
        if nid in w:
            w.remove(nid)
        if nid in m:
            m.remove(nid)
            if w:
                # The newest candidate is admitted, in its place by the time it was last heard from.
                new = w.pop()
                m.append(new)
                m.sort(key=lambda x: self.heard[x])
        assert nid not in self.t

    @invariant()
    def matches_model_and_invariants(self) -> None:
        if not hasattr(self, "t"):
            return
        total = 0
        for b in set(self.members) | {self.t.bucket_of(c.node_id) for c in self.t.contacts()}:
            got = [c.node_id for c in self.t.bucket(b)]
            assert got == self.members.get(b, [])
            assert len(got) <= self.k
            assert all(ref_bucket(SELF, x) == b and self.t.bucket_of(x) == b for x in got)
            seen = [self.t.last_seen(x) for x in got]
            assert seen == sorted(seen)  # least recently seen first
            total += len(got)
        assert len(self.t) == total == len(self.t.contacts())
        assert SELF not in self.t
        assert self.t.last_seen(SELF) == float("-inf")


TableMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=50, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
test_table_state_machine = TableMachine.TestCase


@settings(max_examples=200, deadline=None)
@given(members=st.lists(ids, max_size=120), key=st.one_of(ids, st.just(SELF)), n=st.integers(0, 30), k=st.integers(1, 8))
def test_closest_is_brute_force(members: list[int], key: int, n: int, k: int) -> None:
    t = RoutingTable(SELF, k=k)
    for i, nid in enumerate(members):
        evict = t.touch(contact(nid), float(i))
        if evict is not None and i % 2:  # some pings fail: their candidates come in
            t.remove(evict.node_id)
    ref = sorted(t.contacts(), key=lambda c: c.node_id ^ key)[:n]
    assert t.closest(key, n) == ref
    assert all(c.node_id != SELF for c in t.closest(key, n))


@settings(max_examples=100, deadline=None)
@given(members=st.lists(ids, min_size=1, max_size=80), seed=st.integers(0, 2**32))
def test_refresh_targets(members: list[int], seed: int) -> None:
    t = RoutingTable(SELF, k=3)
    for i, nid in enumerate(members):
        t.touch(contact(nid), float(i))
    rng = random.Random(seed)
    if len(t) == 0:
        assert t.refresh_targets(0.0, 10.0, rng) == []
        return
    nearest = min(ref_bucket(SELF, c.node_id) for c in t.contacts())
    targets = t.refresh_targets(100.0, 10.0, rng)
    # One id inside each bucket from the closest neighbour's out to the farthest.
    assert [ref_bucket(SELF, x) for x in targets] == list(range(nearest, ID_BITS))
    for x in targets[::2]:
        t.refreshed(x, 100.0)
    again = t.refresh_targets(105.0, 10.0, rng)
    assert [ref_bucket(SELF, x) for x in again] == [ref_bucket(SELF, x) for x in targets[1::2]]
    assert len(t.refresh_targets(110.0, 10.0, rng)) == len(targets)  # the interval has passed


def test_touch_self_and_unknown() -> None:
    t = RoutingTable(SELF, k=2)
    assert t.touch(contact(SELF), 1.0) is None
    assert len(t) == 0 and t.get(SELF) is None and t.remove(SELF) is None
    assert t.remove(SELF ^ 1) is None and t.closest(SELF, 5) == []
    assert "not an id" not in t
