"""The consultant over gRPC: membership and leases, epochs, Resolve, Explain, errors, persistence."""

from __future__ import annotations

import asyncio
import time

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from consultant.client import ConsultantClient
from consultant.service import build_partitioner, strategy_fingerprint
from consultant.settings import load_settings
from wancrawl import errors, grpcutil
from wancrawl.v1 import common_pb2, consultant_pb2 as pb

from consultant_helpers import register_n, running, settings_for


def test_register_heartbeat_deregister_bump_epoch_only_on_change(run, tmp_path):
    async def go():
        async with running(settings_for(tmp_path)) as (server, c):
            e0 = (await c.list_agents()).epoch
            r1 = await c.register("a1", "127.0.0.11:7001")
            assert r1.epoch == e0 + 1 and r1.lease_seconds == 15.0
            # Registering again with the same details is not a change.
            assert (await c.register("a1", "127.0.0.11:7001")).epoch == r1.epoch
            assert await c.heartbeat("a1", common_pb2.LoadReport(queue_length=5)) == r1.epoch
            # A new address is an assignment change.
            r2 = await c.register("a1", "127.0.0.11:7002")
            assert r2.epoch == r1.epoch + 1
            agents = (await c.list_agents()).agents
            assert [(a.agent_id, a.address, a.state) for a in agents] == [("a1", "127.0.0.11:7002", pb.AGENT_STATE_ALIVE)]
            assert agents[0].load.queue_length == 5
            e3 = await c.deregister("a1")
            assert e3 == r2.epoch + 1
            assert (await c.list_agents()).agents == []
            assert [a.state for a in (await c.list_agents(include_dead=True)).agents] == [pb.AGENT_STATE_LEFT]
            with pytest.raises(errors.NotFound):
                await c.heartbeat("a1", common_pb2.LoadReport())

    run(go())


def test_lease_expiry_marks_dead_and_backups_take_over(run, tmp_path):
    async def go():
        s = settings_for(tmp_path, lease_seconds=0.6, sweep_interval=0.1)
        async with running(s) as (server, c):
            await register_n(c, 3)
            hosts = [f"h{i}.example.com" for i in range(300)]
            before = await c.resolve(hosts)
            epoch = before[0].epoch
            # Keep agent-0 and agent-1 alive; agent-2 goes silent.
            for _ in range(12):
                await c.heartbeat("agent-0", common_pb2.LoadReport())
                await c.heartbeat("agent-1", common_pb2.LoadReport())
                await asyncio.sleep(0.1)
            listed = {a.agent_id: a.state for a in (await c.list_agents(include_dead=True)).agents}
            assert listed == {"agent-0": pb.AGENT_STATE_ALIVE, "agent-1": pb.AGENT_STATE_ALIVE, "agent-2": pb.AGENT_STATE_DEAD}
            after = await c.resolve(hosts)
            assert after[0].epoch > epoch
            for b, a in zip(before, after):
                if b.owner[0] == "agent-2":
                    assert a.owner == b.agents[1]
                else:
                    assert a.owner == b.owner
            # A dead agent that heartbeats again is back (and the epoch goes up again).
            e = await c.heartbeat("agent-2", common_pb2.LoadReport())
            assert e == after[0].epoch + 1
            assert [r.owner for r in await c.resolve(hosts)] == [r.owner for r in before]

    run(go())


def test_resolve_answers_batches_with_preference_lists_ttl_and_epoch(run, tmp_path):
    async def go():
        async with running(settings_for(tmp_path, preference_length=3, ttl_seconds=120)) as (server, c):
            await register_n(c, 5)
            raw = await c.resolve_raw(["Example.COM.", "b.example.com", "example.com"])
            assert raw.epoch == (await c.list_agents()).epoch
            assert len(raw.agents) == 5
            a, b, again = raw.answers
            assert a.host == "example.com" and len(a.agents) == 3 and len(set(a.agents)) == 3
            assert a.ttl_seconds == 120 and not a.error
            assert list(again.agents) == list(a.agents)
            # Warm answers equal cold ones.
            raw2 = await c.resolve_raw(["example.com"])
            assert [raw2.agents[i].agent_id for i in raw2.answers[0].agents] == [raw.agents[i].agent_id for i in a.agents]

    run(go())


def test_bad_requests_get_clear_statuses_and_the_service_keeps_running(run, tmp_path):
    async def go():
        async with running(settings_for(tmp_path, max_batch=100)) as (server, c):
            with pytest.raises(errors.FailedPrecondition, match="no live agents"):
                await c.resolve(["a.com"])
            await register_n(c, 2)
            with pytest.raises(errors.InvalidArgument, match="empty"):
                await c.resolve([])
            with pytest.raises(errors.InvalidArgument, match="at most 100"):
                await c.resolve([f"h{i}.com" for i in range(101)])
            routes = await c.resolve(["good.com", "bad host!", "", "a..b", "x" * 300, "ok.org"])
            assert [bool(r.error) for r in routes] == [False, True, True, True, True, False]
            assert routes[1].error.startswith("hosts[1]: malformed host name")
            assert routes[2].error.startswith("hosts[2]: empty host name")
            with pytest.raises(errors.InvalidArgument, match="agent_id"):
                await c.register("", "127.0.0.1:1")
            with pytest.raises(errors.InvalidArgument, match="address"):
                await c.register("x", "nowhere")
            with pytest.raises(errors.InvalidArgument, match="source_ip"):
                await c.register("x", "127.0.0.1:5", source_ip="not-an-ip")
            with pytest.raises(errors.NotFound):
                await c.deregister("nobody")
            with pytest.raises(errors.InvalidArgument):
                await c.explain("bad host!")
            # Still serving.
            assert len(await c.resolve(["fine.com"])) == 1

    run(go())


def test_health_service_reports_serving(run, tmp_path):
    async def go():
        async with running(settings_for(tmp_path)) as (server, c):
            async with grpcutil.channel(server.address) as ch:
                stub = health_pb2_grpc.HealthStub(ch)
                for name in ("", "wancrawl.v1.Consultant"):
                    r = await stub.Check(health_pb2.HealthCheckRequest(service=name))
                    assert r.status == health_pb2.HealthCheckResponse.SERVING

    run(go())


def test_state_and_epoch_survive_a_restart(run, tmp_path):
    async def go():
        s = settings_for(tmp_path)
        async with running(s) as (server, c):
            await register_n(c, 3)
            before = await c.resolve(["a.example", "b.example", "c.example"])
            epoch = before[0].epoch
        async with running(s) as (server, c):
            agents = (await c.list_agents()).agents
            assert [a.agent_id for a in agents] == ["agent-0", "agent-1", "agent-2"]
            after = await c.resolve(["a.example", "b.example", "c.example"])
            assert after[0].epoch == epoch, "a restart with the same config is not a change"
            assert [r.agents for r in after] == [r.agents for r in before]
            # The restart gave the agents a fresh lease rather than declaring them dead.
            assert min(a.lease_expires for a in agents) > time.time() + 10

    run(go())


def test_strategy_swap_bumps_epoch_and_changes_answers(run, tmp_path):
    async def go():
        s = settings_for(tmp_path)
        hosts = [f"h{i}.example" for i in range(200)]
        async with running(s) as (server, c):
            await register_n(c, 4)
            by_hash = await c.resolve(hosts)
            # SIGHUP path: reload the service with a new strategy.
            await server.service.reload(settings_for(tmp_path, strategy="xor"))
            by_xor = await c.resolve(hosts)
            assert by_xor[0].epoch == by_hash[0].epoch + 1
            assert sum(a.owner != b.owner for a, b in zip(by_hash, by_xor)) > 50
            assert (await c.list_agents()).strategy == "xor"
        # A restart with the new strategy in the config keeps the epoch (nothing changed).
        async with running(settings_for(tmp_path, strategy="xor")) as (server, c):
            assert (await c.resolve(hosts))[0].epoch == by_xor[0].epoch
            assert [r.owner for r in await c.resolve(hosts)] == [r.owner for r in by_xor]

    run(go())


def test_strategy_fingerprint_covers_options_fallback_and_the_dbs_the_strategy_needs():
    def fp(strategy: str, **keys):
        s = load_settings(None, {"strategy": strategy, **{k.replace("__", "."): v for k, v in keys.items()}})
        return strategy_fingerprint(s, build_partitioner(s))

    assert fp("asn", asn__fallback="geo") != fp("asn", asn__fallback="geo", geo__tie_km=5.0), "the fallback's options count"
    assert fp("asn") != fp("asn", databases__asn_db="/x.mmdb")
    assert fp("geo") != fp("geo", databases__city_db="/x.mmdb")
    # What a strategy does not use changes nothing: no needless epoch bump.
    assert fp("xor") == fp("xor", geo__tie_km=5.0, databases__city_db="/x.mmdb")
    assert fp("xor") != fp("xor", xor__virtual_ids=8) != fp("hash")


def test_overrides_pin_hosts_and_bump_epoch(run, tmp_path):
    async def go():
        async with running(settings_for(tmp_path)) as (server, c):
            await register_n(c, 3)
            [r] = await c.resolve(["pinned.example"])
            target = next(a for a in ("agent-0", "agent-1", "agent-2") if a != r.owner[0])
            e = await c.set_override("PINNED.example", target)
            [r2] = await c.resolve(["pinned.example"])
            assert r2.epoch == e and r2.owner[0] == target and len(set(x[0] for x in r2.agents)) == 3
            ex = await c.explain("pinned.example")
            assert ex.override_agent == target and ex.candidates[0].agent_id == target
            await c.clear_override("pinned.example")
            [r3] = await c.resolve(["pinned.example"])
            assert r3.owner == r.owner
            with pytest.raises(errors.NotFound):
                await c.set_override("x.example", "ghost")

    run(go())


def test_explain_lists_every_candidate_with_score_and_rank(run, tmp_path):
    async def go():
        hosts_file = tmp_path / "hosts"
        hosts_file.write_text("127.1.1.10 www.site.test\n")
        async with running(settings_for(tmp_path, dns__hosts_file=str(hosts_file))) as (server, c):
            await register_n(c, 4)
            e = await c.explain("www.site.test")
            assert e.ip == "127.1.1.10" and e.strategy == "hash"
            assert [x.rank for x in e.candidates] == [0, 1, 2, 3]
            assert sorted(x.agent_id for x in e.candidates) == ["agent-0", "agent-1", "agent-2", "agent-3"]
            [r] = await c.resolve(["www.site.test"])
            assert [x.agent_id for x in e.candidates[:3]] == [a[0] for a in r.agents]
            assert all("rendezvous" in x.detail for x in e.candidates)
            unknown = await c.explain("nowhere.test")
            assert unknown.ip == "" and any("IP unknown" in n for n in unknown.notes)

    run(go())


def test_unreachable_consultant_is_unavailable(run):
    async def go():
        c = ConsultantClient("127.0.0.1:1", timeout=1.0)
        with pytest.raises(errors.Unavailable):
            await c.resolve(["a.com"])
        await c.close()

    run(go())


def test_prometheus_metrics_of_the_consultant(run, tmp_path):
    import urllib.request

    from conftest import free_port

    port = free_port()

    async def go():
        async with running(settings_for(tmp_path, metrics_listen=f"127.0.0.1:{port}")) as (server, c):
            await register_n(c, 2)
            await c.resolve(["a.example", "b.example", "a.example"])
            return await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())

    text = run(go())
    assert "wancrawl_consultant_agents_alive" in text and "wancrawl_consultant_hosts_resolved_total" in text
    line = next(x for x in text.splitlines() if x.startswith("wancrawl_consultant_hosts_resolved_total{"))
    assert float(line.rsplit(" ", 1)[1]) == 3.0


def test_a_consultant_stopped_past_the_lease_does_not_declare_every_agent_dead(tmp_path, run):
    """Issue 21, consultant-stop: SIGSTOP for three leases, then SIGCONT. Nobody could heartbeat
    a stopped consultant, so its first sweep extends every lease instead of declaring all agents
    dead at once (they came back one by one, and hosts moved to whoever came first, then back);
    an agent that stays silent a lease after that is declared dead as ever."""
    from consultant.server import ConsultantServer
    from consultant.service import ConsultantService
    from wancrawl.v1 import common_pb2

    class Clock:
        now = 1000.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()

    async def go():
        s = settings_for(tmp_path)  # background sweeps too: they read the same fake clock
        svc = ConsultantService(s, clock=clock)
        server = ConsultantServer(s, svc)
        await server.start()
        client = ConsultantClient(server.address)
        try:
            await register_n(client, 2)
            lease = s.lease_seconds
            await svc.sweep()
            epoch = await client.heartbeat("agent-0", common_pb2.LoadReport())
            clock.now += 3 * lease          # stopped: no sweep, no heartbeat
            await svc.sweep()
            alive = {a.agent_id for a in (await client.list_agents()).agents}
            assert alive == {"agent-0", "agent-1"} and svc.directory.epoch == epoch
            for _ in range(int(lease) + 2):  # running again: agent-0 heartbeats, agent-1 is gone
                clock.now += 1.0
                await client.heartbeat("agent-0", common_pb2.LoadReport())
                await svc.sweep()
            alive = {a.agent_id for a in (await client.list_agents()).agents}
            assert alive == {"agent-0"}, alive
        finally:
            await client.close()
            await server.stop(0)

    run(go())
