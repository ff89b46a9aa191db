"""Seen set: exact dedup, growth, persistence and crash, per-host export/import/drop."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.state.seen import SeenSet, fingerprint


def _urls(host: str, n: int, tag: str = "p") -> list[str]:
    return [f"http://{host}/{tag}/{i}?q={i * 7}" for i in range(n)]


def test_add_new_reports_new_once_including_repeats_in_a_batch(tmp_path):
    s = SeenSet(tmp_path / "s.db")
    assert s.add_new("a", ["http://a/1", "http://a/2", "http://a/1"]) == [True, True, False]
    assert s.add_new("a", ["http://a/2", "http://a/3"]) == [False, True]
    assert ("http://a/3" in s) and not ("http://a/4" in s)
    assert len(s) == 3


def test_growth_keeps_every_member_and_matches_a_set(tmp_path):
    s = SeenSet(tmp_path / "s.db")
    start_cap = s.capacity
    rng = random.Random(5)
    model: set[str] = set()
    for h in range(40):
        urls = [f"http://h{h}/{rng.randrange(3000)}" for _ in range(1000)]
        got = s.add_new(f"h{h}", urls)
        for u, new in zip(urls, got):
            assert new == (u not in model)
            model.add(u)
    assert s.capacity > start_cap and len(s) == len(model)
    assert all((u in s) for u in model)
    assert not any((f"http://h{h}/x{h}" in s) for h in range(40))
    assert s.memory_bytes() <= 8 * 4 * len(model)  # load stays above 25%


def test_flushed_survives_a_crash_and_unflushed_does_not(tmp_path):
    s = SeenSet(tmp_path / "s.db", merge_rows=3)
    s.add_new("a", _urls("a", 5))
    s.flush()  # 5 >= merge_rows: also merged into the host-clustered table
    s.add_new("b", _urls("b", 2))
    s.flush()  # stays in the log
    s.add_new("a", ["http://a/unflushed"])
    del s  # a crash: no close()
    t = SeenSet(tmp_path / "s.db", merge_rows=3)
    assert len(t) == 7
    assert all((u in t) for u in _urls("a", 5)) and all((u in t) for u in _urls("b", 2))
    assert not ("http://a/unflushed" in t)
    assert t.add_new("a", ["http://a/unflushed", _urls("a", 1)[0]]) == [True, False]
    t.close()
    assert len(SeenSet(tmp_path / "s.db")) == 8


def test_handover_moves_one_host(tmp_path):
    old = SeenSet(tmp_path / "old.db", merge_rows=50)
    old.add_new("a", _urls("a", 120))
    old.add_new("b", _urls("b", 80))
    old.flush()
    old.add_new("a", _urls("a", 10, "late"))  # unflushed and unmerged: must travel too
    fps = old.export_host("a")
    assert len(fps) == 130 and len(set(fps)) == 130
    new = SeenSet(tmp_path / "new.db")
    assert new.import_host("a", fps) == 130
    assert new.import_host("a", fps[:5]) == 0
    assert all((u in new) for u in _urls("a", 120) + _urls("a", 10, "late"))
    assert new.add_new("a", _urls("a", 3)) == [False] * 3
    assert old.drop_host("a") == 130
    assert len(old) == 80
    assert not any((u in old) for u in _urls("a", 120))
    assert all((u in old) for u in _urls("b", 80))
    assert old.export_host("a") == []
    old.close()
    new.close()
    old = SeenSet(tmp_path / "old.db")
    new = SeenSet(tmp_path / "new.db")
    assert len(old) == 80 and len(new) == 130
    assert not (_urls("a", 1)[0] in old) and (_urls("a", 1)[0] in new)
    assert old.add_new("a", _urls("a", 2)) == [True, True]  # the host can come back later


def test_fingerprint_is_stable_64_bit_and_never_zero():
    fp = fingerprint("http://example.com/")
    assert fp == fingerprint("http://example.com/") and fp != 0
    assert -(1 << 63) <= fp < (1 << 63)
    assert fingerprint("http://example.com/a") != fingerprint("http://example.com/b")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=300))
def test_deletion_keeps_probe_runs_intact(tmp_path_factory, ops):
    # Fingerprints sharing low bits collide in a small table, so runs wrap and interleave: the
    # case where a wrong backward shift would hide a member.
    s = SeenSet(tmp_path_factory.mktemp("s") / "s.db")
    mask = s._mask
    keyspace = [((k % 5) + (k // 5) * (mask + 1)) or 1 for k in range(41)]
    keyspace = [k - 3 if k > 3 else k + mask - 3 for k in keyspace]  # some homes near the end: wraps
    model: set[int] = set()
    for insert, k in ops:
        fp = keyspace[k]
        if insert:
            assert s._insert(fp) == (fp not in model)
            model.add(fp)
        else:
            assert s._remove(fp) == (fp in model)
            model.discard(fp)
        assert len(s) == len(model)
    assert all(s._has(fp) for fp in model)
    assert not any(s._has(fp) for fp in set(keyspace) - model)
