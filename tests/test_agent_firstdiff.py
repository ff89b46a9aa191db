"""Seed 000's history store (issue 22, item 5): the frontier and the seen set find the hosts a join
moves (closer to the newcomer than to this node) through their host-key index, exactly, and an old
database gains the index on open."""

from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.state.frontier import SCHEMA_VERSION, Frontier, Item
from agent.state.seen import SeenSet
from wancrawl.kademlia.xorspace import MAX_ID, host_key, key_prefix, moves_to

POOL = [f"h{i}.example" for i in range(40)]


def brute(hosts: set[str], me: int, n: int) -> list[str]:
    return sorted(h for h in hosts if moves_to(host_key(h), me, n))


def frontier_holds(f: Frontier) -> set[str]:
    return {h for h in POOL if f.queue_len(h) or f.in_flight_of(h) or f.pages(h)}


# A newcomer: anywhere, or next to me (sharing many top bits, down to below the 64-bit prefix).
pairs = st.tuples(st.integers(0, MAX_ID), st.integers(0, MAX_ID), st.sampled_from([0, 1, 4, 30, 63, 64, 65, 100, 160]),
                  st.sampled_from(POOL + [None]))


def ids(pair: tuple[int, int, int, str | None]) -> tuple[int, int]:
    """(me, newcomer): me near a pool host's key when asked, newcomer sharing `near` top bits with me."""
    me, other, near, anchor = pair
    if anchor is not None:
        me = host_key(anchor) ^ (me >> 140)
    n = me ^ (other >> near) if near < 160 else me
    return me, n


ops = st.lists(st.tuples(st.sampled_from(["add", "pages", "pop", "drop", "clear", "flush", "reopen"]),
                         st.sampled_from(POOL), st.integers(1, 3)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(steps=ops, queries=st.lists(pairs, min_size=1, max_size=6))
def test_frontier_hosts_moving_is_brute_force(tmp_path_factory, steps, queries):
    path = tmp_path_factory.mktemp("f") / "f.db"
    f = Frontier(path, hot_per_host=2)
    k = 0
    for op, host, n in steps:
        if op == "add":
            f.add([Item(f"http://{host}/{k + i}", host, 1) for i in range(n)])
            k += n
        elif op == "pages":
            f.add_pages(host, n)
        elif op == "pop":
            it = f.pop(host)
            if it is not None and n > 1:
                f.done(it)
        elif op == "drop":
            f.drop_host(host)
        elif op == "clear":
            f.clear_queue(host)
        elif op == "flush":
            f.flush()
        else:
            f.close()
            f = Frontier(path, hot_per_host=2)
    held = frontier_holds(f)
    for q in queries:
        me, n = ids(q)
        assert sorted(f.hosts_moving(me, n)) == brute(held, me, n)
    lo, hi = sorted((queries[0][0], queries[0][1]))
    assert sorted(f.hosts_in_key_range(lo, hi)) == sorted(h for h in held if lo <= host_key(h) <= hi)
    f.close()


@settings(max_examples=150, deadline=None)
@given(steps=ops, queries=st.lists(pairs, min_size=1, max_size=6))
def test_seen_hosts_moving_is_brute_force(tmp_path_factory, steps, queries):
    path = tmp_path_factory.mktemp("s") / "s.db"
    s = SeenSet(path, merge_rows=5)
    k = 0
    for op, host, n in steps:
        if op in ("add", "pages", "pop"):
            s.add_new(host, [f"http://{host}/{k + i}" for i in range(n)])
            k += n
        elif op in ("drop", "clear"):
            s.drop_host(host)
        elif op == "flush":
            s.flush()
        else:
            s.close()
            s = SeenSet(path, merge_rows=5)
    held = set(s.hosts())
    for q in queries:
        me, n = ids(q)
        assert sorted(s.hosts_moving(me, n)) == brute(held, me, n)
    lo, hi = sorted((queries[0][0], queries[0][1]))
    assert sorted(s.hosts_in_key_range(lo, hi)) == sorted(h for h in held if lo <= host_key(h) <= hi)
    s.close()


def test_frontier_index_follows_what_it_holds(tmp_path):
    # A host known by its page count alone, one drained (its index row stays, stale), one cleared,
    # one dropped, one only in flight; before and after a flush and a restart.
    f = Frontier(tmp_path / "f.db")
    f.add_pages("counted.example", 2)
    for h in ("drained.example", "cleared.example", "dropped.example", "inflight.example", "queued.example"):
        f.add([Item(f"http://{h}/", h, 0)])
    it = f.pop("drained.example")
    assert it is not None
    f.done(it)
    f.clear_queue("cleared.example")
    f.drop_host("dropped.example")
    assert f.pop("inflight.example") is not None
    held = {"counted.example", "inflight.example", "queued.example"}
    every = held | {"drained.example", "cleared.example", "dropped.example"}
    for step in ("buffered", "flushed", "reopened"):
        if step == "flushed":
            f.flush()
        if step == "reopened":
            f.close()
            f = Frontier(tmp_path / "f.db")  # the in-flight URL is queued again: still held
        for h in every:
            k = host_key(h)
            me, n = k ^ (1 << 159), k ^ 1  # h is closer to n: it moves iff the frontier holds it
            assert (h in f.hosts_moving(me, n)) == (h in held), (step, h)
            assert (h in f.hosts_in_key_range(k, k)) == (h in held), (step, h)
    f.close()


def test_a_join_reads_only_the_moving_ranges(tmp_path):
    me = host_key("me.example")
    # What a node of a cluster of ~256 holds: hosts whose keys share its top 8 bits, and a few others.
    near = [h for h in (f"site{i}.example" for i in range(300_000)) if (host_key(h) ^ me) >> 152 == 0]
    far = [f"far{i}.example" for i in range(10)]
    f = Frontier(tmp_path / "f.db")
    s = SeenSet(tmp_path / "s.db")
    for h in near + far:
        f.add([Item(f"http://{h}/", h, 0)])
        s.add_new(h, [f"http://{h}/"])
    f.flush()
    s.flush()
    n = me ^ (1 << 151) ^ 777  # a newcomer splitting me's share in two
    want = brute(set(near + far), me, n)
    assert len(near) // 3 < len(want) < len(near) * 2 // 3
    far_prefixes = {host_key(h) >> 152 for h in far}
    for store in (f, s):
        r = store.read_moving(me, n)
        assert sorted(r.hosts) == want
        # Exactly the movers are read (the moving bit is within the prefix), and two seeks per
        # prefix above the moving bit that is present: me's own, and the far hosts'.
        assert r.rows == len(want)
        assert r.seeks <= 2 * (1 + len(far_prefixes)) + 1, (r.seeks, len(far_prefixes))
    f.close()
    s.close()


OLD_FRONTIER = """
CREATE TABLE queue (host TEXT NOT NULL, depth INTEGER NOT NULL, seq INTEGER NOT NULL, url TEXT NOT NULL,
    via TEXT NOT NULL, not_before REAL NOT NULL, PRIMARY KEY (host, depth, seq)) WITHOUT ROWID;
CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
CREATE TABLE pages (host TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
"""
OLD_SEEN = """
CREATE TABLE hosts (hid INTEGER PRIMARY KEY, host TEXT NOT NULL UNIQUE);
CREATE TABLE seen (hid INTEGER NOT NULL, fp INTEGER NOT NULL, PRIMARY KEY (hid, fp)) WITHOUT ROWID;
CREATE TABLE seen_log (hid INTEGER NOT NULL, fp INTEGER NOT NULL);
"""


def test_an_old_frontier_is_migrated_and_answers(tmp_path):
    path = tmp_path / "f.db"
    db = sqlite3.connect(path)
    db.executescript(OLD_FRONTIER)
    queued, counted = POOL[:25], POOL[20:35]
    db.executemany("INSERT INTO queue VALUES (?, 1, ?, ?, '', 0)", [(h, i, f"http://{h}/") for i, h in enumerate(queued)])
    db.executemany("INSERT INTO pages VALUES (?, 3)", [(h,) for h in counted])
    db.execute("INSERT INTO meta VALUES ('next_seq', 100)")
    db.commit()
    db.close()
    f = Frontier(path)
    assert f.pages(POOL[30]) == 3 and len(f) == 25  # the old data is intact
    held = set(queued) | set(counted)
    for anchor in POOL[:10]:
        me = host_key(anchor)
        for n in (me ^ (1 << 159), me ^ (1 << 157), me ^ (1 << 120), me ^ 5):
            assert sorted(f.hosts_moving(me, n)) == brute(held, me, n)
    f.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION  # 1 (hostkey), 3 since issue 26 (revisit)
    rows = db.execute("SELECT hkey, host FROM hostkey").fetchall()
    assert sorted(rows) == sorted((key_prefix(host_key(h)), h) for h in held)
    db.close()
    with Frontier(path) as f:  # opening again migrates nothing and changes nothing
        assert sorted(f.hosts_moving(me, me ^ 1)) == brute(held, me, me ^ 1)


def test_an_old_seen_set_is_migrated_and_answers(tmp_path):
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    db.executescript(OLD_SEEN)
    db.executemany("INSERT INTO hosts VALUES (?, ?)", list(enumerate(POOL, 1)))
    db.executemany("INSERT INTO seen VALUES (?, ?)", [(i, 1000 + i) for i in range(1, len(POOL) + 1)])
    db.executemany("INSERT INTO seen_log VALUES (?, ?)", [(1, 7)])
    db.commit()
    db.close()
    s = SeenSet(path)
    assert len(s) == len(POOL) + 1 and sorted(s.export_host(POOL[0])) == [7, 1001]
    s.add_new("new.example", ["http://new.example/"])  # a host after the migration, unflushed
    held = set(POOL) | {"new.example"}
    for anchor in POOL[:10]:
        me = host_key(anchor)
        for n in (me ^ (1 << 159), me ^ (1 << 157), me ^ (1 << 120), me ^ 5):
            assert sorted(s.hosts_moving(me, n)) == brute(held, me, n)
    s.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2  # 1 (hkey), 2 since issue 24 (packed fingerprints)
    assert db.execute("SELECT count(*) FROM hosts WHERE hkey = 0").fetchone()[0] == 0
    plan = " ".join(str(r) for r in db.execute("EXPLAIN QUERY PLAN SELECT host FROM hosts WHERE hkey BETWEEN 1 AND 2"))
    assert "hosts_hkey" in plan
    db.close()


def test_a_deep_split_falls_back_to_one_ordered_read(tmp_path):
    # A newcomer sharing 20 more bits with me: its keys are one block in every present prefix
    # above its bit, i.e. spread thin over the index; the read stays near one full pass.
    me = host_key("me.example")
    hosts = [f"site{i}.example" for i in range(2000)]
    s = SeenSet(tmp_path / "s.db")
    for h in hosts:
        s.add_new(h, [f"http://{h}/"])
    s.flush()
    n = me ^ (1 << 100) ^ 99
    r = s.read_moving(me, n)
    assert sorted(r.hosts) == brute(set(hosts), me, n)
    assert r.rows <= len(hosts) and r.seeks <= 40, (r.rows, r.seeks)
    s.close()
