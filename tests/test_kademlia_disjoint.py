"""Lookups over disjoint paths and the disagreement rule (wancrawl/kademlia/disjoint.py, issue 36).

The reference is a brute-force model of an in-memory network: every node's true id, which nodes
lie (answer FIND_NODE with themselves alone, with made-up contacts next to the target, or hiding
every honest node), which are dead. Against it: every node in an answer is a real node that
answered (never a made-up one), no node is asked twice for one target whatever the number of
paths, the merged result is the true closest `preference` whenever some path is honest, and a
placement is refused only when every path agrees. Deterministic: seeded ids, no clock."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wancrawl.kademlia.disjoint import DisjointLookup, Verdict, judge, lookup_disjoint, merge
from wancrawl.kademlia.lookup import LookupStats
from wancrawl.kademlia.table import Contact
from wancrawl.kademlia.xorspace import ID_BITS

PREF = 3


def contact(n: int, name: str = "") -> Contact:
    return Contact(n, name or f"n{n:x}"[:12], f"127.0.0.1:{n % 60000 + 1}")


class Net:
    """Nodes with complete or partial views; `lie[n]` is how node n lies ("self", "fabricate",
    "hide"), `dead` the nodes that do not answer. A made-up contact does not answer as itself
    (its id is not its certificate's), so asking it fails, as the directory's responder check
    and TLS make it fail."""

    def __init__(self, rng: random.Random, n: int, *, liars: int = 0, dead: int = 0, view: int | None = None,
                 lie: str = "self"):
        ids = list(dict.fromkeys(rng.getrandbits(ID_BITS) | 1 for _ in range(n)))
        self.nodes = {i: contact(i) for i in ids}
        self.liars = {i: lie for i in ids[:liars]}
        self.dead = set(ids[liars:liars + dead])
        self.rng = rng
        self.view = view  # contacts each honest node knows (None: all)
        self.known = {i: self._view(i) for i in ids}
        self.calls: Counter[tuple[int, int]] = Counter()  # (node, target) -> calls

    def _view(self, i: int) -> list[Contact]:
        others = [c for j, c in self.nodes.items() if j != i]
        if self.view is None:
            return others
        return sorted(others, key=lambda c: c.node_id ^ i)[: self.view // 2] + self.rng.sample(others, self.view // 2)

    def answer(self, callee: int, target: int, k: int) -> list[Contact]:
        how = self.liars.get(callee)
        if how == "self":
            return [self.nodes[callee]]
        if how == "fabricate":  # ten made-up contacts next to the target
            return [contact(target ^ (j + 1), "fake") for j in range(10)]
        if how == "hide":  # only the liars it knows, itself included
            return [self.nodes[j] for j in self.liars]
        near = sorted([*self.known[callee], self.nodes[callee]], key=lambda c: c.node_id ^ target)
        return near[:k]

    async def find_nodes(self, c: Contact, targets: list[int]) -> dict[int, list[Contact]]:
        for t in targets:
            self.calls[(c.node_id, t)] += 1
        if c.node_id not in self.nodes or self.nodes[c.node_id] != c or c.node_id in self.dead:
            raise ConnectionError("no such node answers as itself")
        return {t: self.answer(c.node_id, t, 20) for t in targets}

    def truth(self, target: int, n: int = PREF) -> list[int]:
        live = [i for i in self.nodes if i not in self.dead]
        return sorted(live, key=lambda i: i ^ target)[:n]


def resolve(net: Net, targets: list[int], seeds: list[Contact], paths: int, k: int = 20, alpha: int = 3):
    return asyncio.run(lookup_disjoint(targets, lambda t: seeds, net.find_nodes, k=k, alpha=alpha, paths=paths))


# -- a table of cases ------------------------------------------------------------------------------

def test_a_liar_first_in_the_seeds_is_outvoted_by_the_union_of_the_paths():
    """Issue 36's fault: the liar answers with itself alone and is the first (here: the closest)
    seed. One path asked only it; the union of three paths seeded alike has the truth."""
    rng = random.Random(1)
    net = Net(rng, 12, liars=1)
    liar = next(iter(net.liars))
    target = liar ^ 1  # the liar is the closest node to the target
    found = resolve(net, [target], [net.nodes[liar], *rng.sample(list(net.nodes.values()), 2)], paths=3)[target]
    v = judge(target, found.votes(), PREF)
    assert [c.node_id for c in v.route] == net.truth(target)
    assert v.agreed and not v.refuses(net.nodes[net.truth(target)[1]].agent_id)


def test_made_up_contacts_never_enter_an_answer():
    rng = random.Random(2)
    net = Net(rng, 10, liars=2, lie="fabricate")
    for target in (rng.getrandbits(ID_BITS) for _ in range(20)):
        found = resolve(net, [target], list(net.nodes.values())[:3], paths=3)[target]
        assert {c.agent_id for c in found.result()} <= {c.agent_id for c in net.nodes.values()}
        assert [c.node_id for c in judge(target, found.votes(), PREF).route] == net.truth(target)


# (per-path top PREF by node id, expected: route, agreed, refuses "x" / "n1")
JUDGE = [
    ([[1, 2, 3], [1, 2, 3], [1, 2, 3]], [1, 2, 3], True),    # all paths agree
    ([[1, 2, 3], [1, 2, 4], [1, 2, 3]], [1, 2, 3], False),   # one path missed 3: the union has it, contested
    ([[5], [1, 2, 3], [1, 2, 3]], [1, 2, 3], False),         # a liar's path found only itself (5 is far)
    ([[1, 2, 3], [], []], [1, 2, 3], True),                  # paths that found nothing do not vote
    ([[], [], []], [], False),                               # nothing found: no placement at all
]


@pytest.mark.parametrize("paths, route, agreed", JUDGE)
def test_the_disagreement_rule(paths, route, agreed):
    results = [[contact(n, f"n{n}") for n in p] for p in paths]
    v = judge(0, results, PREF)
    assert [c.node_id for c in v.route] == route and v.agreed == agreed
    assert not v.refuses("n1") if route else True  # a listed node is never refused
    assert v.refuses("x") == (agreed and bool(route)), "an unlisted agent: refused only on agreement"
    assert all(v.accepts(c.agent_id) for c in v.route)


def test_merge_is_the_deduplicated_union_closest_first():
    a, b, c = contact(1), contact(2), contact(6)
    assert merge(0, [[c, a], [a, b], []]) == [a, b, c]


def test_one_path_is_a_plain_lookup_and_paths_share_no_rpc():
    """A contact wanted by several paths is asked once; the others learn only its outcome."""
    rng = random.Random(3)
    net = Net(rng, 40, view=12)
    targets = [rng.getrandbits(ID_BITS) for _ in range(30)]
    seeds = list(net.nodes.values())[:6]
    stats = LookupStats()
    asyncio.run(lookup_disjoint(targets, lambda t: seeds, net.find_nodes, k=8, alpha=3, paths=4, stats=stats))
    assert max(net.calls.values()) == 1
    dl = DisjointLookup(targets[0], seeds, k=8, alpha=3, paths=1)
    assert len(dl.paths) == 1 and not dl.done


# -- against the model ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(4, 40), liars=st.integers(0, 3), dead=st.integers(0, 3),
       lie=st.sampled_from(["self", "fabricate", "hide"]), paths=st.integers(1, 4), partial=st.booleans())
def test_disjoint_lookups_against_a_brute_force_model(seed, n, liars, dead, lie, paths, partial):
    rng = random.Random(seed)
    liars = min(liars, n - 2)
    dead = min(dead, n - liars - 2)
    net = Net(rng, n, liars=liars, dead=dead, lie=lie, view=10 if partial and n > 12 else None)
    honest = [c for i, c in net.nodes.items() if i not in net.liars and i not in net.dead]
    liar_seeds = [net.nodes[i] for i in net.liars]
    seeds = liar_seeds + honest[:1]  # every liar among the seeds, first, and one honest node
    targets = [rng.getrandbits(ID_BITS) for _ in range(5)]
    found = resolve(net, targets, seeds, paths=paths)
    for t in targets:
        assert all(v == 1 for (node, tt), v in net.calls.items() if tt == t), "a node is asked once per target"
        lk = found[t]
        v = judge(t, lk.votes(), PREF)
        answered = {i for i in net.nodes if i not in net.dead}
        assert {c.node_id for c in lk.result()} <= answered, "only nodes that answered as themselves"
        assert all(net.nodes[c.node_id] == c for c in v.route)
        truth = net.truth(t)
        if net.view is None:
            # An honest node with a complete view is asked (it is a seed and the paths together
            # ask every seed among the k closest): the union holds the truth.
            assert [c.node_id for c in v.route] == truth
        if v.agreed:
            # Agreement means every path that found anything ranks the route first; refusing an
            # agent outside it then goes by what every path saw.
            assert all([c.node_id for c in sorted(r, key=lambda c: c.node_id ^ t)[:PREF]] == [c.node_id for c in v.route]
                       for r in lk.votes() if r)
        outsider = next(i for i in net.nodes if i not in {c.node_id for c in v.route})
        assert v.refuses(net.nodes[outsider].agent_id) == v.agreed


def test_verdict_of_nothing_refuses_nobody():
    v = Verdict((), 0, 0)
    assert not v.agreed and not v.refuses("anyone") and not v.accepts("anyone")
