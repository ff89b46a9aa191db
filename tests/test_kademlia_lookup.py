"""The iterative lookup (wancrawl/kademlia/lookup.py) in a static in-memory network of a few
hundred nodes whose routing tables were filled by joins: a lookup finds exactly the true k closest
(brute force by XOR over the whole node set), and with crashed nodes the true closest live ones;
lookup_many batches one call per contact per round. Deterministic: seeded ids, no clock."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from wancrawl.kademlia.lookup import Lookup, LookupStats, lookup_many
from wancrawl.kademlia.table import Contact, RoutingTable
from wancrawl.kademlia.xorspace import ID_BITS

K, ALPHA = 8, 3


class Net:
    """Nodes, each with its own table; an RPC lets the callee learn the caller (Kademlia §2.2), and
    a contact that fails to answer is removed by whoever asked it."""

    def __init__(self, k: int = K, alpha: int = ALPHA) -> None:
        self.k, self.alpha = k, alpha
        self.tables: dict[int, RoutingTable] = {}
        self.me: dict[int, Contact] = {}
        self.dead: set[int] = set()
        self.now = 0.0
        self.calls = 0

    def heard(self, t: RoutingTable, c: Contact) -> None:
        evict = t.touch(c, self.now)
        if evict is not None:  # ping the least recently seen: it stays if alive
            if evict.node_id in self.dead:
                t.remove(evict.node_id)
            else:
                t.touch(evict, self.now)

    def find_node(self, caller: int, callee: Contact, targets: list[int]) -> dict[int, list[Contact]]:
        self.calls += 1
        self.now += 1
        if callee.node_id in self.dead:
            self.tables[caller].remove(callee.node_id)
            raise ConnectionError("dead")
        t = self.tables[callee.node_id]
        self.heard(t, self.me[caller])
        self.heard(self.tables[caller], callee)
        return {x: t.closest(x, self.k) for x in targets}

    def lookup(self, origin: int, target: int) -> Lookup:
        lk = Lookup(target, self.tables[origin].closest(target, self.k), k=self.k, alpha=self.alpha, self_id=origin)
        self.tables[origin].refreshed(target, self.now)
        while not lk.done:
            qs = lk.next_queries()
            assert qs, "a lookup that is not done has something to ask"
            for c in qs:
                try:
                    lk.answered(c, self.find_node(origin, c, [target])[target])
                except ConnectionError:
                    lk.failed(c)
        return lk

    def join(self, nid: int, bootstrap: int | None, rng: random.Random) -> None:
        """Kademlia §2.3: insert the bootstrap contact, look up one's own id, refresh the buckets
        farther than the closest neighbour (one lookup of a random id in each)."""
        self.me[nid] = Contact(nid, f"a{nid % 10007}", f"10.0.0.1:{len(self.me)}")
        self.tables[nid] = RoutingTable(nid, k=self.k)
        if bootstrap is None:
            return
        self.heard(self.tables[nid], self.me[bootstrap])
        self.lookup(nid, nid)
        for x in self.tables[nid].refresh_targets(self.now, 1e9, rng):
            self.lookup(nid, x)


def build(n: int, seed: int, k: int = K) -> tuple[Net, random.Random]:
    rng = random.Random(seed)
    net = Net(k=k)
    ids = [rng.getrandbits(ID_BITS) for _ in range(n)]
    for i, nid in enumerate(ids):
        net.join(nid, ids[0] if i else None, rng)
    return net, rng


def true_closest(ids: list[int], key: int, n: int, exclude: int) -> list[int]:
    return sorted((x for x in ids if x != exclude), key=lambda x: x ^ key)[:n]


@pytest.fixture(scope="module")
def net300() -> tuple[Net, random.Random]:
    return build(300, seed=1)


def test_lookups_find_the_true_k_closest(net300: tuple[Net, random.Random]) -> None:
    net, _ = net300
    rng = random.Random(2)
    ids = list(net.tables)
    for _ in range(150):
        origin, key = rng.choice(ids), rng.getrandbits(ID_BITS)
        if rng.random() < 0.2:
            key = rng.choice(ids)  # the lookup of a node's own id (FIND_NODE of an existing node)
        lk = net.lookup(origin, key)
        assert [c.node_id for c in lk.result()] == true_closest(ids, key, net.k, origin)
        assert 1 <= lk.hops <= 8 and lk.queried >= net.k


def test_lookups_route_around_crashed_nodes() -> None:
    net, rng = build(250, seed=3)
    ids = list(net.tables)
    net.dead = set(rng.sample(ids, 75))  # 30% crash; nobody is told
    live = [x for x in ids if x not in net.dead]
    stale_before = stale(net)
    exact = 0
    for _ in range(120):
        origin, key = rng.choice(live), rng.getrandbits(ID_BITS)
        lk = net.lookup(origin, key)
        got = [c.node_id for c in lk.result()]
        exact += check_live_result(got, true_closest(live, key, net.k, origin), key, net)
    assert exact >= 120 // 2
    assert stale(net) < stale_before  # failed RPCs dropped dead contacts from the askers' tables


def check_live_result(got: list[int], want: list[int], key: int, net: Net) -> bool:
    """With crashed nodes nobody was told about, a lookup returns live nodes only, closest first,
    and the true closest live ones: all of the first k/2 (the owner and its first backups). The
    last few of the k may be missed: the nodes that answer still list crashed contacts among
    their k closest, which crowds the k-th closest live node out of every answer until the
    crashed entries are dropped (by the failed RPCs and pings of their own lookups). True when
    the whole k matched."""
    assert not set(got) & net.dead
    assert got == sorted(got, key=lambda x: x ^ key)
    assert got[: net.k // 2] == want[: net.k // 2]
    return got == want


def stale(net: Net) -> int:
    return sum(1 for x, t in net.tables.items() if x not in net.dead for c in t.contacts() if c.node_id in net.dead)


def test_lookup_state_machine_by_hand() -> None:
    """alpha bounds what is in flight; only the k closest are asked; a failure lets the next
    closest in; hops counts the chain of answers that led to the closest result."""
    target = 0
    c = {d: Contact(d, f"n{d}", f"h:{d}") for d in range(1, 20)}
    lk = Lookup(target, [c[9], c[10], c[11], c[12]], k=2, alpha=2, self_id=5)
    first = lk.next_queries()
    assert first == [c[9], c[10]] and lk.next_queries() == [] and lk.queried == 2
    lk.answered(c[9], [c[4], c[5], c[9]])  # 5 is the asker itself, 9 itself: both ignored
    assert lk.next_queries() == [c[4]]  # one slot; 4 is now the closest
    lk.failed(c[10])
    lk.answered(c[4], [c[2]])
    assert lk.next_queries() == [c[2]]  # the top 2 are 2 and 4, and 4 has answered: 11 and 12 wait
    assert not lk.done
    lk.answered(c[2], [])
    assert lk.done and lk.next_queries() == []
    assert lk.result() == [c[2], c[4]]
    assert lk.hops == 3  # seed 9 answered (1), reported 4 which answered (2), reported 2 which answered (3)
    assert lk.queried == 4
    lk.answered(c[11], [c[1]])  # a reply to nothing in flight is ignored
    assert lk.result() == [c[2], c[4]]
    empty = Lookup(1, [], k=3, alpha=3)
    assert empty.done and empty.result() == [] and empty.hops == 0


def run_many(net: Net, origin: int, targets: list[int], stats: LookupStats) -> tuple[dict[int, list[Contact]], Counter[tuple[int, int]]]:
    per_round: Counter[tuple[int, int]] = Counter()

    async def find_nodes(c: Contact, ts: list[int]) -> dict[int, list[Contact]]:
        per_round[(stats.rounds, c.node_id)] += 1
        await asyncio.sleep(0)
        return net.find_node(origin, c, ts)

    out = asyncio.run(lookup_many(targets, lambda t: net.tables[origin].closest(t, net.k), find_nodes,
                                  k=net.k, alpha=net.alpha, stats=stats, self_id=origin))
    return out, per_round


def test_lookup_many_batches_one_call_per_contact_per_round(net300: tuple[Net, random.Random]) -> None:
    net, _ = net300
    rng = random.Random(4)
    ids = list(net.tables)
    origin = ids[7]
    targets = [rng.getrandbits(ID_BITS) for _ in range(40)] + ids[:5]
    stats = LookupStats()
    out, per_round = run_many(net, origin, targets + targets[:3], stats)  # duplicates are looked up once
    assert set(out) == set(targets)
    for t in targets:
        assert [c.node_id for c in out[t]] == true_closest(ids, t, net.k, origin)
    assert max(per_round.values()) == 1  # at most one call per contact per round
    assert stats.rpcs == len(per_round) and stats.failures == 0
    # Batching pays: 45 separate lookups would each cost at least k calls.
    assert stats.rpcs < 45 * net.k and 1 <= stats.rounds <= 12


def test_lookup_many_with_failures() -> None:
    net, rng = build(200, seed=5)
    ids = list(net.tables)
    net.dead = set(rng.sample(ids, 20))
    live = [x for x in ids if x not in net.dead]
    origin = live[3]
    targets = [rng.getrandbits(ID_BITS) for _ in range(30)]
    stats = LookupStats()
    out, per_round = run_many(net, origin, targets, stats)
    exact = sum(check_live_result([c.node_id for c in out[t]], true_closest(live, t, net.k, origin), t, net) for t in targets)
    assert exact >= len(targets) // 2
    assert max(per_round.values()) == 1 and stats.failures >= 1
    assert stats.failures == sum(1 for (_, nid) in per_round if nid in net.dead)
