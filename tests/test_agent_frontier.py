"""Frontier: per-host BFS order, paging, retry, handover, group commit and recovery after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.state.frontier import Frontier, Item
from wancrawl.domains import registered_domain

ROOT = Path(__file__).resolve().parent.parent


def _items(host: str, depths: list[int], tag: str = "") -> list[Item]:
    return [Item(f"http://{host}/{tag}{i}", host, d, f"http://{host}/", 0.0) for i, d in enumerate(depths)]


def test_pop_is_breadth_first_within_a_host(tmp_path):
    f = Frontier(tmp_path / "f.db")
    f.add(_items("a", [2, 1, 3, 1, 0]))
    f.add(_items("b", [5]))
    got = [f.pop("a") for _ in range(5)]
    assert [(it.depth, it.url) for it in got] == [
        (0, "http://a/4"), (1, "http://a/1"), (1, "http://a/3"), (2, "http://a/0"), (3, "http://a/2")
    ]
    assert f.pop("a") is None
    assert not f.has_work("a") and f.has_work("b")
    assert f.in_flight == 5 and len(f) == 1


def test_only_the_head_is_in_memory_and_paging_keeps_order(tmp_path):
    f = Frontier(tmp_path / "f.db", hot_per_host=8)
    for h in range(20):
        f.add(_items(f"h{h}", [3] * 300))
    assert f.hot_items <= 20 * 8
    # Shallower URLs arriving after the tail went to disk must still come out first.
    f.add(_items("h0", [1] * 50, "late"))
    assert f.hot_items <= 20 * 8
    f.flush()
    out = []
    while (it := f.pop("h0")) is not None:
        out.append(it)
        f.done(it)
        assert f.hot_items <= 20 * 8 + 1
    assert len(out) == 350
    assert [it.url for it in out[:50]] == [f"http://h0/late{i}" for i in range(50)]
    assert [it.url for it in out[50:]] == [f"http://h0/{i}" for i in range(300)]
    assert f.queue_len("h0") == 0 and f.queue_len("h1") == 300


def test_global_hot_cap(tmp_path):
    f = Frontier(tmp_path / "f.db", hot_per_host=64, max_hot_items=500)
    for h in range(100):
        f.add(_items(f"h{h}", [1] * 30))
    assert f.hot_items <= 500
    assert len(f) == 3000
    seen = 0
    for h in range(100):
        while (it := f.pop(f"h{h}")) is not None:
            f.done(it)
            seen += 1
    assert seen == 3000


def test_retry_keeps_bfs_position_and_not_before(tmp_path):
    f = Frontier(tmp_path / "f.db")
    f.add(_items("a", [0, 1, 1]))
    first = f.pop("a")
    assert f.retry(first, not_before=100.0)
    assert not f.retry(first, 5.0)  # not in flight any more
    assert f.pop("a", now=50.0).url == "http://a/1"  # head not due yet: the next due one
    assert f.pop("a", now=100.0).url == "http://a/0"
    assert f.ready_at("a") == 0.0
    f.flush()


def test_export_and_drop_move_only_one_host(tmp_path):
    f = Frontier(tmp_path / "f.db", hot_per_host=4)
    f.add(_items("a", [1] * 10))
    f.add(_items("b", [0, 2, 1]))
    inflight = f.pop("b")
    exported = f.export_host("b")
    assert [(i.url, i.depth) for i in exported] == [("http://b/0", 0), ("http://b/2", 1), ("http://b/1", 2)]
    assert f.drop_host("b") == 3
    assert not f.has_work("b") and f.queue_len("b") == 0 and f.in_flight == 0
    assert not f.done(inflight)  # the fetch that was running when the host left is ignored
    g = Frontier(tmp_path / "g.db")
    g.add(Item(i.url, i.host, i.depth, i.via, i.not_before) for i in exported)
    assert [g.pop("b").url for _ in range(3)] == ["http://b/0", "http://b/2", "http://b/1"]
    f.close()
    f = Frontier(tmp_path / "f.db")
    assert f.queue_len("a") == 10 and f.queue_len("b") == 0 and len(f) == 10


def test_restart_requeues_in_flight_and_loses_unflushed_only(tmp_path):
    f = Frontier(tmp_path / "f.db", hot_per_host=2)
    f.add(_items("a", [0, 0, 0, 0]))
    f.flush()
    a0, a1 = f.pop("a"), f.pop("a")
    f.done(a0)
    f.flush()
    f.done(a1)  # not flushed: a1 will be fetched again
    f.add(_items("a", [0], "lost"))  # not flushed: lost, as the PushUrls was never acknowledged
    del f  # no close(): a crash as far as the file is concerned
    g = Frontier(tmp_path / "f.db", hot_per_host=2)
    assert sorted(it.url for it in g.export_host("a")) == ["http://a/1", "http://a/2", "http://a/3"]
    urls = []
    while (it := g.pop("a")) is not None:
        urls.append(it.url)
    assert urls == ["http://a/1", "http://a/2", "http://a/3"]
    g.add(_items("a", [0], "new"))
    assert g.pop("a").seq > max(i.seq for i in g.export_host("a") if i.url != "http://a/new0")


# -- model-based property test: random operations and crashes against a plain reference ---------

op_st = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.lists(st.integers(0, 3), min_size=1, max_size=6)),
        st.tuples(st.just("pop"), st.integers(0, 2)),
        st.tuples(st.just("pop"), st.integers(0, 2)),
        st.tuples(st.just("pop"), st.integers(0, 2)),
        st.tuples(st.just("done"), st.integers(0, 50)),
        st.tuples(st.just("done"), st.integers(0, 50)),
        st.tuples(st.just("retry"), st.integers(0, 50)),
        st.just(("flush",)),
        st.just(("crash",)),
        st.just(("close",)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(op_st)
def test_random_operations_match_a_reference_model(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("fr") / "f.db"
    f = Frontier(path, hot_per_host=2, max_hot_items=4)
    queued: dict[str, dict[str, tuple]] = {}  # host -> url -> (depth, seq)   (what the frontier holds)
    inflight: dict[str, Item] = {}
    durable: dict[str, tuple[str, tuple]] = {}  # url -> (host, key) as of the last flush
    pend_add: dict[str, tuple[str, tuple]] = {}
    pend_del: set[str] = set()
    counter = 0

    def do_flush():
        durable.update(pend_add)
        for u in pend_del:
            durable.pop(u, None)
        pend_add.clear()
        pend_del.clear()

    def reopen():
        nonlocal f
        f = Frontier(path, hot_per_host=2, max_hot_items=4)
        queued.clear()
        inflight.clear()
        pend_add.clear()
        pend_del.clear()
        for u, (h, k) in durable.items():
            queued.setdefault(f"h{h}", {})[u] = k

    for op in ops:
        if op[0] == "add":
            host = f"h{op[1]}"
            items = []
            for d in op[2]:
                counter += 1
                # two origins per host (a lane each): BFS order holds across them
                items.append(Item(f"{'https' if counter % 3 == 0 else 'http'}://{host}/{counter}", host, d))
            f.add(items)
            for it in items:
                queued.setdefault(host, {})[it.url] = (it.depth, it.seq)
                pend_add[it.url] = (op[1], (it.depth, it.seq))
        elif op[0] == "pop":
            host = f"h{op[1]}"
            it = f.pop(host)
            q = queued.get(host, {})
            if not q:
                assert it is None
            else:
                best = min(q, key=q.get)
                assert it is not None and it.url == best, "not the first in BFS order"
                del q[best]
                inflight[it.url] = it
            if f.pending() == 0:  # paging in may commit early (never later): follow it
                do_flush()
        elif op[0] in ("done", "retry") and inflight:
            url = sorted(inflight)[op[1] % len(inflight)]
            it = inflight.pop(url)
            if op[0] == "done":
                assert f.done(it)
                pend_del.add(url)
                pend_add.pop(url, None)
            else:
                assert f.retry(it, 0.0)
                queued.setdefault(it.host, {})[url] = (it.depth, it.seq)
        elif op[0] == "flush":
            f.flush()
            do_flush()
        elif op[0] == "crash":
            reopen()
        elif op[0] == "close":
            f.close()
            do_flush()
            reopen()
        assert len(f) == sum(len(q) for q in queued.values())
        assert f.in_flight == len(inflight)
        for h in ("h0", "h1", "h2"):
            assert f.queue_len(h) == len(queued.get(h, {}))
            assert f.has_work(h) == bool(queued.get(h))


# -- kill -9 ----------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import random, sys
    sys.path.insert(0, sys.argv[3])
    from agent.state.frontier import Frontier, Item
    f = Frontier(sys.argv[1], hot_per_host=16)
    log = open(sys.argv[2], "a", buffering=1)
    log.write("S\\n")
    rng = random.Random(int(sys.argv[4]))
    n = int(sys.argv[5])
    inflight = []
    while True:
        adds = []
        for _ in range(rng.randint(1, 200)):
            n += 1
            h = rng.randrange(30)
            adds.append(Item(f"http://h{h}.test/{n}", f"h{h}.test", rng.randint(0, 4), "", 0.0))
        # Intent lines go out before the frontier may commit (paging in can commit early), the
        # confirmation after flush(): a kill leaves only what follows the last "C" undecided.
        log.write("A " + " ".join(a.url for a in adds) + "\\n")
        f.add(adds)
        for _ in range(rng.randint(0, 150)):
            it = f.pop(f"h{rng.randrange(30)}.test")
            if it is not None:
                inflight.append(it)
        rng.shuffle(inflight)
        keep, dones, retries = [], [], []
        for it in inflight:
            r = rng.random()
            if r < 0.6:
                dones.append(it)
            elif r < 0.7:
                retries.append(it)
            else:
                keep.append(it)
        inflight = keep
        log.write("D " + " ".join(it.url for it in dones) + "\\n")
        for it in dones:
            f.done(it)
        for it in retries:
            f.retry(it, 0.0)
        f.flush()
        log.write("C\\n")
    """
)


def _run_child_and_kill(db: Path, log: Path, seed: int, start_n: int, after: float) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(log), str(ROOT), str(seed), str(start_n)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + after
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _parse(log: Path) -> tuple[set[str], set[str], set[str]]:
    """(added and confirmed, done and confirmed, undecided: logged after the last confirmation)."""
    added, done, earlier = set(), set(), set()
    pa, pd = set(), set()
    for line in log.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "S":  # a new run: what the killed one left unconfirmed stays undecided
            earlier |= pa | pd
            pa, pd = set(), set()
        elif kind == "A":
            pa |= set(rest.split())
        elif kind == "D":
            pd |= set(rest.split())
        elif kind == "C":
            added |= pa
            done |= pd
            pa, pd = set(), set()
    return added, done, earlier | pa | pd


def test_kill_9_loses_nothing_flushed_and_requeues_in_flight(tmp_path):
    db, log = tmp_path / "f.db", tmp_path / "log"
    for round_, after in enumerate((0.8, 0.5)):
        _run_child_and_kill(db, log, seed=round_, start_n=1_000_000 * (round_ + 1), after=after)
        added, done, undecided = _parse(log)
        assert len(added) > 1000, "the child did too little work to test anything"
        f = Frontier(db, hot_per_host=16)
        present: list[str] = []
        for h in f.hosts_ready():
            present.extend(it.url for it in f.export_host(h))
        assert len(present) == len(set(present)), "an item is queued twice"
        present_set = set(present)
        must = added - done - undecided
        missing = must - present_set
        assert not missing, f"{len(missing)} flushed URLs lost, e.g. {sorted(missing)[:3]}"
        resurrected = (done - undecided) & present_set
        assert not resurrected, f"{len(resurrected)} URLs done and flushed came back"
        assert present_set <= added | undecided, "an item appeared that was never flushed"
        assert len(f) == len(present) and f.in_flight == 0
        # Everything is poppable again, in flight at the kill included.
        popped = 0
        for h in list(f.hosts_ready()):
            while f.pop(h) is not None:
                popped += 1
        assert popped == len(present)
        del f  # leave the file as it is (nothing done) for the next round


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "pop_done", "pages", "clear", "drop", "restart"]), st.integers(0, 5)), max_size=40))
def test_per_domain_counts_follow_the_per_host_state(tmp_path_factory, ops):
    """Issue 25: domain_pages and domain_hosts equal what the per-host state says, after any mix
    of queueing, fetching, page counts, dropped queues, handed-over hosts and restarts."""
    path = tmp_path_factory.mktemp("dom") / "f.sqlite"
    hosts = [f"h{k}.a.example.com" for k in range(3)] + ["x.b.example.com", "127.0.0.1", "solo.lab"]
    f = Frontier(path, domain_of=registered_domain)
    seq = 0
    for op, k in ops:
        h = hosts[k]
        if op == "add":
            seq += 1
            f.add([Item(f"http://{h}/{seq}", h)])
        elif op == "pop_done":
            it = f.pop(h)
            if it is not None:
                f.done(it)
        elif op == "pages":
            f.add_pages(h, k + 1)
        elif op == "clear":
            f.clear_queue(h)
        elif op == "drop":
            f.drop_host(h)
        else:
            f.close()
            f = Frontier(path, domain_of=registered_domain)
        for d in {f.domain_of(x) for x in hosts}:
            mine = [x for x in hosts if f.domain_of(x) == d]
            assert f.domain_pages(mine[0]) == sum(f.pages(x) for x in mine)
            assert f.domain_hosts(mine[0]) == sum(1 for x in mine if f.holds(x) or f.queue_len(x) or f.in_flight_of(x))
    f.close()
