"""The Placement contract (agent/placement/port.py): one suite, run over every implementation.

Every Placement implementation must pass this file: the consultant (agent/placement/consultant.py:
one consultant, or replicas of it over one state database) and the consultant-less Kademlia
overlay (agent/placement/kademlia/: N overlay nodes exchanging their messages in memory on one
fake clock; `settle` runs ping rounds until every node knows every other and all answer one
epoch, `detect` one ping round past dead_after). Each is a factory in IMPLEMENTATIONS that opens a
world of N agents (see `World` below for what a factory provides).

The rules, as the consultant keeps them today:

1. Join: `register` answers a Registration with a positive lease and an epoch; a new member
   bumps the epoch. Epochs never go backwards: every epoch any agent is answered (register,
   heartbeat, deregister, resolve), taken in the order the answers came, is non-decreasing
   (after `settle`, see below). Every test checks this on its way out.
2. Resolve answers one HostRoute per host asked, in the order asked. A placed host's route
   names the host in canonical form (lower case, no trailing dot: "Example.COM." is answered as
   "example.com"), has no error and a positive TTL, and lists min(preference_length, live
   agents) distinct agents, owner first, each a live registered agent with the address it
   registered with.
3. Agreement: once settled, every agent is given the same preference list for a host, at the
   same epoch.
4. Spread: over 200 hosts and 4 agents every agent owns some hosts, and none owns most of them.
5. Leave: `deregister` bumps the epoch; the agent is in no preference list; the hosts it owned
   are owned by their first backup; every other host keeps its owner, and the surviving agents
   of a list keep their order. Deregistering again is harmless (no error, no new epoch).
6. Join moves little: hosts that change owner move only to the newcomer; a list changes only
   by the newcomer entering it.
7. A heartbeat, or a deregister, naming an agent the placement does not know (never
   registered, or gone) raises wancrawl.errors.NotFound; the agent then registers again.
8. Bad hosts: a host that is not a host name ("", "bad host!", "a..b", a name over 253
   characters) gets a route with `error` set (naming its index: "hosts[i]: ..."), no agents,
   and the host echoed as asked, while the other hosts of the batch are answered as usual. A
   request that cannot be answered host by host raises wancrawl.errors.InvalidArgument: an
   empty list, or a host string over 300 characters (wancrawl.checks.MAX_HOST; a reply would
   echo it).
9. Crash: an agent that stops heartbeating loses its lease: the epoch grows, it leaves every
   preference list and its first backups own its hosts. When it comes back (a heartbeat, or a
   new registration if the heartbeat says NotFound) it owns them again.
10. Who lives: `live_agents` names every live registered agent with the address it registered
   with, and no other (not one that left, not one that crashed once that is noticed), at the
   current epoch. A live agent missing from a host's list (a list names at most
   preference_length agents) is still in it: ownership takes "not listed" for "dead" only when
   `live_agents` agrees (agent/ownership/settle.py).

Not (yet) in the contract, as the consultant answers them: a resolve while no agent is
registered (FailedPrecondition "no live agents", for the whole request), a resolve by an agent
that is not registered (answered like any other), re-registering with unchanged details (no new
epoch).

Determinism: no test sleeps or reads the wall clock. A world has a fake clock where time
matters (lease expiry) and a `settle` hook that returns once every agent's placement has seen
every change made so far (the consultant: each replica reloads its state now rather than at its
next sync; an overlay: until its routing converges).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest
from consultant_helpers import settings_for

from agent.placement.consultant import consultant_placement
from agent.placement.kademlia.delegation import EMPTY, Announce
from agent.placement.kademlia.overlay import Overlay
from agent.placement.kademlia.placement import KademliaPlacement
from agent.placement.port import HostRoute, LiveAgents, Placement, Registration
from agent.settings import AgentSettings, KademliaSettings
from consultant.server import ConsultantServer
from consultant.service import ConsultantService
from wancrawl import errors
from wancrawl.kademlia import xorspace
from wancrawl.kademlia.table import Contact
from wancrawl.v1 import common_pb2

HOSTS = [f"www.site{i}.example" for i in range(200)]


# -- what an implementation provides --------------------------------------------------------------


class Backend(Protocol):
    """What a factory yields for N agents. Everything but `placements` is for the tests only.

    placements[i] is agent i's own Placement (not yet registered); addresses[i] the address it
    registers with (agent ids are agent-0...agent-N-1). preference_length is the length of a
    full preference list (owner + backups)."""

    placements: list[Placement]
    addresses: list[str]
    preference_length: int

    async def settle(self) -> None:
        """Return once every agent's placement has seen every change made so far."""

    async def crash(self, agent_id: str) -> None:
        """The agent dies: from now on it does nothing (an overlay node stops answering)."""

    async def pass_lease(self) -> None:
        """More than one lease's time passes (on a fake clock)."""

    async def detect(self) -> None:
        """Whatever notices silent agents runs once (the consultant: its lease sweep)."""

    async def revive(self, agent_id: str) -> None:
        """A crashed agent's process is back (its placement usable again)."""


Factory = Callable[[Path, int], contextlib.AbstractAsyncContextManager[Backend]]


# -- the consultant ---------------------------------------------------------------------------


class FakeClock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class ConsultantBackend:
    servers: list[ConsultantServer]
    placements: list[Placement]
    addresses: list[str]
    clock: FakeClock
    crashed: set[str] = field(default_factory=set)

    @property
    def preference_length(self) -> int:
        return self.servers[0].settings.preference_length

    async def settle(self) -> None:
        # Every write already reloads the replica that took it; the others would at their next
        # sync (sync_interval, set out of reach here): reload them now.
        for s in self.servers:
            await s.service.refresh()

    async def crash(self, agent_id: str) -> None:
        self.crashed.add(agent_id)  # a crashed agent simply stops heartbeating

    async def pass_lease(self) -> None:
        self.clock.now += self.servers[0].settings.lease_seconds + 1.0

    async def detect(self) -> None:
        # One round of the consultant's lease sweep (ConsultantService._sweep_loop, whose
        # interval is set out of reach here), on the fake clock.
        svc = self.servers[0].service
        expired, _epoch = await svc._run(svc.store.expire, svc.clock())
        assert sorted(expired) == sorted(self.crashed), "harness: only the crashed agents lapse"
        self.crashed.clear()
        await self.settle()

    async def revive(self, agent_id: str) -> None:
        pass  # its client was never closed


@contextlib.asynccontextmanager
async def consultant_backend(tmp_path: Path, n: int, *, replicas: int = 1, **keys):
    """N agents, each with its own client made by consultant_placement (as an agent makes it),
    against `replicas` consultants sharing one state database on one fake clock; agent i talks
    to replica i % replicas. The background sweep and sync never run (intervals out of reach):
    `detect` and `settle` do their work when a test asks."""
    clock = FakeClock()
    keys = {"sweep_interval": 3600.0, "sync_interval": 3600.0, **keys}
    servers: list[ConsultantServer] = []
    placements: list[Placement] = []
    try:
        for _ in range(replicas):
            s = settings_for(tmp_path, **keys)  # the same state_url for every replica
            server = ConsultantServer(s, ConsultantService(s, clock=clock))
            servers.append(server)
            await server.start()
        for i in range(n):
            target = servers[i % replicas].address
            placements.append(consultant_placement(AgentSettings(agent_id=f"agent-{i}", consultant=target)))
        addresses = [f"127.0.0.{10 + i}:{7000 + i}" for i in range(n)]
        yield ConsultantBackend(servers, placements, addresses, clock)
    finally:
        for p in placements:
            await p.close()
        for server in servers:
            await server.stop(0)


# -- the Kademlia overlay (agent/placement/kademlia/) ---------------------------------------------


class MemoryNet:
    """The overlay's messages between in-process nodes: a crashed node does not answer, and a
    node answers a call for another id with its own contact (as TLS would refuse it)."""

    def __init__(self) -> None:
        self.nodes: dict[str, Overlay] = {}
        self.crashed: set[str] = set()

    def _at(self, address: str) -> Overlay:
        node = self.nodes.get(address)
        if node is None or node.me.agent_id in self.crashed:
            raise errors.Unavailable(f"{address} does not answer")
        return node

    async def ping(self, to: Contact, me: Contact, epoch: int, said: Announce = EMPTY) -> tuple[Contact, int, Announce]:
        return await self.bootstrap_ping(to.address, me, epoch, said)

    async def bootstrap_ping(self, address: str, me: Contact, epoch: int,
                             said: Announce = EMPTY) -> tuple[Contact, int, Announce]:
        node = self._at(address)
        if node.left:
            raise errors.FailedPrecondition("left")
        await node.heard_from(me, epoch, said)
        return node.me, node.epoch, node.balancing.announce()

    async def find_node(self, to: Contact, me: Contact, targets: list[int], count: int, epoch: int):
        node = self._at(to.address)
        await node.heard_from(me, epoch)
        return node.find(targets, count), node.epoch

    async def leave(self, to: Contact, me: Contact) -> None:
        self._at(to.address).left_by(me)

    async def close(self) -> None:
        pass


@dataclass
class KademliaBackend:
    net: MemoryNet
    placements: list[Placement]
    addresses: list[str]
    clock: FakeClock
    preference_length: int = 3

    def _live(self) -> list[Overlay]:
        return [o for o in self.net.nodes.values() if o.joined and o.me.agent_id not in self.net.crashed]

    async def _drain(self) -> None:
        for _ in range(5):  # the ping-backs that admit callers run as tasks
            await asyncio.sleep(0)

    async def settle(self) -> None:
        """Ping rounds until every live node knows every other and all answer one epoch."""
        for _ in range(20):
            for o in self._live():
                await o.ping_round()
            await self._drain()
            live = self._live()
            if (len({o.epoch for o in live}) <= 1
                    and all(len(o.table) == len(live) - 1 for o in live)):
                return
        raise AssertionError("the overlay did not settle")

    async def crash(self, agent_id: str) -> None:
        self.net.crashed.add(agent_id)

    async def pass_lease(self) -> None:
        self.clock.now += KademliaSettings().dead_after + 1.0

    async def detect(self) -> None:
        for o in self._live():
            await o.ping_round()  # silent past dead_after: declared dead
        await self.settle()

    async def revive(self, agent_id: str) -> None:
        self.net.crashed.discard(agent_id)


@contextlib.asynccontextmanager
async def kademlia_backend(tmp_path: Path, n: int):
    """N overlay nodes over MemoryNet on one fake clock; agent 0 is every other's bootstrap.
    The ping rounds run only when the harness (or an agent's heartbeat) runs them."""
    clock = FakeClock()
    net = MemoryNet()
    addresses = [f"127.0.0.{10 + i}:{7000 + i}" for i in range(n)]
    placements: list[Placement] = []
    for i in range(n):
        aid = f"agent-{i}"
        settings = KademliaSettings(bootstrap=(addresses[0],))
        overlay = Overlay(Contact(xorspace.insecure_node_id(aid), aid, addresses[i]), settings, net, clock=clock)
        net.nodes[addresses[i]] = overlay
        placements.append(KademliaPlacement(overlay, backups=2))
    yield KademliaBackend(net, placements, addresses, clock)


IMPLEMENTATIONS: dict[str, Factory] = {
    "kademlia": kademlia_backend,
    "consultant": consultant_backend,
    # Two replicas over one state (SQLite here; PostgreSQL in production): agreement between
    # agents asking different replicas is then more than one process agreeing with itself.
    "consultant-replicas": lambda tmp_path, n: consultant_backend(tmp_path, n, replicas=2),
}


# -- the world the tests see -------------------------------------------------------------------


@dataclass
class Agent:
    """One agent: calls its own placement and logs every epoch it is answered."""

    id: str
    address: str
    placement: Placement
    log: list[tuple[str, str, int]]
    registered: bool = False

    async def register(self) -> Registration:
        r = await self.placement.register(self.id, self.address)
        self.log.append((self.id, "register", r.epoch))
        self.registered = True
        return r

    async def heartbeat(self) -> int:
        try:
            epoch = await self.placement.heartbeat(self.id, common_pb2.LoadReport())
        except errors.NotFound:
            self.registered = False
            raise
        self.log.append((self.id, "heartbeat", epoch))
        return epoch

    async def deregister(self) -> int:
        epoch = await self.placement.deregister(self.id)
        self.log.append((self.id, "deregister", epoch))
        self.registered = False
        return epoch

    async def resolve(self, hosts: list[str]) -> list[HostRoute]:
        routes = await self.placement.resolve(hosts)
        self.log.extend((self.id, "resolve", r.epoch) for r in routes)
        return routes

    async def live_agents(self) -> LiveAgents:
        live = await self.placement.live_agents()
        self.log.append((self.id, "live_agents", live.epoch))
        return live


@dataclass
class World:
    backend: Backend
    agents: list[Agent]
    log: list[tuple[str, str, int]]

    def live(self) -> dict[str, str]:
        """agent_id -> address of the agents registered now (the test's own account)."""
        return {a.id: a.address for a in self.agents if a.registered}

    async def settle(self) -> None:
        await self.backend.settle()

    async def crash(self, agent: Agent) -> None:
        """The agent dies; a lease later, the others still heartbeating, the placement notices."""
        await self.backend.crash(agent.id)
        agent.registered = False
        await self.backend.pass_lease()
        for a in self.agents:
            if a.registered:
                await a.heartbeat()
        await self.backend.detect()
        await self.settle()


def epochs_never_go_back(log: list[tuple[str, str, int]]) -> None:
    for (a1, op1, e1), (a2, op2, e2) in itertools.pairwise(log):
        assert e2 >= e1, f"epoch went back: {a1} {op1} answered {e1}, then {a2} {op2} answered {e2}"


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def world(request, tmp_path):
    """world(n): an async context manager giving a World of n agents (none registered yet)."""
    factory = IMPLEMENTATIONS[request.param]

    @contextlib.asynccontextmanager
    async def open_world(n: int):
        async with factory(tmp_path, n) as backend:
            log: list[tuple[str, str, int]] = []
            agents = [Agent(f"agent-{i}", backend.addresses[i], p, log) for i, p in enumerate(backend.placements)]
            w = World(backend, agents, log)
            yield w
            epochs_never_go_back(log)  # rule 1, for every test that got this far

    return open_world


async def join_all(w: World, agents: list[Agent]) -> int:
    epoch = 0
    for a in agents:
        epoch = (await a.register()).epoch
    await w.settle()
    return epoch


def ids(route: HostRoute) -> list[str]:
    return [agent_id for agent_id, _ in route.agents]


def check_routes(w: World, asked: list[str], routes: list[HostRoute], expect_hosts: list[str]) -> None:
    """Rule 2, against the test's own account of who is registered where."""
    live = w.live()
    assert [r.host for r in routes] == expect_hosts
    for r in routes:
        assert r.error == "" and r.ttl > 0
        assert len(r.agents) == min(w.backend.preference_length, len(live)), r
        assert len(set(ids(r))) == len(r.agents), f"an agent twice in {r}"
        for agent_id, address in r.agents:
            assert live.get(agent_id) == address, f"{agent_id}@{address} in {r.host}'s list is not a live agent there"
        assert r.owner == r.agents[0]


# -- the contract ------------------------------------------------------------------------------


def test_register_gives_a_lease_and_epochs_never_go_back(run, world):
    async def go():
        async with world(3) as w:
            a, b, c = w.agents
            seen = []
            for agent in (a, b, c):
                r = await agent.register()
                assert isinstance(r, Registration) and r.lease_seconds > 0 and r.epoch > 0
                seen.append(r.epoch)
            assert seen[0] < seen[1] < seen[2], "every newcomer is a new epoch"
            await w.settle()
            hb = [await x.heartbeat() for x in (a, b, c)]
            assert hb == [seen[2]] * 3, "a heartbeat answers the current epoch"
            [route] = await b.resolve(["example.com"])
            assert route.epoch == seen[2]
            left = await b.deregister()
            assert left > seen[2]
            await w.settle()
            assert await a.heartbeat() == left and await c.heartbeat() == left
            assert {r.epoch for r in await c.resolve(HOSTS[:5])} == {left}
            back = await b.register()
            assert back.epoch > left and back.lease_seconds > 0
            await w.settle()
            assert {r.epoch for r in await a.resolve(HOSTS[:5])} == {back.epoch}
            assert len(w.log) == 3 + 3 + 1 + 1 + 2 + 5 + 1 + 5

    run(go())


def test_resolve_answers_each_host_in_order_with_distinct_live_agents(run, world):
    async def go():
        async with world(4) as w:
            await join_all(w, w.agents)
            asked = ["Example.COM.", "www.a.example", "b.example", "www.a.example", *HOSTS[:50]]
            expect = ["example.com", "www.a.example", "b.example", "www.a.example", *HOSTS[:50]]
            routes = await w.agents[3].resolve(asked)
            check_routes(w, asked, routes, expect)
            assert routes[1].agents == routes[3].agents, "one host, one answer"
            [single] = await w.agents[1].resolve(["example.com"])
            assert single.agents == routes[0].agents, "the canonical name is the same host"
            # Fewer live agents than a full list: every live agent, once.
            for a in w.agents[2:4]:
                await a.deregister()
            await w.settle()
            routes = await w.agents[0].resolve(HOSTS[:20])
            check_routes(w, HOSTS[:20], routes, HOSTS[:20])
            assert all(sorted(ids(r)) == ["agent-0", "agent-1"] for r in routes)

    run(go())


def test_every_agent_is_given_the_same_lists_at_the_same_epoch(run, world):
    async def go():
        async with world(4) as w:
            await join_all(w, w.agents)
            for stage in ("all joined", "one left"):
                if stage == "one left":
                    await w.agents[3].deregister()
                    await w.settle()
                askers = [a for a in w.agents if a.registered]
                answers = [await a.resolve(HOSTS) for a in askers]
                epochs = {r.epoch for routes in answers for r in routes}
                assert len(epochs) == 1, f"{stage}: answers at epochs {epochs}"
                first = [r.agents for r in answers[0]]
                for a, routes in zip(askers[1:], answers[1:]):
                    assert [r.agents for r in routes] == first, f"{stage}: {a.id} disagrees with agent-0"
            assert "agent-3" not in {i for r in answers[0] for i in ids(r)}

    run(go())


def test_every_agent_owns_some_hosts(run, world):
    async def go():
        async with world(4) as w:
            await join_all(w, w.agents)
            routes = await w.agents[0].resolve(HOSTS)
            owned = collections.Counter(r.owner[0] for r in routes)
            backing = collections.Counter(i for r in routes for i in ids(r)[1:])
            for a in w.agents:
                assert owned[a.id] > 0, f"{a.id} owns none of {len(HOSTS)} hosts: {owned}"
                assert backing[a.id] > 0, f"{a.id} backs up no host: {backing}"
            assert max(owned.values()) <= 0.75 * len(HOSTS), owned

    run(go())


def test_leave_hands_each_host_to_its_first_backup_and_moves_nothing_else(run, world):
    async def go():
        async with world(4) as w:
            epoch = await join_all(w, w.agents)
            leaver = w.agents[1]
            before = await w.agents[0].resolve(HOSTS)
            assert sum(r.owner[0] == leaver.id for r in before) > 0, "the test needs hosts to move"
            left = await leaver.deregister()
            assert left > epoch
            await w.settle()
            assert await leaver.deregister() == left, "leaving twice is harmless"
            for asker in (w.agents[0], w.agents[2], w.agents[3]):
                after = await asker.resolve(HOSTS)
                check_routes(w, HOSTS, after, HOSTS)
                assert {r.epoch for r in after} == {left}
                for b, a in zip(before, after):
                    assert leaver.id not in ids(a)
                    if b.owner[0] == leaver.id:
                        assert a.owner == b.agents[1], f"{b.host}: its backup {b.agents[1]} should own it, not {a.owner}"
                    else:
                        assert a.owner == b.owner, f"{b.host} moved from {b.owner} though its owner stayed"
                    survivors = [x for x in b.agents if x[0] != leaver.id]
                    assert list(a.agents[:len(survivors)]) == survivors, f"{b.host}: the survivors' order changed"

    run(go())


def test_join_moves_hosts_only_to_the_newcomer(run, world):
    async def go():
        async with world(4) as w:
            epoch = await join_all(w, w.agents[:3])
            before = await w.agents[0].resolve(HOSTS)
            newcomer = w.agents[3]
            r = await newcomer.register()
            assert r.epoch > epoch
            await w.settle()
            after = await w.agents[1].resolve(HOSTS)
            check_routes(w, HOSTS, after, HOSTS)
            assert {x.epoch for x in after} == {r.epoch}
            moved = 0
            for b, a in zip(before, after):
                if a.owner != b.owner:
                    assert a.owner == (newcomer.id, newcomer.address), f"{b.host} moved to {a.owner}, not to the newcomer"
                    moved += 1
                others = [x for x in a.agents if x[0] != newcomer.id]
                assert others == list(b.agents[:len(others)]), f"{b.host}: the list changed beyond the newcomer entering it"
            assert moved > 0, "the newcomer took no host"
            assert [x.agents for x in await newcomer.resolve(HOSTS)] == [x.agents for x in after]

    run(go())


def test_unknown_agents_are_not_found_and_may_register_again(run, world):
    async def go():
        async with world(3) as w:
            a, b, stranger = w.agents
            epoch = await join_all(w, [a, b])
            with pytest.raises(errors.NotFound):
                await stranger.heartbeat()
            with pytest.raises(errors.NotFound):
                await stranger.deregister()
            await b.deregister()
            await w.settle()
            with pytest.raises(errors.NotFound):
                await b.heartbeat()  # gone: it must register again
            for agent in (stranger, b):
                r = await agent.register()
                assert r.epoch > epoch
                epoch = r.epoch
                await w.settle()
                assert await agent.heartbeat() == epoch
            routes = await a.resolve(HOSTS)
            check_routes(w, HOSTS, routes, HOSTS)
            assert {r.owner[0] for r in routes} == {"agent-0", "agent-1", "agent-2"}

    run(go())


def test_bad_hosts_get_an_error_each_and_unanswerable_requests_are_refused(run, world):
    async def go():
        async with world(3) as w:
            await join_all(w, w.agents)
            too_long = ".".join(["a" * 63] * 4)  # 255 characters of valid labels
            asked = ["good.example", "", "bad host!", "a..b", too_long, "OK.example"]
            routes = await w.agents[0].resolve(asked)
            assert len(routes) == len(asked)
            good = [routes[0], routes[5]]
            check_routes(w, ["good.example", "OK.example"], good, ["good.example", "ok.example"])
            for i in (1, 2, 3, 4):
                r = routes[i]
                assert r.error.startswith(f"hosts[{i}]: "), r
                assert r.agents == () and r.owner is None
                assert r.host == asked[i], "a bad host is echoed as asked"
            assert routes[1].error == "hosts[1]: empty host name"
            assert "longer than 253" in routes[4].error
            # The good hosts get the answer they get alone.
            assert [r.agents for r in await w.agents[1].resolve(["good.example", "ok.example"])] == [r.agents for r in good]
            # What cannot be answered host by host is refused whole.
            with pytest.raises(errors.InvalidArgument):
                await w.agents[0].resolve([])
            with pytest.raises(errors.InvalidArgument, match="at most 300"):
                await w.agents[0].resolve(["good.example", "x" * 301])
            assert len(await w.agents[2].resolve(["still.example"])) == 1

    run(go())


def test_a_crashed_agent_lapses_and_its_backups_take_over_until_it_returns(run, world):
    async def go():
        async with world(4) as w:
            epoch = await join_all(w, w.agents)
            victim = w.agents[2]
            before = await w.agents[0].resolve(HOSTS)
            assert sum(r.owner[0] == victim.id for r in before) > 0, "the test needs hosts to move"
            await w.crash(victim)
            for asker in (w.agents[0], w.agents[3]):
                after = await asker.resolve(HOSTS)
                check_routes(w, HOSTS, after, HOSTS)
                assert after[0].epoch > epoch
                for b, a in zip(before, after):
                    assert victim.id not in ids(a)
                    expected = b.agents[1] if b.owner[0] == victim.id else b.owner
                    assert a.owner == expected, f"{b.host}: owner {a.owner}, expected {expected}"
            lapsed = after[0].epoch
            # It comes back: a heartbeat does it, or a registration when the heartbeat says it
            # is not known any more.
            await w.backend.revive(victim.id)
            try:
                back = await victim.heartbeat()
                victim.registered = True
            except errors.NotFound:
                back = (await victim.register()).epoch
            assert back > lapsed
            await w.settle()
            again = await w.agents[1].resolve(HOSTS)
            check_routes(w, HOSTS, again, HOSTS)
            assert [r.agents for r in again] == [r.agents for r in before], "the same membership, the same lists"

    run(go())


def test_live_agents_names_every_live_agent_listed_or_not(run, world):
    async def go():
        async with world(5) as w:
            epoch = await join_all(w, w.agents)
            for a in w.agents:
                live = await a.live_agents()
                assert (live.agents, live.epoch) == (w.live(), epoch), f"{a.id}'s answer"
            # Five agents, lists of three: a live agent is missing from some host's list, and
            # live_agents still names it.
            routes = await w.agents[0].resolve(HOSTS[:20])
            assert any(set(w.live()) - set(ids(r)) for r in routes), "the test needs an agent off a list"
            leaver, victim = w.agents[1], w.agents[3]
            left = await leaver.deregister()
            await w.settle()
            live = await w.agents[0].live_agents()
            assert (live.agents, live.epoch) == (w.live(), left) and leaver.id not in live.agents
            await w.crash(victim)
            for a in (w.agents[0], w.agents[2], w.agents[4]):
                live = await a.live_agents()
                [route] = await a.resolve(["example.com"])
                assert (live.agents, live.epoch) == (w.live(), route.epoch), f"{a.id} after {victim.id}'s crash"
            assert victim.id not in w.live()

    run(go())
