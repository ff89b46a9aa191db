"""Politeness rules and the host scheduler: spacing, concurrency caps, Retry-After, backoff, crawl-delay."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.crawl.politeness import Politeness, Scheduler

HOSTS = ["a.test", "b.test", "c.test", "d.test"]
IP_OF = {"a.test": "10.0.0.1", "b.test": "10.0.0.1", "c.test": "10.0.0.1", "d.test": "10.0.0.2"}

ops = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.floats(0.0, 3.0)),
        st.tuples(st.just("start"), st.sampled_from(HOSTS)),
        st.tuples(st.just("finish"), st.integers(0, 10), st.sampled_from([200, 404, 429, 503, 500, None])),
        st.tuples(st.just("delay"), st.sampled_from(HOSTS), st.floats(0.0, 10.0)),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 3), st.integers(1, 3))
def test_random_event_sequences_never_break_the_rules(seq, max_host, max_ip):
    p = Politeness(1.5, max_per_host=max_host, max_per_ip=max_ip, ip_delay=0.25, max_delay=5.0, rng=random.Random(1))
    now = 0.0
    starts: dict[str, list[float]] = {h: [] for h in HOSTS}
    ends: dict[str, list[float]] = {h: [] for h in HOSTS}
    ip_starts: dict[str, list[float]] = {}
    active: list[tuple[str, float]] = []
    for op in seq:
        if op[0] == "tick":
            now += op[1]
        elif op[0] == "delay":
            p.set_delay(op[1], op[2])
        elif op[0] == "start":
            h = op[1]
            ip = IP_OF[h]
            if p.ready(h, ip, now):
                # The rules, checked independently of the implementation's bookkeeping.
                d = p.delay(h)
                assert all(now - s >= d - 1e-9 for s in starts[h]), "two starts closer than the delay"
                assert all(now - e >= d - 1e-9 for e in ends[h]), "start sooner than delay after an end"
                assert all(now - s >= 0.25 - 1e-9 for s in ip_starts.get(ip, [])), "IP delay broken"
                assert sum(1 for a, _ in active if a == h) < max_host
                assert sum(1 for a, _ in active if IP_OF[a] == ip) < max_ip
                p.started(h, ip, now)
                starts[h].append(now)
                ip_starts.setdefault(ip, []).append(now)
                active.append((h, now))
        elif op[0] == "finish" and active:
            h, _ = active.pop(op[1] % len(active))
            p.finished(h, IP_OF[h], now, op[2], retry_after=2.0 if op[2] == 429 else None)
            ends[h].append(now)
        for h in HOSTS:
            assert p.active(h) == sum(1 for a, _ in active if a == h)


def test_concurrency_caps_per_host_and_per_ip():
    p = Politeness(0.0, max_per_host=2, max_per_ip=3)
    p.started("a", "1.1.1.1", 0)
    p.started("a", "1.1.1.1", 0)
    assert not p.ready("a", "1.1.1.1", 10)  # host cap
    p.started("b", "1.1.1.1", 0)
    assert not p.ready("c", "1.1.1.1", 10)  # IP cap, c never fetched
    assert p.ready("c", "2.2.2.2", 10)
    p.finished("b", "1.1.1.1", 1, 200)
    assert p.ready("c", "1.1.1.1", 10)
    assert not p.ready("a", "1.1.1.1", 10)


def test_delay_is_start_to_start_and_end_to_start():
    p = Politeness(2.0)
    p.started("h", "ip", 10.0)
    assert p.next_time("h") == 12.0
    p.finished("h", "ip", 11.5, 200)
    assert p.next_time("h") == 13.5
    assert not p.ready("h", "ip", 13.4)
    assert p.ready("h", "ip", 13.5)


def test_retry_after_is_honoured_and_capped():
    p = Politeness(1.0, max_retry_after=100.0)
    p.started("h", "ip", 0.0)
    p.finished("h", "ip", 1.0, 429, retry_after=30.0)
    assert p.next_time("h") == 31.0
    assert not p.ready("h", "ip", 30.9)
    assert p.ready("h", "ip", 31.0)
    p.started("h", "ip", 31.0)
    p.finished("h", "ip", 32.0, 503, retry_after=10_000.0)  # hostile value: capped
    assert p.next_time("h") == 132.0


def test_backoff_grows_with_jitter_and_resets_after_success():
    p = Politeness(1.0, backoff_base=2.0, max_backoff=1000.0, rng=random.Random(42))
    now = 0.0
    waits = []
    for _ in range(6):
        p.started("h", "ip", now)
        now += 0.1
        p.finished("h", "ip", now, 500)
        waits.append(p.next_time("h") - now)
        now = p.next_time("h")
    assert all(b >= a for a, b in zip(waits, waits[1:])), waits
    assert waits[-1] >= 2.0 * 2**5 * 0.5 and waits[0] <= 2.0
    assert len({round(w / (2.0 * 2**i), 6) for i, w in enumerate(waits)}) > 1  # jittered, not a fixed factor
    p.started("h", "ip", now)
    p.finished("h", "ip", now + 0.1, 200)
    assert p.backoff_level("h") == 0
    assert p.next_time("h") == now + 0.1 + 1.0
    # Same seed, same waits: tests and simulations are reproducible.
    r1 = Politeness(1.0, rng=random.Random(7)).backoff("h", None, 0.0)
    r2 = Politeness(1.0, rng=random.Random(7)).backoff("h", None, 0.0)
    assert r1 == r2


def test_transport_failure_backs_off_and_404_does_not():
    p = Politeness(1.0, backoff_base=4.0, rng=random.Random(0))
    p.started("h", "ip", 0.0)
    p.finished("h", "ip", 0.0, None)
    assert p.next_time("h") >= 2.0
    p2 = Politeness(1.0)
    p2.started("h", "ip", 0.0)
    p2.finished("h", "ip", 0.0, 404)
    assert p2.next_time("h") == 1.0 and p2.backoff_level("h") == 0


def test_crawl_delay_override_capped_and_never_below_default():
    p = Politeness(1.0, max_delay=30.0)
    assert p.set_delay("h", 10.0) == 10.0
    p.started("h", "ip", 0.0)
    p.finished("h", "ip", 0.0, 200)
    assert p.next_time("h") == 10.0
    assert p.set_delay("h", 3600.0) == 30.0
    assert p.set_delay("h", 0.1) == 1.0
    assert p.set_delay("h", None) == 1.0
    assert p.delay("other") == 1.0


def _simulate(n_hosts: int, n_ips: int, urls_per_host: int, max_ip: int, seed: int = 3):
    """Drive the scheduler with a fake clock; fetches take 0.05-0.5 s. Returns the start log."""
    rng = random.Random(seed)
    p = Politeness(1.0, max_per_host=1, max_per_ip=max_ip, rng=random.Random(seed))
    s = Scheduler(p)
    work = {f"h{i}": urls_per_host for i in range(n_hosts)}
    ip = {h: f"ip{i % n_ips}" for i, h in enumerate(work)}
    for h in work:
        s.wake(h, ip[h])
    now = 0.0
    ends: list[tuple[float, str]] = []
    log: list[tuple[float, str, str]] = []
    active_ip: dict[str, int] = {}
    while True:
        h = s.pop_ready(now)
        if h is not None:
            s.started(h, ip[h], now)
            active_ip[ip[h]] = active_ip.get(ip[h], 0) + 1
            assert active_ip[ip[h]] <= max_ip
            log.append((now, h, ip[h]))
            work[h] -= 1
            if work[h]:
                s.wake(h, ip[h])
            else:
                s.remove(h)
            ends.append((now + rng.uniform(0.05, 0.5), h))
            continue
        nxt = s.next_wakeup(now)
        if not ends and nxt is None:
            break
        ends.sort(reverse=True)
        if ends and (nxt is None or ends[-1][0] <= nxt):
            t, h = ends.pop()
            now = max(now, t)
            active_ip[ip[h]] -= 1
            s.finished(h, ip[h], now, 200, has_work=work[h] > 0)
        else:
            now = max(now, nxt)
    return log, work


def test_scheduler_respects_delay_and_ip_cap_and_finishes_all_work():
    log, work = _simulate(n_hosts=60, n_ips=7, urls_per_host=5, max_ip=2)
    assert not any(work.values())
    assert len(log) == 60 * 5
    last: dict[str, float] = {}
    for t, h, _ in log:
        if h in last:
            assert t - last[h] >= 1.0 - 1e-9
        last[h] = t


def _count_calls(obj: object) -> Counter[str]:
    """Count calls to obj's public methods (wrapped on the instance); returns the live counter."""
    calls: Counter[str] = Counter()

    def counting(name, fn):
        def counted(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    for name in dir(type(obj)):
        if not name.startswith("_") and callable(getattr(type(obj), name)):
            setattr(obj, name, counting(name, getattr(obj, name)))
    return calls


def test_scheduler_picks_scale_to_100k_hosts():
    p = Politeness(1.0, max_per_host=1, max_per_ip=1_000_000)
    s = Scheduler(p)
    not_before = {f"h{i}": (i % 977) * 0.001 for i in range(100_000)}
    for i, (h, t) in enumerate(not_before.items()):
        s.wake(h, f"ip{i % 5000}", not_before=t)
    calls = _count_calls(p)
    got = []
    now = 2.0
    while True:
        h = s.pop_ready(now)
        if h is None:
            break
        got.append(h)
    # Every host once, by ready time, ties in wake order.
    assert got == sorted(not_before, key=not_before.__getitem__)
    # A pick that scanned the waiting hosts would ask Politeness about each of them (~5*10^9
    # questions in all); a heap pick asks about the host on top only. Time per pick is a
    # benchmark figure: bench/parts/scheduler_picks.py.
    per_pick = sum(calls.values()) / len(got)
    assert per_pick <= 10, (per_pick, calls)


def test_scheduler_orders_by_ready_time_and_parks_full_hosts():
    p = Politeness(1.0, max_per_host=1, max_per_ip=1)
    s = Scheduler(p)
    s.wake("late", "ip1", not_before=5.0)
    s.wake("early", "ip2", not_before=1.0)
    assert s.peek(0.0) == ("early", 1.0)
    assert s.pop_ready(0.5) is None
    assert s.pop_ready(1.0) == "early"
    s.started("early", "ip2", 1.0)
    s.wake("early", "ip2")  # still has work, but its one slot is taken
    s.wake("same-ip", "ip2")  # shares the busy IP
    assert s.next_wakeup(1.0) == 5.0  # both parked, not polled
    s.finished("early", "ip2", 1.2, 200, has_work=True)
    assert s.pop_ready(1.2) == "same-ip"
    assert s.next_wakeup(1.2) == 2.2  # early: 1 s after its end
