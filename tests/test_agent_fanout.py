"""Issue 25's hostile web against a real agent and the lab server: a subdomain flood held to its
registered domain's budget, a path repeating a block of four segments cut as a trap, and bombs
of every kind arriving at once parsed within the memory budget."""

from __future__ import annotations

import collections
import dataclasses

import pytest

from lab import topology
from lab.testing import ServerThread
from lab.web import Web

from agent_helpers import cluster, seed, wait_idle


def hostile_web(*kinds: str) -> Web:
    """The lab with one normal site per block and only these hostile sites."""
    base = topology.default_spec()
    topo = topology.load(sites=dataclasses.replace(base.sites, per_block=1, hostile_kinds=list(kinds)),
                         web=dataclasses.replace(base.web, pages_max=5))
    return Web(topo, 1, time_scale=60.0)


@pytest.mark.timeout(120)
def test_a_subdomain_flood_on_one_ip_is_held_to_its_domains_host_budget_and_the_per_ip_delay(run, tmp_path):
    with ServerThread(hostile_web("subdomain-flood"), zero_latency=True) as lab:
        site = lab.web.topology.hostile_sites["subdomain-flood"]

        async def go():
            # Depth 2 reaches ~110 of its 2,000 names; the domain may have 20 hosts here.
            # The default politeness (the test helpers' 0.02 s delay would cap ip_delay at 0.02 s).
            keys = {"scope.max_depth": 2, "scope.max_hosts_per_domain": 20, "politeness.delay": 1.0, "politeness.ip_delay": 0.25}
            async with cluster(tmp_path, lab, 1, agent_keys=keys) as (cs, client, [agent], [store]):
                await seed(agent.node, [lab.web.url(site, "/")])
                await wait_idle([agent.node], timeout=90)
                return agent.node.status_counters()

        c = run(go())
        hosts = collections.Counter(e.host.split(":")[0] for e in lab.server.log)
        flood = {h for h in hosts if h.endswith("." + lab.web.topology.site_domain(site))}
        assert 10 < len(flood) <= 20, (f"{len(flood)} hosts of the flood contacted", {k: v for k, v in c.items() if v})
        assert c["over_domain_hosts"] > 0
        # And to the per-IP delay (politeness.ip_delay, 0.25 s by default): every name is on the
        # site's one IP, so the server sees about one request per 0.25 s whatever the name, not
        # one per name at once (4 in flight at zero latency: hundreds a second). Counted over 2 s
        # windows of the server's clock, with slack for requests bunched on the way.
        times = sorted(e.t for e in lab.server.log if e.site_ip == site.ip)
        busiest = max(sum(1 for t in times[i:] if t < t0 + 2.0) for i, t0 in enumerate(times))
        assert len(times) > 20 and busiest <= 2.0 / 0.25 + 4, (len(times), busiest, [(round(e.t - times[0], 3), e.host, e.path) for e in lab.server.log][:60])


@pytest.mark.timeout(120)
def test_a_path_repeating_a_block_of_four_segments_is_cut_as_a_trap(run, tmp_path):
    with ServerThread(hostile_web("repeat-block"), zero_latency=True) as lab:
        site = lab.web.topology.hostile_sites["repeat-block"]

        async def go():
            async with cluster(tmp_path, lab, 1) as (cs, client, [agent], [store]):
                await seed(agent.node, [lab.web.url(site, "/")])
                await wait_idle([agent.node], timeout=90)
                return agent.node.status_counters()

        c = run(go())
        dirs = [e.path for e in lab.server.log if e.host.startswith(site.host) and e.path.endswith("/")]
        deepest = max(len([x for x in p.split("/") if x]) for p in dirs)
        # a/b/c/d twice and three more: the block's third copy is the trap (max_segment_repeats = 2).
        assert deepest == 11, sorted(dirs, key=len)[-3:]
        assert c["out_of_scope"] > 0


@pytest.mark.timeout(120)
def test_bombs_of_every_kind_at_once_are_stored_and_parsed_within_the_parse_budget(run, tmp_path):
    with ServerThread(hostile_web("bombs"), zero_latency=True) as lab:
        topo = lab.web.topology
        site = topo.hostile_sites["bombs"]
        urls = [Web._name_url(site, n) + "/" for n in topo.subdomains(site)]

        async def go():
            async with cluster(tmp_path, lab, 1, agent_keys={"fetch.total_timeout": 20.0, "scope.max_depth": 0}) as (cs, client, [agent], [store]):
                await seed(agent.node, urls)
                await wait_idle([agent.node], timeout=90)
                return agent.node.status_counters(), agent.node.dispatcher.page.parse.parses, store, dict(agent.node.incidents.counts)

        c, parses, store, incidents = run(go())
        by_url = {cap.url: cap for cap in store.captures.values()}
        assert set(urls) <= set(by_url), "every bomb is stored"
        assert all(by_url[u].truncated for u in urls), "each one truncated at a cap"
        # Parsed in pieces (the text bomb's without a tag skipped), never more than the budget at once.
        assert c["parse_pieces"] > len(urls) and c["parse_pieces_skipped"] > 0
        assert 0 < parses.peak <= 1024 * 1024
        # The operator sees them: the decompression bombs (six of them are 20:1 or more), every cut body.
        assert incidents["bomb"] >= 4 and incidents["truncated_decoded"] == 7 and incidents["truncated_length"] == 1
