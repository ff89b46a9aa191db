"""Ownership on the state-moving RPCs (issue 21, docs/security.md): a peer's HandOver is taken
only by the host's owner and only from a holder it expects the host from; a Replicate only from
the host's owner to its backups; operator flags only from operators.

The pure rules are checked case by case; then a real agent node (fake placement) is sent each
hostile message of the issue and must keep its state: the URLs the attacker marks as seen are
still fetched, the replica the attacker tries to replace is unchanged."""

from __future__ import annotations

import asyncio

import pytest

from agent.ownership.guard import handover_refusal, replicate_refusal
from agent.server import AgentServicer
from agent.settings import load_settings
from agent.state.frontier import Item
from agent.state.seen import fingerprint
from agent.node import AgentNode
from consultant.client import HostRoute
from wancrawl.v1 import agent_pb2

A, B, C, D = ("a", "127.0.0.1:1"), ("b", "127.0.0.1:2"), ("c", "127.0.0.1:3"), ("d", "127.0.0.1:4")
H = "h.lab"


def route(*agents):
    return HostRoute(H, tuple(agents), 300, 7)


# -- the rules -----------------------------------------------------------------------------------
# (route, sender, settling here, replica owner here, promoted from) -> taken?
HANDOVER = [
    ((A, B), "b", True, None, None, True),      # a join: the old owner (now first backup) hands over while this agent settles
    ((A, B), "b", False, None, None, False),    # no epoch change lately, nothing held: no handover expected
    ((A, B, C), "c", True, None, None, True),   # a balancer's move: the natural owner is lower in the list
    ((A, B), "c", True, None, None, False),     # a live agent of no place in the list, even while settling
    ((A, B), "c", False, "c", None, True),      # a drain: the leaver whose replica this agent keeps
    ((A, B), "c", False, None, "c", True),      # ... or promoted within the settle window
    ((A, B), "c", True, "b", "d", False),       # gone from the list, never this agent's replica source
    ((B, A), "c", True, "c", None, False),      # this agent does not own the host
    ((B, A), "b", True, None, None, False),     # the owner handing its own host to a backup
    ((A, B), "a", True, None, None, False),     # from itself
    # Issue 23: b moved the host to this agent as b died; after b's death (epoch change, so
    # settling) c, b's backup, hands b's replica over (HandOver marked replica_of): c is in the list.
    ((A, C, D), "c", True, None, None, True),
    ((A, C, D), "c", False, None, None, False),  # ... not long after the settle window
    ((A, C), "d", True, None, None, False),      # a stranger claiming to carry a dead owner's replica
]


@pytest.mark.parametrize("agents, sender, settling, replica_owner, promoted_from, taken", HANDOVER)
def test_handover_rule(agents, sender, settling, replica_owner, promoted_from, taken):
    why = handover_refusal("a", sender, route(*agents), settling=settling, replica_owner=replica_owner,
                           promoted_from=promoted_from)
    assert (why is None) == taken, why
    assert handover_refusal("a", "b", None, settling=True, replica_owner=None, promoted_from=None), \
        "placement cannot say: refused (the sender keeps the host)"


# (route, sender, drop, replica owner here) -> applied?
REPLICATE = [
    ((B, A), "b", False, None, True),      # the owner to its first backup
    ((B, C, A), "b", False, "b", True),    # ... to a later backup
    ((B, A), "c", False, "b", False),      # not the owner: would replace the owner's replica
    ((C, A), "b", False, "b", False),      # the old owner after the host moved on
    ((B, C), "b", False, None, False),     # this agent is not a backup
    ((B, A), "b", True, "b", True),        # DELETE_BACKUP from the replica's owner
    ((C, A), "b", True, "b", True),        # ... even after the host moved (the old owner tidies up)
    ((B, A), "c", True, "b", False),       # a drop from anyone else
    ((B, A), "c", True, None, True),       # nothing here to drop: harmless
]


@pytest.mark.parametrize("agents, sender, drop, replica_owner, applied", REPLICATE)
def test_replicate_rule(agents, sender, drop, replica_owner, applied):
    why = replicate_refusal("a", sender, route(*agents), drop=drop, replica_owner=replica_owner)
    assert (why is None) == applied, why
    # Placement unreachable: the replica's own owner goes on, nobody else starts.
    assert replicate_refusal("a", "b", None, drop=False, replica_owner="b") is None
    assert replicate_refusal("a", "c", None, drop=False, replica_owner="b") is not None
    assert replicate_refusal("a", "c", None, drop=False, replica_owner=None) is not None


# -- a real node ---------------------------------------------------------------------------------
class Placement:
    """Fixed preference lists (host -> agents); counts the look-ups."""

    def __init__(self, lists: dict[str, tuple]):
        self.lists = lists
        self.asked = 0

    async def resolve(self, hosts):
        self.asked += 1
        return [HostRoute(h, self.lists.get(h, (A, B)), 300, 7) for h in hosts]

    async def close(self) -> None:
        pass


def make_node(tmp_path, lists, agent_id: str = "a") -> AgentNode:
    """A node that is not started, but commits (a handover is answered once durable)."""
    s = load_settings(None, {"agent_id": agent_id, "data_dir": str(tmp_path / agent_id), "storage_out.fsync": False})
    node = AgentNode(s, placement=Placement(lists))  # type: ignore[arg-type]
    node.tasks.append(asyncio.create_task(node.commit_log.run(0.01)))
    return node


def handover(sender: str, host: str, *, queue=(), seen=(), **fields):
    st = agent_pb2.HostState(host=host, queue=[agent_pb2.QueuedUrl(url=u) for u in queue], seen=list(seen), **fields)
    return agent_pb2.HandOverRequest(sender_id=sender, epoch=7, host=st)


async def done(node: AgentNode) -> None:
    for task in node.tasks:
        task.cancel()
    await asyncio.gather(*node.tasks, return_exceptions=True)


async def stream(*msgs):
    for m in msgs:
        yield m


URLS = [f"http://{H}/p{i}" for i in range(20)]


def test_a_handover_from_an_agent_that_never_owned_the_host_is_refused(tmp_path, run):
    """Attack 2: a live agent with no place in the host's list sends the owner the host's URLs
    as seen, and a huge backoff and crawl delay. The owner keeps crawling every URL."""

    async def go():
        node = make_node(tmp_path, {H: (A, B)})
        node.intake.accept_local([Item(u, H) for u in URLS])
        node.commit_log.commit(force=True)
        resp = await node.handoff.receive(stream(handover("c", H, seen=[fingerprint(u) for u in URLS],
                                                          backoff_until=1e300, crawl_delay=1e6)))
        node.commit_log.commit(force=True)
        assert [n.host for n in resp.refused] == [H] and resp.hosts == 0
        assert "c" in resp.refused[0].reason
        # Independent reference: what the node would fetch next is every URL it was given.
        popped = []
        while (it := node.frontier.pop(H)) is not None:
            popped.append(it.url)
        assert sorted(popped) == sorted(URLS)
        crawl = node.dispatcher.export_host(H)
        assert crawl.backoff_until < 1e300 and (crawl.crawl_delay or 0) < 1e6
        await done(node)

    run(go())


def test_a_handover_of_a_host_the_receiver_does_not_own_is_refused(tmp_path, run):
    """Attack 2, third agent: a host's queue sent to an agent that does not own it would have two
    agents fetch one host."""

    async def go():
        node = make_node(tmp_path, {H: (B, C)})
        resp = await node.handoff.receive(stream(handover("b", H, queue=URLS)))
        assert [n.host for n in resp.refused] == [H]
        assert len(node.frontier) == 0 and node.frontier.pop(H) is None
        await done(node)

    run(go())


def test_the_previous_owner_hands_over_and_is_taken(tmp_path, run):
    """The legitimate case beside the attacks: after a join the old owner (now the first
    backup) hands the host over whole while the new owner takes it over, and is queued."""

    async def go():
        node = make_node(tmp_path, {H: (A, B), "o.lab": (A, C), "q.lab": (A, B)})
        await node.directory.routes([H])             # placement's epoch learnt...
        await node.ownership.reconcile(claim_all=False)  # ... and settled: a steady state
        # No epoch change lately and nothing held: even the first backup's handover is refused
        # (a compromised backup cannot feed a host's history to its owner in steady state).
        resp = await node.handoff.receive(stream(handover("b", "q.lab", seen=[fingerprint("http://q.lab/")])))
        assert [n.host for n in resp.refused] == ["q.lab"] and "http://q.lab/" not in node.seen
        node.gate.hold([H, "o.lab"])  # taking them over: claims under way (Ownership holds them so)
        resp = await node.handoff.receive(stream(handover("b", H, queue=URLS[:5], seen=[fingerprint(URLS[9])]),
                                                 handover("b", "o.lab", queue=["http://o.lab/"])))
        assert resp.hosts == 1 and resp.queued == 5 and [n.host for n in resp.refused] == ["o.lab"]
        assert URLS[9] in node.seen and URLS[0] in node.seen
        await done(node)

    run(go())


def test_replicate_from_a_non_owner_leaves_the_replica_as_the_owner_made_it(tmp_path, run):
    """Attack 3: a non-owner's Replicate would replace the host's replica on its backup (the
    newest sender won), and the backup would promote the attacker's copy when the owner dies."""

    class Context:
        pass

    def batch(sender, *, drop=False, urls=()):
        st = agent_pb2.HostState(host=H, queue=[agent_pb2.QueuedUrl(url=u, seq=i + 1) for i, u in enumerate(urls)])
        return agent_pb2.ReplicateBatch(items=[agent_pb2.ReplicateRequest(sender_id=sender, epoch=7, host=H, reset=not drop,
                                                                           drop=drop, state=st)])

    async def go():
        node = make_node(tmp_path, {H: (B, A)})
        servicer = AgentServicer(node)
        ok = await servicer.Replicate(stream(batch("b", urls=URLS[:3])), Context())
        assert ok.applied == 1
        for hostile in (batch("c", urls=URLS[10:11]), batch("c", drop=True)):
            resp = await servicer.Replicate(stream(hostile), Context())
            assert resp.applied == 0 and [n.host for n in resp.refused] == [H] and "c" in resp.refused[0].reason
        assert node.guard.stats.replicate_hosts_refused == 2
        assert node.replicas is not None and node.replicas.owner(H) == "b"
        assert [i.url for i in node.replicas.export(H).queue] == URLS[:3]
        await done(node)

    run(go())


def test_a_replicate_stream_decides_each_host_at_its_first_message(tmp_path, run):
    """A Replicate stream refuses hosts by name and applies the rest (issue 23: one host whose
    move the sender had not seen failed the whole stream). A host's full copy may span stream
    messages: a host taken at its first message is taken for the whole stream, one refused stays
    refused, even when placement changes under the stream; otherwise the backup would keep half
    a copy (the reset applied and the rest refused, or a later part without its reset)."""

    class Context:
        pass

    def msg(host, urls, *, reset=False, first_seq=1):
        st = agent_pb2.HostState(host=host, queue=[agent_pb2.QueuedUrl(url=u, seq=first_seq + i) for i, u in enumerate(urls)])
        return agent_pb2.ReplicateRequest(sender_id="b", epoch=7, host=host, reset=reset, state=st)

    other = [f"http://o.lab/p{i}" for i in range(4)]

    async def go():
        lists = {H: (B, A), "o.lab": (C, A)}  # b owns h.lab (this agent backs it up), c owns o.lab
        node = make_node(tmp_path, lists)
        servicer = AgentServicer(node)

        async def batches():
            yield agent_pb2.ReplicateBatch(items=[msg(H, URLS[:2], reset=True), msg("o.lab", other[:2], reset=True)])
            # Both hosts move while the stream is under way, and this agent learns it.
            lists[H], lists["o.lab"] = (C, A), (B, A)
            node.directory.forget(H)
            node.directory.forget("o.lab")
            yield agent_pb2.ReplicateBatch(items=[msg(H, URLS[2:4], first_seq=3), msg("o.lab", other[2:], first_seq=3)])

        resp = await servicer.Replicate(batches(), Context())
        assert [n.host for n in resp.refused] == ["o.lab"] and "b does not own it" in resp.refused[0].reason
        assert resp.applied == 2
        assert node.replicas is not None
        assert [i.url for i in node.replicas.export(H).queue] == URLS[:4], "the whole copy of the host taken first"
        assert node.replicas.owner("o.lab") is None, "nothing of the host refused first"
        await done(node)

    run(go())


def test_a_host_its_owner_refuses_leaves_as_plain_urls_and_is_not_left_held(tmp_path, run):
    """The sender's side of a refusal (seen in bench/chaos.py's consultant-stop: a host handed
    out and refused stayed held for ever, never fetched, the agent never idle). The host leaves
    this agent, its queued URLs go to the owner as pushes, and the gate holds nothing."""

    async def go():
        node = make_node(tmp_path, {H: (B, A)})  # b owns the host now; this agent ("a") holds it
        node.intake.accept_local([Item(u, H) for u in URLS[:4]])
        node.commit_log.commit(force=True)
        assert node.ledger.holds(H)

        async def refuse(address, states, replica_of=None):
            return agent_pb2.HandOverResponse(refused=[agent_pb2.HostNote(host=st.host, reason="not now") for st in states])

        node.handoff.send = refuse  # type: ignore[method-assign]
        assert await node.ownership.hand_out(B, [H]) == []
        assert not node.ledger.holds(H) and not node.gate.held(H)
        assert node.routing.pending() == 4, "the host's URLs are owed to its owner"
        await done(node)

    run(go())


def test_a_leaving_agent_does_not_take_its_backups_replicas_away(tmp_path, run):
    """A drain replicates, deregisters, then hands its hosts over. A replication round after
    the deregistration sees routes that no longer name it and would tell its backups to drop
    their replicas (DELETE_BACKUP); the new owner would then refuse the leaver's handover (it
    keeps no replica of the leaver: chaos drain stored 213 pages twice). Stopped, it sends none."""

    async def go():
        lists = {H: (A, B, C)}
        node = make_node(tmp_path, lists)
        node.intake.accept_local([Item(u, H) for u in URLS[:3]])
        node.commit_log.commit(force=True)
        sent: list[tuple[str, list]] = []

        async def record(backup, msgs, fulls):
            sent.append((backup[0], msgs))
            for h in fulls:
                node.replicator._synced.setdefault(h, set()).add(backup)

        node.replicator._send = record  # type: ignore[method-assign]
        await node.replicator.round()
        assert sorted(b for b, _ in sent) == ["b", "c"], "a full copy to each of r = 2 backups"
        lists[H] = (B, C)                    # this agent deregistered: not in the list any more
        node.directory.forget(H)
        node.replicator.stop()
        node.replicator.sync([H])
        sent.clear()
        await node.replicator.round()
        assert sent == [], "no DELETE_BACKUP from a leaving agent"
        await done(node)

    run(go())


# -- issue 36 item 4: what a compromised backup's HandOver can do inside a settle window ---------
# The sender is the host's first backup while the owner takes the host over (held for claims):
# the guard takes the HandOver (a join's old owner looks exactly so), so the limits below are on
# what the state may do, not on who sends it.

async def compromised_backup_node(tmp_path) -> AgentNode:
    """A node that owns H and crawls it steadily (queued, not held for a takeover), then learns
    a new epoch (any change: a balancer's move elsewhere), which opens its settle window."""
    node = make_node(tmp_path, {H: (A, B)})
    await node.directory.routes([H])
    await node.ownership.reconcile(claim_all=False)  # settled: a steady state
    node.seen.add_new(H, URLS)
    node.frontier.add([Item(u, H) for u in URLS])
    node.commit_log.commit(force=True)
    node.directory.consultant_epoch(8)  # placement's news: a new epoch, not settled here yet
    assert not node.gate.held(H) and node.ownership.settling(H)
    return node


def test_a_backups_seen_set_never_erases_the_receivers_queue(tmp_path, run):
    """The HandOver's `seen` = the fingerprints of every URL the owner has queued, no queue:
    before, reconcile dropped all of them (the host erased, never requested). Now they stay
    queued, wait the grace, and storage is asked before each is fetched."""

    async def go():
        node = await compromised_backup_node(tmp_path)
        watched: list[str] = []
        node.handoff.may_be_stored = watched.extend
        resp = await node.handoff.receive(stream(handover("b", H, seen=[fingerprint(u) for u in URLS])))
        node.commit_log.commit(force=True)
        assert resp.hosts == 1 and not resp.refused  # taken: the limit is on what it may do
        queued = sorted(i.url for i in node.frontier.export_host(H))
        assert queued == sorted(URLS), "nothing the owner queued is erased"
        assert sorted(watched) == sorted(URLS), "the URLs the sender says it did are checked at storage first"
        grace = node.handoff.defer_done
        assert all(i.not_before <= node.clock() + grace for i in node.frontier.export_host(H)), "a grace, no more"
        await done(node)

    run(go())


def test_a_backups_backoff_is_bounded_by_the_receivers_max_backoff(tmp_path, run):
    """backoff_until = 9e10 (inside the field's bound, 1e11) parked the host silently."""

    async def go():
        node = await compromised_backup_node(tmp_path)
        before = node.clock()
        resp = await node.handoff.receive(stream(handover("b", H, backoff_until=9e10, backoff_level=40)))
        assert resp.hosts == 1
        until, _level = node.dispatcher.politeness.backoff_state(H)
        assert until <= node.clock() + node.s.politeness.max_backoff
        assert until >= before  # it is taken, within the bound: a real backoff carries over
        await done(node)

    run(go())


def test_a_backups_crawl_delay_is_what_the_receiver_reads_in_robots_txt(tmp_path, run):
    """crawl_delay = 1e6 held the host's pages past the end of the crawl. The delay is the
    receiver's own reading of the robots.txt rules: none handed, none here: its default."""

    async def go():
        node = await compromised_backup_node(tmp_path)
        pol = node.dispatcher.politeness
        resp = await node.handoff.receive(stream(handover("b", H, crawl_delay=1e6)))
        assert resp.hosts == 1
        assert pol.delay(H) == pol.default_delay
        # With robots.txt handed over, its Crawl-delay (within max_crawl_delay) is what applies,
        # and its expiry is at most the receiver's own robots TTL from now.
        robots = agent_pb2.RobotsState(origin=f"http://{H}", status=200, body=b"User-agent: *\nCrawl-delay: 3\n",
                                       expires=9e10, fetched_ok=1.0)
        await node.handoff.receive(stream(handover("b", H, crawl_delay=1e6, robots=[robots])))
        assert pol.delay(H) == max(3.0, pol.default_delay)
        st = node.dispatcher.robots.export(f"http://{H}")
        assert st is not None and st.expires <= node.clock() + node.s.robots.ttl
        await done(node)

    run(go())


def test_the_settle_window_is_per_host(tmp_path, run):
    """Issue 36: any epoch change (a balancer's move elsewhere) made every host of the receiver
    "settling" for 2 x lease. Now, once the change is settled here, a host crawled here since
    before it is steady: a backup's HandOver of it is refused. A host the change moved here
    (held for a takeover) and a host new here are still taken from the agent below in its list."""

    async def go():
        node = await compromised_backup_node(tmp_path)  # H crawled here; epoch 8 learnt, not settled
        node.membership.registered = True  # so the settle loop takes the new epoch (as a running agent)
        node.ownership._registrations = node.membership.registrations
        node.placement.lists.update({"moved.lab": (A, B), "new.lab": (A, B)})
        node.seen.add_new("moved.lab", ["http://moved.lab/"])
        node.frontier.add([Item("http://moved.lab/", "moved.lab")])
        node.commit_log.commit(force=True)
        node.ownership.arriving(["new.lab"])  # nothing of it here: arriving holds only unknown hosts
        await node.ownership.step()  # the epoch change's pass: opens the window
        assert node.ownership.settling("new.lab") and not node.ownership.settling(H)
        node.gate.hold(["moved.lab"])
        node.ownership._moving_in(["moved.lab"], node.clock())  # taken over: held for its claim
        resp = await node.handoff.receive(stream(handover("b", H, seen=[fingerprint(u) for u in URLS]),
                                                 handover("b", "moved.lab", queue=["http://moved.lab/a"]),
                                                 handover("b", "other.lab", queue=["http://other.lab/"])))
        assert [n.host for n in resp.refused] == [H], "the steady host alone is refused"
        assert sorted(i.url for i in node.frontier.export_host(H)) == sorted(URLS)
        assert resp.hosts == 2
        await done(node)

    run(go())
