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
