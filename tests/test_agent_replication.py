"""Replicas, failover, handover on epoch change and the lease fence (issue 12).

The pure decision (`settle_action`) is checked against the rules; the replica store against a
model; promotion, two failures in a row and fencing with real agents on the lab web, against the
lab's truth and request log.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

import pytest

from agent.state.frontier import Item
from agent.placement.gate import Gate
from agent.ownership.ledger import HostState
from agent.ownership.settle import Action, settle_action
from agent.ownership.replica import ReplicaStore
from agent.state.seen import fingerprint
from consultant.client import HostRoute
from wancrawl.placement import LiveAgents
from lab.testing import ServerThread
from wancrawl.errors import Unavailable
from wancrawl.urls import canonicalize
from wancrawl.v1 import agent_pb2

from agent_helpers import cluster, lab_web, normal_hosts, seed, truth_urls, wait_idle

A, B, C, D = ("a", "127.0.0.1:1"), ("b", "127.0.0.1:2"), ("c", "127.0.0.1:3"), ("d", "127.0.0.1:4")


def route(*agents):
    return HostRoute("h.lab", tuple(agents), 300, 7)


# -- the decision -------------------------------------------------------------------------------
@pytest.mark.parametrize("agents, holds, replica_of, settling, want", [
    ((A, B), False, None, False, Action("fetch")),                 # mine, nothing elsewhere to ask
    ((A, B), False, None, True, Action("claim", (B,))),            # mine, just settled: ask the others
    ((A, B, C), True, None, True, Action("claim", (B, C))),
    ((A, C), False, "b", False, Action("promote")),                # replica of a dead owner
    ((A, B), False, "b", False, Action("claim", (B,))),            # replica of a live owner: it hands over
    ((B, A), True, None, False, Action("hand_out", (B,))),         # not mine any more: to the owner
    ((B, A), False, "b", False, Action("keep")),                   # I am its backup: keep the replica
    ((B, C), False, "b", False, Action("drop_replica")),           # no longer its backup
    ((B, C, A), False, "b", False, Action("drop_replica")),        # third in the list: not the first backup
    ((A,), False, None, True, Action("fetch")),                    # alone: nobody to ask
    # A move (balance or operator pin, join) took the host off b as b died: c owns it and b is
    # gone. Nobody promotes (the host has a live owner): the replica goes to c (issue 23).
    ((C, A), False, "b", False, Action("hand_replica", (C,))),
    ((C, A), False, "b", True, Action("hand_replica", (C,))),
    ((C, D), False, "b", False, Action("hand_replica", (C,))),     # even from outside the list
    ((C, A), True, "b", False, Action("hand_out", (C,))),          # owned state here goes first
    ((C, A, B), False, "b", False, Action("keep")),                # b moved down but lives: c claims from b
    ((B, C, D), False, "b", False, Action("drop_replica")),        # b owns it, this agent is out of the list
    # b lives but the host moves away from it, pushing this agent out of the list: the copy stays
    # until b's handover (then b's drop) or b's death (then hand_replica): a pin at a double kill.
    ((C, B, D), False, "b", False, Action("keep")),
])
def test_settle_action_follows_the_rules(agents, holds, replica_of, settling, want):
    assert settle_action("a", route(*agents), holds=holds, replica_of=replica_of, settling=settling) == want


@pytest.mark.parametrize("agents, want", [
    ((B, C, A), Action("keep")),            # second backup with r = 2: keeps the owner's replica
    ((B, C, D, A), Action("drop_replica")),  # third backup: beyond r
    ((A, D), Action("promote")),            # owner and first backup dead: the second backup takes over
    ((C, B, A), Action("keep")),            # moved to c while b lives (it answers c's claim)
    # b dead: c (its first backup, promoting, or the agent a move pinned it to) owns it; the
    # second backup's replica goes to c (c merges it with what it promoted, or takes it whole).
    ((C, A, D), Action("hand_replica", (C,))),
    ((C, D, A), Action("hand_replica", (C,))),
    ((C, D), Action("hand_replica", (C,))),
])
def test_settle_action_with_two_backups(agents, want):
    assert settle_action("a", route(*agents), holds=False, replica_of="b", settling=False, backups=2) == want


# A host moves off b, its owner, which lives (a balance epoch: b had been pinned the host, and the
# new list, three of four agents, does not name b). Off the list is not dead: placement's
# LiveAgents says b lives (live_owner), and b hands the host over itself.
@pytest.mark.parametrize("agents, holds, live_owner, want", [
    ((C, A), False, B, Action("keep")),                  # its backup: keeps the copy until b's handover and drop
    ((C, D), False, B, Action("keep")),                  # ... pushed off the list too
    ((C, A, D), False, B, Action("keep")),
    ((C, A), False, None, Action("hand_replica", (C,))),  # b dead (or liveness unknown): handed on, as before
    ((C, D), False, None, Action("hand_replica", (C,))),
    ((C, A), False, D, Action("hand_replica", (C,))),     # another agent alive is no word on b
    ((C, A), True, B, Action("hand_out", (C,))),          # owned state here goes first, as ever
    ((A, C), False, B, Action("claim", (B,))),           # this agent is the new owner: claim it from b
    ((A, C, D), False, B, Action("claim", (B,))),
    ((A, C), False, None, Action("promote")),            # b dead: the replica is the host's state
    ((A, B), False, B, Action("claim", (B,))),           # listed: as before
])
def test_settle_action_keeps_a_live_owners_replica_when_the_host_moves_off_its_list(agents, holds, live_owner, want):
    for backups in (1, 2):
        assert settle_action("a", route(*agents), holds=holds, replica_of="b", settling=False, backups=backups,
                             live_owner=live_owner) == want


def test_settle_action_never_leaves_a_dead_owners_replica_unclaimed():
    """Against the invariant, for every small preference list: a replica whose owner is not in
    the list is promoted here (this agent owns the host) or handed to the owner; never kept or
    dropped (that was the lost URL of docs/balance.md's chaos kill run)."""
    import itertools
    pool = [A, B, C, D]
    for n in range(1, 4):
        for agents in itertools.permutations(pool, n):
            ids = [x[0] for x in agents]
            for backups in (1, 2):
                got = settle_action("a", route(*agents), holds=False, replica_of="b", settling=False, backups=backups)
                if "b" in ids and ids[0] != "b":
                    assert got.kind in ("keep", "claim"), (agents, got)  # moving off b: kept until b hands over
                elif "b" in ids:
                    assert got.kind in ("keep", "drop_replica"), (agents, got)
                elif ids[0] == "a":
                    assert got == Action("promote"), (agents, got)
                else:
                    assert got == Action("hand_replica", (agents[0],)), (agents, got)


def test_replica_store_drops_a_replica_only_if_it_is_still_the_named_owners(tmp_path):
    """With r = 2 the second backup hands a dead owner's replica on while the first backup,
    promoting, replaces it by its own: the drop after the handover must spare the new one."""
    rs = ReplicaStore(tmp_path / "r")
    rs.apply("b", [_msg("h.lab", reset=True, adds=[(1, "http://h.lab/1", 1)], sender="b"),
                   _msg("g.lab", reset=True, adds=[(1, "http://g.lab/1", 1)], sender="b")])
    rs.apply("c", [_msg("h.lab", reset=True, adds=[(5, "http://h.lab/5", 1)], sender="c")])  # c promoted h
    assert rs.drop(["h.lab", "g.lab"], owner="b") == 1
    assert rs.hosts() == {"h.lab": "c"} and [i.url for i in rs.export("h.lab").queue] == ["http://h.lab/5"]
    assert rs.drop(["h.lab"]) == 1 and len(rs) == 0, "without an owner: unconditional, as before"
    rs.close()


# -- a move off a live owner, on a real node ------------------------------------------------------
class MovingPlacement:
    """Preference lists and live agents a test changes epoch by epoch (as a balance move and a
    death would); counts the LiveAgents asks. live None: placement cannot say (it fails)."""

    def __init__(self, lists: dict[str, tuple], live: list | None, epoch: int = 7):
        self.lists, self.live, self.epoch = lists, live, epoch
        self.live_asks = 0

    async def resolve(self, hosts):
        return [HostRoute(h, self.lists[h], 300, self.epoch) for h in hosts]

    async def live_agents(self) -> LiveAgents:
        self.live_asks += 1
        if self.live is None:
            raise Unavailable("consultant: connection refused")
        return LiveAgents(self.epoch, dict(self.live))

    async def close(self) -> None:
        pass


@contextlib.asynccontextmanager
async def moving_node(tmp_path, placement: MovingPlacement):
    """Agent a, not started (its loops are called by the test), holding b's replica of H whose
    queue lags b (b fetched more since); its HandOvers are recorded, not sent."""
    from agent.node import AgentNode
    from agent.settings import load_settings

    s = load_settings(None, {"agent_id": "a", "data_dir": str(tmp_path / "a"), "storage_out.fsync": False})
    node = AgentNode(s, placement=placement)  # type: ignore[arg-type]
    node.tasks.append(asyncio.create_task(node.commit_log.run(0.01)))
    sent: list[tuple[str, list[str], dict]] = []

    async def send(address, states, replica_of=None):
        sent.append((address, [st.host for st in states], dict(replica_of or {})))
        return agent_pb2.HandOverResponse(hosts=len(states))

    node.handoff.send = send  # type: ignore[method-assign]
    node.replicas.apply("b", [_msg(MOVED, reset=True, adds=[(i, f"http://{MOVED}/{i}", 1) for i in (1, 2, 3)],
                                   sender="b")])
    try:
        await node.ownership.reconcile(claim_all=False)  # the steady state: b owns, a backs it up
        assert placement.live_asks == 0, "every replica's owner is listed: nothing to ask"
        yield node, sent
    finally:
        for task in node.tasks:
            task.cancel()
        await asyncio.gather(*node.tasks, return_exceptions=True)


MOVED = "www.s0002.telecom-beijing.lab"
ALL = [A, B, C, D]


async def _new_epoch(node, placement: MovingPlacement, epoch: int, route: tuple, live: list | None) -> None:
    placement.lists, placement.epoch, placement.live = {MOVED: route}, epoch, live
    node.directory.consultant_epoch(epoch)  # as the heartbeat that brings it
    await node.ownership.reconcile(claim_all=False)


@pytest.mark.parametrize("b_is", ["alive", "dead", "unknown"])
def test_a_backup_keeps_a_live_owners_replica_when_a_move_takes_the_host_off_its_list(run, tmp_path, b_is):
    """Chaos, consultant mode, a balance epoch: a host pinned to b moved to c, and c's list (three
    of four agents) does not name b, which lives. Its backup a took "b not in the list" for "b is
    gone" and handed its lagging replica to c as a dead owner's: c fetched at once, 400 ms before
    b's own handover, 5 pages b had fetched a second before (stored twice). Now a asks placement
    who lives: b alive, the copy stays (b hands over, then tells a to drop it); dead, it goes to c
    as before; placement unreachable, taken for dead (today's behaviour), counted."""
    live = {"alive": ALL, "dead": [A, C, D], "unknown": None}[b_is]

    async def go():
        placement = MovingPlacement({MOVED: (B, A)}, ALL)
        async with moving_node(tmp_path, placement) as (node, sent):
            await _new_epoch(node, placement, 8, (C, D, A), live)
            stats = node.ownership.loop_stats
            if b_is == "alive":
                assert sent == [], "a live owner's replica was handed on as a dead owner's"
                assert node.replicas.owner(MOVED) == "b" and stats.replicas_kept_owner_alive == 1
                await node.ownership.reconcile(claim_all=False)
                assert placement.live_asks == 1, "liveness is asked once per epoch"
                # b dies before its handover: at the epoch of its death the copy goes to c.
                await _new_epoch(node, placement, 9, (C, D, A), [A, C, D])
                assert placement.live_asks == 2
            assert sent == [(C[1], [MOVED], {MOVED: "b"})], sent
            assert node.replicas.owner(MOVED) is None, "dropped once c took it"
            assert stats.replica_owner_liveness_unknown == (1 if b_is == "unknown" else 0)

    run(go())


@pytest.mark.parametrize("b_alive", [True, False])
def test_the_new_owner_claims_a_live_owners_host_rather_than_promote_its_lagging_replica(run, tmp_path, b_alive):
    """The same move with a (b's backup) as the new owner and b off the list: a promoted its
    replica and fetched before b's handover came. b alive: a holds the host and claims it from b
    (b's answer is its handover); b dead: promoted, as before."""

    async def go():
        placement = MovingPlacement({MOVED: (B, A)}, ALL)
        async with moving_node(tmp_path, placement) as (node, sent):
            claims: list[tuple[str, ...]] = []
            node.ownership.claims.ask = lambda h, peers: claims.append(tuple(p[0] for p in peers))  # type: ignore
            await _new_epoch(node, placement, 8, (A, C, D), ALL if b_alive else [A, C, D])
            await node.ownership.settle()
            assert sent == []
            if b_alive:
                assert claims == [("b",)] and node.replicas.owner(MOVED) == "b"
                assert not node.ledger.holds(MOVED) and node.ownership.loop_stats.hosts_promoted == 0
            else:
                assert claims == [] and node.ownership.loop_stats.hosts_promoted == 1
                assert node.ledger.holds(MOVED) and node.replicas.owner(MOVED) is None

    run(go())


@pytest.mark.parametrize("b_alive", [True, False])
def test_a_new_owners_replicate_does_not_take_a_live_owners_replica_off_its_backup(run, tmp_path, b_alive):
    """The same move seen from the new owner's replication (chaos storage-writer-kill, balancer
    on: "handed the replicas of 2 hosts of dead owners", 200 ms before the live owner's own
    handover). c, the new owner, claims only from its list, which does not name b: it fetches
    pushed URLs at once and replicates them to a, whose replica of the host is b's. The rule
    "hand the replaced replica to the sender first" (for an owner that died as the host moved)
    gave c b's lagging copy to fetch from. b alive: the host is refused by name and b's copy
    kept; dead: handed to c, then c's message applied, as before."""
    from agent.server import AgentServicer

    async def go():
        placement = MovingPlacement({MOVED: (B, A)}, ALL)
        async with moving_node(tmp_path, placement) as (node, sent):
            placement.lists, placement.epoch = {MOVED: (C, A, D)}, 8
            placement.live = ALL if b_alive else [A, C, D]
            node.directory.consultant_epoch(8)  # learnt, not settled yet: the settle window

            async def batch():
                yield agent_pb2.ReplicateBatch(items=[_msg(MOVED, reset=True, adds=[(1, f"http://{MOVED}/9", 1)],
                                                           sender="c")])

            resp = await AgentServicer(node).Replicate(batch(), None)
            if b_alive:
                assert sent == [] and resp.applied == 0, "b's lagging copy went to c"
                assert [n.host for n in resp.refused] == [MOVED] and "b's" in resp.refused[0].reason
                assert node.replicas.owner(MOVED) == "b"
            else:
                assert sent == [(C[1], [MOVED], {MOVED: "b"})] and resp.applied == 1 and not resp.refused
                assert node.replicas.owner(MOVED) == "c"

    run(go())


# -- the gate -----------------------------------------------------------------------------------
def test_gate_fences_on_lease_and_wakes_what_it_refused():
    woken = []
    g = Gate(woken.append)
    assert not g.allows("x", 1.0), "no lease before the first answered Register"
    g.renew(10.0, 1.0)
    assert woken == ["x"] and g.allows("x", 5.0) and g.lease_ok(9.9)
    assert not g.allows("y", 10.0), "the lease ran out"
    g.renew(20.0, 10.5)
    assert woken == ["x", "y"] and g.stats.lease_ran_out == 1
    g.hold(["z"])
    assert not g.allows("z", 11.0) and g.allows("y", 11.0)
    g.release(["z"])
    assert woken[-1] == "z"
    g.expire()
    assert not g.allows("y", 11.0) and g.stats.lease_lapses == 1
    assert Gate(woken.append, fenced=False).allows("q", 0.0)


def test_gate_dates_the_last_lapse_on_the_wall_clock():
    """lapsed_at: the wall-clock time the lease ended (pages fetched before it may have been
    fetched again elsewhere): this process's start at first, a lapse under way, the last one
    after a renewal, the moment the consultant forgot the agent."""
    wall = [1000.0]
    g = Gate(lambda h: None, wall=lambda: wall[0])
    assert g.lapsed_at(5.0) == 1000.0, "before the first lease: the process's start"
    g.renew(20.0, 5.0, registered=True)            # lease to t=20 on the agent's clock
    wall[0] = 1010.0
    assert g.lapsed_at(15.0) == 1000.0, "the lease holds"
    wall[0] = 1030.0
    assert g.lapsed_at(35.0) == 1015.0, "lapsed at t=20, 15 s ago"
    g.renew(50.0, 35.0)
    wall[0] = 1040.0
    assert g.lapsed_at(45.0) == 1015.0, "renewed: the last lapse stays"
    g.expire()
    assert g.lapsed_at(45.0) == 1040.0, "forgotten by the consultant: now"
    assert Gate(lambda h: None, fenced=False).lapsed_at(1.0) == float("-inf")
    g.renew(40.0, 12.0, registered=True)
    assert not g.allows("y", 12.0), "registered again: closed until ownership looked at its hosts"
    g.hold(["y"])
    g.settled()
    assert not g.allows("y", 12.0) and g.allows("w", 12.0), "the held host waits for its claim, the others go"


# -- the replica store against a model -----------------------------------------------------------
def _msg(host, *, reset=False, drop=False, adds=(), done=(), seen=(), pages=0, sender="a", unshipped=()):
    st = agent_pb2.HostState(host=host, pages=pages, seen=list(seen),
                             queue=[agent_pb2.QueuedUrl(url=u, depth=d, seq=s) for s, u, d in adds])
    return agent_pb2.ReplicateRequest(sender_id=sender, host=host, reset=reset, drop=drop, state=st, done=list(done),
                                      unshipped=list(unshipped))


def test_replica_store_applies_copies_and_deltas_and_survives_a_restart(tmp_path):
    u = [f"http://h.lab/{i}" for i in range(6)]
    r = ReplicaStore(tmp_path / "rep")
    r.apply("a", [_msg("h.lab", reset=True, adds=[(1, u[0], 0), (2, u[1], 1)], seen=[fingerprint(u[5])], pages=3)])
    r.apply("a", [_msg("h.lab", adds=[(3, u[2], 1), (4, u[3], 2)], done=[1, 3], pages=5, unshipped=[4])])
    r.apply("a", [_msg("o.lab", reset=True, adds=[(1, "http://o.lab/", 0)])])
    r.close()
    r = ReplicaStore(tmp_path / "rep")  # persistent across the backup's restart
    st = r.export("h.lab")
    assert [i.url for i in st.queue] == [u[1], u[3]], "queued minus done, breadth-first"
    assert set(st.seen) == {fingerprint(x) for x in (u[0], u[1], u[2], u[3], u[5])}, "a done URL stays seen"
    assert st.crawl is not None and st.crawl.pages == 5
    deferred = r.export("h.lab", defer_unshipped=100.0).queue
    assert [(i.url, i.not_before) for i in deferred] == [(u[1], 0.0), (u[3], 100.0)], \
        "fetched by the owner but not stored: queued, deferred on promotion"
    assert r.hosts() == {"h.lab": "a", "o.lab": "a"}
    r.apply("b", [_msg("o.lab", drop=True, sender="b")])
    assert "o.lab" in r.hosts(), "only the owner of a replica drops it"
    r.apply("a", [_msg("h.lab", reset=True, adds=[(9, u[4], 0)])])
    assert [i.url for i in r.export("h.lab").queue] == [u[4]] and set(r.export("h.lab").seen) == {fingerprint(u[4])}
    r.apply("a", [_msg("o.lab", drop=True)])
    assert r.hosts() == {"h.lab": "a"} and r.export("o.lab").queue == []
    r.close()



def test_stored_check_asks_storage_once_for_what_is_due_together_and_only_for_watched_urls(run):
    """StoredCheck against storage's answers: a watched URL with a completed capture is not
    fetched; one with only a transient status (503), none, or a failed lookup is; an unwatched
    URL costs no call; URLs asked at once go in one Lookup."""
    from agent.crawl.outcome import RETRY_STATUSES
    from agent.crawl.refetch import StoredCheck
    from wancrawl.errors import Unavailable

    held = {"http://h.lab/a": {200}, "http://h.lab/b": {503}, "http://h.lab/c": {503, 301}}
    calls: list[list[str]] = []
    fail = False

    async def lookup(urls):
        calls.append(list(urls))
        if fail:
            raise Unavailable("storage down")
        return {u: held[u] for u in urls if u in held}

    async def go():
        nonlocal fail
        chk = StoredCheck(lookup, RETRY_STATUSES)
        urls = ["http://h.lab/a", "http://h.lab/b", "http://h.lab/c", "http://h.lab/d"]
        chk.watch(urls)
        got = await asyncio.gather(*(chk.stored(u) for u in urls), chk.stored("http://h.lab/unwatched"))
        assert got == [200, 0, 301, 0, 0]  # the completed status (a 2xx first), 0: fetch it
        assert calls == [urls], "one call, for the watched URLs only"
        assert len(chk) == 0 and not await chk.stored("http://h.lab/a"), "asked once: a retry later fetches"
        chk.watch(["http://h.lab/a"])
        fail = True
        assert not await chk.stored("http://h.lab/a"), "storage unreachable: fetch (at least once)"
        assert chk.stats.refetches_avoided == 2 and chk.stats.stored_check_errors == 1

    run(go())


@pytest.mark.parametrize("lapsed", [True, False], ids=["lease-lapsed", "lease-held"])
def test_pages_spooled_before_a_lease_lapse_are_not_stored_again_after_the_new_owner_stored_them(run, tmp_path, lapsed):
    """A paused agent comes back with pages in its spool that the agent which took its hosts
    over has fetched and stored meanwhile. Spooled before its lease lapsed, they are checked at
    storage first: those storage holds complete are dropped, the others (and a 503 the new
    owner got) are sent. With the lease held nothing is asked and everything is sent."""
    from agent.crawl.outcome import RETRY_STATUSES
    from agent.state.shipper import StorageShipper
    from agent.state.spool import Spool
    from storage.client import make_batch
    from storage.testing import FakeStorageClient, fetch_result
    from wancrawl.warcrecords import build_capture

    one_storage: list = []
    new_owner, victim = FakeStorageClient(one_storage), FakeStorageClient(one_storage)
    urls = [f"http://h.lab/{i}" for i in range(4)]
    page = lambda u, agent, status=200: build_capture(fetch_result(u, b"<html>" + u.encode(), agent_id=agent, status=status))  # noqa: E731
    # The new owner stored 0 and 1 while the victim was paused; 2 answered it 503 (not complete).
    run(new_owner.send(make_batch([page(urls[0], "b"), page(urls[1], "b"), page(urls[2], "b", 503)])))
    spool = Spool(tmp_path / "spool", fsync=False)
    spool.put(make_batch([page(u, "a") for u in urls[:3]]))
    spool.put(make_batch([page(urls[3], "a")]))
    # fetch_result's pages were fetched at 1_700_000_000 (+ a little): before or after the lapse.
    shipper = StorageShipper(spool, victim, retry_seconds=1.0, lease_left=lambda now: -1.0 if lapsed else 4.5,
                             lapsed_at=lambda now: 1_700_000_100.0 if lapsed else 1_600_000_000.0, transient=RETRY_STATUSES)
    assert run(shipper.send(max_batches=10)) == 2 and len(spool) == 0
    sent = sorted(c.url for c in victim.captures.values())
    if lapsed:
        assert sent == urls[2:] and shipper.stats.captures_superseded == 2
    else:
        assert sent == urls and shipper.stats.captures_superseded == 0
        assert victim.timeouts == [4.5], "a send within the lease ends with it (a pause mid-send fails it)"

def test_replication_batches_are_the_bytes_protobuf_makes_of_the_same_messages():
    """The replicator joins its host messages' bytes into ReplicateBatch messages itself (each
    message serialized once per round, issue 24). The reference is protobuf's own encoding of
    ReplicateBatch(items=...) for each batch: lengths of one, two and three varint bytes, a drop,
    and the cut at the size limit (in order, every message once, a batch over the limit only
    when one message is)."""
    from agent.ownership.replicator import Wire, batches

    msgs = [agent_pb2.ReplicateRequest(sender_id="a", epoch=7, host=f"h{i}.lab", done=list(range(n)),
                                       state=agent_pb2.HostState(host=f"h{i}.lab", queue=[
                                           agent_pb2.QueuedUrl(url=f"http://h{i}.lab/{j}", seq=j) for j in range(n)]))
            for i, n in enumerate([0, 3, 40, 3000, 1, 700])]
    msgs.append(agent_pb2.ReplicateRequest(sender_id="a", epoch=7, host="gone.lab", drop=True))
    wire = [Wire(m.host, m.drop, m.SerializeToString()) for m in msgs]
    assert max(len(w.data) for w in wire) > 16384 and min(len(w.data) for w in wire) < 128
    for limit in (1 << 20, 20_000, 1):
        out = list(batches(wire, limit))
        got = [agent_pb2.ReplicateBatch.FromString(b) for b in out]
        assert [m for b in got for m in b.items] == msgs
        for b, raw in zip(got, out):
            assert raw == agent_pb2.ReplicateBatch(items=list(b.items)).SerializeToString()
            assert len(raw) <= limit or len(b.items) == 1
    assert len(list(batches(wire))) == 1
    assert len(list(batches(wire, 1))) == len(msgs)
    assert list(batches([])) == []


def test_the_shipper_sends_spool_files_as_they_are_and_parses_only_what_it_must_check(run, tmp_path):
    """Spool files go to storage as their bytes (issue 24: not parsed and serialized again). A
    file this process spooled after the lease's last lapse is sent unparsed; a file found on disk
    at start (an earlier process's: when its pages were fetched is not known) is read and
    checked at storage like any spooled before the lapse."""
    from agent.state.shipper import StorageShipper
    from agent.state.spool import Spool
    from storage.client import make_batch
    from storage.testing import FakeStorageClient, fetch_result
    from wancrawl.v1 import storage_pb2
    from wancrawl.warcrecords import build_capture

    class Recording(FakeStorageClient):
        def __init__(self, group):
            super().__init__(group)
            self.sent: list = []
            self.asked: list[str] = []

        async def send(self, batches, timeout=None):
            self.sent.extend(batches)
            return await super().send(batches, timeout)

        async def lookup(self, urls):
            self.asked.extend(urls)
            return await super().lookup(urls)

    group: list = []
    new_owner, storage = FakeStorageClient(group), Recording(group)
    page = lambda u, agent, at: build_capture(fetch_result(u, b"<html>" + u.encode(), agent_id=agent, at=at))  # noqa: E731
    run(new_owner.send(make_batch([page("http://h.lab/old", "b", 100.0)])))
    spool = Spool(tmp_path / "spool", fsync=False)
    spool.put(make_batch([page("http://h.lab/old", "a", 10.0)]))   # fetched before the lapse at 50
    restarted = Spool(tmp_path / "spool", fsync=False)              # ... and found on disk at start
    path = restarted.put(make_batch([page("http://h.lab/new", "a", 60.0), page("http://h.lab/new2", "a", 61.0)]))
    on_disk = path.read_bytes()
    shipper = StorageShipper(restarted, storage, retry_seconds=1.0, lapsed_at=lambda now: 50.0)
    assert run(shipper.send(max_batches=10)) == 2 and len(restarted) == 0
    assert storage.asked == ["http://h.lab/old"], "only the captures that may be superseded are asked about"
    assert storage.sent[0] == storage_pb2.PageBatch(batch_id=storage.sent[0].batch_id), "the old file, its capture dropped"
    assert storage.sent[1] == on_disk, "spooled after the lapse: the file's bytes as they are"
    assert sorted(c.url for c in storage.captures.values()) == ["http://h.lab/new", "http://h.lab/new2"]
    assert shipper.stats.captures_stored == 2 and shipper.stats.captures_superseded == 1


def test_ledger_merge_drops_what_the_previous_owner_fetched(tmp_path):
    from agent.state.frontier import Frontier
    from agent.ownership.ledger import HostLedger
    from agent.state.seen import SeenSet

    class NoCrawl:
        def import_host(self, host, st): ...
        def export_host(self, host, robots=True): return None
        def drop_host(self, host): ...

    fr, seen = Frontier(tmp_path / "f.sqlite"), SeenSet(tmp_path / "s.sqlite")
    ledger = HostLedger(fr, seen, NoCrawl(), wake=lambda h: None)  # type: ignore[arg-type]
    mine = [Item(f"http://h.lab/{i}", "h.lab", 1) for i in range(4)]  # pushed here while the host was held
    seen.add_new("h.lab", [i.url for i in mine])
    fr.add(mine)
    # The previous owner fetched /0 and /1, still queues /2, never saw /3, and queues /9.
    theirs = HostState("h.lab", [Item("http://h.lab/2", "h.lab", 1), Item("http://h.lab/9", "h.lab", 2)],
                       [fingerprint(f"http://h.lab/{i}") for i in (0, 1, 2, 9)])
    ledger.merge(theirs)
    assert sorted(i.url for i in fr.export_host("h.lab")) == ["http://h.lab/2", "http://h.lab/3", "http://h.lab/9"]
    fr.close()
    seen.close()


def test_ledger_reconcile_leaves_in_flight_items_in_flight(tmp_path):
    """A HandOver or promotion that drops copies the previous owner fetched must not put back in
    the queue an item this agent is fetching right now: it would be fetched, and stored, twice
    (chaos flap, session 12: one agent fetched a page twice 54 ms apart after a promotion and a
    replica's HandOver of the same host)."""
    from agent.state.frontier import Frontier
    from agent.ownership.ledger import HostLedger
    from agent.state.seen import SeenSet

    class NoCrawl:
        def import_host(self, host, st): ...
        def export_host(self, host, robots=True): return None
        def drop_host(self, host): ...

    fr, seen = Frontier(tmp_path / "f.sqlite"), SeenSet(tmp_path / "s.sqlite")
    ledger = HostLedger(fr, seen, NoCrawl(), wake=lambda h: None)  # type: ignore[arg-type]
    mine = [Item(f"http://h.lab/{i}", "h.lab", 1) for i in range(4)]
    seen.add_new("h.lab", [i.url for i in mine])
    fr.add(mine)
    fr.add_pages("h.lab", 5)
    busy = fr.pop("h.lab")
    assert busy is not None and busy.url == "http://h.lab/0"
    # The previous owner never saw /0 (pushed here), fetched /1 (seen, not queued), still queues /2 and /3.
    gone = ledger.reconcile("h.lab", {"http://h.lab/2", "http://h.lab/3"}, {fingerprint(f"http://h.lab/{i}") for i in (1, 2, 3)})
    assert gone == 1
    popped = []
    while (it := fr.pop("h.lab")) is not None:
        popped.append(it.url)
    assert popped == ["http://h.lab/2", "http://h.lab/3"], "the item in flight is not queued again"
    assert fr.done(busy), "and it is still in flight: its fetch's end is recorded"
    assert fr.pages("h.lab") == 5
    fr.close()
    seen.close()



def test_a_handover_into_a_host_already_replicated_reaches_its_backup_whole(run, tmp_path):
    """Issue 23, kill2 with a balance move off the first victim (docs/balance.md, "Stored twice
    after a move at a death"): the new owner held the host for its claim and replicated the URLs
    pushed to it, so its backup was synced; then the dead owner's replica came in as a HandOver
    with the pages that owner had fetched (seen, not queued). Replication deltas carry queued
    URLs and dones, not fingerprints: unless the handover sends the host whole again, the backup
    never learns them, and when the new owner dies too the backup promotes a replica without
    them and stores those pages again. Checked against the owner's own ledger: after the next
    round the backup's replica has seen exactly what the owner has seen."""
    from agent.ownership.handoff import HandOff
    from agent.ownership.ledger import HostLedger
    from agent.ownership.replicator import Replicator
    from agent.state.changes import ChangeLog
    from agent.state.frontier import Frontier
    from agent.state.seen import SeenSet

    class NoCrawl:
        def import_host(self, host, st): ...
        def export_host(self, host, robots=True): return None
        def drop_host(self, host): ...

    class Directory:
        epoch = 7

        def saw_epoch(self, epoch): ...

        async def routes(self, hosts):
            return {h: HostRoute(h, (A, B), 300, 7) for h in hosts}  # this agent a owns it, b backs it up

    backup = ReplicaStore(tmp_path / "b-replicas")

    class Backup:
        async def replicate(self, batches):
            # The replicator sends each batch as its bytes (built once per round).
            n = sum(backup.apply("a", list(agent_pb2.ReplicateBatch.FromString(b).items)) for b in batches)
            return agent_pb2.ReplicateResponse(applied=n)

    class Peers:
        def get(self, address):
            assert address == B[1]
            return Backup()

    fr, seen = Frontier(tmp_path / "f.sqlite", changes=ChangeLog()), SeenSet(tmp_path / "s.sqlite")
    ledger = HostLedger(fr, seen, NoCrawl(), wake=lambda h: None)  # type: ignore[arg-type]
    directory, peers = Directory(), Peers()
    replicator = Replicator("a", fr.changes, ledger, directory, peers, spooled=lambda: 0, shipped=lambda: 0,  # type: ignore[arg-type]
                            interval=60.0, retry_seconds=1.0, max_pending=100_000, clock=lambda: 0.0)

    async def durable(hosts=None):
        fr.flush()
        seen.flush()

    handoff = HandOff("a", ledger, directory, peers, durable=durable, replicate=replicator.sync)  # type: ignore[arg-type]
    u = [f"http://h.lab/{i}" for i in range(5)]

    async def go():
        # Pushed here while the host was held for its claim: the backup gets a full copy of that.
        seen.add_new("h.lab", [u[4]])
        fr.add([Item(u[4], "h.lab", 1)])
        await durable()
        await replicator.round()
        assert {i.url for i in backup.export("h.lab").queue} == {u[4]}
        # The dead owner's replica arrives: it had fetched /0 and /1 and still queued /2.
        st = HostState("h.lab", [Item(u[2], "h.lab", 1)], [fingerprint(x) for x in u[:3]])

        async def parts():
            for part in st.parts():
                yield agent_pb2.HandOverRequest(sender_id="c", epoch=7, host=part.to_proto(), replica_of="d")

        await handoff.receive(parts())
        await replicator.round()

    run(go())
    mine = ledger.export("h.lab")
    replica = backup.export("h.lab")
    assert set(replica.seen) == set(mine.seen) == {fingerprint(x) for x in (u[0], u[1], u[2], u[4])}, \
        "the backup knows what the dead owner fetched: a promotion there does not fetch it again"
    assert {i.url for i in replica.queue} == {i.url for i in mine.queue} == {u[2], u[4]}
    fr.close()
    seen.close()
    backup.close()


# -- real agents on the lab web ------------------------------------------------------------------
@contextlib.contextmanager
def lab_site(seed: int, pages_max: int):
    """The lab web served on loopback: (server thread, web, normal hosts, seeds, truth)."""
    with ServerThread(lab_web(seed=seed, pages_max=pages_max), zero_latency=True) as lab:
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites]
        yield lab, web, hosts, seeds, truth_urls(web, seeds, max_depth=None, allow=hosts)


async def crash(srv) -> None:
    """kill -9, in process: no commit, no deregister, no answer to peers from now on."""
    node = srv.node
    await srv.grpc.stop(0)
    for t in list(node.tasks) + list(node.dispatcher.fetch_tasks) + list(node.dispatcher.bg_tasks):
        t.cancel()
    await asyncio.gather(*node.tasks, *node.dispatcher.fetch_tasks, return_exceptions=True)
    await node.fetcher.close()


def stored_urls(storages) -> list[str]:
    return [c.url for st in storages for c in st.captures.values() if c.status == 200]


def _keys(hosts):
    return {"scope.allowed_domains": hosts, "politeness.delay": 0.15, "replication.interval": 0.05,
            "heartbeat_interval": 0.3}


CONSULTANT = {"lease_seconds": 2.0, "sweep_interval": 0.2}


async def _until(cond, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.05)


crashed: list = []  # (agent id, time) of the crashes of the last run, for failure messages
caps: list = []     # (url, agent id, fetched_at) of the last run


def _crawl_with_crashes(run, tmp_path, crashes: int):
    """Three agents crawl; `crashes` times, the agent that owns the most hosts (after the first:
    the one that promoted the dead one's replicas) dies once its replicas are current.
    Returns (truth, every stored URL, URLs stored by the victims before they died, counters of
    the survivors, the lab's page requests)."""
    with lab_site(seed=5, pages_max=40) as (lab, web, hosts, seeds, truth):

        async def go():
            async with cluster(tmp_path, lab, 3, agent_keys=_keys(hosts), consultant_keys=CONSULTANT) as (cs, client, agents, stores):
                await seed(agents[0].node, seeds)
                alive = list(range(3))
                victims_stored = 0
                crashed.clear()
                for k in range(crashes):
                    nodes = [agents[i].node for i in alive]
                    if k == 0:
                        v = 1
                        await _until(lambda: agents[v].node.status_counters()["pages"] >= 15)
                    else:
                        v = max(alive, key=lambda i: agents[i].node.status_counters()["hosts_promoted"])
                        assert agents[v].node.status_counters()["hosts_promoted"] > 0
                    # Replicas current (every survivor's): "after re-replication". Then the victim's
                    # last moments made deterministic: it stops fetching, its pages reach storage
                    # and one more round tells its backups. (The lag of a victim killed mid-fetch
                    # is bench/chaos.py's to measure, not a unit test's.)
                    await _until(lambda: all(n.replicator.gauges()["replica_unsynced"] == 0 for n in nodes), 20)
                    victim = agents[v].node
                    await victim.dispatcher.stop()
                    victim.commit_log.commit(force=True)
                    await _until(lambda: victim.spool.pages == 0, 10)
                    await victim.replicator.round()
                    victims_stored += len(stored_urls([stores[v]]))
                    crashed.append((agents[v].node.id, agents[v].node.clock()))
                    await crash(agents[v])
                    alive.remove(v)
                    rest = [agents[i].node for i in alive]
                    await _until(lambda: sum(n.status_counters()["hosts_promoted"] for n in rest) > 0, 20)
                rest = [agents[i].node for i in alive]
                await wait_idle(rest, timeout=120)
                caps.clear()
                caps.extend((c.url, c.agent_id, c.fetched_at) for st in stores for c in st.captures.values() if c.status == 200)
                return stored_urls(stores), victims_stored, [n.status_counters() for n in rest]

        stored, victims_stored, counters = run(go())
        requests = [e for e in lab.server.log if e.path != "/robots.txt"]
    return truth, stored, victims_stored, counters, requests


def _check_no_loss_few_repeats(truth, stored, victims_stored):
    got = {canonicalize(u) for u in stored}
    assert truth <= got, f"lost: {sorted(truth - got)[:5]}"
    twice = [u for u, n in collections.Counter(canonicalize(u) for u in stored).items() if n > 1]
    # Without replicas the hosts of a dead agent start from nothing at their backup: every page
    # the victim stored is stored again. With a current replica, none is.
    detail = [(u, sorted((round(t, 2), a) for x, a, t in caps if canonicalize(x) == u)) for u in twice[:5]]
    assert not twice, f"{len(twice)} stored twice of {victims_stored} the victims had stored; crashes {crashed}; e.g. {detail}"


def test_a_dead_owners_hosts_go_on_from_its_replica(run, tmp_path):
    truth, stored, victims_stored, counters, _ = _crawl_with_crashes(run, tmp_path, 1)
    assert victims_stored >= 10
    assert sum(c["hosts_promoted"] for c in counters) > 0
    _check_no_loss_few_repeats(truth, stored, victims_stored)


def test_two_failures_in_a_row_lose_nothing(run, tmp_path):
    truth, stored, victims_stored, counters, _ = _crawl_with_crashes(run, tmp_path, 2)
    assert len(counters) == 1 and counters[0]["hosts_promoted"] > 0
    _check_no_loss_few_repeats(truth, stored, victims_stored)



@pytest.mark.parametrize("check_storage", [True, False], ids=["storage-asked", "not-asked"])
def test_pages_stored_before_their_done_reached_the_backup_are_not_fetched_again(run, tmp_path, check_storage):
    """The window of issue 12: the owner's last pages reached storage, but it died before their
    "done" reached its backups, which hold them as fetched-but-unshipped. The promoted backup
    asks storage before fetching them again (agent/crawl/refetch.py): none is stored twice. Without
    asking (check_storage off), those pages are fetched and stored again: the case can fail."""
    with lab_site(seed=5, pages_max=40) as (lab, web, hosts, seeds, truth):
        keys = {**_keys(hosts), "replication.unshipped_grace": 0.5, "replication.check_storage": check_storage}

        async def go():
            async with cluster(tmp_path, lab, 3, agent_keys=keys, consultant_keys=CONSULTANT) as (cs, client, agents, stores):
                await seed(agents[0].node, seeds)
                victim = agents[1].node
                await _until(lambda: victim.status_counters()["pages"] >= 15)
                await _until(lambda: all(a.node.replicator.gauges()["replica_unsynced"] == 0 for a in agents), 20)
                # Its last moments, in the window's order: replication stops and shipping to
                # storage pauses; the pages it fetches from then on (one at least) are the window's;
                # fetching stops, one round carries them as fetched-but-unshipped, then they reach
                # storage. (With the shipper running, every page could reach storage before that
                # round on a loaded machine, and the case tested nothing.)
                tasks = {t.get_name(): t for t in victim.tasks}
                for name in ("replication", "storage"):
                    tasks[name].cancel()
                await asyncio.gather(tasks["replication"], tasks["storage"], return_exceptions=True)
                await _until(lambda: victim.spool.pages > 0, 20)
                await victim.dispatcher.stop()
                victim.commit_log.commit(force=True)
                await victim.replicator.round()
                in_window = len(victim.replicator._held_done) and sum(len(items) for v in victim.replicator._held_done.values() for _, items in v)
                while len(victim.spool):
                    assert await victim.shipper.send(max_batches=50) > 0, "the fake storage takes every batch"
                await crash(agents[1])
                rest = [agents[0].node, agents[2].node]
                await _until(lambda: sum(n.status_counters()["hosts_promoted"] for n in rest) > 0, 20)
                await wait_idle(rest, timeout=120)
                return stored_urls(stores), in_window, [n.status_counters() for n in rest]

        stored, in_window, counters = run(go())
    got = collections.Counter(canonicalize(u) for u in stored)
    assert truth <= set(got), f"lost: {sorted(truth - set(got))[:5]}"
    twice = sorted(u for u, n in got.items() if n > 1)
    assert in_window > 0, "the victim's last pages were not in the window: the case tests nothing"
    if check_storage:
        assert not twice, f"{len(twice)} stored twice: {twice[:5]}"
        assert sum(c["refetches_avoided"] for c in counters) > 0
    else:
        assert twice, "without asking storage the pages in the window are fetched again"

@pytest.mark.parametrize("cut", ["cancelled", "error", "call-cancelled"])
def test_a_push_is_answered_only_once_its_urls_are_at_the_backup(run, tmp_path, cut):
    """The loss behind the test above (seen as http://www.s0006.unicom-beijing.lab/events/plain-15.html
    lost under load): the replication loop was stopped (cancelled) in the middle of the round a
    push waited on. The round answered the push as if its URLs were at the backup, and the delta
    it was sending had left the replicator's pending changes while the backup still counted as
    current, so no later round sent it. The push's sender forgot the URLs, the owner died, its
    backup promoted a replica without them. Here the backup's first answer after the push never
    comes and the round is cut short (the loop cancelled, or an error in the round): the push
    must not be answered as done, and the next rounds must bring the backup's replica (a real
    ReplicaStore, the reference) to the owner's queue. call-cancelled: the backup's call raises
    CancelledError while the loop is not cancelled (grpc.aio does so for a call it cancelled
    itself): an error of the round, not the loop's end (it was: run catches Exception only, so
    the loop ended and no later push was answered, the 120 s push timeouts of the test above)."""
    from test_peer_guard import A, B, H, URLS, done, make_node

    replica = ReplicaStore(tmp_path / "backup")
    hang = asyncio.Event()   # set: the next Replicate to the backup never answers
    entered = asyncio.Event()

    class Backup:
        async def replicate(self, parts):
            msgs = [m for b in parts for m in agent_pb2.ReplicateBatch.FromString(b).items]
            if hang.is_set():
                hang.clear()
                entered.set()
                if cut == "error":
                    raise RuntimeError("the round breaks (test)")
                if cut == "call-cancelled":
                    raise asyncio.CancelledError()
                await asyncio.Event().wait()  # no answer: the round is cancelled while it waits
            replica.apply("a", msgs)
            return agent_pb2.ReplicateResponse(applied=len(msgs))

    class Pool:
        def get(self, address):
            assert address == B[1]
            return Backup()

    async def go():
        node = make_node(tmp_path, {H: (A, B)})
        node.replicator.peers = Pool()  # type: ignore[assignment]
        node.intake.accept_local([Item(URLS[0], H)])
        node.commit_log.commit(force=True)
        await node.replicator.round()  # the backup has the host whole: synced
        assert [i.url for i in replica.export(H).queue] == [URLS[0]]
        loop = asyncio.create_task(node.replicator.run(), name="replication")
        hang.set()
        push = asyncio.create_task(node.push(7, [agent_pb2.UrlItem(url=URLS[1], depth=1)], route=False))
        await entered.wait()  # the round carrying the push's URL is under way
        if cut == "cancelled":
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            with pytest.raises(Unavailable):
                await push  # its sender keeps the URL and pushes it again
        else:
            # The loop goes on: the next round sends the host whole and answers the push then.
            assert (await push).accepted == 1
            # and later pushes too (bounded: a loop that has ended answers none).
            again = node.push(8, [agent_pb2.UrlItem(url=URLS[2], depth=1)], route=False)
            assert (await asyncio.wait_for(again, 30)).accepted == 1
            assert not loop.done(), "the replication loop ended"
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
        await node.replicator.round()
        owner = sorted(i.url for i in node.frontier.export_host(H))
        assert owner == (URLS[:2] if cut == "cancelled" else URLS[:3])
        assert sorted(i.url for i in replica.export(H).queue) == owner, "the backup's replica lacks what the owner queued"
        assert node.replicator.gauges()["replica_unsynced"] == 0
        await done(node)

    run(go())
    replica.close()


def test_a_host_its_backup_refuses_lags_alone_and_its_pushes_wait(run, tmp_path):
    """Issue 23 (kill2 with balancing on, docs/balance.md "Stored twice after a move at a
    death"): the balancer moved a host off its owner; the backup saw the move first and its peer
    guard refused that host. The whole Replicate stream failed, the owner backed that backup off
    for every host, and a push waiting on the round was answered although its URL was not at the
    backup. Here a real backup node (its AgentServicer, its ReplicaStore the reference) refuses
    one host of the owner's round: the other host's changes are applied, the next round goes to
    that backup at once, and the push of the refused host is answered only once the host left
    the owner by its handover (its URLs went with it to the new owner)."""
    from agent.server import AgentServicer
    from test_peer_guard import A, B, C, H, URLS, done, make_node

    O = "o.lab"
    other = [f"http://{O}/p{i}" for i in range(3)]

    class Context:
        pass

    async def go():
        mine = {H: (A, B), O: (A, B)}      # the owner a's view: b backs both hosts up
        theirs = {H: (A, B), O: (A, B)}    # the backup b's
        a, b = make_node(tmp_path, mine, "a"), make_node(tmp_path, theirs, "b")
        backup = AgentServicer(b)

        class Peer:
            async def replicate(self, parts):
                async def stream():
                    for p in parts:
                        yield agent_pb2.ReplicateBatch.FromString(p)
                return await backup.Replicate(stream(), Context())

        class Pool:
            def get(self, address):
                assert address == B[1]
                return Peer()

        a.replicator.peers = Pool()  # type: ignore[assignment]
        now = [0.0]
        a.replicator.clock = lambda: now[0]  # the refusal's pause, without waiting for it
        both = asyncio.Event()
        waiting: list = []
        barrier = a.replicator.barrier

        async def counted(hosts=None):
            waiting.append(hosts)
            if len(waiting) == 2:
                both.set()
            await barrier(hosts)

        a.intake.replicated = counted  # the barrier intake was attached to (AgentNode._attach), counted
        a.intake.accept_local([Item(URLS[0], H), Item(other[0], O)])
        a.commit_log.commit(force=True)
        await a.replicator.round()
        assert b.replicas is not None
        assert [i.url for i in b.replicas.export(O).queue] == [other[0]] and b.replicas.owner(H) == "a"

        # The balancer moves h.lab to c; the backup learns it first.
        theirs[H] = (C, B)
        b.directory.forget(H)
        push_h = asyncio.create_task(a.push(7, [agent_pb2.UrlItem(url=URLS[1], depth=1)], route=False))
        push_o = asyncio.create_task(a.push(7, [agent_pb2.UrlItem(url=other[1], depth=1)], route=False))
        await both.wait()
        await a.replicator.round()
        assert b.guard.stats.replicate_hosts_refused == 1
        assert sorted(i.url for i in b.replicas.export(O).queue) == sorted(i.url for i in a.frontier.export_host(O)) \
            == other[:2], "the host the backup took is applied"
        assert [i.url for i in b.replicas.export(H).queue] == [URLS[0]], "the refused host is left as it was"
        assert (await push_o).accepted == 1
        assert not push_h.done(), "a push answered while its URL is at no backup"
        assert a.replicator.stats.replica_hosts_refused == 1

        # Not backed off: the next round takes the other host's changes to that backup at once.
        a.intake.accept_local([Item(other[2], O)])
        a.commit_log.commit(force=True)
        await a.replicator.round()
        assert sorted(i.url for i in b.replicas.export(O).queue) == other, "the backup was backed off"
        assert not push_h.done()
        assert b.guard.stats.replicate_hosts_refused == 1, "the refused host sent again at once"
        # retry_seconds later it goes again (whole), and is refused again: the views still differ.
        now[0] += a.replicator.retry_seconds
        await a.replicator.round()
        assert b.guard.stats.replicate_hosts_refused == 2 and not push_h.done()

        # The owner learns the move (the epoch change reaches it) and hands the host to c: the
        # push's URL goes with it, and the next round answers the push.
        mine[H] = (C, B)
        a.directory.forget(H)
        await a.replicator.round()
        assert not push_h.done(), "answered before the host left (its URL is still only here)"
        handed: list = []

        async def accept(address, states, replica_of=None):
            handed.extend(st.host for st in states)
            return agent_pb2.HandOverResponse(hosts=len(states))

        a.handoff.send = accept  # type: ignore[method-assign]
        assert await a.ownership.hand_out(C, [H]) == [H] and handed == [H]
        await a.replicator.round()
        assert (await push_h).accepted == 1
        await done(a)
        await done(b)

    run(go())


def test_an_agent_whose_lease_lapsed_fetches_nothing_until_it_is_renewed(run, tmp_path):
    """The fence: a consultant that stops answering heartbeats (a partition, as the agent sees
    it) stops the agent's fetches within its lease; answers again: the crawl goes on."""
    with lab_site(seed=6, pages_max=30) as (lab, web, hosts, seeds, truth):

        async def go():
            async with cluster(tmp_path, lab, 1, agent_keys=_keys(hosts), consultant_keys={"lease_seconds": 1.0}) as (cs, client, agents, stores):
                node = agents[0].node
                real = node.placement.heartbeat

                async def partitioned(*a, **k):
                    from wancrawl.errors import Unavailable
                    raise Unavailable("partitioned (test)")

                # When the agent sent each request (its own clock): a request sent just before the
                # lapse may reach the lab after it, later still on a loaded machine.
                sent: dict[tuple[str, str], float] = {}
                requests = node.dispatcher.requests
                real_fetch = requests.fetch

                async def fetch(url, host, ip, headers=None):
                    sent[(host, "/" + url.split("/", 3)[3])] = node.clock()  # the latest send of the path
                    return await real_fetch(url, host, ip, headers)

                requests.fetch = fetch  # type: ignore[method-assign]
                await seed(node, seeds)
                await _until(lambda: node.status_counters()["pages"] >= 5)
                node.placement.heartbeat = partitioned  # type: ignore[method-assign]
                await _until(lambda: not node.gate.lease_ok(node.clock()), 5)
                lapsed = node.gate.lease_until
                await asyncio.sleep(0.5)  # a test of absence: nothing may start in this window
                late = [e for e in lab.server.log if lapsed < e.t]
                during = [e for e in late if sent.get((e.host, e.path), lapsed + 1) > lapsed]
                node.placement.heartbeat = real  # type: ignore[method-assign]
                await wait_idle([node], timeout=60)
                return during, node.status_counters()

        during, counters = run(go())
        fetched = {canonicalize(f"http://{e.host}{e.path}") for e in lab.server.log if e.path != "/robots.txt"}
    assert not during, f"{len(during)} requests after the lease lapsed"
    assert counters["fence_refusals"] > 0
    assert {u.replace(f":{lab.port}", "") for u in truth} <= {u.replace(f":{lab.port}", "") for u in fetched}


def test_a_new_host_arriving_once_an_epoch_is_learnt_but_not_yet_settled_is_held(run, tmp_path):
    """A URL of a host this agent holds nothing of, arriving after the directory learnt a new
    epoch but before the settle loop ran for it (a push's own look-up can bring the epoch), is
    held before its first fetch like one inside the settle window: a dead owner's replica of the
    host may be on its way (bench/chaos.py flap stored a root page twice: the new owner fetched it
    10 ms before it took the host's replica from the other backup)."""
    with lab_site(seed=6, pages_max=30) as (lab, web, hosts, seeds, truth):

        async def go():
            async with cluster(tmp_path, lab, 1, agent_keys=_keys(hosts)) as (cs, client, agents, stores):
                node = agents[0].node
                own = node.ownership
                await _until(lambda: node.membership.registered and own._epoch == node.directory.epoch
                             and own._registrations == node.membership.registrations)
                own._settle_until = 0.0  # the settle window of that epoch is over (no waiting it out)
                own.arriving(["before.new.lab"])  # settled, nothing learnt since: not held
                before = node.gate.held("before.new.lab")
                node.directory.consultant_epoch(node.directory.epoch + 1)  # learnt, not settled yet
                own.arriving(["after.new.lab"])
                return before, node.gate.held("after.new.lab")

        before, after = run(go())
    assert (before, after) == (False, True)


def test_without_faults_each_page_is_stored_once(run, tmp_path):
    truth, stored, _, _, requests = _crawl_with_crashes(run, tmp_path, 0)
    got = collections.Counter(canonicalize(u) for u in stored)
    assert truth <= set(got)
    assert [u for u, n in got.items() if n > 1] == []


def test_a_joining_agent_gets_its_hosts_whole_and_nothing_is_fetched_twice(run, tmp_path):
    """Join (REFRESH_TASK): the old owners hand the hosts the new agent now owns over, and the
    new agent fetches none of them before it has their state."""
    from agent.server import create_server as create_agent
    from agent_helpers import agent_config
    from storage.testing import FakeStorageClient

    with lab_site(seed=7, pages_max=40) as (lab, web, hosts, seeds, truth):

        async def go():
            async with cluster(tmp_path, lab, 2, agent_keys=_keys(hosts), consultant_keys=CONSULTANT) as (cs, client, agents, stores):
                await seed(agents[0].node, seeds)
                await _until(lambda: sum(a.node.status_counters()["pages"] for a in agents) >= 40)
                b = web.topology.blocks[8]
                st = FakeStorageClient()
                s = agent_config(tmp_path, f"agent-{b.name}", cs.address, tmp_path / "hosts",
                                 web.topology.agent_address(b.isp, b.city, 0), **{k.replace(".", "__"): v for k, v in _keys(hosts).items()})
                new, _ = create_agent(s, storage=st)
                await new.start()
                try:
                    await wait_idle([a.node for a in agents] + [new.node], timeout=120)
                    return stored_urls(stores + [st]), [a.node.status_counters() for a in agents], new.node.status_counters()
                finally:
                    await new.stop(0)

        stored, old, joined = run(go())
    got = collections.Counter(canonicalize(u) for u in stored)
    assert truth <= set(got), f"lost: {sorted(truth - set(got))[:5]}"
    assert sum(c["hosts_moved_out"] for c in old) > 0 and joined["hosts_handed_in"] > 0, "hosts moved to the new agent"
    assert joined["pages"] > 0
    assert [u for u, n in got.items() if n > 1] == [], "each page stored once across the join"


def test_the_balancer_moves_hosts_off_a_slow_agent_and_each_page_is_stored_once(run, tmp_path):
    """Load balancing (docs/balance.md): one agent fetches each host 20 times slower than the
    others; the consultant's balancer sees its load level in the heartbeats and pins some of its
    hosts to the others; they are handed over whole (as on a join): nothing is lost and no page
    is stored twice."""
    slow = {"politeness.delay": 1.0, "concurrency": 2}
    balance = {**CONSULTANT, "balance.enabled": True, "balance.interval": 0.5, "balance.min_gap_seconds": 1.0,
               "balance.cooldown": 30.0}
    with lab_site(seed=5, pages_max=40) as (lab, web, hosts, seeds, truth):

        async def go():
            keys = {**_keys(hosts), "politeness.delay": 0.05, "load.period": 1.0}
            async with cluster(tmp_path, lab, 3, agent_keys=keys, consultant_keys=balance,
                               per_agent=[{}, slow, {}]) as (cs, client, agents, stores):
                await seed(agents[0].node, seeds)
                balancer = cs.service.balancer
                await _until(lambda: balancer.stats.balance_moves > 0, 60)
                await wait_idle([a.node for a in agents], timeout=120)
                snap = await cs.service.snapshot()
                return stored_urls(stores), [a.node.status_counters() for a in agents], snap, agents[1].node.id

        stored, counters, snap, slow_id = run(go())
    got = collections.Counter(canonicalize(u) for u in stored)
    assert truth <= set(got), f"lost: {sorted(truth - set(got))[:5]}"
    assert [u for u, n in got.items() if n > 1] == [], "each page stored once across the moves"
    assert snap.balanced, "the balancer's overrides are in the state"
    moved_to = {snap.overrides[h] for h in snap.balanced}
    assert slow_id not in moved_to, "hosts went from the slow agent, never to it"
    assert counters[1]["hosts_moved_out"] > 0, "the slow agent handed hosts out"
    assert counters[1]["load_level"] != 0 or counters[1]["work_area"] > 0, "it reported a load level"
    assert sum(c["hosts_handed_in"] for i, c in enumerate(counters) if i != 1) > 0
    assert moved_to and all(a in snap.agents for a in moved_to)


def test_the_owner_and_its_first_backup_dying_at_once_lose_nothing_with_two_backups(run, tmp_path):
    """Issue 21, fault 8: kill -9 of a host's owner and its first backup at the same moment.
    With r = 2 (replication.backups, the default) the second backup holds a replica too and
    promotes it: the crawl equals the lab's truth and nothing the victims stored is stored again.
    (With r = 1 the hosts of both victims start from nothing: pages are lost or fetched again.)"""
    with lab_site(seed=5, pages_max=40) as (lab, web, hosts, seeds, truth):

        async def go():
            keys = {**_keys(hosts), "replication.backups": 2}
            async with cluster(tmp_path, lab, 4, agent_keys=keys, consultant_keys=CONSULTANT) as (cs, client, agents, stores):
                await seed(agents[0].node, seeds)
                owner = agents[1].node
                await _until(lambda: owner.status_counters()["pages"] >= 15)
                await _until(lambda: all(a.node.replicator.gauges()["replica_unsynced"] == 0 for a in agents), 20)
                # The victim's first backup for most of its hosts dies with it.
                routes = await owner.directory.routes(owner.ledger.owned_hosts())
                firsts = collections.Counter(r.agents[1][0] for r in routes.values() if len(r.agents) > 1)
                second = next(i for i, a in enumerate(agents) if a.node.id == firsts.most_common(1)[0][0])
                both = [1, second]
                for i in both:  # their last moments made deterministic, as in _crawl_with_crashes
                    n = agents[i].node
                    await n.dispatcher.stop()
                    n.commit_log.commit(force=True)
                for i in both:
                    n = agents[i].node
                    await _until(lambda n=n: n.spool.pages == 0, 10)
                    await n.replicator.round()
                victims_stored = len(stored_urls([stores[i] for i in both]))
                await asyncio.gather(*(crash(agents[i]) for i in both))
                rest = [a.node for i, a in enumerate(agents) if i not in both]
                await _until(lambda: sum(n.status_counters()["hosts_promoted"] for n in rest) > 0, 20)
                await wait_idle(rest, timeout=120)
                return stored_urls(stores), victims_stored

        stored, victims_stored = run(go())
    assert victims_stored >= 10
    _check_no_loss_few_repeats(truth, stored, victims_stored)


@pytest.mark.parametrize("alive_at_pin", [False, True])
def test_a_host_moved_off_its_owner_as_it_dies_goes_on_from_the_replica(run, tmp_path, alive_at_pin):
    """Issue 23's lost URL (docs/balance.md, "On by default?"): a host is pinned away from its
    owner (an operator's override here; the balancer writes the same) a moment after the owner
    was killed, before its lease ran out. The new owner's claim to the dead agent is never
    answered, and no backup promotes (the host has a live owner): the dead owner's backup hands
    its replica to the new owner (settle_action's `hand_replica`). Four agents and r = 2, so the
    new owner is not one of the host's backups. Checked against the lab's truth: nothing lost.
    alive_at_pin: the pin comes first, the owner learns it and runs a replication round of the
    host, and dies before its handover (its ownership loop stopped here): its backups must not
    have dropped their copies in that round."""
    with lab_site(seed=5, pages_max=40) as (lab, web, hosts, seeds, truth):

        async def go():
            async with cluster(tmp_path, lab, 4, agent_keys={**_keys(hosts), "replication.backups": 2},
                               consultant_keys=CONSULTANT) as (cs, client, agents, stores):
                await seed(agents[0].node, seeds)
                owner = agents[1].node
                await _until(lambda: owner.status_counters()["pages"] >= 10)
                await _until(lambda: all(a.node.replicator.gauges()["replica_unsynced"] == 0 for a in agents), 20)
                # The owner's last moments made deterministic, as in _crawl_with_crashes.
                await owner.dispatcher.stop()
                owner.commit_log.commit(force=True)
                await _until(lambda: owner.spool.pages == 0, 10)
                await owner.replicator.round()
                # The host with most left to fetch, and the agent outside its preference list.
                routes = await owner.directory.routes(owner.ledger.owned_hosts())
                mine = [h for h, r in routes.items() if r.agents[0][0] == owner.id and len(r.agents) == 3]
                host = max(mine, key=owner.ledger.queued)
                queued = {i.url for i in owner.ledger.export(host).queue}
                assert len(queued) >= 3, "the victim still has pages of the host to fetch"
                listed = {a[0] for a in routes[host].agents}
                new = next(a for a in agents if a.node.id not in listed)
                backups = [a for a in agents if a.node.id in listed and a.node is not owner]
                assert all(b.node.replicas.owner(host) == owner.id for b in backups), "the replicas are current"
                if alive_at_pin:
                    loop = next(t for t in owner.tasks if t.get_name() == "ownership")
                    loop.cancel()  # it never hands the host over
                    await asyncio.gather(loop, return_exceptions=True)
                    epoch = await client.set_override(host, new.node.id)
                    await _until(lambda: owner.directory.epoch >= epoch, 10)
                    owner.directory.forget(host)  # its next look-up is of the new epoch
                    owner.replicator.sync([host])  # a change of the host while its handover waits
                    await owner.replicator.round()
                    await crash(agents[1])
                else:
                    await crash(agents[1])
                    await client.set_override(host, new.node.id)  # the owner's lease has not run out yet
                rest = [a.node for a in agents if a.node is not owner]
                await _until(lambda: owner.id not in {a.agent_id for a in cs.service.directory.records}, 20)
                await wait_idle(rest, timeout=120)
                return stored_urls(stores), queued, [n.status_counters() for n in rest], new.node.status_counters()

        stored, queued, counters, new = run(go())
    got = collections.Counter(canonicalize(u) for u in stored)
    lost = truth - set(got)
    assert not lost, (f"lost {len(lost)} (of them {len(lost & {canonicalize(u) for u in queued})} queued at the dead "
                      f"owner): {sorted(lost)[:5]}")
    # Without the dead owner's history the new owner crawls the host again from what reaches it:
    # every page the dead owner stored that it finds again is stored twice.
    twice = sorted(u for u, n in got.items() if n > 1)
    assert not twice, f"{len(twice)} stored twice: {twice[:5]}"
    assert sum(c.get("replicas_handed_out", 0) for c in counters) > 0 and new.get("replicas_handed_in", 0) > 0, \
        "the new owner took the host from the dead owner's backup"


def test_a_handed_host_is_closed_until_its_whole_stream_is_in(tmp_path, run):
    """A HandOver's first part queues the host's URLs (and wakes it) before the copies the sender
    fetched are dropped and before a dead owner's queue is watched at storage: a fetch in that gap
    stored a page twice (chaos flap, session 13). The host stays closed at the gate until the
    stream is in, reconciled and watched; a host held before (a claim) stays held."""
    from agent.ownership.handoff import HandOff
    from agent.ownership.ledger import HostLedger
    from agent.state.frontier import Frontier
    from agent.state.seen import SeenSet

    class NoCrawl:
        def import_host(self, host, st): ...
        def export_host(self, host, robots=True): return None
        def drop_host(self, host): ...

    class Directory:
        epoch = 7

        def saw_epoch(self, epoch): ...

    fr, seen = Frontier(tmp_path / "f.sqlite"), SeenSet(tmp_path / "s.sqlite")
    gate = Gate(lambda h: None, fenced=False)
    gate.hold(["claimed.lab"])
    watched: list[tuple[list[str], bool]] = []
    ledger = HostLedger(fr, seen, NoCrawl(), wake=lambda h: None)  # type: ignore[arg-type]

    async def durable(hosts=None):
        fr.flush()
        seen.flush()

    handoff = HandOff("a", ledger, Directory(), None, durable=durable, gate=gate,  # type: ignore[arg-type]
                      may_be_stored=lambda urls: watched.append((sorted(urls), gate.held("h.lab"))))
    u = [f"http://h.lab/{i}" for i in range(3)]
    st = HostState("h.lab", [Item(u[1], "h.lab", 1), Item(u[2], "h.lab", 1)], [fingerprint(x) for x in u])
    other = HostState("claimed.lab", [Item("http://claimed.lab/", "claimed.lab", 0)], [fingerprint("http://claimed.lab/")])
    during: list[bool] = []

    async def parts():
        for s in (st, other):
            for i, part in enumerate(s.parts()):
                if i:  # the host's first part is in: queued here, and closed
                    during.append(fr.queue_len(s.host) > 0 and not gate.allows(s.host, 0.0))
                yield agent_pb2.HandOverRequest(sender_id="c", epoch=7, host=part.to_proto(), replica_of="d")

    run(handoff.receive(parts()))
    assert during == [True, True], "queued but not fetchable while the stream goes on"
    assert watched == [(sorted([u[1], u[2], "http://claimed.lab/"]), True)], "watched at storage before the gate opens"
    assert gate.allows("h.lab", 0.0), "open once the stream is in"
    assert gate.held("claimed.lab"), "a host held for its claim before the stream stays held"
    fr.close()
    seen.close()
