"""Crawl the lab with real agents in-process: consultant on port 0, lab web in a thread."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from pathlib import Path

from consultant_helpers import running, settings_for

from agent.server import create_server as create_agent
from agent.settings import load_settings as agent_settings
from lab.testing import ServerThread, small_topology
from lab.truth import Scope as TruthScope
from lab.truth import Truth
from lab.web import Web
from storage.testing import FakeStorageClient
from wancrawl.config import override

NORMAL = r"^https?://www\.s\d{4}\."


def lab_web(seed: int = 1, time_scale: float = 60.0, hostile_kinds: list[str] | None = None, **web) -> Web:
    return Web(small_topology(hostile_kinds, **web), seed, time_scale=time_scale)


def agent_config(tmp: Path, agent_id: str, consultant: str, hosts_file: Path, source_ip: str, **keys):
    s = agent_settings(None, {"agent_id": agent_id})
    base = {
        "listen": "127.0.0.1:0", "consultant": consultant, "data_dir": str(tmp / agent_id),
        "hosts_file": str(hosts_file) if hosts_file else "", "system_dns": False, "source_ip": source_ip,
        "fetch.allow_networks": ["127.0.0.0/8"],
        "politeness.delay": 0.02, "commit_interval": 0.05, "routing.flush_interval": 0.05,
        "storage_out.flush_interval": 0.1, "heartbeat_interval": 0.5,
        "fetch.total_timeout": 3.0, "fetch.read_timeout": 2.0, "fetch.connect_timeout": 2.0,
    }
    base.update({k.replace("__", "."): v for k, v in keys.items()})
    for k, v in base.items():
        s = override(s, k, v)
    return s


async def seed(node, urls: list[str]):
    """Hand URLs to an agent as the manager does: it routes them to their owners."""
    from wancrawl.v1 import agent_pb2

    return await node.push(0, [agent_pb2.UrlItem(url=u) for u in urls], route=True)


def truth_urls(web: Web, seeds: list[str], max_depth: int, allow: list[str] | None = None) -> set[str]:
    t = Truth(web, TruthScope(max_depth=max_depth, allow_domains=allow or [], respect_robots=True))
    return {r.url for r in t.reachable(seeds)}


def normal_hosts(web: Web) -> list[str]:
    return [s.host for s in web.topology.normal_sites]


def refetches(lab: ServerThread, port: int) -> dict[str, list[tuple[float, str]]]:
    """The page URLs the lab served more than once: URL -> [(seconds after the lab's first
    request, the requesting agent's source address)] (what a "fetched twice" message shows)."""
    log = [e for e in lab.server.log if e.path != "/robots.txt"]
    t0 = min((e.t for e in lab.server.log), default=0.0)
    by_url: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
    for e, u in zip(log, fetched_urls(lab, port)):
        by_url[u].append((round(e.t - t0, 3), e.client))
    return {u: w for u, w in by_url.items() if len(w) > 1}


def unfenced_refetches(lab: ServerThread, port: int, fenced: dict[str, float]) -> dict[str, list[tuple[float, str]]]:
    """The refetches no fence explains. A fetch whose answer came after its agent's lease had
    lapsed is dropped unstored and fetched again by the same agent (dispatcher: fenced_results):
    such repeats, up to each agent's fenced_results, are by design. A URL fetched by two agents,
    or by one more often than it fenced results, is returned. fenced: source address ->
    fenced_results (`fenced_of`)."""
    reps = refetches(lab, port)
    by_agent = collections.Counter(a for w in reps.values() if len({a for _, a in w}) == 1 for _, a in w[1:])
    return {u: w for u, w in reps.items()
            if len({a for _, a in w}) > 1 or by_agent[w[0][1]] > fenced.get(w[0][1], 0)}


def fenced_of(nodes) -> dict[str, float]:
    """Each agent's fenced_results by its source address (for unfenced_refetches)."""
    return {n.s.source_ip: n.status_counters()["fenced_results"] for n in nodes}


def fetched_urls(lab: ServerThread, port: int) -> list[str]:
    """Every page request the lab saw, as canonical URLs (robots.txt excluded)."""
    from wancrawl.urls import canonicalize

    out = []
    for e in lab.server.log:
        if e.path == "/robots.txt":
            continue
        out.append(canonicalize(f"http://{e.host}{'' if ':' in e.host else f':{port}'}{e.path}"))
    return out


async def wait_idle(nodes, timeout: float = 60.0, stable: float = 0.5) -> None:
    """Until every agent is idle and stays so for `stable` seconds (pushes may be in flight)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    quiet_since = None
    while loop.time() < end:
        if all(n.idle() for n in nodes):
            quiet_since = quiet_since or loop.time()
            if loop.time() - quiet_since >= stable:
                return
        else:
            quiet_since = None
        await asyncio.sleep(0.05)
    raise AssertionError("crawl did not finish: " + "; ".join(
        f"{n.id}: frontier={len(n.frontier)} in_flight={n.dispatcher.in_flight} routing={n.routing.pending()} "
        f"hosts={[(h, n.frontier.queue_len(h), n.frontier.ready_at(h), h in set(n.dispatcher.scheduler.hosts()), n.dispatcher.politeness.next_time(h) - n.clock()) for h in list(n.frontier.hosts_ready())[:5]]}"
        for n in nodes))


@contextlib.asynccontextmanager
async def cluster(tmp: Path, web_thread: ServerThread, n_agents: int, *, strategy: str = "hash", agent_keys=None, consultant_keys=None,
                  per_agent=None, dns: str = ""):
    """A consultant and n agents (one per ISP/city block of the lab), with fake storages;
    `per_agent[i]`: keys for agent i alone (over agent_keys). `dns`: the lab's DNS server
    ("IP:PORT"): everyone resolves through it with c-ares, no hosts file."""
    topo = web_thread.web.topology
    hosts_file = tmp / "hosts"
    hosts_file.write_text(topo.hosts_file())
    resolving = {"dns__system_dns": True, "dns__resolver": "cares", "dns__nameservers": [dns], "dns__timeout": 0.5,
                 "dns__hosts_file": ""} if dns else {"dns__hosts_file": str(hosts_file)}
    if dns:
        agent_keys = {"system_dns": True, "dns.resolver": "cares", "dns.nameservers": [dns], "dns.timeout": 0.5,
                      **(agent_keys or {})}
    cs = settings_for(tmp, strategy=strategy, **resolving, **(consultant_keys or {}))
    async with running(cs) as (csrv, client):
        servers, storages = [], []
        one_storage: list[FakeStorageClient] = []  # Lookup searches every agent's captures
        blocks = topo.blocks
        for i in range(n_agents):
            b = blocks[(i * 4) % len(blocks)]  # different ISP and city for the first three
            src = topo.agent_address(b.isp, b.city, 0)
            st = FakeStorageClient(one_storage)
            keys = {**(agent_keys or {}), **((per_agent or [{}] * n_agents)[i] or {})}
            s = agent_config(tmp, f"agent-{b.name}", csrv.address, "" if dns else hosts_file, src, **keys)
            srv, _ = create_agent(s, storage=st)
            await srv.start()
            servers.append(srv)
            storages.append(st)
        try:
            yield csrv, client, servers, storages
        finally:
            for srv in servers:
                await srv.stop(0)


@contextlib.asynccontextmanager
async def kademlia_cluster(tmp: Path, web_thread: ServerThread, n_agents: int, *, agent_keys=None, per_agent=None):
    """n agents in the consultant-less mode (mode = "kademlia"): no consultant; agent 0 starts
    alone, the others join through it. Yields (servers, fake storages)."""
    topo = web_thread.web.topology
    hosts_file = tmp / "hosts"
    hosts_file.write_text(topo.hosts_file())
    servers, storages = [], []
    one_storage: list[FakeStorageClient] = []
    blocks = topo.blocks
    try:
        for i in range(n_agents):
            b = blocks[(i * 4) % len(blocks)]
            src = topo.agent_address(b.isp, b.city, 0)
            st = FakeStorageClient(one_storage)
            keys = {"mode": "kademlia", "kademlia.bootstrap": [servers[0].address] if servers else [],
                    **(agent_keys or {}), **((per_agent or [{}] * n_agents)[i] or {})}
            s = agent_config(tmp, f"agent-{b.name}", "", hosts_file, src, **keys)
            srv, _ = create_agent(s, storage=st)
            await srv.start()
            servers.append(srv)
            storages.append(st)
        yield servers, storages
    finally:
        for srv in servers:
            await srv.stop(0)


async def overlay_formed(servers, timeout: float = 30.0) -> None:
    """Until every agent's overlay holds every other agent (the joins and ping-backs are done)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    want = len(servers) - 1
    while not all(len(s.node.overlay.table) == want for s in servers):
        if loop.time() > end:
            raise AssertionError("overlay did not form: " + ", ".join(f"{s.node.id}: {len(s.node.overlay.table)}" for s in servers))
        await asyncio.sleep(0.02)
