"""Load balancing in the Kademlia mode (docs/kademlia.md, "Load balancing in this mode"):
the pure planner of agent/placement/kademlia/balance.py (seed 000 §1.4.2: heavy to light, k-bucket
regions near to far, caps), delegations (only a host's XOR owner may delegate it; a dead
delegate's host goes back; a change takes a new epoch), and an in-process crawl where one slow
agent's hosts move to the others and the truth is still fetched exactly once."""

from __future__ import annotations

import asyncio

import collections
import math

from hypothesis import given, settings, strategies as st

from agent.placement.kademlia.balance import Host, Neighbour, NodeLoad, Policy, candidate, plan, regions, targets
from agent.placement.kademlia.delegation import Announce
from agent.placement.kademlia.overlay import Overlay
from agent.placement.kademlia.placement import KademliaPlacement
from agent.settings import KademliaSettings
from wancrawl import errors
from wancrawl.kademlia import xorspace
from wancrawl.kademlia.table import Contact

from agent_helpers import fenced_of, fetched_urls, kademlia_cluster, overlay_formed, seed, unfenced_refetches, wait_idle
from test_agent_replication import lab_site, stored_urls

ID = st.integers(min_value=1, max_value=2**160 - 1)


def loads() -> st.SearchStrategy[NodeLoad]:
    return st.builds(lambda q, w, r: NodeLoad(q, float(w), float(r)),
                     st.integers(0, 2_000), st.integers(0, 1_000), st.sampled_from([0.0, 0.5, 1, 2, 5, 10, 40, 100]))


@st.composite
def situations(draw):
    me_id = draw(ID)
    me = draw(st.builds(lambda q, w, r: NodeLoad(q, float(w), float(r)),
                        st.integers(1, 5_000), st.integers(0, 500), st.sampled_from([0.5, 1, 2, 5, 10])))
    ids = draw(st.lists(ID, min_size=0, max_size=12, unique=True).map(lambda xs: [x for x in xs if x != me_id]))
    neighbours = [Neighbour(i, draw(loads())) for i in ids]
    names = draw(st.lists(st.integers(0, 10_000), max_size=10, unique=True))
    hosts = [Host(f"h{n}.example", xorspace.host_key(f"h{n}.example"), draw(st.integers(0, 800)),
                  draw(st.none() | st.frozensets(st.sampled_from([me_id, *ids])))) for n in names]
    policy = Policy(max_moves=draw(st.integers(0, 5)), min_gap=draw(st.sampled_from([0.0, 1.0, 5.0])),
                    min_ratio=draw(st.sampled_from([1.0, 1.5, 3.0])))
    return me_id, me, hosts, neighbours, policy


@settings(max_examples=400, deadline=None)
@given(situations())
def test_the_planner_moves_from_heavier_to_lighter_nearest_region_first_within_the_caps(s):
    me_id, me, hosts, neighbours, policy = s
    use = me.queue % 2 == 0   # half the cases with the allocator's shares (phase 2), half without
    shares = targets(me_id, me, neighbours) if use else {}
    moves = plan(me_id, me, hosts, neighbours, policy, use_targets=use)
    assert len(moves) <= policy.max_moves
    assert len({m.host for m in moves}) == len(moves), "a host moves once"
    by_name = {h.name: h for h in hosts}
    model = {n.node_id: n.load for n in neighbours}
    q = me.queue
    for m in moves:
        h = by_name[m.host]
        assert h.urls == m.urls and h.key == m.key and h.urls >= policy.min_urls
        assert h.placed is None or m.target in h.placed, "only to a node of the host's XOR preference list"
        src = NodeLoad(q, me.work_area, me.rate)
        dst = model[m.target]
        # Never from lighter to heavier: the source heavy, the target light, the source's runtime
        # above the target's by the hysteresis, and the larger of the two goes down.
        assert src.excess > 0 and dst.excess < 0
        assert src.runtime >= policy.min_ratio * dst.runtime and src.runtime - dst.runtime >= policy.min_gap
        after = max((src.queue - m.urls) / src.rate, (dst.queue + m.urls) / dst.rate)
        assert after < max(src.runtime, dst.runtime)
        if shares.get(me_id) is not None:
            mine, theirs = shares[me_id], shares[m.target]
            assert src.queue > mine and dst.queue < theirs, "from over its share to under the target's"
            assert abs(src.queue - m.urls - mine) + abs(dst.queue + m.urls - theirs) < abs(src.queue - mine) + abs(dst.queue - theirs)
        assert m.bucket == xorspace.firstdiff(me_id, m.target)
        # Nearest region first: no nearer k-bucket could have taken any host still movable.
        left = [x for x in hosts if x.urls >= policy.min_urls and x.name not in {mm.host for mm in moves[: moves.index(m)]}]
        current = [Neighbour(i, lo) for i, lo in model.items()]
        for bucket, region in regions(me_id, current):
            if bucket >= m.bucket:
                break
            room = -sum(n.load.excess for n in region)
            assert not any(candidate(src, n.load, x.urls, room, policy, shares.get(me_id), shares.get(n.node_id))
                           for n in region for x in left if x.placed is None or n.node_id in x.placed), \
                f"bucket {bucket} is nearer than {m.bucket} and could take a host"
        # ... and its own region had room for the host (seed 000's L_k + L < 0).
        region = dict(regions(me_id, current))[m.bucket]
        assert m.urls < -sum(n.load.excess for n in region)
        q -= m.urls
        model[m.target] = NodeLoad(dst.queue + m.urls, dst.work_area, dst.rate)


def test_the_neighbourhoods_shares_keep_a_host_off_a_near_node_past_the_common_finish():
    """Phase 2 in this mode: the near light node (9 s of work) is past the time the three could
    finish together (2.4 s); with the shares the host goes to the far node under its share."""
    me_id, near, far = 0, 1 << 3, 1 << 150
    me = NodeLoad(queue=200, work_area=100, rate=10)
    hosts = [Host("a.example", 1, 5)]
    others = [Neighbour(near, NodeLoad(90, 100, 10)), Neighbour(far, NodeLoad(0, 1_000, 100))]
    policy = Policy(max_moves=1, min_gap=1.0)
    assert [m.target for m in plan(me_id, me, hosts, others, policy, use_targets=False)] == [near]
    assert [m.target for m in plan(me_id, me, hosts, others, policy)] == [far]
    got = targets(me_id, me, others)
    assert set(got) == {me_id, near, far}
    assert all(math.isclose(got[i], want) for i, want in ((me_id, 290 / 12), (near, 290 / 12), (far, 2900 / 12)))


def test_a_host_goes_only_to_a_node_of_its_xor_preference_list():
    """Storage, in this mode, takes a host's pages only from its key's XOR preference list (it
    knows no delegations): a delegate outside it would have every page refused (docs/balance.md).
    The lighter node outside the list is passed over for the one inside."""
    me_id, inside, outside = 0, 1 << 3, 1 << 150
    heavy = NodeLoad(queue=1_000, work_area=100, rate=10)
    free = [Neighbour(outside, NodeLoad(0, 1_000, 100)), Neighbour(inside, NodeLoad(0, 500, 10))]
    anywhere = Host("a.example", 1, 200)
    assert [m.target for m in plan(me_id, heavy, [anywhere], free, Policy(max_moves=1))] == [inside]  # nearer bucket
    out_only = Host("a.example", 1, 200, frozenset({me_id, outside}))
    in_only = Host("a.example", 1, 200, frozenset({me_id, inside}))
    far_first = [Neighbour(outside, NodeLoad(0, 1_000, 100))]
    assert [m.target for m in plan(me_id, heavy, [out_only], far_first, Policy(max_moves=1))] == [outside]
    assert plan(me_id, heavy, [in_only], far_first, Policy(max_moves=1)) == []


def test_a_light_node_or_a_balanced_pair_moves_nothing():
    me_id = 1 << 100
    hosts = [Host("a.example", xorspace.host_key("a.example"), 50)]
    light = NodeLoad(queue=10, work_area=100, rate=10)
    assert plan(me_id, light, hosts, [Neighbour(2, NodeLoad(0, 100, 10))]) == []
    heavy = NodeLoad(queue=300, work_area=100, rate=10)   # 30 s of work
    close = NodeLoad(queue=250, work_area=300, rate=10)   # 25 s: within min_gap 5 and min_ratio 1.5
    assert plan(me_id, heavy, hosts, [Neighbour(2, close)]) == []


def test_the_nearest_bucket_with_room_wins_over_a_lighter_far_one():
    me_id = 0
    near, far = 1 << 3, 1 << 150     # buckets 3 and 150
    heavy = NodeLoad(queue=1_000, work_area=100, rate=10)
    hosts = [Host("a.example", 1, 200)]
    moves = plan(me_id, heavy, hosts, [Neighbour(far, NodeLoad(0, 1_000, 100)), Neighbour(near, NodeLoad(0, 500, 10))])
    assert [(m.target, m.bucket) for m in moves] == [(near, 3)]
    # The near bucket is heavy as a whole (a second, heavy node in it): skipped for the far one.
    crowd = Neighbour(near + 1, NodeLoad(2_000, 100, 10))
    moves = plan(me_id, heavy, hosts, [Neighbour(far, NodeLoad(0, 1_000, 100)), Neighbour(near, NodeLoad(0, 500, 10)), crowd])
    assert [(m.target, m.bucket) for m in moves] == [(far, 150)]


# -- delegations --------------------------------------------------------------------------------


class NoNet:
    """A transport that never answers: these tests drive the overlay by hand."""

    async def ping(self, *a, **k):
        raise errors.Unavailable("no network")

    bootstrap_ping = find_node = leave = ping

    async def close(self) -> None:
        pass


def _contact(name: str) -> Contact:
    return Contact(xorspace.insecure_node_id(name), name, f"{name}:1")


def _node(me: Contact, others: list[Contact]) -> KademliaPlacement:
    ov = Overlay(me, KademliaSettings(balance=True), NoNet(), clock=lambda: 100.0)
    for c in others:
        ov.table.touch(c, 100.0)
    return KademliaPlacement(ov, backups=2)


def test_only_the_xor_owner_may_delegate_a_host_and_a_dead_delegate_gives_it_back():
    a, b, c, d = (_contact(f"agent-{x}") for x in "abcd")
    node = _node(a, [b, c, d])
    host = next(f"h{i}.example" for i in range(1_000)
                if min((a, b, c, d), key=lambda n: n.node_id ^ xorspace.host_key(f"h{i}.example")) == b)
    key = xorspace.host_key(host)
    xor = node.preference(key, [])
    assert xor[0] == b
    other = next(x for x in (c, d) if x not in xor[:1])
    # A node that is not the host's XOR owner announces a delegation of it: nothing moves, and
    # whatever it says the epoch of placement does not matter.
    liar = next(x for x in (c, d) if x != b)
    node.overlay.learned(liar.node_id, 0, Announce(None, ((key, liar),)))
    assert node.preference(key, []) == xor
    # The owner announces it: the delegate goes first, the owner second (a previous holder).
    epoch = node.overlay.epoch
    node.overlay.learned(b.node_id, 0, Announce(None, ((key, other),)))
    assert node.overlay.epoch == epoch + 1, "a change of delegations is a new epoch"
    pref = node.preference(key, [])
    assert pref[0] == other and pref[1] == b and len(pref) == 3
    # The same announcement again changes nothing, and nor does a call that carries none (FindNode).
    node.overlay.learned(b.node_id, 0, Announce(None, ((key, other),)))
    asyncio.run(node.overlay.heard_from(b, 0))  # b is in the table: no ping back, no I/O
    assert node.overlay.epoch == epoch + 1 and node.preference(key, [])[0] == other
    # The delegate dies: the host is back at its XOR owner, with a new epoch.
    node.overlay._remove(other, "dead")
    assert node.preference(key, [])[0] == b
    assert node.overlay.epoch > epoch + 1


def test_a_heavy_owner_delegates_its_own_hosts_only_and_never_to_a_heavier_node():
    from wancrawl.v1 import common_pb2

    a, b, c = (_contact(f"agent-{x}") for x in "abc")
    node = _node(a, [b, c])
    names = [f"h{i}.example" for i in range(60)]
    mine = [h for h in names if min((a, b, c), key=lambda n: n.node_id ^ xorspace.host_key(h)) == a][:4]
    theirs = [h for h in names if h not in mine][:4]
    report = common_pb2.LoadReport(queue_length=800, work_area=20, pages_per_second=2, peak_pages_per_second=20,
                                   heavy_hosts=[common_pb2.HostLoad(host=h, queue_length=100) for h in mine + theirs])
    ov = node.overlay
    from agent.placement.kademlia.placement import node_load
    ov.balancing.my_load = node_load(report)
    ov.learned(b.node_id, 0, Announce(NodeLoad(0, 200, 20), ()))       # light and fast
    ov.learned(c.node_id, 0, Announce(NodeLoad(5_000, 200, 20), ()))   # heavier than a
    epoch = ov.epoch
    assert node.balance_round(report, sent=100.0)
    assert ov.epoch == epoch + 1
    moved = {k: d for k, (d, _t) in ov.balancing.own.items()}
    assert moved and set(moved.values()) == {b}, "to the light node only"
    assert set(moved) <= {xorspace.host_key(h) for h in mine}, "only hosts it owns by XOR"
    for k in moved:
        assert node.preference(k, [])[0] == b
    # Cooldown and the settle time: a second round right away moves nothing more to b.
    assert not node.balance_round(report, sent=100.0)


# -- an in-process crawl ------------------------------------------------------------------------


def test_a_slow_agents_hosts_move_to_the_others_and_each_page_is_fetched_once(run, tmp_path):
    """Three agents with no consultant; agent 1 fetches each host 20 times slower. With
    kademlia.balance on it delegates hosts it owns by XOR to the other two (never the reverse),
    the handover moves them whole, and the lab's truth is fetched exactly once: stored once, and
    fetched again only by the agent that fetched it, where its lease had lapsed during the fetch
    (the fence drops that answer; with a 2 s lease, pings of three agents in one loaded process
    lapse it: 4 pages fetched twice, 0.2 s apart, in 1 of ~20 runs beside other jobs)."""
    slow = {"politeness.delay": 1.0, "concurrency": 2}
    with lab_site(seed=5, pages_max=40) as (lab, web, hosts, seeds, truth):
        port = lab.port

        async def go():
            keys = {"scope.allowed_domains": hosts, "politeness.delay": 0.05, "load.period": 1.0,
                    "replication.interval": 0.05, "heartbeat_interval": 0.3,
                    "kademlia.lease_seconds": 2.0, "kademlia.dead_after": 4.0, "kademlia.balance": True,
                    "kademlia.balance_min_gap": 1.0, "kademlia.balance_cooldown": 30.0}
            async with kademlia_cluster(tmp_path, lab, 3, agent_keys=keys, per_agent=[{}, slow, {}]) as (servers, stores):
                await overlay_formed(servers)
                await seed(servers[0].node, seeds)
                await wait_idle([s.node for s in servers], timeout=120)
                ids = {s.node.id: s.node.overlay.me.node_id for s in servers}
                delegated = {s.node.id: [d.agent_id for d, _t in s.node.overlay.balancing.own.values()] for s in servers}
                return (ids, [s.node.status_counters() for s in servers], delegated, servers[1].node.id,
                        fenced_of([s.node for s in servers]), stored_urls(stores))

        ids, counters, delegated, slow_id, fenced, stored = run(go())
        got = fetched_urls(lab, port)
        twice = unfenced_refetches(lab, port, fenced)
    assert not twice, f"fetched twice: {dict(list(twice.items())[:5])}; fenced results {fenced}"
    assert [u for u, n in collections.Counter(stored).items() if n > 1] == [], "stored twice"
    assert set(got) == truth, (sorted(truth - set(got))[:5], sorted(set(got) - truth)[:5])
    assert counters[1]["overlay_delegations"] > 0, "the slow agent delegated hosts"
    assert counters[1]["hosts_moved_out"] > 0, "and handed them out"
    assert sum(c["hosts_handed_in"] for i, c in enumerate(counters) if i != 1) > 0
    assert all(slow_id not in targets for targets in delegated.values()), "never to the slow agent"
    assert math.isfinite(counters[1]["load_level"])
