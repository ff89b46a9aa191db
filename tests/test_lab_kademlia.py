"""`lab up --mode kademlia`: the lab's processes with no consultant. The agents form a Kademlia
overlay among themselves (every agent's Members lists every agent), take seeds pushed with
route=true to one of them, and store the lab's truth exactly once, each URL fetched by the agent
closest to its host by XOR distance."""

from __future__ import annotations

import asyncio
import collections
import sqlite3
from pathlib import Path

from lab import checks, peers, topology
from lab.cluster import down, overlay_complete, overlay_views, up, write_configs
from lab.truth import Scope, Truth
from lab.web import Web
from manager.seed import parse_seeds
from wancrawl.kademlia import xorspace
from wancrawl.urls import host_of

TOPOLOGY = '[sites]\nper_block = 2\nhostile = false\n[web]\npages_max = 40\n'
GROUPS = ["unicom-beijing", "cernet-harbin", "telecom-guangzhou"]


def test_kademlia_configs_name_every_other_agent_and_no_consultant(tmp_path):
    import tomllib

    cfgs = write_configs(tmp_path, topology.load(), "asn", GROUPS, delay=0.05, concurrency=4, lease=7.0, mode="kademlia")
    assert cfgs.consultant is None and not (tmp_path / "consultant.toml").exists()
    assert "consultant" not in tomllib.loads(cfgs.storage.config.read_text())
    addresses = {a.address for a in cfgs.agents.values()}
    for svc in cfgs.agents.values():
        c = tomllib.loads(svc.config.read_text())
        assert c["mode"] == "kademlia" and "consultant" not in c
        assert set(c["kademlia"]["bootstrap"]) == addresses - {svc.address}
        assert c["kademlia"]["lease_seconds"] == 7.0 and "tls" in c


def test_overlay_complete_ignores_extra_members_and_reports_silent_agents():
    want = {"a", "b"}
    assert overlay_complete({"a": {"a", "b", "gone"}, "b": {"a", "b"}}, want) == []
    assert overlay_complete({"a": {"a"}, "b": None}, want) == ["a", "b"]


def test_lab_in_kademlia_mode_crawls_the_truth_exactly_once_by_xor_owners(tmp_path):
    topo_file = tmp_path / "topology.toml"
    topo_file.write_text(TOPOLOGY)
    run = tmp_path / "run"
    cl = up(run, mode="kademlia", groups=GROUPS, topology_path=str(topo_file), time_scale=60.0, delay=0.02, concurrency=16)
    try:
        assert cl.mode == "kademlia" and cl.consultant == ""
        assert {p.name for p in cl.procs} == {"web", "storage", *(f"agent-{g}" for g in GROUPS)}, "no consultant"
        # `up` returned: the overlay is formed, every agent lists every agent.
        views = asyncio.run(overlay_views(cl.agents))
        assert views == {g: set(GROUPS) for g in GROUPS}

        seeds = parse_seeds(Path(cl.seeds_file).read_text()).urls
        # The operator pushes every seed to one agent, which routes them to their owners.
        res = asyncio.run(peers.inject([cl.agents[GROUPS[0]]], seeds))
        assert sum(res.taken.values()) == len(seeds) and not res.failed and not res.refused
        assert asyncio.run(peers.wait_idle(list(cl.agents.values()), timeout=120, stable=1.0))
    finally:
        stopped = down(run)
    assert sorted(stopped) == sorted(["web", "storage", *(f"agent-{g}" for g in GROUPS)])

    stored = _stored(run)
    web = Web(topology.load(str(topo_file)), cl.seed, time_scale=cl.time_scale).with_port(cl.web_port)
    truth = {r.url for r in Truth(web, Scope(allow_domains=cl.allowed_domains, respect_robots=True)).reachable(seeds)}
    counts = collections.Counter(u for u, _ in stored)
    assert [u for u, n in counts.items() if n > 1] == [], "a URL was stored twice"
    assert set(counts) == truth, (sorted(truth - set(counts))[:5], sorted(set(counts) - truth)[:5])
    assert all(host_of(u) in set(cl.allowed_domains) for u in counts), "nothing out of scope"
    # The owner of a host is the agent whose id, read here from its certificate (the independent
    # reference), is closest to the host's key.
    node_ids = {g: xorspace.node_id_of_cert((run / "pki" / f"agent-{g}.crt").read_bytes()) for g in GROUPS}
    owner_ip = {h: cl.agent_sources[min(node_ids, key=lambda a: node_ids[a] ^ xorspace.host_key(h))]
                for h in {host_of(u) for u in counts}}
    assert checks.wrong_owner(checks.read_log(cl.web_log), owner_ip) == [], "every URL fetched by its host's owner"
    assert len({a for _, a in stored}) == 3, "all three agents crawled"
    storage_log = (run / "logs" / "storage.log").read_text()
    assert "does not answer" not in storage_log
    assert not any("not-placed" in p.name for p in run.glob("agents/*/spool/rejected/*")), "nothing refused"


def _stored(run: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(f"file:{run / 'storage' / 'index.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT canonical_url, agent_id FROM storage_captures").fetchall()
    finally:
        db.close()


def test_a_joining_agent_and_a_restarted_cluster_form_the_overlay_again(tmp_path):
    from lab.cluster import add_agent, kill_all, restart_all

    topo_file = tmp_path / "topology.toml"
    topo_file.write_text(TOPOLOGY)
    run = tmp_path / "run"
    cl = up(run, mode="kademlia", groups=GROUPS[:2], topology_path=str(topo_file), delay=0.02, concurrency=4)
    try:
        # A join: the new agent bootstraps through the running ones; add_agent returns once
        # every agent's overlay lists all three.
        add_agent(run, GROUPS[2])
        agents = type(cl).load(run).agents
        assert asyncio.run(overlay_views(agents)) == {g: set(GROUPS) for g in GROUPS}
        # The whole cluster crashes at once and comes back on its recorded configs (the same
        # ports, so each one's bootstrap list still names the others).
        names = [f"agent-{g}" for g in GROUPS]
        kill_all(run, names)
        restart_all(run, names)
        assert asyncio.run(overlay_views(agents)) == {g: set(GROUPS) for g in GROUPS}
    finally:
        down(run)
