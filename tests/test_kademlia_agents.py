"""The consultant-less mode end to end in-process: agents form a Kademlia overlay with no
consultant, agree on every host's preference list (checked against XOR distance computed from
the agents' ids, the independent reference), and crawl the lab's truth exactly once."""

from __future__ import annotations

import asyncio
import collections

from agent_helpers import fetched_urls, kademlia_cluster, lab_web, normal_hosts, overlay_formed, seed, truth_urls, wait_idle

from lab import checks
from lab.testing import ServerThread
from wancrawl.kademlia import xorspace
from wancrawl.urls import host_of

HOSTS = [f"www.site{i}.example" for i in range(200)]


def test_agents_form_an_overlay_and_agree_on_placement_by_xor(run, tmp_path):
    web = lab_web(pages_max=10)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            async with kademlia_cluster(tmp_path, lab, 4) as (servers, _):
                await overlay_formed(servers)
                ids = {s.node.id: xorspace.insecure_node_id(s.node.id) for s in servers}
                answers = [await s.node.placement.resolve(HOSTS) for s in servers]
                return ids, answers

        ids, answers = run(go())
    for routes in answers[1:]:
        assert [r.agents for r in routes] == [r.agents for r in answers[0]]
    for r in answers[0]:
        key = xorspace.host_key(r.host)
        expected = sorted(ids, key=lambda a: ids[a] ^ key)[:3]  # owner + r = 2 backups
        assert [a for a, _ in r.agents] == expected
    owners = collections.Counter(r.agents[0][0] for r in answers[0])
    assert len(owners) == 4  # every agent owns some of 200 hosts


def test_three_agents_without_a_consultant_fetch_the_truth_once_each_by_its_owner(run, tmp_path):
    web = lab_web(seed=2, pages_max=60)
    with ServerThread(web, zero_latency=True) as lab:
        port = lab.port
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[::4]]
        truth = truth_urls(web, seeds, max_depth=None, allow=hosts)

        async def go():
            keys = {"scope.allowed_domains": hosts, "routing.alpha": 7}
            async with kademlia_cluster(tmp_path, lab, 3, agent_keys=keys) as (servers, stores):
                await overlay_formed(servers)
                await seed(servers[1].node, seeds)
                await wait_idle([s.node for s in servers])
                ids = {s.node.id: xorspace.insecure_node_id(s.node.id) for s in servers}
                return ids, [s.node.status_counters() for s in servers], stores

        ids, counters, stores = run(go())
        got = fetched_urls(lab, port)
        dup = [u for u, n in collections.Counter(got).items() if n > 1]
        assert not dup, f"fetched twice: {dup[:5]}"
        assert set(got) == truth, (sorted(truth - set(got))[:5], sorted(set(got) - truth)[:5])
        assert checks.robots_violations(lab.server.log, checks.web_robots(web)) == []
        # Each page was stored by the agent XOR-closest to its host.
        for st in stores:
            for c in st.captures.values():
                key = xorspace.host_key(host_of(c.url))
                assert min(ids, key=lambda a: ids[a] ^ key) == c.agent_id
        assert sum(c["pages"] for c in counters) >= len(truth)
        # Every overlay counter the metrics declare is exported in this mode.
        from agent.metrics import HELP
        assert {n for n in HELP if n.startswith("overlay_")} <= set(counters[0])


def test_a_join_hands_over_only_the_hosts_the_newcomer_is_closer_to_read_by_firstdiff(run, tmp_path):
    """Two agents crawl; a third joins mid-crawl. The old agents look only at the hosts the
    newcomer is closer to (the host-key index, seed 000's firstdiff), hand those over, and the
    truth is still fetched exactly once, every host's pages after the join by its XOR owner."""
    from agent.server import create_server

    from agent_helpers import agent_config

    web = lab_web(seed=3, pages_max=80)
    with ServerThread(web, zero_latency=True) as lab:
        port = lab.port
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites]
        truth = truth_urls(web, seeds, max_depth=None, allow=hosts)

        async def go():
            keys = {"scope.allowed_domains": hosts, "politeness.delay": 0.1, "concurrency": 4}
            async with kademlia_cluster(tmp_path, lab, 2, agent_keys=keys) as (servers, stores):
                await overlay_formed(servers)
                await seed(servers[0].node, seeds)
                while sum(s.node.status_counters()["pages"] for s in servers) < len(truth) // 4:
                    await asyncio.sleep(0.05)
                b = web.topology.blocks[8 % len(web.topology.blocks)]
                s = agent_config(tmp_path, "agent-newcomer", "", tmp_path / "hosts",
                                 web.topology.agent_address(b.isp, b.city, 0), mode="kademlia",
                                 kademlia__bootstrap=[servers[0].address], **keys)
                from storage.testing import FakeStorageClient
                st = FakeStorageClient(stores[0].group)
                srv, _ = create_server(s, storage=st)
                await srv.start()
                servers.append(srv)
                stores.append(st)
                try:
                    await overlay_formed(servers)
                    await wait_idle([x.node for x in servers], timeout=120)
                    ids = {x.node.id: xorspace.insecure_node_id(x.node.id) for x in servers}
                    return ids, [x.node.status_counters() for x in servers], stores
                finally:
                    await srv.stop(0)
                    servers.pop()

        ids, counters, stores = run(go())
        got = fetched_urls(lab, port)
        dup = [u for u, n in collections.Counter(got).items() if n > 1]
        # A join may fetch a page twice in its window (issue 22 allows 1% stored twice): a page
        # fetched by the old owner whose "done" had not reached the newcomer's claim. Seen in 1
        # of ~10 runs on a loaded machine (1 page); never more.
        t0 = min(e.t for e in lab.server.log)
        when = {u: [(round(e.t - t0, 3), web.topology.locate(e.client)) for e in lab.server.log
                    if e.path != "/robots.txt" and u.endswith(f"{e.host.split(':')[0]}:{port}{e.path}")]
                for u in dup[:5]}
        assert len(dup) <= len(truth) // 100, f"fetched twice: {when}; retries {[c['retries'] for c in counters]}"
        assert set(got) == truth
        newcomer = ids["agent-newcomer"]
        for c in stores[2].captures.values():
            key = xorspace.host_key(host_of(c.url))
            assert min(ids.values(), key=lambda i: i ^ key) == newcomer
        assert stores[2].captures, "the newcomer took hosts over"
        for c in counters[:2]:
            # The join was settled from the index (ranged passes). Full passes are the agent's
            # own registration, and one more after a lease lapse (a slow moment of this machine).
            assert c["reconcile_ranged"] >= 1, c
            assert c["reconcile_full"] <= 1 + c["lease_lapses"] + c["heartbeats_withheld"] + 1, c
        assert sum(c["hosts_moved_out"] for c in counters[:2]) >= 1


def test_two_nodes_that_missed_each_other_meet_at_the_next_rounds(run):
    """A ping back that failed (a slow moment) is tried again in later rounds: nodes that know of
    each other only through a lookup's answer still end up in each other's tables."""
    from agent.placement.kademlia.overlay import Overlay
    from wancrawl.kademlia.table import Contact
    from agent.settings import KademliaSettings
    from wancrawl import errors

    class Net:
        def __init__(self):
            self.nodes, self.down = {}, set()

        async def ping(self, to, me, epoch, said):
            if to.address in self.down:
                raise errors.Unavailable("slow")
            node = self.nodes[to.address]
            await node.heard_from(me, epoch, said)
            return node.me, node.epoch, node.balancing.announce()

        async def bootstrap_ping(self, address, me, epoch, said):
            return await self.ping(self.nodes[address].me, me, epoch, said)

        async def find_node(self, to, me, targets, count, epoch):
            if to.address in self.down:
                raise errors.Unavailable("slow")
            node = self.nodes[to.address]
            await node.heard_from(me, epoch)
            return node.find(targets, count), node.epoch

        async def leave(self, to, me):
            pass

        async def close(self):
            pass

    async def go():
        net = Net()
        now = [0.0]
        ids = [Contact(xorspace.insecure_node_id(f"n{i}"), f"n{i}", f"127.0.0.1:{7000 + i}") for i in range(3)]
        for c in ids:
            net.nodes[c.address] = Overlay(c, KademliaSettings(bootstrap=(ids[0].address,)), net, clock=lambda: now[0])
        a, b, c = (net.nodes[x.address] for x in ids)
        await a.join()
        await b.join()
        net.down.add(ids[1].address)  # b is slow while c joins: c's lookup and ping back fail
        await c.join()
        assert ids[1].node_id not in c.table
        net.down.clear()
        for _ in range(3):
            for node in (a, b, c):
                await node.ping_round()
                await node.verify_pending()
            await asyncio.sleep(0)
        assert ids[1].node_id in c.table and ids[2].node_id in b.table

    run(go())
