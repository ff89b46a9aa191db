"""The agent's components alone, with fakes around them: Intake, RoutingService, CommitLog, the
outcome decision, and the HostLedger round trip (export from one agent, import into another)."""

from __future__ import annotations

import asyncio

import pytest

from agent.client import PushResult
from agent.state.commit import CommitLog
from agent.fetch import FetchResponse
from agent.state.frontier import Frontier, Item
from agent.placement.hostcache import HostCache, HostRoute
from agent.routing.intake import Intake
from agent.ownership.ledger import PART_ITEMS, HostState
from agent.node import AgentNode
from agent.state.outbox import Outbox
from agent.crawl.outcome import Policy, decide
from agent.placement.directory import HostDirectory
from agent.routing.router import Router
from agent.routing.service import RoutingService
from agent.crawl.scope import Scope
from agent.state.seen import SeenSet
from agent.settings import ScopeSettings
from agent.settings import load_settings
from agent.state.spool import Spool
from wancrawl.errors import Unavailable
from wancrawl.v1 import agent_pb2
from wancrawl.warcrecords import FetchResult, build_capture


def wire(*urls: str) -> list[agent_pb2.UrlItem]:
    return [agent_pb2.UrlItem(url=u) for u in urls]


# -- Intake ---------------------------------------------------------------------------------------
class Durable:
    """A commit barrier that records what was queued when it was awaited."""

    def __init__(self, frontier: Frontier):
        self.frontier = frontier
        self.queued_at_barrier: list[int] = []

    async def __call__(self, hosts=None) -> None:
        self.queued_at_barrier.append(len(self.frontier))


def make_intake(tmp_path, owners: dict[str, bool | None], refusing=False, **scope):
    frontier, seen = Frontier(tmp_path / "f.sqlite"), SeenSet(tmp_path / "s.sqlite")
    woken: list[str] = []
    durable = Durable(frontier)

    async def owns(hosts: list[str], epoch: int) -> dict[str, bool | None]:
        return {h: owners.get(h) for h in hosts}

    intake = Intake(seen, frontier, Scope(ScopeSettings(**scope)), owners=owns, refusing=lambda: refusing,
                    wake=woken.append, durable=durable)
    return intake, frontier, seen, woken, durable


def test_intake_keeps_own_and_unknown_hosts_bounces_foreign_ones_and_answers_after_the_commit(tmp_path, run):
    intake, frontier, seen, woken, durable = make_intake(tmp_path, {"mine.cn": True, "theirs.cn": False},
                                                          denied_domains=["no.cn"])
    r = run(intake.accept_push(7, wire("http://mine.cn/a", "http://theirs.cn/b", "http://unknown.cn/c", "not a url",
                                       "http://no.cn/d", "http://mine.cn/a")))
    assert r.not_mine == [1], "only a host known to be someone else's is bounced"
    assert r.accepted == 3 and r.errors == ["3: relative URL without a base", "4: out of scope (denied_domain)"]
    assert durable.queued_at_barrier == [2], "the answer waits for a commit of what was queued"
    assert len(frontier) == 2 and "http://mine.cn/a" in seen and "http://unknown.cn/c" in seen
    assert sorted(woken) == ["mine.cn", "unknown.cn"]
    assert intake.stats.duplicates == 1 and intake.stats.out_of_scope == 1


def test_intake_refuses_everything_once_the_agent_left(tmp_path, run):
    intake, frontier, *_ = make_intake(tmp_path, {"mine.cn": True}, refusing=True)
    r = run(intake.accept_push(0, wire("http://mine.cn/a", "http://x.cn/")))
    assert r.not_mine == [0, 1] and len(frontier) == 0


def test_intake_queues_a_url_once_across_pushes(tmp_path, run):
    intake, frontier, *_ = make_intake(tmp_path, {"a.cn": True})
    run(intake.accept_push(0, wire("http://a.cn/1", "http://a.cn/2")))
    run(intake.accept_push(0, wire("http://a.cn/2", "http://a.cn/3")))
    assert len(frontier) == 3


# -- RoutingService -------------------------------------------------------------------------------
class FakePlacement:
    def __init__(self, owners: dict[str, str], epoch: int = 1):
        self.owners = owners
        self.epoch = epoch
        self.asked: list[list[str]] = []

    async def resolve(self, hosts: list[str]) -> list[HostRoute]:
        self.asked.append(list(hosts))
        return [HostRoute(h, ((self.owners[h], self.owners[h] + ":1"),), 300, self.epoch) for h in hosts]

    async def close(self) -> None:
        pass


class FakePeer:
    def __init__(self, pool: FakePool, address: str):
        self.pool, self.address = pool, address

    async def push(self, sender_id, epoch, urls, *, route=False, timeout=None) -> PushResult:
        p = self.pool
        p.in_flight += 1
        p.most = max(p.most, p.in_flight)
        try:
            await p.gate.wait()
            if self.address in p.down:
                raise Unavailable(f"{self.address} is down")
            p.received.setdefault(self.address, []).extend(u.url for u in urls)
            bounce = [i for i, u in enumerate(urls) if p.not_mine.get(self.address) and u.url in p.not_mine[self.address]]
            return PushResult(len(urls) - len(bounce), bounce, p.epoch, [])
        finally:
            p.in_flight -= 1


class FakePool:
    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.down: set[str] = set()
        self.not_mine: dict[str, set[str]] = {}
        self.received: dict[str, list[str]] = {}
        self.in_flight = self.most = 0
        self.epoch = 1

    def get(self, address: str) -> FakePeer:
        return FakePeer(self, address)


def make_routing(tmp_path, placement: FakePlacement, pool: FakePool, *, alpha=2, max_pushes=16):
    local: list[Item] = []
    directory = HostDirectory("me", placement, HostCache(), beta=10, clock=lambda: 0.0)
    outbox = Outbox(tmp_path / "outbox.sqlite")
    router = Router("me", directory.cache, alpha=alpha, beta=10, flush_interval=0.0)
    svc = RoutingService("me", router, outbox, directory, pool, lambda items: local.extend(items) or len(items),  # type: ignore[arg-type]
                         retry_seconds=0.0, max_pushes_in_flight=max_pushes, clock=lambda: 0.0)
    return svc, outbox, local


def test_routing_keeps_own_urls_pushes_the_rest_and_holds_outbox_rows_until_acknowledged(tmp_path, run):
    placement = FakePlacement({"mine.cn": "me", "x.cn": "p1"})
    pool = FakePool()
    pool.down.add("p1:1")
    svc, outbox, local = make_routing(tmp_path, placement, pool)

    async def go():
        svc.route([Item("http://mine.cn/a", "mine.cn"), Item("http://x.cn/1", "x.cn"), Item("http://x.cn/2", "x.cn")])
        await svc.flush(force=True)
        await asyncio.sleep(0)  # the push fails: p1 is down
        outbox.flush()
        owed_while_down = len(outbox)
        pool.down.clear()
        await svc.flush(force=True, deadline=1.0)
        outbox.flush()
        return owed_while_down, len(outbox)

    owed_while_down, owed_after = run(go())
    assert [i.url for i in local] == ["http://mine.cn/a"]
    assert owed_while_down == 2 and owed_after == 0, "a row goes only when the owner acknowledged"
    assert sorted(pool.received["p1:1"]) == ["http://x.cn/1", "http://x.cn/2"]
    assert placement.asked == [["mine.cn", "x.cn"], ["x.cn"]], "a failed owner's host is asked again"


def test_routing_re_resolves_not_mine_and_delivers_to_the_new_owner(tmp_path, run):
    placement = FakePlacement({"x.cn": "old"})
    pool = FakePool()
    pool.not_mine["old:1"] = {"http://x.cn/1"}
    svc, outbox, _ = make_routing(tmp_path, placement, pool)

    async def go():
        svc.route([Item("http://x.cn/1", "x.cn")])
        await svc.flush(force=True)
        await asyncio.sleep(0)
        placement.owners["x.cn"], placement.epoch, pool.epoch = "new", 2, 2
        await svc.flush(force=True, deadline=1.0)

    run(go())
    assert pool.received == {"old:1": ["http://x.cn/1"], "new:1": ["http://x.cn/1"]}
    assert svc.idle() and svc.router.c.not_mine == 1


def test_routing_caps_pushes_in_flight(tmp_path, run):
    owners = {f"h{i}.cn": f"p{i}" for i in range(10)}
    pool = FakePool()
    pool.gate.clear()
    svc, *_ = make_routing(tmp_path, FakePlacement(owners), pool, max_pushes=3)

    async def go():
        svc.route([Item(f"http://{h}/", h) for h in owners])
        await svc.flush(force=True)
        await asyncio.sleep(0)
        started = pool.in_flight
        pool.gate.set()
        await svc.flush(force=True, deadline=5.0)
        return started

    assert run(go()) == 3
    assert pool.most == 3 and sum(map(len, pool.received.values())) == 10


# -- CommitLog ------------------------------------------------------------------------------------
def capture(url: str):
    return build_capture(FetchResult(url=url, status=200, response_headers=[("Content-Type", "text/html")], body=b"<p>x</p>",
                                     agent_id="me", started_at=1.0, ended_at=1.1))


def test_a_page_is_done_only_once_its_capture_is_in_the_spool(tmp_path, run):
    t = [0.0]
    frontier, seen = Frontier(tmp_path / "f.sqlite"), SeenSet(tmp_path / "s.sqlite")
    spool, outbox = Spool(tmp_path / "spool", fsync=False), Outbox(tmp_path / "o.sqlite")
    log = CommitLog(frontier, seen, outbox, spool, batch_pages=10, flush_interval=1.0, clock=lambda: t[0])
    frontier.add([Item("http://a.cn/1", "a.cn"), Item("http://a.cn/2", "a.cn")])
    log.commit()
    it = frontier.pop("a.cn")
    assert it is not None
    log.finish(it, capture(it.url))
    log.commit()
    assert len(spool) == 0 and log.busy()
    assert len(Frontier(tmp_path / "f.sqlite")) == 2, "on disk the page is still queued: a crash refetches it"
    t[0] = 2.0  # the capture batch's flush interval has passed
    log.commit()
    assert len(spool) == 1 and not log.busy()
    assert len(Frontier(tmp_path / "f.sqlite")) == 1, "done for good once its capture is spooled"


def test_commit_barrier_returns_after_the_next_commit(tmp_path, run):
    frontier, seen = Frontier(tmp_path / "f.sqlite"), SeenSet(tmp_path / "s.sqlite")
    log = CommitLog(frontier, seen, Outbox(tmp_path / "o.sqlite"), Spool(tmp_path / "spool", fsync=False),
                    batch_pages=10, flush_interval=0.0, clock=lambda: 0.0)

    async def go():
        seen.add_new("a.cn", ["http://a.cn/1"])
        frontier.add([Item("http://a.cn/1", "a.cn")])
        waiter = asyncio.ensure_future(log.barrier())
        await asyncio.sleep(0)
        before = waiter.done(), len(Frontier(tmp_path / "f.sqlite"))
        log.commit()
        await waiter
        return before, len(Frontier(tmp_path / "f.sqlite")), "http://a.cn/1" in SeenSet(tmp_path / "s.sqlite")

    (done_before, on_disk_before), on_disk_after, seen_after = run(go())
    assert not done_before and on_disk_before == 0
    assert on_disk_after == 1 and seen_after


# -- outcome --------------------------------------------------------------------------------------
POLICY = Policy(max_retries=2, max_retry_after=60.0)


@pytest.mark.parametrize(
    "resp, attempts, stopping, want",
    [
        (FetchResponse("u", status=200, content_type="text/html"), 0, False, dict(page=True, record=True, parse=True)),
        (FetchResponse("u", status=200, content_type="image/png"), 0, False, dict(page=True, record=True, not_html=True)),
        (FetchResponse("u", status=200, content_type="text/html", truncated="length"), 0, False, dict(page=True, record=True, parse=True)),
        (FetchResponse("u", status=301, location="/x"), 0, False, dict(page=True, record=True, follow="/x")),
        (FetchResponse("u", status=404), 0, False, dict(page=True, record=True)),
        (FetchResponse("u", status=503, retry_after=600.0), 0, False, dict(retry=True, wait=60.0, attempt=1, record=True)),
        (FetchResponse("u", error="timeout"), 1, False, dict(retry=True, attempt=2)),
        (FetchResponse("u", error="timeout"), 2, False, dict(given_up=True)),
        (FetchResponse("u", status=500), 2, False, dict(page=True, record=True, given_up=True)),
        (FetchResponse("u", error="timeout"), 2, True, dict(retry=True, attempt=None)),
        (FetchResponse("u", error="tls"), 0, False, dict()),
    ],
)
def test_outcome_decisions(resp, attempts, stopping, want):
    o = decide(resp, attempts, POLICY, stopping=stopping)
    got = {k: v for k, v in vars(o).items() if v not in (False, 0.0, None)}
    want = {k: v for k, v in want.items() if v not in (False, 0.0, None)}
    assert got == want


# -- HostLedger round trip ------------------------------------------------------------------------
def make_node(tmp_path, agent_id: str) -> AgentNode:
    s = load_settings(None, {"agent_id": agent_id, "data_dir": str(tmp_path / agent_id), "storage_out.fsync": False})
    return AgentNode(s, placement=FakePlacement({}))  # type: ignore[arg-type]


def test_host_ledger_round_trip_gives_the_same_pops_and_seen_answers(tmp_path, run):
    host = "a.cn"
    urls = [f"http://{host}/p{i}" for i in range(PART_ITEMS + 50)]  # more than one part

    async def go():
        a, b = make_node(tmp_path, "a"), make_node(tmp_path, "b")
        a.intake.accept_local([Item(u, host, depth=i % 3) for i, u in enumerate(urls)])
        a.intake.accept_local([Item("http://other.cn/", "other.cn")])
        a.commit_log.commit()
        done = [a.frontier.pop(host) for _ in range(10)]  # ten fetched, as far as the host goes
        for it in done:
            a.commit_log.finish(it)
        a.commit_log.commit(force=True)
        d = a.dispatcher
        d.robots.update(f"http://{host}", 200, b"User-agent: *\nDisallow: /p1\nCrawl-delay: 3\n", 1000.0)
        d.hosts.add_origin(host, f"http://{host}")
        d.politeness.backoff(host, 30.0, 1000.0)
        a.frontier.add_pages(host, 10)
        st = a.ledger.export(host)
        parts = [HostState.from_proto(p.to_proto(), first=i == 0) for i, p in enumerate(st.parts())]
        assert len(parts) >= 2
        for p in parts:
            b.ledger.import_(p)
        b.commit_log.commit()
        probes = urls + ["http://a.cn/nowhere", "http://other.cn/"]
        seen_a = {u: u in a.seen for u in probes}
        a.ledger.release(st)
        a.commit_log.commit()
        return a, b, st, seen_a

    a, b, st, seen_a = run(go())
    host_urls = [u for u in seen_a if u.startswith("http://a.cn/")]
    assert {u: u in b.seen for u in host_urls} == {u: seen_a[u] for u in host_urls}, "the same seen answers"
    assert "http://a.cn/nowhere" not in b.seen and "http://other.cn/" not in b.seen
    # The same pops, in the same breadth-first order, for what was not fetched yet.
    ref = Frontier(tmp_path / "ref.sqlite")
    ref.add([Item(i.url, host, i.depth, i.via) for i in st.queue])
    pops_b = [b.frontier.pop(host) for _ in range(len(urls))]
    pops_ref = [ref.pop(host) for _ in range(len(urls))]
    assert [x.url if x else None for x in pops_b] == [x.url if x else None for x in pops_ref]
    assert len([x for x in pops_b if x]) == len(urls) - 10
    db = b.dispatcher
    origin = f"http://{host}"
    assert not db.robots.allowed(f"{origin}/p1", origin) and db.robots.allowed(f"{origin}/p2", origin)
    assert db.politeness.delay(host) == 3.0 and db.politeness.backoff_state(host)[0] == pytest.approx(1030.0)
    assert b.frontier.pages(host) == 10
    # The sender kept nothing of the host, and its other host stayed.
    assert host not in a.ledger.owned_hosts() and "http://a.cn/p1" not in a.seen and a.frontier.queue_len(host) == 0
    assert a.ledger.owned_hosts() == ["other.cn"]


def test_release_keeps_urls_that_arrived_after_the_export(tmp_path, run):
    async def go():
        a = make_node(tmp_path, "a")
        a.intake.accept_local([Item("http://a.cn/1", "a.cn")])
        st = a.ledger.export("a.cn")
        a.intake.accept_local([Item("http://a.cn/late", "a.cn")])  # a push during the handover
        kept = a.ledger.release(st)
        return kept, a.frontier.export_host("a.cn"), "http://a.cn/1" in a.seen

    kept, left, still_seen = run(go())
    assert kept == 1 and [i.url for i in left] == ["http://a.cn/late"] and not still_seen


def test_a_forced_url_is_queued_again_though_seen(tmp_path, run):
    intake, frontier, seen, woken, durable = make_intake(tmp_path, {"a.cn": True})
    run(intake.accept_push(0, wire("http://a.cn/x")))
    it = frontier.pop("a.cn")
    assert it is not None and frontier.done(it)
    run(intake.accept_push(0, wire("http://a.cn/x")))
    assert len(frontier) == 0, "seen: not queued again"
    run(intake.accept_push(0, [agent_pb2.UrlItem(url="http://a.cn/x", force=True)]))
    assert len(frontier) == 1, "manager seed --force: queued again"
