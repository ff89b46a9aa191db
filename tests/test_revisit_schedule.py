"""The revisit schedule (issue 26): the policies against models, the frontier's schedule (due
order, the discovery share, restart, kill -9), and its moves (HostState, replicas, handover)."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from agent.ownership.ledger import HostState
from agent.ownership.replica import ReplicaStore
from agent.settings import RevisitSettings
from agent.state.changes import ChangeLog
from agent.state.frontier import Frontier, Item
from agent.state.revisit import (
    DAY, Planner, Policy, Visit, adaptive_next, age, changed, changefreq_seconds, estimate_rate, estimate_rate_irregular, freq_for, freshness,
    optimal_frequencies,
)
from wancrawl.v1 import agent_pb2

ROOT = Path(__file__).resolve().parent.parent


# -- the policies against models ---------------------------------------------------------------------
def _poisson_visits(rng: random.Random, rate: float, interval: float, n: int) -> int:
    """Visits at a fixed interval of a page whose changes are a Poisson process: how many found
    it changed (an independent model: change times drawn one by one)."""
    t, x, nxt = 0.0, 0, rng.expovariate(rate) if rate > 0 else math.inf
    for _ in range(n):
        t += interval
        if nxt <= t:
            x += 1
            while nxt <= t:
                nxt += rng.expovariate(rate)
    return x


@pytest.mark.parametrize("ratio", [0.1, 0.5, 1.0, 2.0])
def test_the_estimator_recovers_poisson_rates_and_beats_the_naive_one(ratio):
    """Cho and Garcia-Molina's estimator, on pages simulated as Poisson processes visited at a
    fixed interval: its mean is within 10% of the true rate up to two changes per interval,
    where the naive X/n (changes seen per visit) underestimates more and more."""
    rng = random.Random(7)
    interval, n = 3600.0, 200
    rate = ratio / interval
    est, naive = [], []
    for _ in range(200):
        x = _poisson_visits(rng, rate, interval, n)
        est.append(estimate_rate(n, x, n * interval))
        naive.append(x / (n * interval))
    mean = sum(est) / len(est)
    assert abs(mean - rate) / rate < 0.10, (mean * interval, ratio)
    naive_mean = sum(naive) / len(naive)
    assert abs(mean - rate) <= abs(naive_mean - rate) + 1e-12


def test_estimator_without_visits_is_the_prior_and_no_change_is_zero():
    assert estimate_rate(0, 0, 0.0, prior=1 / 3600) == 1 / 3600
    assert estimate_rate(10, 0, 36000.0) == 0.0
    assert estimate_rate(10, 10, 36000.0) > 10 / 36000  # every visit changed: more than one a visit


def _poisson_irregular(rng: random.Random, rate: float, gaps: list[float]) -> list[tuple[float, bool]]:
    """Visits after the given gaps of a page whose changes are a Poisson process (change times
    drawn one by one, an independent model): (gap, whether a change fell in it)."""
    t, out, nxt = 0.0, [], rng.expovariate(rate)
    for g in gaps:
        t += g
        out.append((g, nxt <= t))
        while nxt <= t:
            nxt += rng.expovariate(rate)
    return out


@pytest.mark.parametrize("ratio, biased", [(0.2, False), (1.0, True), (3.0, True)])
def test_the_irregular_estimator_recovers_poisson_rates_where_the_regular_one_is_biased(ratio, biased):
    """Cho and Garcia-Molina's estimator for irregular access, on a simulated Poisson page visited
    at very uneven gaps (0.1 and 1.9 times a mean gap of `ratio` change intervals, at random):
    its mean is within 10% of the true rate; the equal-interval estimator fed the same visits
    (n, X, total span) is off by more than 25% once a gap is about a change interval or more
    (uneven intervals are what the irregular estimator is for; with short gaps both do)."""
    rng = random.Random(11)
    rate = 1 / 3600.0
    mean_gap = ratio / rate
    est, regular = [], []
    for _ in range(100):
        gaps = [mean_gap * (0.1 if rng.random() < 0.5 else 1.9) for _ in range(300)]
        visits = _poisson_irregular(rng, rate, gaps)
        est.append(estimate_rate_irregular(visits))
        regular.append(estimate_rate(len(visits), sum(c for _, c in visits), sum(gaps)))
    mean = sum(est) / len(est)
    assert abs(mean - rate) / rate < 0.10, (mean / rate, ratio)
    reg = sum(regular) / len(regular)
    assert (abs(reg - rate) / rate > 0.25) == biased, (reg / rate, ratio)


def test_the_irregular_estimator_solves_its_likelihood_equation_and_agrees_with_equal_gaps():
    # Equal gaps: the MLE has a closed form, r = -log(1 - X/n) / t (the regular estimator without
    # its +0.5 bias correction).
    visits = [(100.0, True)] * 30 + [(100.0, False)] * 70
    assert math.isclose(estimate_rate_irregular(visits), -math.log(1 - 0.3) / 100.0, rel_tol=1e-9)
    # Uneven gaps: the root satisfies the paper's equation.
    visits = [(10.0, True), (500.0, True), (60.0, False), (2000.0, True), (30.0, False), (900.0, False)]
    r = estimate_rate_irregular(visits)
    lhs = sum(t / math.expm1(r * t) for t, c in visits if c)
    assert math.isclose(lhs, 60.0 + 30.0 + 900.0, rel_tol=1e-9)
    assert estimate_rate_irregular([(100.0, False)] * 5) == 0.0 and estimate_rate_irregular([]) == 0.0
    every = estimate_rate_irregular([(100.0, True)] * 5)  # no finite root: bounded, above one per visit
    assert math.isfinite(every) and every > 1 / 100.0


@hsettings(max_examples=200, deadline=None)
@given(interval=st.floats(1.0, 1e7), was=st.sampled_from([True, False, None]),
       lo=st.floats(1.0, 1e4), span=st.floats(1.0, 1e4), inc=st.floats(0.0, 2.0), dec=st.floats(0.0, 0.9))
def test_adaptive_rule_is_nutchs_within_bounds(interval, was, lo, span, inc, dec):
    """Against the rule written out (Nutch AdaptiveFetchSchedule: changed * (1 - dec), unchanged
    * (1 + inc), then the bounds)."""
    p = Policy("adaptive", min(max(interval, lo), lo + span), lo, lo + span, inc, dec)
    got = adaptive_next(interval, was, p)
    model = interval * (1 - dec) if was is True else interval * (1 + inc) if was is False else interval
    assert got == min(lo + span, max(lo, model))
    assert lo <= got <= lo + span


def test_adaptive_intervals_converge_towards_the_change_interval():
    """A page changing every 2 h, visited adaptively from 24 h: the interval comes down into the
    band where about half the visits see a change, and a page that never changes goes to max."""
    p = Policy("adaptive", DAY, 60.0, 30 * DAY)
    pl = Planner(p)
    rng = random.Random(3)
    e = pl.first("http://a/x", "a", 0, Visit(0.0, 200, "d0"))
    still = pl.first("http://a/y", "a", 0, Visit(0.0, 200, "s"))
    t, version, next_change = 0.0, 0, rng.expovariate(1 / 7200)
    for _ in range(200):
        t = e.due
        while next_change <= t:
            version += 1
            next_change += rng.expovariate(1 / 7200)
        e = pl.next(e, Visit(t, 200, f"d{version}"), t)
        still = pl.next(still, Visit(still.due, 304), still.due)
    assert 600 < e.interval < 6 * 3600, e.interval
    assert still.interval == p.max_interval


def test_freshness_and_age_match_a_simulation():
    """F(lambda, f) and A(lambda, f) against a simulated Poisson page refreshed every 1/f."""
    rng = random.Random(11)
    rate, f = 1 / 3600, 1 / 1800
    fresh_time = age_time = 0.0
    total = 0.0
    for _ in range(20000):
        # One refresh interval: fresh until the first change in it.
        first = rng.expovariate(rate)
        span = 1 / f
        fresh_time += min(first, span)
        if first < span:
            age_time += (span - first) ** 2 / 2
        total += span
    assert abs(fresh_time / total - freshness(rate, f)) < 0.01
    assert abs(age_time / total - age(rate, f)) / age(rate, f) < 0.05


def test_optimal_frequencies_spend_the_budget_and_beat_uniform_and_proportional():
    """The Lagrange solution uses exactly the budget, and its summed freshness is at least
    that of uniform and of proportional-to-rate allocations, and of random perturbations of it
    (a local optimum of a concave problem is the global one)."""
    rng = random.Random(5)
    rates = [rng.choice([0.0, 1 / 600, 1 / 3600, 1 / DAY, 1 / (7 * DAY)]) * rng.uniform(0.5, 2) for _ in range(200)]
    budget = 200 / 7200  # every page every two hours on average
    freqs, mu = optimal_frequencies(rates, budget)
    assert sum(freqs) == pytest.approx(budget, rel=1e-6)
    assert mu > 0

    def total(fs):
        return sum(freshness(r, x) for r, x in zip(rates, fs))

    best = total(freqs)
    uniform = [budget / len(rates)] * len(rates)
    prop = [budget * r / sum(rates) for r in rates]
    assert best >= total(uniform) - 1e-9 and best >= total(prop) - 1e-9
    assert best > total(uniform) * 1.02  # strictly better on this mix
    for _ in range(50):
        i, j = rng.randrange(len(rates)), rng.randrange(len(rates))
        d = min(freqs[i], budget / 1000) * rng.random()
        moved = list(freqs)
        moved[i] -= d
        moved[j] += d
        assert total(moved) <= best + 1e-9
    # Pages that change far faster than the budget can follow get nothing (Cho and Garcia-Molina).
    assert freq_for(1.0, mu) == 0.0


def test_changefreq_names_and_hints():
    assert changefreq_seconds("hourly") == 3600 and changefreq_seconds("Daily ") == DAY
    assert changefreq_seconds("bogus") == 0.0 and changefreq_seconds(None) == 0.0
    pl = Planner(Policy("fixed", DAY, 60.0, 30 * DAY))
    e = pl.first("http://a/", "a", 0, Visit(1000.0, 200, "d", '"e1"', "Mon"))
    assert e.due == 1000.0 + DAY and e.etag == '"e1"'
    hinted = pl.hinted(e, lastmod=5000.0, changefreq=3600.0, now=6000.0)
    assert hinted.due <= 6000.0 and hinted.changefreq == 3600.0  # changed after our capture: due now
    assert pl.hinted(e, lastmod=500.0, changefreq=0.0, now=6000.0).due == e.due  # not changed since: as it was
    # A 304 keeps the digest; a 200 with another digest is a change.
    assert changed(e, Visit(2000.0, 304)) is False and changed(e, Visit(2000.0, 200, "d2")) is True
    assert changed(e, Visit(2000.0, 500)) is None
    nxt = pl.next(e, Visit(2000.0, 304, "", '"e2"'), 2000.0)
    assert nxt.digest == "d" and nxt.etag == '"e2"' and nxt.modified == "Mon" and nxt.visits == 1 and nxt.changes == 0


# -- the frontier's schedule ---------------------------------------------------------------------------
class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _revisits(**kw) -> RevisitSettings:
    kw.setdefault("enabled", True)
    kw.setdefault("interval", 100.0)
    kw.setdefault("min_interval", 10.0)
    return RevisitSettings(**kw)


def _fetch(f: Frontier, it: Item, clock: Clock, digest: str = "d", status: int = 200) -> None:
    it.visit = Visit(clock.t, status, digest, f'"{digest}"', "", 100)
    assert f.done(it)


def test_a_fetched_page_is_due_again_after_its_interval(tmp_path):
    clock = Clock()
    f = Frontier(tmp_path / "f.db", revisit=_revisits(), clock=clock)
    f.add([Item(f"http://a/{i}", "a") for i in range(3)])
    for _ in range(3):
        _fetch(f, f.pop("a", clock.t), clock)
    f.flush()
    assert f.pop("a", clock.t) is None and f.has_work("a")
    assert f.ready_at("a") == clock.t + 100
    clock.t += 100
    got = [f.pop("a", clock.t) for _ in range(3)]
    assert {it.url for it in got} == {f"http://a/{i}" for i in range(3)} and all(it.revisit for it in got)
    assert f.in_flight == 3 and f.in_flight_of("a") == 3
    for it in got:
        _fetch(f, it, clock, status=304)
    f.flush()
    e = f.schedule_of("a", "http://a/0")
    assert e is not None and e.visits == 1 and e.changes == 0 and e.due == clock.t + 100
    assert f.revisit_counts(clock.t) == {"revisits_scheduled": 3.0, "revisits_due": 0.0}


def test_revisits_off_by_default_schedule_nothing(tmp_path):
    f = Frontier(tmp_path / "f.db")
    f.add([Item("http://a/0", "a")])
    it = f.pop("a")
    it.visit = Visit(1.0, 200, "d")
    f.done(it)
    f.flush()
    assert not f.has_work("a") and f.schedule_of("a", "http://a/0") is None


@pytest.mark.parametrize("share", [0.5, 0.75])
def test_revisits_never_starve_discovery(tmp_path, share):
    """With revisits and first visits both due, first visits get their share of the pops."""
    clock = Clock()
    f = Frontier(tmp_path / "f.db", revisit=_revisits(discovery_share=share), clock=clock)
    f.add([Item(f"http://a/old{i}", "a") for i in range(200)])
    while (it := f.pop("a", clock.t)) is not None:
        _fetch(f, it, clock)
    clock.t += 1000
    f.add([Item(f"http://a/new{i}", "a") for i in range(200)])
    kinds = []
    for _ in range(200):
        it = f.pop("a", clock.t)
        kinds.append(it.revisit is None)
        _fetch(f, it, clock)
    assert sum(kinds) / len(kinds) == pytest.approx(share, abs=0.02)
    # Either kind alone takes every pop.
    while (it := f.pop("a", clock.t)) is not None:
        _fetch(f, it, clock)
    assert len(f) == 0


def test_the_schedule_survives_a_restart_and_pages_in_by_due(tmp_path):
    clock = Clock()
    f = Frontier(tmp_path / "f.db", revisit=_revisits(), clock=clock)
    f.add([Item(f"http://a/{i}", "a") for i in range(300)])
    for i in range(300):
        clock.t = 1000.0 + (i * 7919) % 300 / 4  # fetched in a scrambled order (before any is due again)
        _fetch(f, f.pop("a", clock.t), clock)
    in_flight = None
    clock.t = 1100.5
    in_flight = f.pop("a", clock.t)
    assert in_flight is not None and in_flight.revisit is not None
    f.close()
    g = Frontier(tmp_path / "f.db", revisit=_revisits(), clock=clock)
    assert g.has_work("a") and len(g) == 0
    clock.t = 5000.0
    dues = []
    while (it := g.pop("a", clock.t)) is not None:
        dues.append(it.revisit.due)
    assert len(dues) == 300  # the one in flight at the close is due again
    assert dues == sorted(dues)


CHILD = textwrap.dedent(
    """
    import random, sys
    sys.path.insert(0, sys.argv[3])
    from agent.settings import RevisitSettings
    from agent.state.frontier import Frontier, Item
    from agent.state.revisit import Visit
    db, logpath, seed = sys.argv[1], sys.argv[2], int(sys.argv[4])
    rng = random.Random(seed)
    t = [1000.0]
    f = Frontier(db, revisit=RevisitSettings(enabled=True, interval=20.0, min_interval=10.0), clock=lambda: t[0])
    log = open(logpath, "a", buffering=1)
    n = seed * 1_000_000
    while True:
        t[0] += 1.0
        adds = [Item(f"http://h{rng.randrange(10)}.test/{n + i}", "") for i in range(20)]
        for it in adds:
            it.host = it.url.split("/")[2]
        n += 20
        f.add(adds)
        fetched = []
        for _ in range(40):
            it = f.pop(f"h{rng.randrange(10)}.test", t[0])
            if it is not None:
                it.visit = Visit(t[0], 200, f"d{rng.randrange(3)}")
                fetched.append(it)
        log.write("F " + " ".join(it.url for it in fetched if it.revisit is None) + "\\n")
        for it in fetched:
            f.done(it)
        f.flush()
        log.write("C\\n")
    """
)


def test_kill_9_keeps_every_scheduled_url(tmp_path):
    """A process scheduling and revisiting URLs is killed: after reopening, every URL whose
    first visit was committed is in the schedule, once (the chaos count: none drops out)."""
    db, log = tmp_path / "f.db", tmp_path / "log"
    for round_, commits in enumerate((30, 60)):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(log), str(ROOT), str(round_ + 1)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Kill it after some commits of this run (its own count: the log grows by rounds).
        before = log.read_text().count("C\n") if log.exists() else 0
        deadline = time.monotonic() + 120
        while (log.read_text().count("C\n") if log.exists() else 0) < before + commits:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode())
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        confirmed, pending = set(), set()
        for line in log.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "F":
                pending = set(rest.split())
            elif kind == "C":
                confirmed |= pending
                pending = set()
        assert len(confirmed) > 100, "the child did too little work to test anything"
        f = Frontier(db, revisit=_revisits())
        scheduled = [e.url for h in range(10) for e in f.export_schedule(f"h{h}.test")]
        assert len(scheduled) == len(set(scheduled))
        missing = confirmed - set(scheduled)
        assert not missing, f"{len(missing)} committed first visits are not scheduled, e.g. {sorted(missing)[:3]}"
        f.close()


# -- moves: HostState, replicas, handover ------------------------------------------------------------
def _scheduled_frontier(path: Path, clock: Clock, n: int = 50, changes: ChangeLog | None = None) -> Frontier:
    f = Frontier(path, revisit=_revisits(), clock=clock, changes=changes)
    f.add([Item(f"http://a/{i}", "a") for i in range(n)])
    for _ in range(n):
        _fetch(f, f.pop("a", clock.t), clock, digest="x")
    f.flush()
    return f


def test_host_state_carries_the_schedule_through_the_wire_and_parts(tmp_path):
    clock = Clock()
    f = _scheduled_frontier(tmp_path / "a.db", clock)
    f.hint("a", "http://a/new", lastmod=0.0, changefreq=3600.0)  # a sitemap hint, not fetched yet
    st_ = HostState("a", [], [], None, f.export_schedule("a"))
    assert len(st_.revisits) == 51
    back = [HostState.from_proto(p.to_proto(), i == 0) for i, p in enumerate(st_.parts())]
    got = [e for p in back for e in p.revisits]
    assert sorted(got, key=lambda e: e.url) == sorted(st_.revisits, key=lambda e: e.url)
    hint = next(e for e in got if e.url == "http://a/new")
    assert math.isinf(hint.due) and hint.changefreq == 3600.0
    g = Frontier(tmp_path / "b.db", revisit=_revisits(), clock=clock)
    assert g.import_schedule(got) == 51
    g.flush()
    assert {e.url for e in g.export_schedule("a")} == {e.url for e in st_.revisits}
    clock.t += 100
    assert len([1 for _ in iter(lambda: g.pop("a", clock.t), None)]) == 50  # the hint is not a revisit


def test_replicas_keep_the_latest_schedule_and_promotion_exports_it(tmp_path):
    clock = Clock()
    log = ChangeLog()
    f = _scheduled_frontier(tmp_path / "a.db", clock, n=20, changes=log)
    taken = log.take()["a"]
    assert len(taken.revisits) == 20
    store = ReplicaStore(tmp_path / "rep")
    from agent.ownership.ledger import revisit_to_proto
    msg = agent_pb2.ReplicateRequest(sender_id="owner", epoch=1, host="a", reset=True,
                                     state=agent_pb2.HostState(host="a", revisits=[revisit_to_proto(e) for e in taken.revisits.values()]))
    store.apply("owner", [msg])
    clock.t += 100
    it = f.pop("a", clock.t)
    _fetch(f, it, clock, digest="y")  # changed
    f.flush()
    delta = log.take()["a"].revisits
    assert list(delta) == [it.url] and delta[it.url].changes == 1
    store.apply("owner", [agent_pb2.ReplicateRequest(sender_id="owner", epoch=1, host="a", state=agent_pb2.HostState(
        host="a", revisits=[revisit_to_proto(delta[it.url])]))])
    store.close()
    promoted = ReplicaStore(tmp_path / "rep").export("a")
    assert len(promoted.revisits) == 20
    assert next(e for e in promoted.revisits if e.url == it.url).changes == 1


def test_sitemap_hints_reach_the_schedule_when_revisits_are_on(tmp_path):
    """The sitemap reader's hints (AgentNode wires the dispatcher's sitemap_hint to
    Frontier.hint): a URL not fetched yet keeps its changefreq for its first visit; a scheduled
    one whose lastmod is after its capture becomes due now."""
    from agent.crawl.sitemap import Entry as SitemapEntry
    from test_agent_budgets import Web, node

    n = node(tmp_path, Web(lambda url: (200, b"<html></html>", {})), revisit__enabled=True, revisit__interval=100.0,
             revisit__min_interval=10.0)
    try:
        n.dispatcher.sitemaps.hints([SitemapEntry("http://a.test/x", None, "hourly"), SitemapEntry("http://a.test/y", 5.0, None)])
        e = n.frontier.schedule_of("a.test", "http://a.test/x")
        assert e is not None and math.isinf(e.due) and e.changefreq == 3600.0
        it = Item("http://a.test/x", "a.test")
        n.frontier.add([it])
        it = n.frontier.pop("a.test")
        it.visit = Visit(1000.0, 200, "d")
        n.frontier.done(it)
        e = n.frontier.schedule_of("a.test", "http://a.test/x")
        assert e.interval == 3600.0 and e.due == 1000.0 + 3600.0  # the first interval is the hint's changefreq
        n.dispatcher.sitemaps.hints([SitemapEntry("http://a.test/x", 2000.0, None)])
        assert n.frontier.schedule_of("a.test", "http://a.test/x").due <= n.clock()  # changed since: due now
    finally:
        n.frontier.close()
    off = node(tmp_path / "off", Web(lambda url: (200, b"", {})))
    try:
        assert off.dispatcher.sitemaps.hints([SitemapEntry("http://a.test/x", None, "hourly")]) is None
        assert off.frontier.schedule_of("a.test", "http://a.test/x") is None  # revisits off: no hint kept
    finally:
        off.frontier.close()
