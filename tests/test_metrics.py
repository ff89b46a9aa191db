"""Prometheus metrics of every service (docs/metrics.md) and the Grafana dashboard that reads them.

One crawl serves the module: a consultant, a real storage service and two agents, each with
`metrics_listen`, crawl a few sites of the lab web (one seed 404s, one host does not resolve);
then every endpoint is scraped and the numbers are checked against the lab's request log, the
storage index and each other.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import urllib.request
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import GAUGES as AGENT_GAUGES, SCHEMA as AGENT
from agent.crawl.outcome import ERROR_KINDS
from agent.client import AgentClient
from agent.server import create_server as create_agent
from consultant.metrics import SCHEMA as CONSULTANT
from lab.testing import ServerThread
from storage.client import GrpcStorageClient
from storage.config import load as load_storage
from storage.metrics import SCHEMA as STORAGE
from storage.server import create_server as create_storage
from wancrawl import errors, metrics as wmetrics
from wancrawl.metrics import Schema
from wancrawl.stats import StatsRegistry

from agent_helpers import agent_config, lab_web, normal_hosts, seed, wait_idle
from conftest import REPO, free_port
from consultant_helpers import running, settings_for

DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "wancrawl.json"
DOCS = REPO / "docs" / "metrics.md"
NX_HOST = "www.nx.lab"  # in scope, absent from the hosts file: given up on DNS
SERVER_ONLY_WITH_TLS = {"auth_refused_unauthenticated", "auth_refused_permission_denied"}


@dataclass
class Crawl:
    texts: dict[str, str] = field(default_factory=dict)  # "agent-x" / "consultant" / "storage" -> exposition
    agent_ids: list[str] = field(default_factory=list)
    lab_pages: int = 0          # page requests the lab answered (robots.txt excluded)
    lab_4xx: int = 0
    lab_5xx: int = 0
    index_rows: int = 0         # responses + revisits in storage's index
    structure: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # agent -> {"counts"|"levels": names}


def registry_structure(reg: StatsRegistry) -> dict[str, set[str]]:
    """The node's registry split as its owners declared it: typed counters and the counts read
    through a function (the router's Counters; the dispatcher's dict until it registers typed
    stats, TODO(merge)), and the levels (namespaces "<component>.levels")."""
    where = [name.rsplit(".", 1) for name in reg.namespaced()]
    counts = set(reg.counter_names()) | {k for ns, k in where if ns in ("routing.router", "dispatch")}
    return {"counts": counts, "levels": {k for ns, k in where if ns.endswith(".levels")}}


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def values(text: str, service: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, labels other than the identity) -> value."""
    ident = {"agent", "listen"}
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ident)))] = s.value
    return out


def v(vals: dict, name: str, **labels: str) -> float:
    return vals[(name, tuple(sorted(labels.items())))]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory) -> Crawl:
    tmp = tmp_path_factory.mktemp("metrics")
    web = lab_web(seed=11, pages_max=15)
    out = Crawl()
    with ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        topo = web.topology
        hosts_file = tmp / "hosts"
        hosts_file.write_text(topo.hosts_file())
        sites = topo.normal_sites[:4]
        seeds = [web.url(s, "/") for s in sites] + [web.url(sites[0], "/no-such-page-here"), f"http://{NX_HOST}/"]
        ports = {"consultant": free_port(), "storage": free_port()}
        consultant_at = f"127.0.0.1:{free_port()}"

        async def go() -> None:
            # Storage checks every capture's placement with the consultant, as in the lab.
            cfg = tmp / "storage.toml"
            cfg.write_text(f'listen = "127.0.0.1:0"\ndata_dir = "{tmp / "storage"}"\n'
                           f'metrics_listen = "127.0.0.1:{ports["storage"]}"\nconsultant = "{consultant_at}"\n')
            store, _ = create_storage(load_storage(cfg))
            await store.start()
            cs = settings_for(tmp, strategy="hash", dns__hosts_file=str(hosts_file), listen=consultant_at,
                              metrics_listen=f"127.0.0.1:{ports['consultant']}")
            agents = []
            try:
                async with running(cs) as (csrv, client):
                    for i in range(2):
                        b = topo.blocks[(i * 4) % len(topo.blocks)]
                        port = free_port()
                        keys = {"scope.allowed_domains": [*normal_hosts(web), NX_HOST], "storage": store.address,
                                "metrics_listen": f"127.0.0.1:{port}", "robots.park_after": 0.2}
                        s = agent_config(tmp, f"agent-{b.name}", csrv.address, hosts_file,
                                         topo.agent_address(b.isp, b.city, 0), **keys)
                        srv, _ = create_agent(s)
                        await srv.start()
                        agents.append((srv, port))
                    try:
                        await seed(agents[0][0].node, seeds)
                        await wait_idle([a.node for a, _ in agents])
                        # One refused call per service: rpc_errors by code.
                        with pytest.raises(errors.InvalidArgument):
                            await client.resolve([])
                        async with GrpcStorageClient(store.address) as sc:
                            with pytest.raises(errors.NotFound):
                                await sc.get("http://never.example/")
                        async with AgentClient(agents[0][0].address) as ac:
                            with pytest.raises(errors.InvalidArgument):
                                await ac.push("", 0, [])  # a push without a sender
                        for srv, port in agents:
                            srv.refresh_metrics()  # the scrape shows the state at idle, not a second ago
                            n = srv.node
                            out.agent_ids.append(n.id)
                            out.structure[n.id] = registry_structure(n.stats)
                            out.texts[n.id] = await asyncio.to_thread(scrape, port)
                        out.texts["consultant"] = await asyncio.to_thread(scrape, ports["consultant"])
                    finally:
                        for srv, _ in agents:
                            await srv.stop(0)
                st = store.store.stats(5)
                out.index_rows = st["responses"] + st["revisits"]
                out.texts["storage"] = await asyncio.to_thread(scrape, ports["storage"])
            finally:
                await store.stop(0.5)

        asyncio.run(go())
        pages = [e for e in lab.server.log if e.path != "/robots.txt"]
        out.lab_pages = sum(1 for e in pages if e.status)
        out.lab_4xx = sum(1 for e in pages if 400 <= e.status < 500)
        out.lab_5xx = sum(1 for e in pages if e.status >= 500)
    return out


def schema_of(key: str) -> Schema:
    return {"consultant": CONSULTANT, "storage": STORAGE}.get(key, AGENT)


# -- every endpoint ---------------------------------------------------------------------------------

def test_every_family_parses_with_its_declared_type_identity_and_help(crawl):
    for key, text in crawl.texts.items():
        schema = schema_of(key)
        fams = families(text)
        assert fams, key
        for fam in fams.values():
            assert fam.name.startswith(schema.prefix + "_"), fam.name
            name = fam.name[len(schema.prefix) + 1:]
            assert name in schema.help, f"{fam.name} has no meaning in {schema.prefix}'s schema (docs/metrics.md)"
            assert fam.type == schema.kind(name), f"{fam.name}: {fam.type}, declared {schema.kind(name)}"
            assert fam.documentation == schema.help[name]
            for s in fam.samples:
                assert s.labels[schema.identity] == key if schema is AGENT else s.labels[schema.identity].startswith("127.0.0.1:")
                if fam.type == "counter":
                    assert s.name == fam.name + "_total" and s.value >= 0
                extra = set(s.labels) - {schema.identity}
                assert extra == ({schema.labelled[name]} if name in schema.labelled else set()), (s.name, s.labels)


def test_named_keys_are_counters_or_gauges(crawl):
    cases = {
        "agent": ({"pages", "bytes", "fetches", "pushes", "n", "resolves", "resolved_hosts", "pushes_received",
                   "host_cache_hits", "captures_stored", "fetch_errors", "rpc_errors"},
                  {"frontier", "hosts_with_work", "in_flight", "parked_hosts", "mu", "lambda", "host_cache_hit_ratio",
                   "replica_lag_items", "replica_unsynced", "epoch", "idle"}),
        "consultant": ({"resolve_requests", "hosts_resolved", "registrations", "heartbeats", "leases_expired", "rpc_errors"},
                       {"agents_alive", "agents_dead", "epoch", "answers_cached"}),
        "storage": ({"stored", "revisits", "duplicates", "batches", "rejected", "bytes_written", "raw_bytes_received",
                     "bytes_received"}, {"ingest_queue"}),
    }
    for key, (counters, gauges) in cases.items():
        text = crawl.texts[crawl.agent_ids[0]] if key == "agent" else crawl.texts[key]
        schema = schema_of(key if key != "agent" else crawl.agent_ids[0])
        fams = families(text)
        for name in counters:
            assert fams[f"{schema.prefix}_{name}"].type == "counter", name
        for name in gauges:
            assert fams[f"{schema.prefix}_{name}"].type == "gauge", name


def test_the_agents_required_families_exist_and_error_kinds_are_labels_of_one_family(crawl):
    required = {
        "pages_total", "captures_stored_total", "bytes_total", "fetch_errors_total", "frontier", "hosts_with_work",
        "in_flight", "parked_hosts", "pushes_total", "n_total", "pushes_received_total", "urls_received_total",
        "resolves_total", "resolved_hosts_total", "replica_lag_items", "replica_unsynced", "host_cache_hit_ratio",
        "host_cache_hits_total", "host_cache_misses_total", "mu", "lambda",
    }  # and rpc_errors_total{code}, once an RPC failed (test_values_match_...)
    for aid in crawl.agent_ids:
        vals = values(crawl.texts[aid], "agent")
        names = {n for n, _ in vals}
        assert {f"wancrawl_agent_{r}" for r in required} <= names, required - {n[len("wancrawl_agent_"):] for n in names}
        kinds = {dict(lab)["kind"] for n, lab in vals if n == "wancrawl_agent_fetch_errors_total"}
        assert kinds == set(ERROR_KINDS)
        assert not any(n.startswith("wancrawl_agent_fetch_errors_") and n != "wancrawl_agent_fetch_errors_total" for n in names)


def test_values_match_the_lab_log_storage_and_each_other(crawl):
    agents = [values(crawl.texts[a], "agent") for a in crawl.agent_ids]
    cons = values(crawl.texts["consultant"], "consultant")
    stor = values(crawl.texts["storage"], "storage")

    def total(name: str, **labels: str) -> float:
        return sum(v(a, f"wancrawl_agent_{name}", **labels) for a in agents)

    # Pages: what the lab answered is what the agents counted and storage indexed.
    assert total("retries_total") == 0 and crawl.lab_5xx == 0, "the lab's normal sites answer at once"
    assert total("pages_total") == crawl.lab_pages > 10
    assert total("captures_stored_total") == total("pages_total")
    assert v(stor, "wancrawl_storage_captures_received_total") == total("pages_total")
    assert v(stor, "wancrawl_storage_stored_total") + v(stor, "wancrawl_storage_revisits_total") == crawl.index_rows
    assert v(stor, "wancrawl_storage_duplicates_total") == 0 and v(stor, "wancrawl_storage_rejected_total") == 0
    # Every page came from its host's owner: the placement check asked the consultant and refused nothing.
    assert v(stor, "wancrawl_storage_rejected_not_placed_total") == 0 == total("storage_captures_not_placed_total")
    assert 1 <= v(stor, "wancrawl_storage_placement_resolves_total") <= total("spool_batches_sent_total")
    assert v(stor, "wancrawl_storage_placement_resolve_failures_total") == 0 == v(stor, "wancrawl_storage_placement_unavailable_total")
    assert 1 <= v(stor, "wancrawl_storage_placement_routes_cached") <= v(cons, "wancrawl_consultant_hosts_resolved_total")
    assert v(stor, "wancrawl_storage_raw_bytes_received_total") > v(stor, "wancrawl_storage_bytes_received_total") > 0
    assert v(stor, "wancrawl_storage_bytes_written_total") >= v(stor, "wancrawl_storage_bytes_received_total")
    assert total("bytes_total") > 0
    # Errors by kind: the 404 seed (and any 404 link) is the lab's 4xx. The unresolvable host is
    # given up on its look-up's answer (issue 37), before any request: no dns fetch error.
    assert total("fetch_errors_total", kind="http_4xx") == crawl.lab_4xx >= 1
    assert total("fetch_errors_total", kind="http_5xx") == 0
    assert total("fetch_errors_total", kind="dns") == 0
    # Pushes: every batch one agent sent, the other received (at idle nothing is in flight).
    assert total("push_failures_total") == 0
    assert total("pushes_total") == total("pushes_received_total") >= 1
    assert total("n_total") == total("urls_received_total") == total("pushed_in_total") + total("not_mine_sent_total")
    # Resolves: the consultant answered at least what the routers asked (epoch checks and handover look-ups add).
    assert v(cons, "wancrawl_consultant_resolve_requests_total") >= total("resolves_total") >= 1
    assert v(cons, "wancrawl_consultant_hosts_resolved_total") >= total("resolved_hosts_total")
    assert v(cons, "wancrawl_consultant_registrations_total") == 2
    assert v(cons, "wancrawl_consultant_agents_alive") == 2 and v(cons, "wancrawl_consultant_agents_dead") == 0
    assert v(cons, "wancrawl_consultant_epoch") >= max(v(a, "wancrawl_agent_epoch") for a in agents) >= 1
    for a in agents:
        hits, misses = v(a, "wancrawl_agent_host_cache_hits_total"), v(a, "wancrawl_agent_host_cache_misses_total")
        assert v(a, "wancrawl_agent_host_cache_hit_ratio") == pytest.approx(hits / (hits + misses))
        routed = v(a, "wancrawl_agent_routed_total")
        assert v(a, "wancrawl_agent_mu") == pytest.approx(v(a, "wancrawl_agent_n_total") / routed if routed else 0.0)
        assert 0 <= v(a, "wancrawl_agent_lambda") <= 1
        assert v(a, "wancrawl_agent_in_flight") == 0
    # Finished: the unresolvable host was given up on DNS at once (not parked for an hour).
    assert total("frontier") == total("hosts_with_work") == total("parked_hosts") == 0
    assert total("hosts_dns_failed_total") == 1
    # One refused call each: rpc_errors by code.
    assert v(cons, "wancrawl_consultant_rpc_errors_total", code="invalid_argument") == 1
    assert v(stor, "wancrawl_storage_rpc_errors_total", code="not_found") == 1
    assert v(agents[0], "wancrawl_agent_rpc_errors_total", code="invalid_argument") == 1


def test_the_agent_schema_matches_who_counts_and_who_measures(crawl):
    """GAUGES is the agent's one list of levels: no component's counts are in it, every
    component's gauges() are, and every number the agent exports has a meaning."""
    for aid, st in crawl.structure.items():
        assert not (st["counts"] & AGENT_GAUGES), st["counts"] & AGENT_GAUGES
        assert st["levels"] <= AGENT_GAUGES, st["levels"] - AGENT_GAUGES
    exported = {n[len("wancrawl_agent_"):].removesuffix("_total") for a in crawl.agent_ids
                for n, _ in values(crawl.texts[a], "agent")}
    # Nothing declared that no agent exports (a renamed counter leaves its old name behind). The
    # overlay's are exported in the Kademlia mode only (tests/test_kademlia_agents.py sees them).
    # The loop lag's, with loop_lag_interval > 0 only (tests/test_looplag.py).
    kademlia_only = {n for n in AGENT.help if n.startswith("overlay_")}
    loop_lag_only = {n for n in AGENT.help if n.startswith("loop_")}
    # The revisit schedule's levels, with revisit.enabled only (tests/test_revisit_agent.py).
    revisit_only = {"revisits_scheduled", "revisits_due", "revisit_freshness"}
    assert set(AGENT.help) - SERVER_ONLY_WITH_TLS - kademlia_only - loop_lag_only - revisit_only - exported == set()
    # Storage's overlay lookups' (peer_*), with `peers` (Kademlia mode) only (tests/test_kademlia_trust.py).
    peers_only = {n for n in STORAGE.help if n.startswith("peer_")}
    for key, schema in (("consultant", CONSULTANT), ("storage", STORAGE)):
        names = {n[len(schema.prefix) + 1:].removesuffix("_total") for n, _ in values(crawl.texts[key], key)}
        assert set(schema.help) - SERVER_ONLY_WITH_TLS - peers_only - names == set(), key


def _metrics_doc():
    """scripts/metrics_doc.py, which gathers every service's schema (wancrawl/ may not import them)."""
    spec = importlib.util.spec_from_file_location("metrics_doc", REPO / "scripts" / "metrics_doc.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_list_every_metric():
    text = DOCS.read_text()
    schemas = _metrics_doc().SCHEMAS
    assert wmetrics.render(text, schemas) == text, "docs/metrics.md is stale: python scripts/metrics_doc.py docs/metrics.md"
    for schema in schemas.values():
        for name in schema.help:
            assert f"`{schema.exposed(name)}`" in text


# -- the Grafana dashboard --------------------------------------------------------------------------

def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels inside a collapsed row
    return out


def test_dashboard_is_a_grafana_dashboard_model():
    d = dashboard()
    assert d["schemaVersion"] == 39 and d["uid"] and d["title"]
    assert isinstance(d.get("time"), dict) and d["time"]["from"] and d["time"]["to"]
    ps = panels(d)
    ids = [p["id"] for p in ps]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for p in ps:
        assert isinstance(p["id"], int) and p["type"] and p["title"]
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(g) and 0 <= g["x"] and g["x"] + g["w"] <= 24
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "wancrawl-prometheus"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"] == {"type": "prometheus", "uid": "wancrawl-prometheus"}
            assert t["expr"].strip()
    var = {v["name"]: v for v in d["templating"]["list"]}
    assert var["agent"]["type"] == "query" and var["agent"]["datasource"]["uid"] == "wancrawl-prometheus"
    assert "wancrawl_agent_" in json.dumps(var["agent"]["query"])
    assert var["agent"].get("multi") and var["agent"].get("includeAll")


def test_every_metric_the_dashboard_queries_is_exported(crawl):
    exported = {n for text in crawl.texts.values() for n, _ in values(text, "")}
    exported |= {f"{s.prefix}_{n}" for s in (AGENT, CONSULTANT, STORAGE) for n in SERVER_ONLY_WITH_TLS}
    used = set()
    d = dashboard()
    exprs = [t["expr"] for p in panels(d) for t in p.get("targets", [])]
    variables = [json.dumps(v.get("query")) for v in d["templating"]["list"]]
    for e in exprs + variables:
        used |= set(re.findall(r"\bwancrawl_[a-z0-9_]+", e))
    assert used and used - exported == set(), used - exported
    # The dashboard covers each service, and every agent query follows the agent variable.
    assert {u.split("_")[1] for u in used} == {"agent", "consultant", "storage"}
    for e in exprs:
        for sel in re.findall(r"wancrawl_agent_[a-z0-9_]+(\{[^}]*\})?", e):
            assert 'agent=~"$agent"' in sel, e
