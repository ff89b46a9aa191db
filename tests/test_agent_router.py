"""Routing decisions (pure): host cache, batched resolves of at most beta hosts, pushes of at
most alpha URLs per owner, "not mine" bounces, consultant outages, owner failures."""

from __future__ import annotations

from agent.state.frontier import Item
from agent.placement.hostcache import HostCache, HostRoute
from agent.routing.router import Router


def item(host: str, i: int = 0) -> Item:
    return Item(f"http://{host}/p{i}", host)


def route(host: str, owner: str, epoch: int = 5, expires: float = 100.0) -> HostRoute:
    """An answer cached at time 0 that expires at `expires`."""
    return HostRoute(host, ((owner, f"{owner}:1"), ("backup", "backup:1")), int(expires), epoch)


def answer(r: Router, asked: list[str], routes: list[HostRoute], now: float, **kw):
    """What the routing service does with a Resolve answer: cache it, then tell the router."""
    for rt in routes:
        r.cache.put(rt, 0)
    return r.resolved(asked, routes, now, **kw)


def test_own_hosts_go_local_foreign_ones_wait_for_one_batched_resolve():
    r = Router("me", HostCache(), alpha=3, beta=2)
    assert r.submit([item("a.cn", 1), item("a.cn", 2), item("b.cn"), item("c.cn")], now=0) == []
    first = r.hosts_to_resolve(0)
    assert first == ["a.cn", "b.cn"], "at most beta hosts per Resolve, each host asked once"
    assert r.hosts_to_resolve(0) == ["c.cn"]
    assert r.hosts_to_resolve(0) == []
    local, _ = answer(r, first, [route("a.cn", "me"), route("b.cn", "peer")], now=0)
    assert [i.url for i in local] == ["http://a.cn/p1", "http://a.cn/p2"]
    # Cached now: the next URL of a.cn does not wait for the consultant.
    assert r.submit([item("a.cn", 3)], now=1) == [item("a.cn", 3)]
    assert r.cache.stats.host_cache_hits == 1


def test_pushes_are_batched_per_owner_at_alpha_or_after_the_flush_interval():
    r = Router("me", HostCache(), alpha=3, beta=100, flush_interval=0.5)
    r.cache.put(route("x.cn", "p1"), 0)
    r.cache.put(route("y.cn", "p2"), 0)
    r.submit([item("x.cn", i) for i in range(7)] + [item("y.cn")], now=0)
    batches = r.due_pushes(0)
    assert [(b.owner_id, len(b.items)) for b in batches] == [("p1", 3), ("p1", 3)]
    assert r.due_pushes(0.4) == []
    later = r.due_pushes(0.6)
    assert sorted((b.owner_id, len(b.items)) for b in later) == [("p1", 1), ("p2", 1)]
    assert r.pending() == 8
    for b in batches + later:
        r.pushed(b, [], epoch=5, now=1)
    assert r.pending() == 0 and r.idle()
    assert r.c.n == 8 and len(r.c.m_hosts) == 2 and r.c.pushes == 4


def test_not_mine_re_resolves_losing_nothing():
    r = Router("me", HostCache(), alpha=10, beta=10)
    r.cache.put(route("x.cn", "old-owner", epoch=5), 0)
    r.submit([item("x.cn", 1), item("x.cn", 2)], now=0)
    [b] = r.due_pushes(0, force=True)
    delivered = r.pushed(b, not_mine=[0, 1], epoch=6, now=1)
    assert delivered == [] and r.c.not_mine == 2 and r.pending() == 2
    assert r.hosts_to_resolve(1) == ["x.cn"]
    answer(r, ["x.cn"], [route("x.cn", "new-owner", epoch=6)], now=1)
    [b2] = r.due_pushes(1, force=True)
    assert b2.owner_id == "new-owner" and len(b2.items) == 2


def test_a_newer_epoch_makes_cached_routes_stale():
    c = HostCache()
    c.put(route("x.cn", "p1", epoch=5), 0)
    assert c.get("x.cn", 0) is not None
    c.saw_epoch(6)
    assert c.get("x.cn", 0) is None and c.stale("x.cn") is not None
    assert c.get("x.cn", 200) is None  # and TTLs expire


def test_consultant_outage_uses_stale_routes_and_retries_unknown_hosts():
    r = Router("me", HostCache(), alpha=10, beta=10)
    r.cache.put(HostRoute("known.cn", (("p1", "p1:1"),), 0, 5), 0.5)  # expires at 0.5
    r.submit([item("known.cn"), item("new.cn")], now=1.0)  # known.cn's TTL has run out
    hosts = r.hosts_to_resolve(1.0)
    assert sorted(hosts) == ["known.cn", "new.cn"]
    r.resolve_failed(hosts, now=1.0, retry_in=2.0)
    [b] = r.due_pushes(1.0, force=True)
    assert b.owner_id == "p1", "a cached assignment carries on while the consultant is down"
    assert r.hosts_to_resolve(2.0) == [] and r.hosts_to_resolve(3.5) == ["new.cn"]


def test_unreachable_owner_keeps_its_urls_and_re_resolves_after_a_pause():
    r = Router("me", HostCache(), alpha=10, beta=10)
    r.cache.put(route("x.cn", "dead"), 0)
    r.submit([item("x.cn", i) for i in range(3)], now=0)
    [b] = r.due_pushes(0, force=True)
    r.push_failed(b, now=0, retry_in=1.0)
    assert r.pending() == 3 and r.c.push_failures == 1
    assert r.hosts_to_resolve(0.5) == []
    assert r.hosts_to_resolve(1.5) == ["x.cn"]
    answer(r, ["x.cn"], [route("x.cn", "backup", epoch=6)], now=1.5)
    [b2] = r.due_pushes(1.5, force=True)
    assert b2.owner_id == "backup" and len(b2.items) == 3


def test_malformed_hosts_are_rejected_and_unanswered_ones_asked_again():
    r = Router("me", HostCache())
    r.submit([item("ok.cn"), Item("http://bad_/", "bad_"), item("lost.cn")], now=0)
    hosts = r.hosts_to_resolve(0)
    assert hosts == ["ok.cn", "bad_", "lost.cn"]
    local, rejected = answer(r, hosts, [route("ok.cn", "me")], now=0, errors={"bad_": "malformed"}, retry_in=2.0)
    assert [i.host for i in local] == ["ok.cn"]
    assert [i.host for i in rejected] == ["bad_"] and "bad_" not in r.waiting
    # Asked but not answered: not lost, not asked again in a tight loop, asked after retry_in.
    assert r.hosts_to_resolve(1.0) == [] and r.hosts_to_resolve(2.5) == ["lost.cn"]


def test_picking_a_batch_does_not_scan_every_waiting_host():
    r = Router("me", HostCache(), beta=10)
    r.submit([item(f"h{i}.cn") for i in range(50_000)], now=0)
    first = r.hosts_to_resolve(0)
    assert first == [f"h{i}.cn" for i in range(10)]
    assert len(r._to_ask) == 50_000 - 10 and r.resolving == set(first)


def test_only_items_that_stay_with_the_router_are_held_and_pushes_in_flight_are_capped():
    r = Router("me", HostCache(), alpha=2, beta=10)
    r.cache.put(route("mine.cn", "me"), 0)
    r.cache.put(route("x.cn", "p1"), 0)
    held: list[str] = []
    local = r.submit([item("mine.cn"), item("x.cn", 1), item("x.cn", 2), item("x.cn", 3), item("new.cn")], now=0,
                     hold=lambda it: held.append(it.url))
    assert [i.host for i in local] == ["mine.cn"]
    assert held == ["http://x.cn/p1", "http://x.cn/p2", "http://x.cn/p3", "http://new.cn/p0"], "own URLs get no outbox row"
    [b] = r.due_pushes(0, force=True, limit=1)
    assert len(b.items) == 2 and r.pending() == 4, "one batch under way, the rest waits its turn"
    assert [len(x.items) for x in r.due_pushes(0, force=True, limit=1)] == [1]
