"""The manager without a consultant (manager/peers.py, `manager --peers`): against agents in
Kademlia mode in-process, PeerDirectory lists every agent and gives each host the three agents
XOR-closest to its key, computed here from the agents' ids (xorspace.insecure_node_id of the
agent id: the tests run plaintext), the independent reference; seeding through it reaches the
lab's truth; and the real `manager --peers` commands work as a subprocess."""

from __future__ import annotations

import asyncio
import collections
import json
import sys

import pytest
from agent_helpers import cluster, fetched_urls, kademlia_cluster, lab_web, normal_hosts, overlay_formed, truth_urls

from conftest import REPO, free_port
from lab.testing import ServerThread
from manager.peers import PeerDirectory
from manager.seed import inject_all
from manager.status import wait_idle
from wancrawl import errors
from wancrawl.kademlia import xorspace
from wancrawl.v1 import consultant_pb2

HOSTS = [f"www.site{i}.example" for i in range(300)]


def closest(ids: dict[str, int], host: str, n: int = 3) -> list[str]:
    key = xorspace.host_key(host)
    return sorted(ids, key=lambda a: ids[a] ^ key)[:n]


def test_peer_directory_lists_every_agent_and_places_each_host_on_its_three_xor_closest(run, tmp_path):
    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            async with kademlia_cluster(tmp_path, lab, 5) as (servers, _):
                await overlay_formed(servers)
                dead = f"127.0.0.1:{free_port()}"  # nobody listens: the next address answers
                async with PeerDirectory([dead, servers[3].address]) as d:
                    listed = await d.list_agents()
                    routes = await d.resolve([*HOSTS, "WWW.Site1.Example.", "bad host!"])
                    listed_dead = await d.list_agents(include_dead=True)
                return {s.node.id: s.address for s in servers}, listed, routes, listed_dead

        addresses, listed, routes, listed_dead = run(go())
    assert listed.strategy == "kademlia"
    assert {a.agent_id: a.address for a in listed.agents} == addresses
    assert listed.agents[0].agent_id == list(addresses)[3]  # the agent asked lists itself first
    assert {a.state for a in listed.agents} == {consultant_pb2.AGENT_STATE_ALIVE}
    assert len(listed_dead.agents) == len(addresses)
    ids = {a: xorspace.insecure_node_id(a) for a in addresses}
    for r in routes[: len(HOSTS)]:
        assert not r.error and r.ttl > 0
        assert [a for a, _ in r.agents] == closest(ids, r.host), r.host
        assert all(addr == addresses[a] for a, addr in r.agents)
    owners = collections.Counter(r.owner[0] for r in routes[: len(HOSTS)] if r.owner)
    assert len(owners) == 5  # every agent owns some of 300 hosts: the check above is not vacuous
    assert routes[-2].host == "www.site1.example" and routes[-2].agents == routes[1].agents  # canonical host
    assert routes[-1].agents == () and "hosts[" in routes[-1].error


def test_preference_length_is_a_parameter(run, tmp_path):
    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            async with kademlia_cluster(tmp_path, lab, 4) as (servers, _):
                await overlay_formed(servers)
                async with PeerDirectory([servers[0].address], preference=2, k=2, alpha=1) as d:
                    return [s.node.id for s in servers], await d.resolve(HOSTS[:50])

        agents, routes = run(go())
    ids = {a: xorspace.insecure_node_id(a) for a in agents}
    for r in routes:
        # k = 2: the lookup still walks to the key's closest nodes from wherever it starts
        assert [a for a, _ in r.agents] == closest(ids, r.host, 2), r.host


def test_no_answering_peer_and_no_address_are_said_plainly(run):
    async def go():
        async with PeerDirectory([f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"], timeout=2) as d:
            with pytest.raises(errors.Unavailable, match="no agent of --peers answers"):
                await d.list_agents()
    run(go())
    with pytest.raises(errors.ConfigError):
        PeerDirectory([" ", ""])


def test_an_agent_in_consultant_mode_says_it_has_no_overlay(run, tmp_path):
    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            async with cluster(tmp_path, lab, 1) as (_, _, servers, _):
                async with PeerDirectory([servers[0].address]) as d:
                    with pytest.raises(errors.FailedPrecondition, match="use --consultant"):
                        await d.list_agents()
        run(go())


def test_seed_through_the_overlay_and_wait_reach_the_truth_once(run, tmp_path):
    web = lab_web(seed=2, pages_max=40)
    with ServerThread(web, zero_latency=True) as lab:
        port = lab.port
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[::4]]
        truth = truth_urls(web, seeds, max_depth=None, allow=hosts)

        async def go():
            keys = {"scope.allowed_domains": hosts}
            async with kademlia_cluster(tmp_path, lab, 3, agent_keys=keys) as (servers, _):
                await overlay_formed(servers)
                async with PeerDirectory([s.address for s in servers]) as d:
                    res = await inject_all(d, seeds)
                    done = await wait_idle(d, timeout=120, stable=0.5)
                return res, done

        res, done = run(go())
        got = fetched_urls(lab, port)
    assert done
    assert sum(res.taken.values()) == len(seeds) and not res.failed and not res.refused
    assert set(got) == truth, (sorted(truth - set(got))[:5], sorted(set(got) - truth)[:5])
    assert not [u for u, n in collections.Counter(got).items() if n > 1]


async def _manager(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """`manager ARGS` as a subprocess, without blocking the loop the agents run on."""
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "manager.cli", *args, cwd=REPO,
                                             stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(stdin), timeout=180)
    assert p.returncode is not None
    return p.returncode, out.decode(), err.decode()


def test_manager_commands_with_peers_run_as_a_user_runs_them(run, tmp_path):
    web = lab_web(seed=3, pages_max=30)
    with ServerThread(web, zero_latency=True) as lab:
        port = lab.port
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[::5]]
        truth = truth_urls(web, seeds, max_depth=None, allow=hosts)
        seed_file = tmp_path / "seeds.txt"
        seed_file.write_text("\n".join(seeds) + "\nnot a url\n")

        async def go():
            keys = {"scope.allowed_domains": hosts}
            async with kademlia_cluster(tmp_path, lab, 3, agent_keys=keys) as (servers, _):
                await overlay_formed(servers)
                peers = f"127.0.0.1:{free_port()},{servers[1].address}"
                out = {
                    "agents": await _manager("--peers", peers, "agents", "--json"),
                    "seed": await _manager("--peers", peers, "seed", "--json", str(seed_file)),
                    "wait": await _manager("--peers", peers, "wait", "--timeout", "120", "--quiet", "--stable", "0.5"),
                    "status": await _manager("--peers", peers, "status", "--json"),
                    "drain?": await _manager("--peers", peers, "drain", "no-such-agent", "--timeout", "5"),
                }
                return [s.node.id for s in servers], out

        agents, out = run(go())
        got = fetched_urls(lab, port)
    code, stdout, stderr = out["agents"]
    assert code == 0, stderr
    assert sorted(a["agent_id"] for a in json.loads(stdout)) == sorted(agents)
    assert all(a["state"] == "alive" and a["reachable"] for a in json.loads(stdout))
    code, stdout, stderr = out["seed"]
    assert code == 0, stdout + stderr  # the bad line is reported, not a failure to inject
    summary = json.loads(stdout)
    assert summary["accepted"] == len(seeds) and summary["bad_lines"] == 1 and summary["not_injected"] == 0
    code, stdout, stderr = out["wait"]
    assert code == 0 and "crawl finished" in stdout, stdout + stderr
    code, stdout, stderr = out["status"]
    assert code == 0, stderr
    status = json.loads(stdout)
    assert status["strategy"] == "kademlia" and status["idle"]
    assert sum(a["counters"]["pages"] for a in status["agents"]) >= len(truth)
    code, stdout, stderr = out["drain?"]
    assert code == 2 and "no live agent 'no-such-agent'" in stderr
    assert set(got) == truth
    assert not [u for u, n in collections.Counter(got).items() if n > 1]


def test_with_mutual_tls_hosts_go_by_the_ids_the_certificates_give(run, tmp_path):
    """With TLS (an operator certificate) the ids are the hashes of the agents' certificates'
    keys, and the lookup dials each node it learns of by its id's certificate name."""
    from wancrawl import pki
    from wancrawl.grpcutil import TlsSettings

    d = tmp_path / "pki"
    pki.init(d)
    pki.issue(d, "operator", "op")
    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        blocks = lab.web.topology.blocks
        names = [f"agent-{blocks[(i * 4) % len(blocks)].name}" for i in range(4)]
        for n in names:
            pki.issue(d, "agent", n)
        per_agent = [{"tls.ca": str(d / "ca.crt"), "tls.cert": str(d / f"agent-{n}.crt"),
                      "tls.key": str(d / f"agent-{n}.key")} for n in names]
        op = TlsSettings(str(d / "ca.crt"), str(d / "operator-op.crt"), str(d / "operator-op.key"))

        async def go():
            async with kademlia_cluster(tmp_path, lab, 4, per_agent=per_agent) as (servers, _):
                await overlay_formed(servers)
                async with PeerDirectory([servers[2].address], tls=op) as d_:
                    return await d_.list_agents(), await d_.resolve(HOSTS[:100])

        listed, routes = run(go())
    assert sorted(a.agent_id for a in listed.agents) == sorted(names)
    ids = {n: xorspace.node_id_of_cert((d / f"agent-{n}.crt").read_bytes()) for n in names}
    for r in routes:
        assert [a for a, _ in r.agents] == closest(ids, r.host), r.host


def test_drain_with_peers_makes_the_agent_leave_the_overlay(run, tmp_path):
    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            async with kademlia_cluster(tmp_path, lab, 3) as (servers, _):
                await overlay_formed(servers)
                leaving = servers[2].node.id
                peers = ",".join(s.address for s in servers)
                drained = await _manager("--peers", peers, "drain", leaving, "--timeout", "30")
                async with PeerDirectory([servers[0].address]) as d:
                    listed = await d.list_agents()
                return leaving, drained, [a.agent_id for a in listed.agents]

        leaving, (code, stdout, stderr), after = run(go())
    assert code == 0, stdout + stderr
    assert f"{leaving}: 0 queued URLs handed over" in stdout
    assert leaving not in after and len(after) == 2


def test_an_agent_not_in_the_overlay_yet_is_not_asked_for_its_view(run, tmp_path):
    """An agent still joining (its bootstrap peers not up) knows only itself: Members refuses
    (Unavailable), so the manager and storage ask the next agent instead of taking that view."""
    from lab.testing import ServerThread

    from agent_helpers import kademlia_cluster, lab_web

    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            lonely = {"kademlia.bootstrap": ["127.0.0.1:1"]}  # nobody answers there: it never joins
            async with kademlia_cluster(tmp_path, lab, 3, per_agent=[{}, {}, lonely]) as (servers, _):
                a0, a1, alone = servers
                while len(a0.node.overlay.table) < 1 or len(a1.node.overlay.table) < 1:
                    await asyncio.sleep(0.02)
                assert not alone.node.overlay.joined
                async with PeerDirectory([alone.address, a0.address]) as d:
                    listed = await d.list_agents()
                    routes = await d.resolve(["www.example.com"])
                return sorted(a.agent_id for a in listed.agents), routes, a0.node.id, a1.node.id

        listed, routes, id0, id1 = run(go())
    assert listed == sorted([id0, id1])
    assert {a for a, _ in routes[0].agents} == {id0, id1}


def test_seed_force_goes_straight_to_each_owner_and_is_fetched_again(run, tmp_path):
    """`seed --force` (an operator's re-seed): `force` is the operator's alone, so a routing agent
    that passed it on was refused by the owner and retried for ever (the crawl never idle). Each
    forced URL now goes from the manager to its owner, which fetches it once more."""
    from agent_helpers import cluster, wait_idle as agents_idle

    web = lab_web(seed=2, pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        port = lab.port
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[:6]]

        async def go():
            keys = {"scope.allowed_domains": hosts, "scope.max_depth": 0}
            async with cluster(tmp_path, lab, 2, agent_keys=keys) as (_, client, servers, _):
                first = await inject_all(client, seeds)
                await agents_idle([s.node for s in servers])
                owners = {r.host: r.agents[0][0] for r in await client.resolve(sorted({u.split("/")[2].split(":")[0] for u in seeds}))}
                again = await inject_all(client, seeds, force=True)
                await agents_idle([s.node for s in servers])
                return first, again, owners

        first, again, owners = run(go())
        got = collections.Counter(fetched_urls(lab, port))
    assert sum(first.taken.values()) == len(seeds) and not first.failed
    want = collections.Counter(owners[u.split("/")[2].split(":")[0]] for u in seeds)
    assert dict(again.taken) == dict(want), "each forced URL taken by its host's owner, not by a routing agent"
    assert not again.failed and not again.refused
    assert all(got[u] == 2 for u in seeds), {u: got[u] for u in seeds}
