"""The service-config writers as they were before issue 34 (item 5): TOML as f-strings, copied
verbatim from lab/cluster.py (write_configs, kademlia_table) and manager/crawl.py (consultant_toml,
storage_toml, agent_toml) at d782d49. The reference tests/test_config_writers.py holds today's
writers to: what a service loads from their files must be what it loads from today's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from lab import geodb, topology
from lab.cluster import MODES, Configs, Service, _pki, agent_group
from manager import procs
from wancrawl.errors import ConfigError
from manager.procs import free_port
from manager.seaweedfs import storage_tables

if TYPE_CHECKING:
    from manager.crawl import Plan


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(x) for x in items) + "]"


# --- lab/cluster.py ------------------------------------------------------------------------------


def write_configs(run: Path, topo: topology.Topology, strategy: str, groups: list[str], *, delay: float,
                  concurrency: int, lease: float = 10.0, allow_hostile: bool = False,
                  agent_keys: dict[str, dict[str, int | float]] | None = None, consultant_tables: str = "",
                  agent_tables: str = "", mode: str = "consultant", kademlia_keys: str = "",
                  consultants: int = 1, object_store: str = "", storage_writers: int = 1, index_url: str = "",
                  index_schema: str = "") -> Configs:
    """Consultant, storage and agent configs for the run, with the addresses they listen on.
    `object_store`: an S3 endpoint (the lab's SeaweedFS) for the WARCs instead of a directory;
    `storage_writers`: that many storage processes over one index (`index_url`, PostgreSQL, in
    `index_schema`) and one bucket, writer ids w1, w2, ...; agent n ships to writer n mod N.
    `agent_keys`: per group, `concurrency` and `delay` to use instead of the cluster's (an
    unequal cluster, bench/balance.py); `consultant_tables`, `agent_tables`: TOML tables appended
    to the consultant's and every agent's config (e.g. "[balance]\nenabled = true"); `kademlia_keys`:
    lines added to every agent's [kademlia] table (e.g. "balance = true").
    mode "kademlia": no consultant config (Configs.consultant is None), storage without
    `consultant`, and every agent bootstraps through all the others (kademlia_table).
    consultants > 1: replicas sharing one config (each started with its own --listen) and a
    fresh PostgreSQL schema of the run."""
    if mode not in MODES:
        raise ConfigError(f"unknown lab mode {mode!r} (known: {', '.join(MODES)})")
    kademlia = mode == "kademlia"
    if consultants < 1 or (kademlia and consultants > 1):
        raise ConfigError(f"consultants = {consultants}: at least 1, and no replicas in kademlia mode")
    paths = geodb.write_all(topo, run / "geo")
    if storage_writers < 1:
        raise ConfigError("storage_writers must be at least 1")
    if storage_writers > 1 and not (object_store and index_url):
        raise ConfigError("several storage writers read each other's records from one bucket and one index: "
                          "give --object-store and --index-url (PostgreSQL)")
    cport = free_port()
    wports = [free_port() for _ in range(storage_writers)]
    replicas = [f"127.0.0.1:{cport}"] + [f"127.0.0.1:{free_port()}" for _ in range(consultants - 1)]
    state_url = (procs.pg_schema_url(procs.PG_URL, procs.run_schema(run, "lab"), fresh=True) if consultants > 1
                 else f"sqlite:///{run}/consultant.db")
    # Every agent's port is chosen before any config is written: in kademlia mode each agent's
    # bootstrap list names all the others.
    placed = [(spec, *agent_group(topo, spec), free_port()) for spec in groups]
    addresses = [f"127.0.0.1:{aport}" for *_, aport in placed]
    isps = "".join(f'"{i.slug}" = [{i.asn}]\n' for i in topo.isps)
    consultant = run / "consultant.toml"
    consultant_text = f"""# written by lab up
listen = "127.0.0.1:{cport}"
state_url = "{state_url}"
strategy = "{strategy}"
lease_seconds = {lease}
[databases]
city_db = "{paths[geodb.CITY_DB]}"
asn_db = "{paths[geodb.ASN_DB]}"
[dns]
hosts_file = "{paths[geodb.HOSTS]}"
system_dns = false
[asn]
fallback = "geo"
[asn.isps]
{isps}{_pki(run, "service", "consultant")}
{consultant_tables}"""
    if not kademlia:
        consultant.write_text(consultant_text)
    # Without a consultant storage asks the agents' overlay who is placed where (its `peers`).
    storage_consultant = (f"peers = {_toml_list(addresses)}\n" if kademlia else f'consultant = "{",".join(replicas)}"\n')
    writers: list[Service] = []
    for i, wport in enumerate(wports):
        name = "storage" if i == 0 else f"storage-{i + 1}"
        index = f'[index]\nurl = "{index_url}"\n' + (f'schema = "{index_schema}"\n' if index_schema else "") if index_url else ""
        sink = storage_tables(object_store, "wancrawl-lab", f"w{i + 1}") if object_store else ""
        cfg_path = run / f"{name}.toml"
        cfg_path.write_text(f"""# written by lab up
listen = "127.0.0.1:{wport}"
data_dir = "{run}/{name}"
{storage_consultant}[ingest]
fsync = "os"
{index}{sink}{_pki(run, "service", "storage")}""")
        writers.append(Service(cfg_path, f"127.0.0.1:{wport}"))
    allowed = [s.host for s in topo.normal_sites] + ([topo.site_domain(s) for s in topo.hostile_sites.values()] if allow_hostile else [])
    agents: dict[str, Service] = {}
    for n, ((spec, g, src, aport), address) in enumerate(zip(placed, addresses)):
        # "isp-city" is the block's first agent; "isp-city#n" its n-th (several in one block).
        own = (agent_keys or {}).get(spec, {})
        head = 'mode = "kademlia"' if kademlia else f"consultants = {_toml_list(replicas)}"
        tail = kademlia_table([a for a in addresses if a != address], lease) + kademlia_keys if kademlia else ""
        # Its own writer first, then the others (failover: storage.client.FailoverStorageClient).
        ranked = ",".join(w.address for w in writers[n % len(writers):] + writers[:n % len(writers)])
        cfg = run / "agents" / f"{g}.toml"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(f"""# written by lab up
agent_id = "{g}"
listen = "{address}"
{head}
storage = "{ranked}"
data_dir = "{run}/agents/{g}"
hosts_file = "{paths[geodb.HOSTS]}"
system_dns = false
source_ip = "{src}"
concurrency = {int(own.get("concurrency", concurrency))}
heartbeat_interval = 1.0
[fetch]
allow_networks = ["127.0.0.0/8"]
total_timeout = 20.0
[politeness]
delay = {own.get("delay", delay)}
[scope]
allowed_domains = {_toml_list(allowed)}
{tail}{_pki(run, "agent", g, src)}
{agent_tables}""")
        agents[g] = Service(cfg, address, src)
    return Configs(None if kademlia else Service(consultant, f"127.0.0.1:{cport}"), writers[0], agents,
                   [] if kademlia else replicas, writers)


def kademlia_table(bootstrap: list[str], lease: float) -> str:
    """An agent's [kademlia] table: it joins through `bootstrap` (any one answering is enough,
    so a cluster started all at once forms whatever order the agents come up in: each retries
    its join every heartbeat until a peer answers). The lab's lease is the overlay's, and a
    silent neighbour is dead after the same time (dead_after may not be shorter than the lease)."""
    return f"[kademlia]\nbootstrap = {_toml_list(bootstrap)}\nlease_seconds = {lease}\ndead_after = {lease}\n"


# --- manager/crawl.py ----------------------------------------------------------------------------


def _q(s: str) -> str:
    return json.dumps(s)  # a TOML basic string


def _list(items: list[str]) -> str:
    return "[" + ", ".join(_q(x) for x in items) + "]"


def consultant_toml(plan: Plan, listen: str, tls: str, state_url: str = "") -> str:
    """One file for every replica (each is started with its own --listen); state_url: their
    shared PostgreSQL, else SQLite under OUT."""
    dns = (f"hosts_file = {_q(plan.hosts_file)}\n" if plan.hosts_file else "") + "system_dns = true\n"
    state = state_url or "sqlite:///" + str(plan.out / "consultant" / "state.db")
    # geo: an empty city_db is the GeoLite2 City DB shipped with maxminddb-geolite2.
    return (f"# written by manager crawl\nlisten = {_q(listen)}\n"
            f"state_url = {_q(state)}\n"
            f"strategy = {_q(plan.strategy)}\nlease_seconds = 10.0\n[dns]\n{dns}{tls}")


def storage_toml(plan: Plan, listen: str, consultant: str, tls: str, peers: list[str] | None = None, *,
                 writer: int = 1, endpoint: str = "") -> str:
    # consultant: storage stores a page only from its host's owner or backups (docs/security.md).
    # "" (Kademlia mode): the agents' overlay answers that question instead (`peers`).
    line = f"consultant = {_q(consultant)}\n" if consultant else ""
    if not consultant and peers:
        line = "peers = [" + ", ".join(_q(p) for p in peers) + "]\n"
    data = plan.out / ("storage" if writer == 1 else f"storage-{writer}")
    index = f"[index]\nurl = {_q(plan.index_url)}\n" if plan.index_url else ""
    sink = storage_tables(endpoint, "wancrawl", f"w{writer}") if endpoint else ""
    return (f"# written by manager crawl\nlisten = {_q(listen)}\ndata_dir = {_q(str(data))}\n"
            f"{line}[ingest]\nfsync = \"always\"\n{index}{sink}{tls}")


def agent_toml(plan: Plan, agent_id: str, listen: str, consultant: str, storage: str, tls: str,
               bootstrap: list[str] | None = None) -> str:
    """consultant "" with bootstrap: Kademlia mode, joining through those agents' addresses."""
    hosts = f"hosts_file = {_q(plan.hosts_file)}\n" if plan.hosts_file else ""
    scope = f"allowed_domains = {_list(plan.allowed_domains)}\n" if plan.allowed_domains else ""
    # consultant: one address, or the replicas' comma-joined (the agent fails over between them)
    placement = (f"consultants = {_list(consultant.split(','))}\n" if not plan.kademlia else "mode = \"kademlia\"\n")
    overlay = f"[kademlia]\nbootstrap = {_list(bootstrap or [])}\n" if plan.kademlia else ""
    return (f"# written by manager crawl\nagent_id = {_q(agent_id)}\nlisten = {_q(listen)}\n"
            f"{placement}storage = {_q(storage)}\n"
            f"data_dir = {_q(str(plan.out / 'agents' / agent_id))}\n{hosts}system_dns = true\n"
            f"concurrency = {plan.concurrency}\n"
            f"[fetch]\nuser_agent = {_q(plan.user_agent)}\nallow_networks = {_list(plan.allow_networks)}\n"
            f"[politeness]\ndelay = {plan.delay}\nmax_per_host = 1\n"
            f"[robots]\nenabled = true\n"
            f"[scope]\n{scope}max_depth = {plan.max_depth}\nmax_pages_per_host = {plan.max_pages_per_host}\n"
            f"{revisit_toml(plan)}{overlay}{tls}")


def revisit_toml(plan: Plan) -> str:
    """The agents' [revisit] section of a --continuous crawl ("" for a one-shot crawl)."""
    if not plan.continuous:
        return ""
    lo = min(60.0, plan.revisit_interval)
    return (f"[revisit]\nenabled = true\npolicy = {_q(plan.revisit_policy)}\ninterval = {plan.revisit_interval}\n"
            f"min_interval = {lo}\nmax_interval = {max(30 * 86400.0, plan.revisit_interval)}\n"
            f"pages_per_host_day = {plan.revisit_budget}\n")
