"""Membership and outages: consultant restarts, storage outages, Status and Prometheus metrics."""

from __future__ import annotations

import asyncio
import urllib.request

from consultant.server import create_server as create_consultant
from lab.testing import ServerThread
from wancrawl.config import override
from agent.client import AgentClient
from wancrawl.errors import Unavailable

from agent_helpers import cluster, seed, lab_web, normal_hosts, truth_urls, wait_idle
from conftest import free_port


def test_crawl_survives_a_consultant_restart_with_lost_state_and_re_registers(run, tmp_path):
    web = lab_web(seed=6, pages_max=30)
    with ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[:6]]
        truth = truth_urls(web, seeds, max_depth=None, allow=hosts)

        async def go():
            port = free_port()
            keys = {"scope.allowed_domains": hosts, "heartbeat_interval": 0.2, "politeness.delay": 0.05}
            async with cluster(tmp_path, lab, 2, agent_keys=keys, consultant_keys={"listen": f"127.0.0.1:{port}"}) as (cs, client, agents, stores):
                await seed(agents[0].node, seeds)
                await asyncio.sleep(0.3)
                # The consultant goes away; the crawl carries on with cached routes.
                await cs.stop(0)
                before = sum(a.node.status_counters()["pages"] for a in agents)
                await asyncio.sleep(1.0)
                during = sum(a.node.status_counters()["pages"] for a in agents)
                # It comes back with an empty state (a new database): agents register again.
                s2 = override(override(cs.settings, "state_url", f"sqlite:///{tmp_path}/fresh.db"), "listen", f"127.0.0.1:{port}")
                cs2, _ = create_consultant(s2)
                await cs2.start()
                try:
                    listed = set()
                    for _ in range(100):
                        try:
                            listed = {a.agent_id for a in (await client.list_agents()).agents}
                        except Unavailable:  # the client's channel is still backing off
                            pass
                        if listed == {a.node.id for a in agents}:
                            break
                        await asyncio.sleep(0.1)
                    await wait_idle([a.node for a in agents])
                    return before, during, listed, {u for st in stores for u in (c.url for c in st.captures.values())}
                finally:
                    await cs2.stop(0)

        before, during, listed, stored = run(go())
        assert during > before, "fetching went on while the consultant was down"
        assert len(listed) == 2, "both agents registered again with the new consultant"
        assert stored >= truth


def test_storage_outage_loses_nothing_and_the_spool_drains(run, tmp_path):
    web = lab_web(seed=7, pages_max=20)
    with ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[:4]]
        truth = truth_urls(web, seeds, max_depth=None, allow=hosts)

        async def go():
            keys = {"scope.allowed_domains": hosts, "storage_out.retry_seconds": 0.2}
            async with cluster(tmp_path, lab, 1, agent_keys=keys) as (cs, client, [agent], [store]):
                store.fail_next = 10**9  # storage is down
                await seed(agent.node, seeds)
                for _ in range(200):
                    if agent.node.frontier.hosts_with_work() == 0 and agent.node.dispatcher.in_flight == 0:
                        break
                    await asyncio.sleep(0.05)
                spooled = len(agent.node.spool)
                assert not agent.node.idle(), "pages waiting for storage: the crawl is not finished"
                store.fail_next = 0  # storage is back
                await wait_idle([agent.node])
                return spooled, {c.url for c in store.captures.values()}, agent.node.status_counters()["storage_failures"]

        spooled, stored, failures = run(go())
        assert spooled > 0 and failures > 0
        assert stored >= truth


def test_status_rpc_and_prometheus_metrics(run, tmp_path):
    web = lab_web(seed=8, pages_max=10)
    with ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        mport = free_port()

        async def go():
            keys = {"scope.allowed_domains": normal_hosts(web), "metrics_listen": f"127.0.0.1:{mport}"}
            async with cluster(tmp_path, lab, 1, agent_keys=keys) as (cs, client, [agent], _):
                await seed(agent.node, [web.url(web.topology.normal_sites[0], "/")])
                await wait_idle([agent.node])
                async with AgentClient(agent.address) as c:
                    st = await c.status()
                text = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode())
                return st, text

        st, text = run(go())
        assert st.counters["pages"] >= 1 and st.counters["idle"] == 1.0 and st.load.pages_fetched >= 1
        for key in ("n", "m", "mu", "lambda", "pushes", "resolves", "host_cache_hit_ratio", "consultant_rpcs", "agent_rpcs"):
            assert key in st.counters
        assert 'wancrawl_agent_pages_total{agent="' in text and "wancrawl_agent_host_cache_hit_ratio" in text
