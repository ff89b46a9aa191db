"""Issue 21, item 3: a poison message cannot wedge an agent.

A value the agent's disk cannot hold is refused by the request that brought it (the rest goes
on); a row that still cannot be written is left out of the commit, not retried forever; and an
agent whose commits fail (or stop) for commit_stall_seconds reports NOT_SERVING and stops
heartbeating, so its hosts fail over, and comes back when it commits again.

No sleeps: the commit loop, the membership loop and the health check are driven one turn at a
time on a fake clock.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3

import pytest

import agent.state.frontier.item as frontier_item
from agent.node import AgentNode
from agent.ownership.ledger import HostState
from agent.placement.hostcache import HostRoute
from agent.server import SERVICE_NAME, AgentServer
from agent.settings import load_settings
from agent.state.commit import CommitLog
from agent.state.frontier import Frontier, Item
from agent.state.outbox import Outbox
from agent.state.progress import ProgressWatch
from agent.state.seen import SeenSet
from agent.state.spool import Spool
from agent.state.storable import Unstorable
from consultant.client import Registration
from wancrawl import errors, grpcutil
from wancrawl.v1 import agent_pb2

BIG = 2**64 - 1  # a legal uint64, beyond SQLite's signed 64-bit INTEGER


class Placement:
    """Owns every host it is asked about for agent `owner`; records heartbeats."""

    def __init__(self, owner: str = "b"):
        self.owner = owner
        self.heartbeats: list[float] = []
        self.clock = lambda: 0.0

    async def register(self, agent_id, address, *, location=None, source_ip="", capacity=0.0) -> Registration:
        return Registration(epoch=1, lease_seconds=15.0)

    async def heartbeat(self, agent_id, load) -> int:
        self.heartbeats.append(self.clock())
        return 1

    async def deregister(self, agent_id) -> int:
        return 1

    async def resolve(self, hosts: list[str]) -> list[HostRoute]:
        return [HostRoute(h, ((self.owner, self.owner + ":1"),), 300, 1) for h in hosts]

    async def close(self) -> None:
        pass


def make_node(tmp_path, clock=None, placement: Placement | None = None, **keys) -> AgentNode:
    s = load_settings(None, {"agent_id": "b", "data_dir": str(tmp_path / "b"), "storage_out.fsync": False, **keys})
    node = AgentNode(s, placement=placement or Placement(), **({"clock": clock} if clock else {}))  # type: ignore[arg-type]
    # These tests are of the disk's defences, behind the edge: the peer guard (who may hand a
    # host over, tests/test_peer_guard.py) is not what they exercise.
    node.handoff.admit = None
    return node


def on_disk(tmp_path) -> list[str]:
    """URLs in the frontier's table (a fresh reader: what a restart would find)."""
    f = Frontier(tmp_path / "b" / "frontier.sqlite")
    try:
        return sorted(i.url for h in list(f.hosts_ready()) for i in f.export_host(h))
    finally:
        f._store.close()


def hand_over(host: str, urls: list[str], **fields) -> agent_pb2.HandOverRequest:
    return agent_pb2.HandOverRequest(sender_id="a", epoch=1, host=agent_pb2.HostState(
        host=host, queue=[agent_pb2.QueuedUrl(url=u, depth=1, not_before=fields.pop("not_before", 0.0)) for u in urls],
        **fields))


async def stream(*msgs):
    for m in msgs:
        yield m


# -- isolation at entry: the request that brings the value is refused, whole ---------------------
@pytest.mark.parametrize("poison", [
    {"pages": BIG},            # the attack of issue 21: OverflowError at every commit, forever
    {"pages": 2**63},          # one past SQLite's INTEGER
    {"not_before": math.nan},  # NaN binds as NULL: NOT NULL constraint failed at every commit
], ids=["pages=2^64-1", "pages=2^63", "not_before=nan"])
def test_a_handover_with_a_value_the_disk_cannot_hold_is_refused_whole_and_the_rest_commits(tmp_path, run, poison):
    async def go():
        node = make_node(tmp_path)
        # Another caller: URLs of another host, waiting for the commit like a PushUrls does.
        node.intake.accept_local([Item("http://good.cn/1", "good.cn")])
        other = asyncio.ensure_future(node.commit_log.barrier({"good.cn"}))
        handover = asyncio.ensure_future(node.handoff.receive(stream(
            hand_over("bad.cn", ["http://bad.cn/1", "http://bad.cn/2"], **poison))))
        await asyncio.sleep(0)  # one turn: the handover takes its parts in (or is refused)
        node.commit_log.commit()  # without the entry check: OverflowError / IntegrityError, every time
        await other
        with pytest.raises(errors.InvalidArgument):
            await handover
        node.intake.accept_local([Item("http://good.cn/2", "good.cn")])
        node.commit_log.commit()  # and commits go on
        return node

    node = run(go())
    assert on_disk(tmp_path) == ["http://good.cn/1", "http://good.cn/2"]
    # Nothing of the refused part stayed behind: no URL seen here that is not queued (a resend
    # of the corrected host would otherwise be taken for a duplicate and lost), no page count.
    assert "http://bad.cn/1" not in node.seen and "http://bad.cn/2" not in node.seen
    assert node.frontier.queue_len("bad.cn") == 0 and node.frontier.pages("bad.cn") == 0
    assert not node.progress.failures


def test_page_counts_that_add_up_saturate_and_commits_go_on(tmp_path, run):
    """Counts that add up past SQLite's limit (2^62 twice, past the edge's bound too, as a bug
    behind the edge could) stay at MAX_PAGES: both handovers commit, the count is readable."""
    from agent.state.frontier import MAX_PAGES

    async def commit_then(node, coro):
        t = asyncio.ensure_future(coro)
        await asyncio.sleep(0)
        node.commit_log.commit()
        return await t

    async def go():
        node = make_node(tmp_path)
        for i in (1, 2):
            await commit_then(node, node.handoff.receive(stream(hand_over("h.cn", [f"http://h.cn/{i}"], pages=2**62))))
        node.commit_log.commit()
        return node

    node = run(go())
    assert node.frontier.pages("h.cn") == MAX_PAGES and on_disk(tmp_path) == ["http://h.cn/1", "http://h.cn/2"]


def test_seen_set_add_is_all_or_nothing(tmp_path):
    seen = SeenSet(tmp_path / "s.sqlite")
    with pytest.raises(Unstorable):
        seen.add_new("a.cn", ["http://a.cn/1", "http://a.cn/\udc80", "http://a.cn/3"])
    # Without it, a.cn/1 stays "seen" though its caller never queued it: a resend is then
    # dropped as a duplicate, and the URL is never fetched.
    assert "http://a.cn/1" not in seen and seen.pending() == 0
    assert seen.add_new("a.cn", ["http://a.cn/1"]) == [True]
    with pytest.raises(Unstorable):
        seen.add_new("\udc80.cn", ["http://x/"])
    seen.flush()  # a host it could not store was not recorded either


def test_one_unstorable_link_does_not_take_its_batch_with_it(tmp_path, run):
    node = make_node(tmp_path)
    n = node.intake.accept_local([Item("http://a.cn/1", "a.cn"), Item("http://a.cn/\udc80", "a.cn"),
                                  Item("http://a.cn/3", "a.cn")])
    node.commit_log.commit()
    assert n == 2 and node.intake.stats.unstorable == 1
    assert on_disk(tmp_path) == ["http://a.cn/1", "http://a.cn/3"]


def test_a_replica_that_cannot_be_promoted_does_not_stop_the_others(tmp_path, run):
    node = make_node(tmp_path)
    assert node.replicas is not None
    node.replicas.apply("dead", [
        agent_pb2.ReplicateRequest(sender_id="dead", epoch=1, host=h, reset=True, state=agent_pb2.HostState(
            host=h, pages=pages, queue=[agent_pb2.QueuedUrl(url=f"http://{h}/1", seq=1)]))
        for h, pages in (("bad.cn", BIG), ("good.cn", 3))])
    node.ownership.promote(["bad.cn", "good.cn"])
    node.commit_log.commit()
    assert on_disk(tmp_path) == ["http://good.cn/1"] and node.frontier.pages("good.cn") == 3
    assert node.ownership.loop_stats.promotions_refused == 1 and node.ownership.loop_stats.hosts_promoted == 1
    assert node.replicas.owner("bad.cn") == "dead", "kept for an operator"


# -- isolation at flush: a row no entry check caught is left out, not retried forever ------------
def test_an_unwritable_row_past_the_entry_checks_is_left_out_and_only_its_request_fails(tmp_path, run, monkeypatch):
    # A bug in the entry checks: they let everything through.
    monkeypatch.setattr(frontier_item, "item_problem", lambda it: None)

    async def go():
        node = make_node(tmp_path)
        node.intake.accept_local([Item("http://good.cn/1", "good.cn"), Item("http://mixed.cn/ok", "mixed.cn")])
        other = asyncio.ensure_future(node.commit_log.barrier({"good.cn"}))
        bad = HostState("mixed.cn", [Item("http://mixed.cn/deep", "mixed.cn", depth=BIG), Item("http://mixed.cn/2", "mixed.cn")])
        node.ledger.import_(bad)  # what a HandOver does with a part
        mine = asyncio.ensure_future(node.commit_log.barrier({"mixed.cn"}))
        unknown = asyncio.ensure_future(node.commit_log.barrier())
        await asyncio.sleep(0)
        node.commit_log.commit()  # without isolation: OverflowError, at this commit and every one after
        await other
        with pytest.raises(errors.InvalidArgument):
            await mine
        with pytest.raises(errors.Unavailable):
            await unknown  # it named no hosts: it may have brought the row, so it resends
        node.commit_log.commit()
        return node

    node = run(go())
    assert on_disk(tmp_path) == ["http://good.cn/1", "http://mixed.cn/2", "http://mixed.cn/ok"]
    # Memory agrees with the table: the dropped item is not queued, and not seen (a resend of it,
    # corrected, is queued rather than taken for a duplicate).
    assert len(node.frontier) == 3 and node.frontier.queue_len("mixed.cn") == 2
    assert "http://mixed.cn/deep" not in node.seen and "http://mixed.cn/2" in node.seen
    assert node.seen.add_new("mixed.cn", ["http://mixed.cn/deep"]) == [True]
    assert node.commit_log.stats.rows_rejected == 1 and node.progress.failures == 0
    pops = [node.frontier.pop("mixed.cn"), node.frontier.pop("mixed.cn"), node.frontier.pop("mixed.cn")]
    assert sorted(p.url for p in pops if p) == ["http://mixed.cn/2", "http://mixed.cn/ok"] and pops[2] is None


def test_an_unwritable_retry_is_left_out_and_the_item_stays_fetchable(tmp_path):
    f = Frontier(tmp_path / "f.sqlite")
    f.add([Item("http://a.cn/1", "a.cn"), Item("http://a.cn/2", "a.cn")])
    f.flush()
    it = f.pop("a.cn")
    assert it is not None
    f.retry(it, math.nan)  # NaN binds as NULL into a NOT NULL column
    f.add([Item("http://a.cn/3", "a.cn")])
    f.flush()  # without isolation: IntegrityError, at this flush and every one after
    assert f.rejected_rows == 1
    assert sorted(i.url for i in Frontier(tmp_path / "f.sqlite").export_host("a.cn")) == [
        "http://a.cn/1", "http://a.cn/2", "http://a.cn/3"]
    assert [f.pop("a.cn", now=1.0).url for _ in range(3)] == ["http://a.cn/1", "http://a.cn/2", "http://a.cn/3"]


class FlakyDb:
    """The frontier's connection, failing its next write as a full disk would."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.fail = 1

    def executemany(self, sql, rows):
        if self.fail:
            self.fail -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.executemany(sql, rows)

    def __getattr__(self, name):
        return getattr(self.db, name)


def test_a_disk_error_drops_nothing_and_the_next_flush_writes_it_all(tmp_path):
    f = Frontier(tmp_path / "f.sqlite")
    f._store.db = FlakyDb(f._store.db)  # type: ignore[assignment]
    f.add([Item("http://a.cn/1", "a.cn"), Item("http://b.cn/1", "b.cn")])
    with pytest.raises(sqlite3.OperationalError):
        f.flush()
    assert f.pending() == 2 and f.rejected_rows == 0, "the environment's error: nothing left out"
    f.flush()
    assert sorted(i.url for h in ("a.cn", "b.cn") for i in Frontier(tmp_path / "f.sqlite").export_host(h)) == [
        "http://a.cn/1", "http://b.cn/1"]


# -- liveness: no durable progress, no heartbeat, NOT_SERVING -----------------------------------
def test_a_stalled_agent_stops_heartbeating_reports_not_serving_and_comes_back(tmp_path, run, monkeypatch):
    t = [1000.0]
    placement = Placement()
    placement.clock = lambda: t[0]

    async def go():
        node = make_node(tmp_path, clock=lambda: t[0], placement=placement, commit_stall_seconds=5.0)
        server = AgentServer(node.s, node=node)
        await server.grpc.start()
        try:
            async def serving() -> bool:
                await server.refresh_health()
                return await grpcutil.check_health(server.address, SERVICE_NAME)

            await node.membership.register()
            node.commit_log.commit()
            await node.membership.beat()
            states = [("ok", await serving(), len(placement.heartbeats))]
            real_flush = node.frontier.flush

            def broken() -> int:
                raise sqlite3.OperationalError("disk I/O error")

            monkeypatch.setattr(node.frontier, "flush", broken)
            for step in range(1, 8):  # a commit every second, each failing
                t[0] += 1.0
                with pytest.raises(sqlite3.OperationalError):
                    node.commit_log.commit()
                await node.membership.beat()
                states.append((f"failing {step}s", await serving(), len(placement.heartbeats)))
            monkeypatch.setattr(node.frontier, "flush", real_flush)
            t[0] += 1.0
            node.commit_log.commit()
            await node.membership.beat()
            states.append(("committed again", await serving(), len(placement.heartbeats)))
            return states, node
        finally:
            await server.grpc.stop(0)

    states, node = run(go())
    # Serving and heartbeating up to commit_stall_seconds without a good commit; past it neither.
    assert states == [("ok", True, 1)] + [(f"failing {s}s", s <= 5, min(s, 5) + 1) for s in range(1, 8)] + [
        ("committed again", True, 7)]
    c = node.status_counters()
    assert c["heartbeats_withheld"] == 2 and c["commit_failures"] == 7 and c["stalls"] == 1 and c["stalled"] == 0


def test_a_commit_loop_that_stopped_is_a_stall_too():
    t = [0.0]
    w = ProgressWatch(5.0, lambda: t[0])
    w.committed()
    t[0] = 5.0
    assert not w.stalled()
    t[0] = 5.5  # no commit at all, failed or not: the loop died or hangs between turns
    assert w.stalled() and w.gauges() == {"stalled": 1.0}
    w.committed()
    assert not w.stalled()


def test_commit_log_feeds_the_watch_and_answers_no_waiter_while_failing(tmp_path, run):
    t = [0.0]
    frontier, seen = Frontier(tmp_path / "f.sqlite"), SeenSet(tmp_path / "s.sqlite")
    watch = ProgressWatch(5.0, lambda: t[0])
    log = CommitLog(frontier, seen, Outbox(tmp_path / "o.sqlite"), Spool(tmp_path / "spool", fsync=False),
                    batch_pages=10, flush_interval=0.0, clock=lambda: t[0], progress=watch)
    frontier._store.db = FlakyDb(frontier._store.db)  # type: ignore[assignment]

    async def go():
        frontier.add([Item("http://a.cn/1", "a.cn")])
        w = asyncio.ensure_future(log.barrier({"a.cn"}))
        await asyncio.sleep(0)
        with pytest.raises(sqlite3.OperationalError):
            log.commit()
        failed_once = (w.done(), watch.failures)
        t[0] = 1.0
        log.commit()
        await w
        return failed_once

    assert run(go()) == (False, 1), "a failed commit answers nobody (nothing was durable)"
    assert watch.failures == 0 and watch.last_ok == 1.0


def test_commit_stall_seconds_must_leave_room_for_commits():
    with pytest.raises(Exception, match="commit_stall_seconds must be more than twice commit_interval"):
        load_settings(None, {"agent_id": "x", "commit_interval": 1.0, "commit_stall_seconds": 1.5})
