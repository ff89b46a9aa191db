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


def _merged(db) -> set[tuple[str, int]]:
    """(host, fingerprint) in seen_runs, decoded independently of agent/state/sieve.py: each chunk
    n (int32), n host ids (int32), their counts (int32), then the fingerprints (int64), little-endian;
    chunk (khid, kfp) holds the pairs from its key up to the next chunk's key, in order."""
    names = dict(db.execute("SELECT hid, host FROM hosts"))
    chunks = []
    for khid, kfp, blob in db.execute("SELECT khid, kfp, data FROM seen_runs"):
        n = int.from_bytes(blob[:4], "little")
        ints = [int.from_bytes(blob[4 + 4 * i:8 + 4 * i], "little", signed=True) for i in range(2 * n)]
        fps = [int.from_bytes(blob[i:i + 8], "little", signed=True) for i in range(4 + 8 * n, len(blob), 8)]
        pairs = [(h, fp) for h, c in zip(ints[:n], ints[n:]) for fp in [None] * c]
        pairs = [(h, fp) for (h, _), fp in zip(pairs, fps)]
        assert len(pairs) == len(fps) and pairs == sorted(set(pairs))
        chunks.append(((khid, kfp), pairs))
    chunks.sort()
    if chunks:
        assert chunks[0][0] == (0, -(1 << 63))
    for (key, pairs), (nxt, _) in zip(chunks, chunks[1:] + [((1 << 62, 0), [])]):
        assert all(key <= p < nxt for p in pairs)
    return {(names[h], fp) for _, pairs in chunks for h, fp in pairs}


def _on_disk(path) -> set[tuple[str, int]]:
    import sqlite3

    db = sqlite3.connect(str(path))
    rows = _merged(db)
    for t in [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE name IN ('seen_log', 'seen_merging')")]:
        for hb, fb in db.execute(f"SELECT hids, fps FROM {t}"):
            hids = [int.from_bytes(hb[i:i + 4], "little", signed=True) for i in range(0, len(hb), 4)]
            fps = [int.from_bytes(fb[i:i + 8], "little", signed=True) for i in range(0, len(fb), 8)]
            names = dict(db.execute("SELECT hid, host FROM hosts"))
            rows |= {(names[h], fp) for h, fp in zip(hids, fps)}
    db.close()
    return rows


def test_log_merges_in_steps_and_a_crash_mid_merge_loses_nothing(tmp_path, monkeypatch):
    import agent.state.seen as seen_mod

    monkeypatch.setattr(seen_mod, "_SLICE_LOG_ROWS", 40)  # many slices
    monkeypatch.setattr(seen_mod, "_LOAD_ROWS", 25)    # several load steps
    monkeypatch.setattr(seen_mod.sieve, "CHUNK", 4)    # many chunks
    monkeypatch.setattr(seen_mod, "_STEP_FPS", 16)     # a slice in several steps
    monkeypatch.setattr(seen_mod, "_STEP_SECONDS", 0)  # one step per flush
    path = tmp_path / "s.db"
    s = SeenSet(path, merge_rows=200)
    urls = {f"h{h}": _urls(f"h{h}", 30) for h in range(8)}
    for h, us in urls.items():
        s.add_new(h, us)
        s.flush()  # a log row per flush; the 7th (210 rows >= merge_rows) sets the log aside
    assert s._cycle is not None and s._cycle.slices > 2 and s._cycle.last >= 7
    want = {(h, fingerprint(u)) for h, us in urls.items() for u in us}
    steps = 0
    while s._cycle is not None and s._cycle.next < 2:
        s.flush()  # nothing new: steps only
        steps += 1
    assert _on_disk(path) >= want and steps > 3
    del s  # a crash mid-merge: two slices in `seen`, the rest only in seen_merging
    t = SeenSet(path, merge_rows=100)
    assert len(t) == len(want) and all(u in t for us in urls.values() for u in us)
    assert t._cycle is not None  # the merge starts again
    while t._cycle is not None:
        t.flush()
    db_tables = {r[0] for r in t._db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'seen%'")}
    assert "seen_merging" not in db_tables
    assert _on_disk(path) == want
    t.merge()  # the newer log too
    assert _merged(t._db) == want
    assert sorted(t.export_host("h3")) == sorted(fingerprint(u) for u in urls["h3"])
    t.close()


def test_handover_mid_merge_moves_the_whole_host(tmp_path, monkeypatch):
    import agent.state.seen as seen_mod

    monkeypatch.setattr(seen_mod, "_SLICE_LOG_ROWS", 40)
    monkeypatch.setattr(seen_mod, "_STEP_SECONDS", 0)
    s = SeenSet(tmp_path / "s.db", merge_rows=50)
    s.add_new("a", _urls("a", 60))
    s.add_new("b", _urls("b", 60))
    s.flush()  # set aside: a cycle under way
    s.add_new("a", _urls("a", 5, "log"))
    s.flush()  # in the new log
    s.add_new("a", _urls("a", 3, "mem"))  # not flushed
    assert s._cycle is not None
    assert sorted(s.export_host("a")) == sorted(fingerprint(u) for u in _urls("a", 60) + _urls("a", 5, "log") + _urls("a", 3, "mem"))
    assert s.drop_host("b") == 60 and not any(u in s for u in _urls("b", 60))
    s.close()
    assert len(SeenSet(tmp_path / "s.db")) == 68


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
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 200)), max_size=400))
def test_buckets_split_and_remove_like_a_set(tmp_path_factory, ops):
    # Two fingerprints per bucket on average: a split every other insert, so inserts and removals
    # meet buckets mid-way through every level of the linear hashing; the keys share low bits
    # (multiples of 8 and small offsets), the case where a wrong bucket index would hide a member.
    d = tmp_path_factory.mktemp("s")
    s = SeenSet(d / "s.db", bucket=2)
    keyspace = [((k % 7) + (k // 7) * 8 - 100) or 1 for k in range(201)]
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
    assert all(list(b) == sorted(b) for b in s._b)
    # Reloaded from disk into as many buckets as the count asks: the same members.
    s._pending = [(s._host_id("h"), fp) for fp in model]
    s.close()
    t = SeenSet(d / "s.db", bucket=2)
    assert len(t) == len(model) and all(t._has(fp) for fp in model)
    t.close()


def test_growth_takes_no_long_step(tmp_path):
    """Every insert does O(one bucket) of work: no call is much slower than the median, where the
    old table's rehash made one call in a doubling as slow as all the inserts before it. Counted
    in work (fingerprints moved by the largest split), not time."""
    s = SeenSet(tmp_path / "s.db", bucket=64)
    moved = []
    grow = s._grow

    def counting() -> None:
        moved.append(len(s._b[s._split]))
        grow()

    s._grow = counting  # type: ignore[method-assign]
    s.add_new("h", [f"http://h/{i}" for i in range(50_000)])
    assert len(s) == 50_000 and len(moved) > 500
    assert max(moved) <= 4 * 64  # one bucket, never the set


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "add", "add", "flush", "crash", "drop", "merge", "reopen"]),
                          st.integers(0, 5), st.integers(1, 40)), min_size=10, max_size=60))
def test_matches_a_reference_set_through_merges_crashes_and_handovers(tmp_path_factory, ops):
    """The set against a plain Python dict of sets: every answer of add_new, membership, len, and
    what is on disk (decoded by _on_disk, not by the set), with tiny chunks, steps and logs so
    that merges, chunk splits and crashes mid-merge happen within a few dozen operations."""
    import agent.state.seen as seen_mod

    saved = {k: getattr(seen_mod, k) for k in ("_STEP_FPS", "_SLICE_LOG_ROWS", "_LOAD_ROWS", "_STEP_SECONDS")}
    for k, v in {"_STEP_FPS": 5, "_SLICE_LOG_ROWS": 7, "_LOAD_ROWS": 6, "_STEP_SECONDS": 0}.items():
        setattr(seen_mod, k, v)
    chunk, seen_mod.sieve.CHUNK = seen_mod.sieve.CHUNK, 4
    try:
        path = tmp_path_factory.mktemp("s") / "s.db"
        s = SeenSet(path, merge_rows=20)
        durable: dict[str, set[str]] = {}
        recent: dict[str, set[str]] = {}  # recorded since the last flush
        rng = random.Random(len(ops))
        for op, h, k in ops:
            host = f"h{h}"
            if op == "add":
                urls = [f"http://{host}/{rng.randrange(60)}" for _ in range(k)]
                got = s.add_new(host, urls)
                for u, new in zip(urls, got):
                    held = u in durable.get(host, set()) or u in recent.get(host, set())
                    assert new == (not held)
                    recent.setdefault(host, set()).add(u)
            elif op == "flush":
                s.flush()
                for x, us in recent.items():
                    durable.setdefault(x, set()).update(us)
                recent = {}
            elif op in ("crash", "reopen"):
                if op == "reopen":
                    s.close()
                    for x, us in recent.items():
                        durable.setdefault(x, set()).update(us)
                s._db.close() if op == "crash" else None
                recent = {}
                s = SeenSet(path, merge_rows=20)
            elif op == "drop":
                n = len(durable.get(host, set()) | recent.get(host, set()))
                assert s.drop_host(host) == n
                durable.pop(host, None)
                recent.pop(host, None)
            elif op == "merge":
                s.merge()
            every = {(x, u) for d in (durable, recent) for x, us in d.items() for u in us}
            assert len(s) == len(every)
            assert all(u in s for _, u in every)
            assert not any(f"http://h{x}/{i}" in s for x in range(6) for i in range(60)
                           if (f"h{x}", f"http://h{x}/{i}") not in every)
        s.flush()
        for x, us in recent.items():
            durable.setdefault(x, set()).update(us)
        assert _on_disk(path) == {(x, fingerprint(u)) for x, us in durable.items() for u in us}
        s.merge()
        for x, us in durable.items():
            assert sorted(s.export_host(x)) == sorted(fingerprint(u) for u in us)
        s.close()
        db = __import__("sqlite3").connect(str(path))
        assert _merged(db) == {(x, fingerprint(u)) for x, us in durable.items() for u in us}
        db.close()
    finally:
        for k, v in saved.items():
            setattr(seen_mod, k, v)
        seen_mod.sieve.CHUNK = chunk
