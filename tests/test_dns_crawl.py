"""Crawls through the lab's DNS server (issue 37): no hosts file anywhere; the agents and the
consultant resolve with c-ares, given the lab server explicitly (no query leaves the machine).

* A tiny lab whose names are a third CNAME chains: every truth page fetched, once.
* 10% of the names do not exist and 5% are never answered: the crawl finishes (every agent idle:
  nothing queued, or only parked) with every page of a name that resolves fetched, no page of
  one that does not, each missing name given up with its DNS reason and each mute one parked.
The reference is the generator's truth (lab/truth.py) with the zone's `resolves`, computed
without sockets.
"""

from __future__ import annotations

import collections
import dataclasses

import pytest

from agent_helpers import cluster, fetched_urls, normal_hosts, seed, wait_idle
from lab.dns import NXDOMAIN, RESOLVES, TIMEOUT, DnsThread, Zone
from lab.testing import ServerThread, small_topology
from lab.truth import Scope as TruthScope
from lab.truth import Truth
from lab.web import Web
from wancrawl.urls import host_of_canonical


def _web(per_block: int, **dns) -> Web:
    t = small_topology(pages_max=30)
    t = type(t)(dataclasses.replace(t.spec, sites=dataclasses.replace(t.spec.sites, per_block=per_block),
                                    dns=dataclasses.replace(t.spec.dns, **dns)), source="test")
    return Web(t, 3, time_scale=60.0)


def _truth(web: Web, seeds: list[str], zone: Zone) -> tuple[set[str], set[str]]:
    """(URLs a crawler can fetch, URLs of names that do not resolve) reachable from the seeds."""
    reached = Truth(web, TruthScope(allow_domains=normal_hosts(web), respect_robots=True), resolves=zone.resolves).reachable(seeds)
    return {r.url for r in reached if r.status != -1}, {r.url for r in reached if r.status == -1}


@pytest.mark.timeout(120)
def test_a_tiny_lab_crawled_through_the_lab_dns_server_fetches_every_truth_page(run, tmp_path):
    web = _web(2, cname_ratio=0.35, ttl=60)
    zone = Zone(web.topology)
    assert any(zone.has_chain(h) for h in normal_hosts(web)) and all(zone.resolves(h) for h in normal_hosts(web))
    with DnsThread(zone) as dns, ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[::5]]
        truth, dead = _truth(web, seeds, zone)

        async def go():
            keys = {"scope.allowed_domains": normal_hosts(web)}
            async with cluster(tmp_path, lab, 2, agent_keys=keys, dns=dns.address) as (cs, client, agents, _):
                await seed(agents[0].node, seeds)
                await wait_idle([a.node for a in agents])
                return [a.node.dispatcher.resolver.lookups for a in agents]

        lookups = run(go())
        got = fetched_urls(lab, lab.port)
    assert not dead
    assert not [u for u, n in collections.Counter(got).items() if n > 1], "fetched twice"
    assert set(got) == truth, (sorted(truth - set(got))[:5], sorted(set(got) - truth)[:5])
    assert sum(lookups) >= len({host_of_canonical(u) for u in truth}) > 0 and dns.server.queries > 0


@pytest.mark.timeout(150)
def test_a_crawl_where_names_fail_or_time_out_finishes_with_every_resolvable_page(run, tmp_path):
    web = _web(6, nxdomain_ratio=0.10, timeout_ratio=0.05, cname_ratio=0.2)
    zone = Zone(web.topology)
    kinds = collections.Counter(zone.kind(h) for h in normal_hosts(web))
    assert kinds[NXDOMAIN] >= 3 and kinds[TIMEOUT] >= 1 and kinds[RESOLVES] >= 40, kinds
    with DnsThread(zone) as dns, ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        seeds = [web.url(s, "/") for s in web.topology.normal_sites if zone.resolves(s.host)][::6]
        truth, dead = _truth(web, seeds, zone)

        async def go():
            # A mute name's robots.txt never comes: parked after 1 s, so the crawl can end.
            keys = {"scope.allowed_domains": normal_hosts(web), "robots.park_after": 1.0, "robots.retry_base": 0.5,
                    "dns.temporary_ttl": 1.0}
            async with cluster(tmp_path, lab, 2, agent_keys=keys, dns=dns.address) as (cs, client, agents, _):
                nodes = [a.node for a in agents]
                await seed(nodes[0], seeds)
                await wait_idle(nodes, timeout=90)
                given_up = {h: why for n in nodes for h, why in n.dispatcher.given_up.items()}
                parked = {p.host for n in nodes for p in n.dispatcher.parked(n.clock())}
                return given_up, parked

        given_up, parked = run(go())
        got = set(fetched_urls(lab, lab.port))
    dead_hosts = {host_of_canonical(u) for u in dead}
    assert {zone.kind(h) for h in dead_hosts} == {NXDOMAIN, TIMEOUT}, "the crawl meets both kinds of failure"
    assert truth <= got, f"resolvable pages not fetched: {sorted(truth - got)[:5]}"
    assert not {host_of_canonical(u) for u in got} & dead_hosts
    missing = {h for h in dead_hosts if zone.kind(h) == NXDOMAIN}
    assert missing <= set(given_up) and all(given_up[h].startswith("DNS:") and "NXDOMAIN" in given_up[h] for h in missing)
    mute = {h for h in dead_hosts if zone.kind(h) == TIMEOUT}
    assert not mute & set(given_up), "a timeout is temporary: not given up as a missing name"
    assert all(any(p.endswith(h) or p.endswith(h + ":" + str(lab.port)) for p in parked) for h in mute), (mute, parked)
