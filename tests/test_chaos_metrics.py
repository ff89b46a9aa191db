"""bench/chaos.py's comparison against a hand-made truth: lost, stored twice, fetched twice, recovery."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO

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
    m = chaos.compare(TRUTH, captures, requested)
    assert (m.truth, m.stored, m.lost, m.stored_twice) == (5, 3, 2, 2)
    assert m.lost_urls == [f"{B}/", f"{B}/1"]
    assert m.fetched_twice == 2 and m.outside_truth == 1


def test_a_perfect_crawl_compares_clean():
    m = chaos.compare(TRUTH, [(u, "response") for u in TRUTH], sorted(TRUTH) + [f"{B}/robots.txt"])
    assert (m.stored, m.lost, m.stored_twice, m.fetched_twice, m.outside_truth) == (5, 0, 0, 0, 0)


def test_recovery_is_the_last_affected_host_to_be_fetched_again():
    # Fault at t=10. a.lab has work left (A/2 not yet requested); b.lab too (B/1); c is not in truth.
    requests = [
        (1.0, "v", "a.lab", f"{A}/"), (2.0, "v", "a.lab", f"{A}/1"), (3.0, "w", "b.lab", f"{B}/"),
        (10.5, "v", "a.lab", f"{A}/robots.txt"),  # robots.txt is not a fetch of the host's work
        (11.0, "v", "a.lab", f"{A}/1"),           # any page counts, even a refetch
        (14.0, "w", "b.lab", f"{B}/1"),
    ]
    r = chaos.recovery(10.0, requests, TRUTH)
    assert r.affected == 2 and r.per_host == {"a.lab": 1.0, "b.lab": 4.0} and r.seconds == 4.0 and r.never == []
    only_a = chaos.recovery(10.0, requests, TRUTH, candidates={"a.lab"})
    assert only_a.affected == 1 and only_a.seconds == 1.0
    # A drained victim "v" finishing its last requests is not a recovery: a.lab never resumed.
    drained = chaos.recovery(10.0, requests, TRUTH, candidates={"a.lab"}, ignore_clients={"v"})
    assert drained.seconds is None and drained.never == ["a.lab"]


def test_hosts_without_work_left_are_not_affected():
    requests = [(1.0, "v", h, u) for u in sorted(TRUTH) for h in [u.split("/")[2].split(":")[0]]]
    r = chaos.recovery(10.0, requests, TRUTH)
    assert r.affected == 0 and r.seconds is None


@pytest.mark.parametrize("given, want", [(None, list(chaos.SCENARIOS)), (["kill,drain", "kill"], ["kill", "drain"])])
def test_scenario_selection(given, want):
    assert chaos.parse_scenarios(given) == want


def test_worst_is_the_largest_lost_and_share_stored_twice():
    rows = [chaos.Row("a", chaos.Comparison(1000, 990, 10, 5, 5, 0, 0)), chaos.Row("b", chaos.Comparison(1000, 1000, 0, 20, 20, 20, 0)),
            chaos.Row("c")]
    assert chaos.worst(rows) == (10, 2.0)
