"""bench/chaos.py's comparison against a hand-made truth: lost, stored twice, fetched twice, recovery
(the harness in lab/faults/; bench/chaos.py is its command line)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import pytest

from conftest import REPO
from lab.faults import inject, measure, revisits, scenarios, table

_spec = importlib.util.spec_from_file_location("chaos", REPO / "bench" / "chaos.py")
assert _spec and _spec.loader
chaos = importlib.util.module_from_spec(_spec)
sys.modules["chaos"] = chaos  # dataclasses look their module up there
_spec.loader.exec_module(chaos)

A, B = "http://a.lab:8080", "http://b.lab:8080"
TRUTH = {f"{A}/", f"{A}/1", f"{A}/2", f"{B}/", f"{B}/1"}


def test_compare_counts_lost_stored_twice_and_fetched_twice():
    captures = [
        (f"{A}/", "response"),
        (f"{A}/1", "response"), (f"{A}/1", "response"),  # stored twice
        (f"{A}/2", "response"), (f"{A}/2", "revisit"),   # a refetch deduplicated: stored twice all the same
        (f"{B}/", "revisit"),                            # a revisit alone stores no page: lost
        ("http://c.lab:8080/x", "response"),             # not in truth
    ]                                                    # B/1: never stored, lost
    requested = [f"{A}/", f"{A}/1", f"{A}/1", f"{A}/2", f"{A}/2", f"{A}/2", f"{B}/",
                 f"{A}/robots.txt", f"{A}/robots.txt"]   # robots.txt twice does not count
    m = measure.compare(TRUTH, captures, requested)
    assert (m.truth, m.stored, m.lost, m.stored_twice) == (5, 3, 2, 2)
    assert m.lost_urls == [f"{B}/", f"{B}/1"]
    assert m.fetched_twice == 2 and m.outside_truth == 1


def test_a_perfect_crawl_compares_clean():
    m = measure.compare(TRUTH, [(u, "response") for u in TRUTH], sorted(TRUTH) + [f"{B}/robots.txt"])
    assert (m.stored, m.lost, m.stored_twice, m.fetched_twice, m.outside_truth) == (5, 0, 0, 0, 0)


def test_recovery_is_the_last_affected_host_to_be_fetched_again():
    # Fault at t=10. a.lab has work left (A/2 not yet requested); b.lab too (B/1); c is not in truth.
    requests = [
        (1.0, "v", "a.lab", f"{A}/"), (2.0, "v", "a.lab", f"{A}/1"), (3.0, "w", "b.lab", f"{B}/"),
        (10.5, "v", "a.lab", f"{A}/robots.txt"),  # robots.txt is not a fetch of the host's work
        (11.0, "v", "a.lab", f"{A}/1"),           # any page counts, even a refetch
        (14.0, "w", "b.lab", f"{B}/1"),
    ]
    r = measure.recovery(10.0, requests, TRUTH)
    assert r.affected == 2 and r.per_host == {"a.lab": 1.0, "b.lab": 4.0} and r.seconds == 4.0 and r.never == []
    only_a = measure.recovery(10.0, requests, TRUTH, candidates={"a.lab"})
    assert only_a.affected == 1 and only_a.seconds == 1.0
    # A drained victim "v" finishing its last requests is not a recovery: a.lab never resumed.
    drained = measure.recovery(10.0, requests, TRUTH, candidates={"a.lab"}, ignore_clients={"v"})
    assert drained.seconds is None and drained.never == ["a.lab"]


def test_hosts_without_work_left_are_not_affected():
    requests = [(1.0, "v", h, u) for u in sorted(TRUTH) for h in [u.split("/")[2].split(":")[0]]]
    r = measure.recovery(10.0, requests, TRUTH)
    assert r.affected == 0 and r.seconds is None


@pytest.mark.parametrize("given, want", [(None, list(scenarios.SCENARIOS)), (["kill,drain", "kill"], ["kill", "drain"])])
def test_scenario_selection(given, want):
    assert chaos.parse_scenarios(given) == want


def test_worst_is_the_largest_lost_and_share_stored_twice():
    rows = [measure.Row("a", measure.Comparison(1000, 990, 10, 5, 5, 0, 0)), measure.Row("b", measure.Comparison(1000, 1000, 0, 20, 20, 20, 0)),
            measure.Row("c")]
    assert measure.worst(rows) == (10, 2.0)


def test_scenarios_run_in_the_documented_order():
    assert scenarios.SCENARIOS == ("baseline", "restart", "consultant", "storage", "drain", "kill", "kill2", "join", "flap",
                               "kill-owner-and-backup", "storage-kill9", "consultant-stop", "cluster-kill9",
                               "consultant-replica", "consultant-rolling") + scenarios.STORAGE_SCENARIOS + scenarios.REVISIT_SCENARIOS \
        + scenarios.KADEMLIA_ONLY
    assert scenarios.STORAGE_SCENARIOS == ("storage-writer-kill", "object-store-down")
    assert scenarios.KADEMLIA_ONLY == ("liar-first", "liar-last", "liar-fabricate")


def test_the_backup_killed_with_the_owner_is_first_backup_of_most_of_its_hosts():
    routes = [
        ("a.lab", ("v", "x", "y")), ("b.lab", ("v", "x", "z")), ("c.lab", ("v", "y", "x")),
        ("d.lab", ("x", "v", "y")),   # v is only a backup here: not counted
        ("e.lab", ("y", "x", "v")),
        ("f.lab", ("v",)),            # owned by v, no backup named: counted among v's hosts only
        ("g.lab", ()),                # no answer
    ]
    assert measure.first_backup(routes, "v") == ("x", 2, 4)
    assert measure.first_backup(routes, "x") == ("v", 1, 1)
    assert measure.first_backup(routes, "nobody") is None
    assert measure.first_backup([("f.lab", ("v",))], "v") is None
    # A tie goes to the first name in sorted order, whatever the order of the answer.
    tie = [("a.lab", ("v", "z", "x")), ("b.lab", ("v", "y", "x"))]
    assert measure.first_backup(tie, "v") == measure.first_backup(tie[::-1], "v") == ("y", 1, 2)


def test_warc_cut_is_the_tail_recovery_removed(tmp_path):
    (tmp_path / "a.warc.gz").write_bytes(b"x" * 10)
    (tmp_path / "b.warc.gz").write_bytes(b"y" * 5)
    (tmp_path / "index.sqlite").write_bytes(b"z" * 99)   # not a WARC file
    before = measure.warc_sizes(tmp_path)
    assert before == {"a.warc.gz": 10, "b.warc.gz": 5}
    assert measure.warc_sizes(tmp_path / "absent") == {}
    os.truncate(tmp_path / "a.warc.gz", 4)                # 6 bytes cut
    (tmp_path / "b.warc.gz").write_bytes(b"y" * 8)        # grew: not a cut
    (tmp_path / "c.warc.gz").write_bytes(b"w")            # new file: not a cut
    assert measure.warc_cut(before, measure.warc_sizes(tmp_path)) == 6
    assert measure.warc_cut(before, {"b.warc.gz": 5}) == 0  # a file gone is not a cut


def test_fence_gap_measures_fetching_around_a_consultant_stop():
    pages = [5.0, 10.5, 12.0, 24.0, 56.0, 57.0, 3.0]
    # Stopped at 10, continued at 55: requests at 10.5, 12, 24 while stopped; the last 14 s after.
    assert measure.fence_gap(pages, 10.0, 55.0) == (14.0, 1.0, 3)
    assert measure.fence_gap([1.0, 2.0], 10.0, 55.0) == (None, None, 0)
    assert measure.fence_gap([55.0], 10.0, 55.0) == (None, 0.0, 0)   # at the resume: after it


def test_only_kill_owner_and_backup_sets_the_replication_factor():
    args = argparse.Namespace(backups=2)
    tables = scenarios.agent_tables("kill-owner-and-backup", args)
    if scenarios.agent_backups_known():
        import tomllib

        assert tomllib.loads(tables) == {"replication": {"backups": 2}}
    else:  # an agent without the setting refuses the key: none is written
        assert tables == ""
    assert all(scenarios.agent_tables(n, args) == "" for n in scenarios.SCENARIOS
               if n != "kill-owner-and-backup" and n not in scenarios.REVISIT_SCENARIOS)


def test_two_kills_recovery_merges_per_host():
    # kill2: a.lab was the first victim's (fault 10), then the second victim's (fault 30) with b.lab.
    first = measure.Recovery(1, 2.0, [], {"a.lab": 2.0})
    second = measure.Recovery(3, 5.0, ["c.lab"], {"a.lab": 1.0, "b.lab": 5.0})
    r = measure.merge_recovery(first, second)
    assert r.affected == 3 and r.per_host == {"a.lab": 2.0, "b.lab": 5.0} and r.seconds == 5.0 and r.never == ["c.lab"]
    # A host recovered after the first kill but never after the second is "never".
    r = measure.merge_recovery(first, measure.Recovery(1, None, ["a.lab"], {}))
    assert r.affected == 1 and r.seconds is None and r.never == ["a.lab"] and r.per_host == {}


def test_handover_cost_is_bytes_per_host_moved_against_held():
    before = {"x": {"hosts_handed_out": 2, "handover_bytes_out": 1000}, "y": {"hosts_handed_out": 0, "handover_bytes_out": 0}}
    after = {"x": {"hosts_handed_out": 6, "handover_bytes_out": 9000},   # 4 hosts, 8000 B since the fault
             "y": {"hosts_handed_out": 1, "handover_bytes_out": 2000},   # 1 host, 2000 B
             "z": {"hosts_handed_out": 0, "handover_bytes_out": 0}}      # the joiner: absent before
    h = measure.handover_cost(before, after, held_bytes=40_000, held_hosts=10)
    assert (h.hosts_moved, h.bytes_moved, h.moved_per_host, h.held_per_host, h.ratio) == (5, 10_000, 2000.0, 4000.0, 0.5)


def test_handover_cost_without_the_bytes_counter_is_not_available():
    h = measure.handover_cost({}, {"x": {"hosts_handed_out": 3}}, held_bytes=1000, held_hosts=0)
    assert (h.hosts_moved, h.bytes_moved, h.moved_per_host, h.held_per_host, h.ratio) == (3, None, None, None, None)
    assert table.handover_rows([measure.Row("join", handover=h)])[0][1:6] == ["3", "n/a", "n/a", "n/a", "n/a"]
    none_moved = measure.handover_cost({}, {"x": {"hosts_handed_out": 0, "handover_bytes_out": 0}}, 1000, 10)
    assert none_moved.bytes_moved == 0 and none_moved.moved_per_host is None and none_moved.held_per_host == 100.0


def test_flap_counts_the_victims_fetches_of_hosts_taken_while_it_hung():
    # The victim "v" owned a.lab, b.lab and c.lab; stopped at 10, resumed at 30, window to 45.
    V, W = "v", "w"
    C = "http://c.lab:8080"
    requests = [
        (5.0, V, "a.lab", f"{A}/"),            # before the stop: not counted
        (26.0, W, "a.lab", f"{A}/robots.txt"),  # robots.txt alone does not make a host lost
        (27.0, W, "a.lab", f"{A}/1"),           # a.lab taken while v hung
        (28.0, W, "b.lab", f"{B}/"),            # b.lab taken while v hung
        (30.5, V, "a.lab", f"{A}/2"),           # stale, and w still fetches a.lab after it: overlapping
        (31.0, W, "a.lab", f"{A}/2"),
        (33.0, V, "b.lab", f"{B}/1"),           # stale, w had stopped fetching b.lab: not overlapping
        (33.5, V, "b.lab", f"{B}/robots.txt"),  # robots.txt: not counted
        (34.0, V, "c.lab", f"{C}/"),            # c.lab was not taken by anyone: not stale
        (35.0, W, "c.lab", f"{C}/1"),           # taken only after the resume: not a lost host
        (46.0, V, "a.lab", f"{A}/3"),           # after the window
        (20.0, W, "d.lab", "http://d.lab:8080/"),  # not the victim's host
    ]
    f = measure.flap_stale(requests, V, {"a.lab", "b.lab", "c.lab"}, stop_t=10.0, resume_t=30.0, window_end=45.0)
    assert f.lost_hosts == ["a.lab", "b.lab"] and f.stale == 2 and f.overlapping == 1 and f.window_s == 15.0
    assert f.per_host == {"a.lab": 1, "b.lab": 1} and f.before_handback is None and f.handback_s is None
    assert table.flap_rows([measure.Row("flap", flap=f)]) == [["flap", "2", "n/a", "n/a", "2", "1", "pause to resume + 15s"]]
    # Handed back at 32 (after the a.lab fetch at 30.5, before the b.lab one at 33): one fetch before.
    f = measure.flap_stale(requests, V, {"a.lab", "b.lab", "c.lab"}, 10.0, 30.0, 45.0, handback_t=32.0)
    assert f.before_handback == 1 and f.handback_s == 2.0 and f.stale == 2
    assert table.flap_rows([measure.Row("flap", flap=f)]) == [["flap", "2", "2.0", "1", "2", "1", "pause to resume + 15s"]]
    clean = measure.flap_stale([r for r in requests if r[1] == W], V, {"a.lab", "b.lab"}, 10.0, 30.0, 45.0, 32.0)
    assert clean.lost_hosts == ["a.lab", "b.lab"] and clean.stale == clean.overlapping == clean.before_handback == 0


def test_handback_is_the_last_answer_before_the_hosts_were_in():
    # hosts_handed_in was 3 before the pause; 2 hosts were lost. Resumed at 30.
    samples = [(30.1, 3.0), (30.2, None), (30.3, 4.0), (30.4, 5.0), (30.5, 6.0)]
    assert measure.handback_time(samples, baseline=3.0, need=2, start=30.0) == 30.3
    assert measure.handback_time(list(reversed(samples)), 3.0, 2, 30.0) == 30.3     # in any order
    assert measure.handback_time([(30.1, 5.0)], 3.0, 2, 30.0) == 30.0               # back at the first answer: the resume
    assert measure.handback_time(samples, 3.0, 9, 30.0) is None                      # never all back
    assert measure.handback_time([(30.1, None)], 0.0, 1, 30.0) is None               # counter not reported
    assert measure.handback_time([(30.1, 0.0), (30.2, 1.0)], 0.0, 0, 30.0) == 30.1   # no host lost: the first handover


def test_rows_with_the_new_figures_serialise_to_json():
    import json

    f = measure.flap_stale([], "v", {"a.lab"}, 10.0, 30.0, 45.0, handback_t=30.25)
    row = measure.Row("flap", measure.Comparison(5, 5, 0, 0, 0, 0), measure.Recovery(1, 1.23456, [], {"a.lab": 1.23456}),
                    handover=measure.handover_cost({}, {"x": {"hosts_handed_out": 3, "handover_bytes_out": 1000}}, 7000, 3),
                    flap=f, fault2_after_s=12.34567)
    d = json.loads(json.dumps(chaos._row_json(row)))
    assert d["handover"]["moved_per_host"] == 333.333 and d["handover"]["held_per_host"] == 2333.333
    assert d["flap"]["handback_s"] == 0.25 and d["flap"]["before_handback"] == 0 and d["fault2_after_s"] == 12.346


def test_consultant_stop_comes_early_unless_the_share_is_given():
    assert scenarios.fault_share("consultant-stop", None) == 0.05 and scenarios.fault_share("kill", None) == 0.4
    assert scenarios.fault_share("consultant-stop", 0.3) == 0.3 and scenarios.fault_share("kill", 0.2) == 0.2


def test_replica_notes_sum_the_agents_counters_since_the_fault():
    before = {"a": {"consultant_failovers": 1, "fence_refusals": 4}, "b": {"consultant_failovers": 0}}
    after = {"a": {"consultant_failovers": 5, "fence_refusals": 4, "consultant_unanswered": 1},
             "b": {"consultant_failovers": 3, "lease_lapses": 1}, "c": {"consultant_failovers": 9}}
    note = inject.replica_notes(before, after)
    assert "7 consultant calls failed over, 1 unanswered by every replica, 0 fence refusals, 1 leases run out or forgotten" in note
    assert scenarios.fault_share("consultant-rolling", None) == 0.05 and set(scenarios.REPLICA_SCENARIOS) <= set(scenarios.CONSULTANT_ONLY)


def test_with_revisits_only_captures_closer_than_the_interval_are_stored_twice():
    # A/ revisited every 20 s by design; A/1 captured twice 3 s apart (a refetch no schedule
    # allows); B/ captured once; a URL outside truth twice at once does not count.
    captures = [(f"{A}/", 0.0), (f"{A}/", 20.0), (f"{A}/", 41.0),
                (f"{A}/1", 30.0), (f"{A}/1", 5.0), (f"{A}/1", 2.0),
                (f"{B}/", 7.0), ("http://c.lab:8080/x", 1.0), ("http://c.lab:8080/x", 1.0)]
    assert measure.twice_within(TRUTH, captures, 19.0) == 1
    assert measure.twice_within(TRUTH, captures, 21.0) == 2   # A/'s 20 s revisit is now too close
    assert measure.twice_within(TRUTH, captures, 0.5) == 0


def test_schedule_check_counts_urls_dropped_out_and_not_at_their_owner():
    schedules = {"x": {f"{A}/", f"{A}/1", f"{B}/"}, "y": {f"{B}/1", f"{A}/"}}
    owners = {"a.lab": "x", "b.lab": "x"}
    sc = measure.schedule_check(TRUTH, schedules, owners)
    assert (sc.truth, sc.scheduled, sc.unscheduled, sc.rows) == (5, 4, 1, 5)
    assert sc.unscheduled_urls == [f"{A}/2"]
    assert sc.not_at_owner == 2   # A/2 nowhere, B/1 at y while x owns b.lab
    assert measure.schedule_check(TRUTH, {}, {}).unscheduled == 5


def test_revisit_scenarios_turn_revisits_on_over_a_changing_web(tmp_path):
    import tomllib

    args = argparse.Namespace(backups=2)
    for name in scenarios.REVISIT_SCENARIOS:
        table = tomllib.loads(scenarios.agent_tables(name, args))["revisit"]
        assert table["enabled"] and table["policy"] == "fixed"
        assert table["interval"] == table["min_interval"] == scenarios.REVISIT_INTERVAL_S
    assert scenarios.agent_tables("kill", args) == ""
    path = revisits.changing_topology(None, tmp_path / "t.toml")
    from lab import topology
    assert topology.load(path).spec.web.change_ratio == scenarios.REVISIT_CHANGE_RATIO


def test_replicas_settled_waits_for_the_new_epochs_moves():
    """kill2's second kill waits for replicas current: a sum of replica_unsynced read before the
    agents made the new epoch's moves is 0 and says nothing (session 12's 68 pages twice)."""
    from lab.faults.observe import replicas_settled

    done = {"epoch": 5.0, "epoch_settled": 5.0, "replica_unsynced": 0.0, "hosts_settling": 0.0}
    assert replicas_settled({"a": done, "b": dict(done)}) == (True, 0)
    assert replicas_settled({"a": done, "b": {**done, "epoch_settled": 4.0}})[0] is False, "b's moves for 5 are to come"
    assert replicas_settled({"a": done, "b": {**done, "epoch": 4.0, "epoch_settled": 4.0}})[0] is False, "b has not learnt 5"
    assert replicas_settled({"a": done, "b": {**done, "hosts_settling": 3.0}})[0] is False
    assert replicas_settled({"a": done, "b": {**done, "replica_unsynced": 2.0}}) == (False, 2)
    assert replicas_settled({"a": done, "b": None}) == (False, -1), "an agent that did not answer"
    assert replicas_settled({"a": {}, "b": {}}) == (True, 0), "an older agent without the gauges: as before"
