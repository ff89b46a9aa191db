"""Two consultants sharing one PostgreSQL database agree; PostgreSQL state also survives restarts."""

from __future__ import annotations

import asyncio

import pytest

from wancrawl.v1 import common_pb2

from consultant_helpers import register_n, running, settings_for

pytestmark = pytest.mark.postgres


async def _until(pred, timeout=5.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if await pred():
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.parametrize("strategy", ["hash", "xor"])
def test_two_replicas_on_one_postgres_give_the_same_answers(run, tmp_path, pg_url, strategy):
    hosts = [f"h{i}.example.net" for i in range(500)]

    async def go():
        sa = settings_for(tmp_path / "a", state_url=pg_url, strategy=strategy, sync_interval=0.1, lease_seconds=2.0, sweep_interval=0.2)
        sb = settings_for(tmp_path / "b", state_url=pg_url, strategy=strategy, sync_interval=0.1, lease_seconds=2.0, sweep_interval=0.2)
        async with running(sa) as (srv_a, a), running(sb) as (srv_b, b):
            await register_n(a, 3, "left")   # registered on replica A
            await register_n(b, 3, "right")  # registered on replica B
            epoch = (await a.list_agents()).epoch
            assert await _until(lambda: _epoch_is(b, epoch)) and await _until(lambda: _epoch_is(a, epoch))
            ra, rb = await a.resolve(hosts), await b.resolve(hosts)
            assert [r.agents for r in ra] == [r.agents for r in rb]
            assert ra[0].epoch == rb[0].epoch == epoch
            assert len({r.owner[0] for r in ra}) == 6
            # A departure through B is seen by A; only that agent's hosts move.
            e2 = await b.deregister("left-1")
            assert await _until(lambda: _epoch_is(a, e2))
            after = await a.resolve(hosts)
            assert all(x.owner == y.owner or y.owner[0] == "left-1" for x, y in zip(after, ra))
            # Leases expire once, whichever replica sweeps: one epoch bump for the lot.
            for _ in range(40):
                for agent in ("left-0", "right-0", "right-1", "right-2"):
                    await a.heartbeat(agent, common_pb2.LoadReport())
                await asyncio.sleep(0.1)
                if [x.agent_id for x in (await b.list_agents()).agents] == ["left-0", "right-0", "right-1", "right-2"]:
                    break
            assert [x.agent_id for x in (await b.list_agents()).agents] == ["left-0", "right-0", "right-1", "right-2"]
            e3 = (await a.list_agents()).epoch
            assert e3 == e2 + 1
            assert await _until(lambda: _same(a, b, hosts))

    run(go())


async def _epoch_is(client, epoch):
    return (await client.resolve(["probe.example"]))[0].epoch == epoch


async def _same(a, b, hosts):
    ra, rb = await a.resolve(hosts), await b.resolve(hosts)
    return [r.agents for r in ra] == [r.agents for r in rb]


def test_postgres_state_survives_a_restart(run, tmp_path, pg_url):
    async def go():
        s = settings_for(tmp_path, state_url=pg_url)
        async with running(s) as (srv, c):
            await register_n(c, 2)
            epoch = (await c.list_agents()).epoch
        async with running(s) as (srv, c):
            listed = await c.list_agents()
            assert listed.epoch == epoch and [a.agent_id for a in listed.agents] == ["agent-0", "agent-1"]

    run(go())


def test_an_agent_whose_first_consultant_dies_keeps_its_lease_and_crawls_on_through_the_second(run, tmp_path, pg_url):
    """Two replicas over one PostgreSQL; two agents list both, A first. A dies mid-crawl: every
    call goes to B from then on, no lease lapses (no re-registration, no settle, no fence), and
    the crawl ends with every reachable page stored."""
    from agent.server import create_server as create_agent
    from lab.testing import ServerThread
    from storage.testing import FakeStorageClient

    from agent_helpers import agent_config, lab_web, normal_hosts, seed, truth_urls, wait_idle

    web = lab_web(seed=11, pages_max=30)
    with ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[:6]]
        truth = truth_urls(web, seeds, max_depth=None, allow=hosts)
        hosts_file = tmp_path / "hosts"
        hosts_file.write_text(web.topology.hosts_file())

        async def go():
            keys = dict(state_url=pg_url, sync_interval=0.1, lease_seconds=3.0, sweep_interval=0.2, dns__hosts_file=str(hosts_file))
            sa, sb = settings_for(tmp_path / "a", **keys), settings_for(tmp_path / "b", **keys)
            async with running(sa) as (srv_a, a), running(sb) as (srv_b, b):
                agents, stores, one_storage = [], [], []
                blocks = web.topology.blocks
                try:
                    for i in range(2):
                        blk = blocks[(i * 4) % len(blocks)]
                        s = agent_config(tmp_path, f"agent-{blk.name}", "", hosts_file, web.topology.agent_address(blk.isp, blk.city, 0),
                                         consultants=[srv_a.address, srv_b.address], heartbeat_interval=0.3,
                                         **{"scope.allowed_domains": hosts, "politeness.delay": 0.1})
                        stores.append(FakeStorageClient(one_storage))
                        srv, _ = create_agent(s, storage=stores[-1])
                        await srv.start()
                        agents.append(srv)
                    nodes = [x.node for x in agents]
                    await seed(nodes[0], seeds)
                    while sum(n.status_counters()["pages"] for n in nodes) < 10:
                        await asyncio.sleep(0.05)
                    lapses = [n.gate.lapsed_at(n.clock()) for n in nodes]
                    await srv_a.stop(0)  # the replica every agent was using
                    # At least two leases' worth of heartbeats answered by B alone.
                    rpcs = [n.membership.stats.consultant_rpcs for n in nodes]
                    while not all(n.membership.stats.consultant_rpcs >= r + 20 for n, r in zip(nodes, rpcs)):
                        await asyncio.sleep(0.05)
                    await wait_idle(nodes)
                    listed = {x.agent_id for x in (await b.list_agents()).agents}
                    return ([n.gate.lapsed_at(n.clock()) for n in nodes], lapses, [n.membership.registrations for n in nodes],
                            [n.gate.stats.lease_lapses + n.gate.stats.lease_ran_out for n in nodes], [n.placement.replicas.stats.as_dict() for n in nodes],
                            listed, {c.url for st in stores for c in st.captures.values()}, {n.id for n in nodes})
                finally:
                    for srv in agents:
                        await srv.stop(0)

        lapsed_after, lapsed_before, registrations, lease_lapses, counters, listed, stored, ids = run(go())
        assert lapsed_after == lapsed_before, "no lease lapsed through the failover"
        assert registrations == [1, 1] and lease_lapses == [0, 0], "registered once, never forgotten"
        assert all(c["failovers"] >= 1 and c["all_failed"] == 0 for c in counters), counters
        assert listed == ids, "both agents alive at the second replica"
        assert stored >= truth, sorted(truth - stored)[:5]
