"""Load balancing phase 1: the load level (agent/placement/load.py), the planner (consultant/balance.py)
against its rules, and the consultant's balance round writing overrides."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.placement.load import LoadGauge, heaviest, load_level
from agent.settings import LoadSettings
from consultant.balance import (
    ELSEWHERE, AgentLoad, Balancer, Policy, after, allocate, improves, nearer_targets, plan, regions, tier, worth,
)
from consultant.membership import AgentRecord, Snapshot

# -- the load level ------------------------------------------------------------------------------


def test_load_level_is_seed_000s_s_minus_free_work_area_over_h():
    # W = 2 pages/s * 10 s = 20 URLs, H = 5. Heavy: 35 queued = 20 in W + 15 in 3 blocks: L = 3.
    assert load_level(35, 2.0, 10.0, 5).level == 3.0
    # Light: 5 queued, 15 free in W: L = 0 - 15/5 = -3; empty: -W/H, the paper's floor.
    assert load_level(5, 2.0, 10.0, 5).level == -3.0
    assert load_level(0, 2.0, 10.0, 5).level == -4.0
    assert load_level(0, 2.0, 10.0, 5).work_area == 20.0
    # Busy (35 > 20) and fetching 0.5 pages/s now (one host left under its politeness delay):
    # W is what it does now, 5 URLs, so it is heavy by 6 blocks, not 3.
    assert load_level(35, 2.0, 10.0, 5, rate_now=0.5).level == 6.0
    # Short of work: its peak counts, whatever it does now.
    assert load_level(5, 2.0, 10.0, 5, rate_now=0.5).level == -3.0


def test_the_gauge_keeps_the_peak_rate_while_the_queue_runs_dry():
    now = [0.0]
    rate = [4.0]
    g = LoadGauge(LoadSettings(period=10.0, block=2, peak_window=60.0), lambda: rate[0], lambda: now[0])
    assert g.measure(100).work_area == 40.0
    now[0], rate[0] = 30.0, 0.5
    assert g.measure(0).peak_rate == 4.0          # idle, but still able: light, not "W = 0"
    assert g.gauges()["load_level"] == -20.0     # W from the peak: 40 URLs, 20 blocks of 2
    now[0] = 91.0
    assert g.measure(0).peak_rate == 0.5          # the 4.0 sample is older than the window


def test_heaviest_hosts_are_the_longest_queues_longest_first():
    q = {"a": 3, "b": 9, "c": 9, "d": 1}
    assert heaviest(q, q.__getitem__, 3) == [("b", 9), ("c", 9), ("a", 3)]
    assert heaviest(q, q.__getitem__, 0) == []


# -- the planner's rules, for any cluster ------------------------------------------------------------

PLACES = [("telecom", "beijing", 39.9, 116.4), ("telecom", "guangzhou", 23.1, 113.3),
          ("unicom", "beijing", 39.9, 116.4), ("cernet", "harbin", 45.8, 126.5)]


@st.composite
def clusters(draw):
    n = draw(st.integers(2, 6))
    out = []
    for i in range(n):
        isp, city, lat, lon = draw(st.sampled_from(PLACES))
        hosts = draw(st.dictionaries(st.sampled_from([f"h{i}-{k}" for k in range(8)]), st.integers(0, 400), max_size=8))
        queue = sum(hosts.values()) + draw(st.integers(0, 300))  # hosts not reported count too
        rate = draw(st.sampled_from([0.0, 0.5, 2.0, 10.0, 40.0]))
        out.append(AgentLoad(f"a{i}", queue, rate * 10.0, rate, hosts, isp, city, lat, lon))
    return out


policies = st.builds(Policy, max_moves=st.integers(0, 6), min_gap_seconds=st.sampled_from([0.0, 5.0]),
                     min_ratio=st.sampled_from([1.0, 1.5, 3.0]), min_urls=st.sampled_from([1, 20]))


def _replay(loads, policy, moves, frozen=()):
    """Apply the moves one by one to the plan's own model, checking each against the rules."""
    model = {a.agent_id: a for a in loads if a.rate > 0}
    peak = max((a.runtime for a in model.values()), default=0.0)
    moved = set()
    gave = set()
    for m in moves:
        src, dst = model[m.source], model[m.target]
        assert m.host in src.hosts and src.hosts[m.host] == m.urls >= policy.min_urls
        assert m.host not in moved and m.host not in frozen, "a host moves once a round; frozen hosts stay"
        assert src.excess > 0 > dst.excess, "from a heavy agent (L > 0) to a light one (L < 0)"
        assert src.runtime > dst.runtime, "only from heavier to lighter"
        assert worth(src, dst, policy), "the imbalance is past the policy's minimum"
        assert improves(src, dst, m.urls)
        if src.target is not None:
            # phase 2: from over the allocator's target to under it, the pair nearer its targets
            assert src.queue > src.target and dst.queue < dst.target, "from over its allocation to under it"
            before = abs(src.queue - src.target) + abs(dst.queue - dst.target)
            assert abs(src.queue - m.urls - src.target) + abs(dst.queue + m.urls - dst.target) < before
        # Nearest region first: no nearer region that is light as a whole had a light agent
        # able to take a movable host of the source with the same gain rules.
        others = [o for o in model.values() if o.agent_id != src.agent_id]
        for region in regions(src, others):
            if tier(src, region[0]) >= m.tier:
                break
            room = -sum(o.excess for o in region)
            for o in region:
                if o.agent_id not in gave and o.excess < 0 and worth(src, o, policy):
                    assert not any(improves(src, o, n) and n < room and nearer_targets(src, o, n) for h, n in src.hosts.items()
                                   if n >= policy.min_urls and h not in moved and h not in frozen), \
                        f"{m} skipped the nearer {o.agent_id}"
        region = next(r for r in regions(src, others) if any(o.agent_id == dst.agent_id for o in r))
        assert m.urls < -sum(o.excess for o in region), "the target's region has room for the host"
        model[src.agent_id], model[dst.agent_id] = after(src, dst, m.host, m.urls)
        new_peak = max(a.runtime for a in model.values())
        assert new_peak <= peak + 1e-9, "the model's maximum runtime never goes up"
        peak = new_peak
        moved.add(m.host)
        gave.add(m.source)


@settings(max_examples=400, deadline=None)
@given(clusters(), policies)
def test_every_plan_follows_the_rules(loads, policy):
    moves = plan(loads, policy)
    assert len(moves) <= policy.max_moves
    unknown = {a.agent_id for a in loads if a.rate == 0}
    assert not any(m.source in unknown or m.target in unknown for m in moves), "agents with no rate are left out"
    sources, targets = {m.source for m in moves}, {m.target for m in moves}
    assert not sources & targets, "no agent both gives and gets in one round"
    _replay(loads, policy, moves)


@settings(max_examples=200, deadline=None)
@given(clusters(), st.data())
def test_frozen_hosts_never_move(loads, data):
    every = sorted({h for a in loads for h in a.hosts})
    frozen = data.draw(st.sets(st.sampled_from(every))) if every else set()
    moves = plan(loads, Policy(), frozen)
    _replay(loads, Policy(), moves, frozen)


@settings(max_examples=300, deadline=None)
@given(clusters(), policies)
def test_with_the_allocators_targets_every_plan_still_follows_the_rules(loads, policy):
    """Phase 2: the planner takes our allocator's counts as each agent's target; every rule of
    phase 1 holds, and each move goes from over its target to under it, nearer both."""
    targeted = allocate(loads)
    known = [a for a in targeted if a.rate > 0]
    if len(known) >= 2 and sum(a.queue for a in known):
        assert sum(a.target for a in known) == sum(a.queue for a in known), "the allocator places every queued URL"
    moves = plan(targeted, policy)
    assert len(moves) <= policy.max_moves
    _replay(targeted, policy, moves)


def test_the_allocator_splits_the_queued_urls_in_proportion_to_the_rates():
    loads = [AgentLoad("a", 900, 100.0, 10.0), AgentLoad("b", 100, 300.0, 30.0), AgentLoad("c", 0, 0.0, 0.0)]
    got = {a.agent_id: a.target for a in allocate(loads)}
    assert got == {"a": 250.0, "b": 750.0, "c": None}   # 1000 URLs at 10 : 30 pages/s; no rate, no target


def test_the_allocators_targets_keep_a_host_off_a_near_agent_already_past_the_common_finish():
    """Phase 1 alone gives the host to the same-place light agent; its runtime (9 s) is already
    past the time all three could finish together (290 URLs / 120 pages/s = 2.4 s), so with the
    allocator's targets the host goes to the far agent that is under its share."""
    src = AgentLoad("src", 200, 100.0, 10.0, {"h": 5}, "telecom", "beijing", 39.9, 116.4)
    near = AgentLoad("near", 90, 100.0, 10.0, {}, "telecom", "beijing", 39.9, 116.4)
    far = AgentLoad("far", 0, 1000.0, 100.0, {}, "cernet", "harbin", 45.8, 126.5)
    policy = Policy(max_moves=1, min_gap_seconds=1.0)
    assert [(m.target, m.tier) for m in plan([src, near, far], policy)] == [("near", 0)]
    assert [(m.target, m.tier) for m in plan(allocate([src, near, far]), policy)] == [("far", ELSEWHERE)]


def test_the_balancer_takes_the_capacity_models_rate_where_it_has_one():
    """Two light agents reporting the same rate: the one the capacity model knows to be faster
    gets the host; without the model the tie goes by id."""
    b = Balancer(Policy(max_moves=1), cooldown=60.0, isps={"telecom": [4134]})
    snap = Snapshot(5, {"slow": _record("slow", _report(600, 10.0, {"x": 500}), 10.0),
                        "a": _record("a", _report(0, 40.0, {}), 10.0),
                        "b": _record("b", _report(0, 40.0, {}), 10.0)})
    assert [m.target for m in b.round(snap, 11.0)] == ["a"]
    model = {"b": 80.0}
    assert [m.target for m in b.round(snap, 11.0, rate_of=lambda a, q: model.get(a))] == ["b"]


def test_a_balanced_cluster_stays_put():
    same = [AgentLoad(f"a{i}", 100, 20.0, 2.0, {f"h{i}": 100}, "telecom", "beijing") for i in range(3)]
    assert plan(same) == []


def test_the_same_region_is_preferred_to_a_lighter_far_one():
    heavy = AgentLoad("heavy", 400, 20.0, 2.0, {"big": 200, "mid": 100}, "telecom", "beijing", 39.9, 116.4)
    near = AgentLoad("near", 10, 300.0, 30.0, {}, "telecom", "beijing", 39.9, 116.4)
    far = AgentLoad("far", 0, 400.0, 40.0, {}, "cernet", "harbin", 45.8, 126.5)
    moves = plan([heavy, near, far], Policy(max_moves=1))
    assert [(m.host, m.target, m.tier) for m in moves] == [("big", "near", 0)]
    # A region that is heavy as a whole with the host is skipped (seed 000's L_k + L < 0).
    loaded = AgentLoad("near", 10, 100.0, 10.0, {}, "telecom", "beijing", 39.9, 116.4)
    busy = AgentLoad("busy", 300, 200.0, 30.0, {}, "telecom", "beijing", 39.9, 116.4)
    moves = plan([heavy, loaded, busy, far], Policy(max_moves=1))
    assert moves and moves[0].target == "far" and moves[0].tier == ELSEWHERE


def test_the_slow_agent_sheds_hosts_to_the_fast_ones_until_even():
    slow = AgentLoad("slow", 600, 10.0, 1.0, {f"s{k}": 60 for k in range(10)}, "telecom", "beijing")
    fast = [AgentLoad(f"fast{i}", 100, 200.0, 20.0, {}, "telecom", "beijing") for i in range(2)]
    moves = plan([slow, *fast], Policy(max_moves=20))
    assert moves and all(m.source == "slow" for m in moves)
    assert {m.target for m in moves} == {"fast0", "fast1"}


def test_a_busy_agent_is_modelled_at_its_rate_now_an_idle_one_at_its_peak():
    from consultant.balance import load_of

    busy = {**_report(600, 8.0, {"x": 300}), "pages_per_second": 2.0}
    idle = {**_report(10, 8.0, {}), "pages_per_second": 0.5}
    assert load_of(busy, "a", isp="", city="", lat=None, lon=None).rate == 2.0
    assert load_of(idle, "b", isp="", city="", lat=None, lon=None).rate == 8.0
    assert load_of({}, "c", isp="", city="", lat=None, lon=None).rate == 0.0


# -- the Balancer's memory ----------------------------------------------------------------------------------


def _record(agent_id, load, heartbeat, city="beijing", asn=4134):
    return AgentRecord(agent_id, f"127.0.0.1:{1000 + len(agent_id)}", city=city, asn=asn, last_heartbeat=heartbeat,
                       load_json=json.dumps(load))


def _report(queue, rate, hosts):
    # As the consultant keeps it: MessageToDict of the LoadReport (64-bit integers as strings).
    return {"queue_length": str(queue), "work_area": rate * 10.0, "peak_pages_per_second": rate,
            "heavy_hosts": [{"host": h, "queue_length": str(n)} for h, n in hosts.items()]}


def test_the_balancer_waits_for_fresh_reports_and_does_not_move_a_host_back_within_the_cooldown():
    b = Balancer(Policy(), cooldown=60.0, isps={"telecom": [4134]})
    snap = Snapshot(5, {"slow": _record("slow", _report(600, 1.0, {"x": 300, "y": 200}), 10.0),
                        "fast": _record("fast", _report(0, 40.0, {}), 10.0)})
    moves = b.round(snap, 11.0)
    assert [(m.host, m.target) for m in moves] == [("x", "fast")]
    b.applied(moves, 11.0)
    # Reports from before the move: neither agent counts.
    assert b.round(snap, 12.0) == []
    # Fresh reports where the move overshot: "x" stays (cooldown); "y" may not go back either
    # way while its agents' reports are fresh but the gain rules fail.
    snap2 = Snapshot(6, {"slow": _record("slow", _report(100, 1.0, {"y": 100}), 20.0),
                         "fast": _record("fast", _report(900, 20.0, {"x": 900}), 20.0)})
    assert [m.host for m in b.round(snap2, 21.0)] == []
    # An operator's pin is never moved.
    snap3 = Snapshot(7, {"slow": _record("slow", _report(600, 1.0, {"y": 300}), 30.0),
                         "fast": _record("fast", _report(0, 40.0, {}), 30.0)})
    assert b.round(snap3, 31.0, pinned=["y"]) == []
    assert [m.host for m in b.round(snap3, 31.0)] == ["y"]



def test_the_balancer_leaves_out_an_agent_that_missed_a_heartbeat():
    """Issue 23, kill2 with balancing on (docs/balance.md, "Stored twice after a move at a
    death"): a round 7.7 s after the first victim's SIGKILL (its lease of 15 s not run out)
    moved hosts off it on its last report. An agent silent longer than `max_silence` is neither
    source nor target; the same cluster heard from lately moves as before."""
    b = Balancer(Policy(), cooldown=60.0, isps={"telecom": [4134]}, max_silence=6.0)
    slow = lambda t: _record("slow", _report(600, 1.0, {"x": 300, "y": 200}), t)  # noqa: E731
    fast = lambda t, name="fast": _record(name, _report(0, 40.0, {}), t)  # noqa: E731
    assert b.round(Snapshot(5, {"slow": slow(10.0), "fast": fast(15.0)}), 17.0) == [], "the heavy one went silent"
    assert b.round(Snapshot(5, {"slow": slow(15.0), "fast": fast(10.0)}), 17.0) == [], "the light one went silent"
    moves = b.round(Snapshot(5, {"slow": slow(15.0), "fast": fast(10.0), "fast2": fast(16.0, "fast2")}), 17.0)
    assert [(m.source, m.target) for m in moves] == [("slow", "fast2")], "only to the agent heard from"
    b.applied(moves, 17.0)
    assert [m.host for m in b.round(Snapshot(5, {"slow": slow(18.0), "fast": fast(16.0)}), 22.0)] == ["y"], \
        "heard from 6 s ago at most: planned as before (x cooled down after its move above)"


# -- the consultant writes overrides and drops them with their agent -------------------------------------------


def test_a_balance_round_pins_hosts_and_their_agents_death_clears_the_pins(run, tmp_path):
    from consultant.service import ConsultantService
    from consultant_helpers import settings_for

    now = [100.0]
    s = settings_for(tmp_path, lease_seconds=5.0, balance__enabled=True)
    svc = ConsultantService(s, clock=lambda: now[0])

    async def go():
        await svc.start()
        try:
            for a in ("slow", "fast"):
                await svc.register(AgentRecord(a, f"127.0.0.1:{7000 + len(a)}"))
            e0 = await svc.heartbeat("slow", _report(600, 1.0, {"x.example": 300}))
            await svc.heartbeat("fast", _report(0, 40.0, {}))
            await svc.set_override("op.example", "slow")
            now[0] += 1
            moves = await svc.balance_round()
            snap = await svc.snapshot()
            assert [(m.host, m.target) for m in moves] == [("x.example", "fast")]
            assert snap.overrides["x.example"] == "fast" and snap.balanced == {"x.example"} and snap.epoch > e0
            res = await svc.resolve(["x.example"])
            assert res.directory.records[res.results[0].agents[0]].agent_id == "fast"
            # "fast" dies: its balance pins go (the host falls back to the strategy), the
            # operator's pin to "slow" stays.
            now[0] += 10
            await svc.heartbeat("slow", _report(600, 1.0, {}))
            await svc._run(svc.store.expire, now[0])
            snap = await svc.snapshot()
            assert "x.example" not in snap.overrides and snap.overrides["op.example"] == "slow"
        finally:
            await svc.stop()

    run(go())


def test_two_consultant_replicas_over_one_state_do_not_both_move_hosts_on_the_same_reports(run, tmp_path):
    """On by default, every replica plans: a round's writes are refused when another replica's
    balancer wrote within 0.9 interval (its moves are not in the reports yet), and a host one
    replica moved stays for the cooldown on the other too (the state's times)."""
    from consultant.service import ConsultantService
    from consultant_helpers import settings_for

    now = [100.0]
    s = settings_for(tmp_path, lease_seconds=60.0, balance__enabled=True)
    a, b = ConsultantService(s, clock=lambda: now[0]), ConsultantService(s, clock=lambda: now[0])

    async def go():
        await a.start()
        await b.start()
        try:
            for agent in ("slow", "fast"):
                await a.register(AgentRecord(agent, f"127.0.0.1:{7000 + len(agent)}"))
            await a.heartbeat("slow", _report(600, 1.0, {"x.example": 300, "y.example": 200}))
            await a.heartbeat("fast", _report(0, 40.0, {}))
            now[0] += 1
            assert [m.host for m in await a.balance_round()] == ["x.example"]
            now[0] += 1
            assert await b.balance_round() == [], "b plans on reports from before a's move: refused"
            # later, fresh reports in which nothing changed yet: b may move y, never x (a's cooldown)
            now[0] += 0.9 * s.balance.interval
            await b.heartbeat("slow", _report(600, 1.0, {"x.example": 300, "y.example": 200}))
            await b.heartbeat("fast", _report(0, 40.0, {}))
            now[0] += 1
            assert [m.host for m in await b.balance_round()] == ["y.example"]
        finally:
            await a.stop()
            await b.stop()

    run(go())


def test_a_state_from_before_the_balancer_gets_the_origin_column_and_its_overrides_are_the_operators(tmp_path):
    import sqlalchemy as sa

    from consultant.store import Store

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE consultant_overrides (host VARCHAR(255) PRIMARY KEY, agent_id VARCHAR(200) NOT NULL, "
                             "created_at FLOAT NOT NULL)"))
        conn.execute(sa.text("INSERT INTO consultant_overrides VALUES ('a.example', 'x', 1.0)"))
    engine.dispose()
    store = Store(url)
    try:
        snap = store.snapshot()
        assert snap.overrides == {"a.example": "x"} and snap.balanced == frozenset()
        Store(url).close()  # a second opening (a replica) finds the column there
    finally:
        store.close()


@pytest.mark.parametrize("bad", [{"period": 0}, {"block": 0}, {"report_hosts": 5000}])
def test_load_settings_are_checked(bad):
    with pytest.raises(ValueError):
        LoadSettings(**bad)


def test_a_heartbeat_with_a_bad_heavy_host_is_refused_naming_it():
    from consultant import validate
    from wancrawl.errors import InvalidArgument
    from wancrawl.v1 import common_pb2, consultant_pb2

    ok = consultant_pb2.HeartbeatRequest(agent_id="a", load=common_pb2.LoadReport(
        work_area=10.0, heavy_hosts=[common_pb2.HostLoad(host="x.example", queue_length=3)]))
    validate.heartbeat(ok)
    long = consultant_pb2.HeartbeatRequest(agent_id="a", load=common_pb2.LoadReport(
        heavy_hosts=[common_pb2.HostLoad(host="x.example"), common_pb2.HostLoad(host="y" * 400)]))
    with pytest.raises(InvalidArgument, match=r"load\.heavy_hosts\[1\]\.host"):
        validate.heartbeat(long)
    nan = consultant_pb2.HeartbeatRequest(agent_id="a", load=common_pb2.LoadReport(work_area=float("nan")))
    with pytest.raises(InvalidArgument, match="load.work_area"):
        validate.heartbeat(nan)


def test_balancing_is_on_by_default_in_consultant_mode_and_off_in_kademlia_mode():
    """Issue 23's decision (docs/balance.md, "On by default?"): on in consultant mode after a
    clean full chaos run with it on (session 10); off in Kademlia mode (too few delegations
    around the faults to count)."""
    from agent.settings import KademliaSettings
    from consultant.settings import BalanceSettings, load_settings

    assert BalanceSettings().enabled is True
    assert load_settings(None, {}).balance.enabled is True
    assert KademliaSettings().balance is False
