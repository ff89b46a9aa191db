"""`lab up` / `lab down`: the whole topology as local processes on loopback, under one run dir.

`up` writes the lab's geo/ASN DBs, the configs of every service, a seeds file, starts the web,
the consultant, storage and one agent per chosen ISP/city group (each bound to its block), waits
until they answer, and records them in RUN_DIR/cluster.json. `down` stops exactly those
processes (it checks each pid still runs the command it started, so a reused pid is left alone).
`kill` and `restart` crash one of them and start it again from its recorded command (the fault
harness, bench/chaos.py), `kill_all` and `restart_all` several at the same moment (a whole cluster); `pause` and `resume` stop and continue one (SIGSTOP/SIGCONT: a process
that hangs, then comes back); `add_agent` starts one more agent in a running cluster (a join).

`consultants=2` (or more) starts that many consultant replicas ("consultant", "consultant-2",
...) over one PostgreSQL state (manager.procs.PG_URL, a fresh schema per run directory); every
agent and storage list them all, first one first, and fail over between them (docs/consultant.md).

Two modes: "consultant" (seed 002: a consultant process places hosts) and "kademlia" (seeds 000
and 001: no consultant; the agents form a Kademlia overlay, each bootstrapping through all the
others, and place hosts by XOR distance; storage then runs without its placement check). In
kademlia mode the cluster is ready once every agent's overlay lists every agent (the Members
RPC), the counterpart of "registered with the consultant".
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from lab import geodb, topology
from lab.dns import Zone
from manager import procs
from manager.procs import Proc, free_port
from manager.seaweedfs import SeaweedFS, storage_tables
from wancrawl.config import build, merge_tables
from wancrawl.errors import ConfigError, FailedPrecondition, NotFound, Unavailable
from wancrawl.grpcutil import TlsSettings, register_client_tls

# Seed 002's scheme B: agents in three cities, each on a different ISP.
DEFAULT_GROUPS = ("unicom-beijing", "cernet-harbin", "telecom-guangzhou")
REPO = procs.REPO
MODES = ("consultant", "kademlia")
__all__ = ["Cluster", "Proc", "add_agent", "down", "free_port", "kill", "kill_all", "pause", "restart", "restart_all",
           "resume", "up"]


@dataclass
class Cluster:
    run_dir: str
    strategy: str
    web_port: int
    consultant: str  # its address, or the replicas' comma-joined, first one first
    storage: str
    agents: dict[str, str] = field(default_factory=dict)        # agent id -> gRPC address
    agent_sources: dict[str, str] = field(default_factory=dict)  # agent id -> source IP
    procs: list[Proc] = field(default_factory=list)
    seeds_file: str = ""
    web_log: str = ""
    topology: str = ""
    seed: int = 0
    time_scale: float = 60.0
    allowed_domains: list[str] = field(default_factory=list)
    mode: str = "consultant"  # "kademlia": no consultant process (`consultant` is "")
    object_store: str = ""  # SeaweedFS's S3 endpoint with --object-store ("" = WARCs in a local directory)
    storage_writers: list[str] = field(default_factory=list)  # every writer's address (the first is `storage`)
    dns: str = ""  # the lab's DNS server ("127.0.0.1:PORT") with --dns; "" = names from the hosts file
    liar: str = ""  # the agent run as lab/liar.py (its Members lists itself alone: not awaited by `up`)

    def save(self) -> None:
        Path(self.run_dir, "cluster.json").write_text(json.dumps(asdict(self), indent=2))
        procs.record_addresses(Path(self.run_dir), OPERATOR, self.addresses())

    def addresses(self) -> list[str]:
        """Every gRPC address of the cluster: consultant replicas, storage writers, agents."""
        return [a for a in (*self.consultant.split(","), self.storage, *self.storage_writers, *self.agents.values()) if a]

    @classmethod
    def load(cls, run_dir: str | Path) -> Cluster:
        p = Path(run_dir, "cluster.json")
        if not p.is_file():
            raise ConfigError(f"no cluster in {run_dir} (no cluster.json): nothing to stop")
        d = json.loads(p.read_text())
        d["procs"] = [Proc(**x) for x in d["procs"]]
        cl = cls(**d)
        use_cluster_tls(cl)
        return cl


@dataclass
class Service:
    config: Path
    address: str
    source_ip: str = ""  # agents: the address they fetch from


@dataclass
class Configs:
    consultant: Service | None  # None in kademlia mode; its address is the first replica's
    storage: Service
    agents: dict[str, Service]  # by agent id
    replicas: list[str] = field(default_factory=list)  # every consultant replica's address, first one first
    writers: list[Service] = field(default_factory=list)  # every storage writer (the first is `storage`)


PKI_DIR = procs.PKI_DIR
WRITTEN_BY = "# written by lab up\n"
OPERATOR = "lab"  # the operator certificate the lab's own clients (demo, chaos, manager) use


def lab_tls(run: str | Path) -> TlsSettings:
    """The operator credentials of a run: the lab's in-process clients (demo, bench/chaos.py)
    dial its services with them; other processes get them from RUN/pki/operator.env."""
    return procs.operator_tls(Path(run), OPERATOR)


def use_cluster_tls(cl: Cluster) -> None:
    """Register the run's operator certificate for every address of the cluster (this process's
    ConsultantClient, AgentClient and storage clients of those addresses then use it)."""
    if (Path(cl.run_dir) / PKI_DIR / "ca.crt").is_file():
        register_client_tls(cl.addresses(), lab_tls(cl.run_dir))


def replica_addresses(cl: Cluster) -> list[str]:
    """The consultant replicas' addresses, first one first ([] in kademlia mode)."""
    return [a for a in cl.consultant.split(",") if a]


def replica_name(i: int) -> str:
    """The process name of the i-th consultant replica (0: "consultant")."""
    return "consultant" if i == 0 else f"consultant-{i + 1}"


def _pki(run: Path, role: str, name: str, source_ip: str = "") -> str:
    """Issue ROLE/NAME's certificate in the run's PKI (a CA made on first use); its [tls] table.
    An agent's certificate binds its block address: the consultant places it there, and refuses
    a Register claiming another (lab agents reach the consultant from 127.0.0.1, which says
    nothing of their block: docs/security.md, "Where an agent is")."""
    return procs.issue_tls(run, role, name, operator=OPERATOR, ca_name=f"wancrawl lab CA ({run.name})", source_ip=source_ip)


def agent_group(topo: topology.Topology, spec: str) -> tuple[str, str]:
    """"isp-city" (the block's first agent) or "isp-city#n" (its n-th) -> (agent group name,
    its source address)."""
    block, _, slot = spec.partition("#")
    isp, _, city = block.partition("-")
    n = int(slot) if slot.isdigit() else 0
    try:
        src = topo.agent_address(isp, city, n)
    except (KeyError, ValueError) as exc:
        known = ", ".join(b.name for b in topo.blocks)
        raise ConfigError(f"unknown ISP/city group {spec!r} (known: {known}; '#n' picks the n-th agent of a block, 0-7)") from exc
    return (block if n == 0 else f"{block}-{n}"), src


def write_configs(run: Path, topo: topology.Topology, strategy: str, groups: list[str], *, delay: float,
                  concurrency: int, lease: float = 10.0, allow_hostile: bool = False,
                  agent_keys: dict[str, dict[str, int | float]] | None = None, consultant_tables: str = "",
                  agent_tables: str = "", mode: str = "consultant", kademlia_keys: str = "",
                  consultants: int = 1, object_store: str = "", storage_writers: int = 1, index_url: str = "",
                  index_schema: str = "", dns_server: str = "") -> Configs:
    """Consultant, storage and agent configs for the run, with the addresses they listen on.
    `object_store`: an S3 endpoint (the lab's SeaweedFS) for the WARCs instead of a directory;
    `storage_writers`: that many storage processes over one index (`index_url`, PostgreSQL, in
    `index_schema`) and one bucket, writer ids w1, w2, ...; agent n ships to writer n mod N.
    `agent_keys`: per group, `concurrency` and `delay` to use instead of the cluster's (an
    unequal cluster, bench/balance.py); `consultant_tables`, `agent_tables`: TOML tables merged
    into the consultant's and every agent's config (e.g. "[balance]\nenabled = true"); `kademlia_keys`:
    lines added to every agent's [kademlia] table (e.g. "balance = true"). Each config is built as
    its service's settings (checked as the service checks its file) and written with to_toml().
    mode "kademlia": no consultant config (Configs.consultant is None), storage without
    `consultant`, and every agent bootstraps through all the others (kademlia_table).
    consultants > 1: replicas sharing one config (each started with its own --listen) and a
    fresh PostgreSQL schema of the run. `dns_server` ("IP:PORT", the lab's DNS server): every
    agent and the consultant resolve through it with c-ares (no hosts file, never the system's
    servers); "": the hosts file, DNS off (the default for small labs)."""
    # Here, not at the top: the services' settings bring their fetchers and numeric libraries,
    # which `lab down` and the lab's web need not load.
    from agent.settings import AgentSettings
    from consultant.settings import from_data as consultant_from_data
    from storage.config import StorageSettings

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
    consultant = run / "consultant.toml"
    consultant_data = merge_tables({
        "listen": f"127.0.0.1:{cport}", "state_url": state_url, "strategy": strategy, "lease_seconds": lease,
        "databases": {"city_db": str(paths[geodb.CITY_DB]), "asn_db": str(paths[geodb.ASN_DB])},
        "dns": dns_table(dns_server, {"hosts_file": str(paths[geodb.HOSTS]), "system_dns": False}),
        "asn": {"fallback": "geo", "isps": {i.slug: [i.asn] for i in topo.isps}},
    }, _pki(run, "service", "consultant"), consultant_tables)
    if not kademlia:
        consultant.write_text(WRITTEN_BY + consultant_from_data(consultant_data, source=str(consultant)).to_toml())
    # Without a consultant storage asks the agents' overlay who is placed where (its `peers`).
    storage_placement = {"peers": addresses} if kademlia else {"consultant": ",".join(replicas)}
    writers: list[Service] = []
    for i, wport in enumerate(wports):
        name = "storage" if i == 0 else f"storage-{i + 1}"
        index = {"index": {"url": index_url, **({"schema": index_schema} if index_schema else {})}} if index_url else {}
        sink = storage_tables(object_store, "wancrawl-lab", f"w{i + 1}") if object_store else ""
        cfg_path = run / f"{name}.toml"
        storage_data = merge_tables({"listen": f"127.0.0.1:{wport}", "data_dir": f"{run}/{name}", **storage_placement,
                                     "ingest": {"fsync": "os"}, **index}, sink, _pki(run, "service", "storage"))
        cfg_path.write_text(WRITTEN_BY + build(StorageSettings, storage_data, source=str(cfg_path)).to_toml())
        writers.append(Service(cfg_path, f"127.0.0.1:{wport}"))
    allowed = [s.host for s in topo.normal_sites] + ([topo.site_domain(s) for s in topo.hostile_sites.values()] if allow_hostile else [])
    agents: dict[str, Service] = {}
    for n, ((spec, g, src, aport), address) in enumerate(zip(placed, addresses)):
        # "isp-city" is the block's first agent; "isp-city#n" its n-th (several in one block).
        own = (agent_keys or {}).get(spec, {})
        head = {"mode": "kademlia"} if kademlia else {"consultants": replicas}
        tail = merge_tables(kademlia_table([a for a in addresses if a != address], lease), "[kademlia]\n" + kademlia_keys) if kademlia else {}
        # Its own writer first, then the others (failover: storage.client.FailoverStorageClient).
        ranked = ",".join(w.address for w in writers[n % len(writers):] + writers[:n % len(writers)])
        cfg = run / "agents" / f"{g}.toml"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        agent_data = merge_tables({
            "agent_id": g, "listen": address, **head, "storage": ranked, "data_dir": f"{run}/agents/{g}",
            **({"dns": dns_table(dns_server, {})} if dns_server else {"hosts_file": str(paths[geodb.HOSTS]), "system_dns": False}),
            "source_ip": src,
            "concurrency": int(own.get("concurrency", concurrency)), "heartbeat_interval": 1.0,
            "fetch": {"allow_networks": ["127.0.0.0/8"], "total_timeout": 20.0},
            "politeness": {"delay": own.get("delay", delay)},
            "scope": {"allowed_domains": allowed},
        }, tail, _pki(run, "agent", g, src), agent_tables)
        cfg.write_text(WRITTEN_BY + build(AgentSettings, agent_data, source=str(cfg)).to_toml())
        agents[g] = Service(cfg, address, src)
    return Configs(None if kademlia else Service(consultant, f"127.0.0.1:{cport}"), writers[0], agents,
                   [] if kademlia else replicas, writers)


def dns_table(dns_server: str, hosts: dict[str, Any]) -> dict[str, Any]:
    """A [dns] table resolving through the lab's DNS server with c-ares (its own cache, TTLs and
    negative cache; wancrawl/hostres.py), or `hosts` when there is no server."""
    if not dns_server:
        return hosts
    return {"resolver": "cares", "nameservers": [dns_server], "timeout": 1.0}


def kademlia_table(bootstrap: list[str], lease: float) -> dict[str, dict[str, Any]]:
    """An agent's [kademlia] table: it joins through `bootstrap` (any one answering is enough,
    so a cluster started all at once forms whatever order the agents come up in: each retries
    its join every heartbeat until a peer answers). The lab's lease is the overlay's, and a
    silent neighbour is dead after the same time (dead_after may not be shorter than the lease)."""
    return {"kademlia": {"bootstrap": bootstrap, "lease_seconds": lease, "dead_after": lease}}


# Process start, health and liveness are shared with `manager crawl` (manager/procs.py).
# Own session: the services outlive `lab up` and a Ctrl-C in its terminal.
_start = procs.start
_healthy = procs.healthy
_alive = procs.alive


def _web_up(ip: str, port: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection((ip, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def check_strategy(strategy: str, mode: str) -> None:
    """A strategy the consultant knows (in consultant mode): checked before anything starts, or
    the consultant refuses its config and `up` waits for its health until the timeout."""
    from consultant.partition import PARTITIONERS

    if mode not in MODES:
        raise ConfigError(f"unknown lab mode {mode!r} (known: {', '.join(MODES)})")
    if mode == "consultant" and strategy not in PARTITIONERS:
        raise ConfigError(f"unknown strategy {strategy!r} (known: {', '.join(sorted(PARTITIONERS))})")


def choose_web_port(topo: topology.Topology, asked: int, previous: int) -> int:
    """The lab web's port: `asked` when given (it must be free), else the port of the run dir's
    previous run when it is still free (a seeds file written for it keeps working), else a new one."""
    from lab.server import port_taken

    if asked:
        ip = port_taken(topo.site_ips, asked)
        if ip:
            raise ConfigError(f"--web-port {asked} is taken on {ip} (another lab web? `lab down`, or another port)")
        return asked
    if previous and not port_taken(topo.site_ips, previous):
        return previous
    return free_port()


def free_udp_port() -> int:
    """A UDP port free now on 127.0.0.1 whose TCP twin is free too (the DNS server binds both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise Unavailable("no free UDP+TCP port on 127.0.0.1")


def _dns_up(address: str, name: str, timeout: float) -> bool:
    """The DNS server answers a query for `name`."""
    from dnslib import DNSRecord  # type: ignore[import-untyped]

    ip, _, port = address.rpartition(":")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            DNSRecord.question(name).send(ip, int(port), timeout=0.5)
            return True
        except OSError:
            time.sleep(0.1)
    return False


def up(run_dir: str | Path, *, strategy: str = "asn", groups: list[str] | None = None, topology_path: str | None = None,
       seed: int = 0, time_scale: float = 60.0, zero_latency: bool = False, delay: float = 0.05,
       concurrency: int = 32, timeout: float = 60.0, lease: float = 10.0, allow_hostile: bool = False,
       agent_keys: dict[str, dict[str, int | float]] | None = None, consultant_tables: str = "",
       agent_tables: str = "", mode: str = "consultant", kademlia_keys: str = "", consultants: int = 1,
       object_store: bool = False, storage_writers: int = 1, index_url: str = "", index_schema: str = "",
       web_port: int = 0, dns: bool = False, liar: str = "", liar_at: int = 0) -> Cluster:
    """Start the lab (see the module's doc) and return once it is ready: every service answers
    health and, in kademlia mode, every agent's overlay lists every agent. consultants: replicas
    over PostgreSQL (more than one). `object_store`: start SeaweedFS (the `seaweedfs` process)
    and keep the WARCs in its bucket; `storage_writers`, `index_url`, `index_schema`: write_configs.
    `web_port`: the lab web's port (0: choose_web_port keeps the run dir's previous one if free).
    `dns`: start the lab's DNS server (the `dns` process, lab/dns.py) and resolve through it.
    `liar` ("self" or "fabricate", kademlia mode): the agent at index `liar_at` of the groups
    (the same place in storage's `peers`) runs as lab/liar.py, its FindNode and Members lying."""
    check_strategy(strategy, mode)
    run = Path(run_dir).resolve()
    previous_port = 0
    if (run / "cluster.json").exists():
        try:
            old = Cluster.load(run)
            if any(_alive(p) for p in old.procs):
                raise ConfigError(f"a cluster is already running in {run}: `lab down --run-dir {run_dir}` first")
            previous_port = old.web_port
        except (ValueError, TypeError, KeyError):
            pass
    topo = topology.load(topology_path)
    groups = list(groups or DEFAULT_GROUPS)
    for spec in groups:
        agent_group(topo, spec)  # an unknown group fails here, before anything is written or started
    web_port = choose_web_port(topo, web_port, previous_port)
    run.mkdir(parents=True, exist_ok=True)
    seaweed = SeaweedFS(run / "seaweedfs") if object_store else None
    seaweed_args = seaweed.args() if seaweed is not None else []  # its ports, chosen now
    endpoint = seaweed.endpoint if seaweed is not None else ""
    dns_server = f"127.0.0.1:{free_udp_port()}" if dns else ""
    cfgs = write_configs(run, topo, strategy, groups, delay=delay, concurrency=concurrency, lease=lease,
                         allow_hostile=allow_hostile, agent_keys=agent_keys, consultant_tables=consultant_tables,
                         agent_tables=agent_tables, mode=mode, kademlia_keys=kademlia_keys, consultants=consultants,
                         object_store=endpoint, storage_writers=storage_writers, index_url=index_url,
                         index_schema=index_schema, dns_server=dns_server)
    seeds = run / "seeds.txt"
    by_block: dict[tuple[str, str], topology.Site] = {}
    resolves = Zone(topo).resolves if dns else (lambda host: True)
    for s in topo.normal_sites:
        if resolves(s.host):  # with the DNS server: a seed whose name fails would seed nothing
            by_block.setdefault((s.isp, s.city), s)
    base = lambda s: f"http://{s.host}:{web_port}/"  # noqa: E731
    seeds.write_text("# one site per ISP/city block (written by lab up)\n" + "".join(base(s) + "\n" for s in by_block.values()))
    web_log = run / "web-requests.jsonl"
    cl = Cluster(str(run), strategy, web_port, "", "", seeds_file=str(seeds), web_log=str(web_log),
                 topology=topology_path or "", seed=seed, time_scale=time_scale,
                 allowed_domains=[s.host for s in topo.normal_sites],
                 agent_sources={g: a.source_ip for g, a in cfgs.agents.items()}, mode=mode, object_store=endpoint,
                 storage_writers=[w.address for w in cfgs.writers])
    web_args = ["lab.cli", "web", "--port", str(web_port), "--seed", str(seed), "--time-scale", str(time_scale), "--log", str(web_log)]
    if topology_path:
        web_args += ["--topology", topology_path]
    if zero_latency:
        web_args.append("--zero-latency")
    try:
        if dns_server:
            cl.dns = dns_server
            dns_args = ["lab.cli", "dns", "--port", dns_server.rpartition(":")[2]] + (["--topology", topology_path] if topology_path else [])
            cl.procs.append(_start("dns", dns_args, run))
            cl.save()
            if not _dns_up(dns_server, topo.normal_sites[0].host, timeout):
                raise Unavailable(f"the lab DNS server did not come up: see {run}/logs/dns.log")
        cl.procs.append(_start("web", web_args, run))
        cl.save()
        if not _web_up(topo.normal_sites[0].ip, web_port, timeout):
            raise Unavailable(f"the lab web did not come up: see {run}/logs/web.log")
        if seaweed is not None:  # storage needs its bucket before it can start
            cl.procs.append(_start("seaweedfs", seaweed_args, run))
            cl.save()
            if not seaweed.wait_ready(timeout):
                raise Unavailable(f"SeaweedFS did not come up: see {run}/logs/seaweedfs.log and {seaweed.data_dir}/weed.log")
        cl.consultant, cl.storage = ",".join(cfgs.replicas), cfgs.storage.address
        cl.agents = {g: a.address for g, a in cfgs.agents.items()}
        use_cluster_tls(cl)
        # Replicas share the consultant's config, each on its own --listen.
        cons = [(replica_name(i), "consultant.cli", "serve", Service(cfgs.consultant.config, a))
                for i, a in enumerate(cfgs.replicas)] if cfgs.consultant is not None else []
        core = [(w.config.stem, "storage.cli", "serve", w) for w in cfgs.writers]
        agents = [(f"agent-{g}", "agent.cli", "run", a) for g, a in cfgs.agents.items()]
        if liar:
            i = liar_at % len(agents)
            agents[i] = (agents[i][0], "lab.liar", liar, agents[i][3])  # python -m lab.liar HOW --config ...
            cl.liar = list(cfgs.agents)[i]
        cl.agents = {g: a.address for g, a in cfgs.agents.items()}
        # Agents need the consultant and storage: start and wait for those first; the first
        # replica before the others (it makes the shared tables).
        for group in (cons[:1], cons[1:] + core, agents):
            for name, module, command, svc in group:
                listen = ["--listen", svc.address] if module == "consultant.cli" else []
                p = _start(name, [module, command, "--config", str(svc.config), *listen], run)
                p.address = svc.address
                cl.procs.append(p)
                cl.save()
            for name, _, _, svc in group:
                if not asyncio.run(_healthy(svc.address, timeout)):
                    raise Unavailable(f"{name} did not come up: see {run}/logs/{name}.log")
        if mode == "kademlia":
            _await_overlay(cl, timeout)
    except BaseException:
        down(run)
        raise
    return cl


def down(run_dir: str | Path, timeout: float = 20.0) -> list[str]:
    """Stop the run's processes: agents first (they deregister and flush), then the rest."""
    return procs.stop(Cluster.load(run_dir).procs, timeout)


def _find(cl: Cluster, name: str) -> int:
    for i, p in enumerate(cl.procs):
        if p.name == name:
            return i
    raise NotFound(f"no process {name!r} in {cl.run_dir} (known: {', '.join(p.name for p in cl.procs)})")


def kill(run_dir: str | Path, name: str, sig: int = signal.SIGKILL, timeout: float = 10.0) -> Proc:
    """Send `sig` to one process of the run (SIGKILL by default: a crash, nothing flushed, no
    deregistration) and return once it no longer runs. Its record stays in cluster.json: `down`
    skips a process that is gone, and `restart` starts it again from the record."""
    return kill_all(run_dir, [name], sig, timeout)[0]


def kill_all(run_dir: str | Path, names: list[str], sig: int = signal.SIGKILL, timeout: float = 10.0) -> list[Proc]:
    """`kill` for several processes at the same moment: every one is checked running first (none
    is signalled if one is not), then each is sent `sig` in one loop with nothing waited on in
    between (a few microseconds apart: no survivor can notice the others' deaths and act first),
    then this returns once all of them are gone."""
    cl = Cluster.load(run_dir)
    targets = [cl.procs[_find(cl, n)] for n in names]
    for p in targets:
        if not _alive(p):
            raise FailedPrecondition(f"{p.name} (pid {p.pid}) is not running")
    for p in targets:
        os.kill(p.pid, sig)
    end = time.monotonic() + timeout
    for p in targets:
        # Until it has exited (gone, or a zombie of ours): its sockets are closed only then.
        while not procs.exited(p):
            if time.monotonic() > end:
                raise Unavailable(f"{p.name} (pid {p.pid}) still runs {timeout:.0f}s after signal {sig}")
            time.sleep(0.01)
    return targets


def restart(run_dir: str | Path, name: str, timeout: float = 60.0) -> Proc:
    """Start a stopped process of the run again from its recorded command (its module and
    arguments, so the same config, data dir and address; run by this interpreter, as `up` does),
    record the new pid in cluster.json, and return once it answers. Blocking: not from a running
    event loop."""
    return restart_all(run_dir, [name], timeout)[0]


def restart_all(run_dir: str | Path, names: list[str], timeout: float = 60.0) -> list[Proc]:
    """`restart` for several stopped processes (a whole cluster after `kill_all`), in `up`'s
    order: the services that are not agents (the consultant, storage, the web) are started
    together and waited for, then the agents together (an agent needs its consultant and
    storage). Every one is checked stopped first (none is started if one still runs). Returns
    the new records, in the order of `names`, once each answers."""
    cl = Cluster.load(run_dir)
    idx = [_find(cl, n) for n in names]
    for i in idx:
        old = cl.procs[i]
        if _alive(old):
            raise FailedPrecondition(f"{old.name} (pid {old.pid}) is still running: kill it first")
        if old.cmd[1:2] != ["-m"]:
            raise ConfigError(f"{old.name}: recorded command {old.cmd!r} is not `python -m MODULE ...`")
    run = Path(cl.run_dir)
    for group in ([i for i in idx if not cl.procs[i].name.startswith(procs.AGENT_PREFIX)],
                  [i for i in idx if cl.procs[i].name.startswith(procs.AGENT_PREFIX)]):
        for i in group:
            old = cl.procs[i]
            new = _start(old.name, old.cmd[2:], run)
            new.address = old.address
            cl.procs[i] = new
            cl.save()
        for i in group:
            new = cl.procs[i]
            if new.name == "seaweedfs":
                ok = SeaweedFS.from_args(new.cmd).wait_ready(timeout)
            elif new.address:
                ok = asyncio.run(_healthy(new.address, timeout))
            else:  # the web: no gRPC health, a TCP connect to a site answers instead
                ok = _web_up(topology.load(cl.topology or None).normal_sites[0].ip, cl.web_port, timeout)
            # Answering is not enough: another process may have taken the freed port meanwhile.
            if not ok or not _alive(new):
                raise Unavailable(f"{new.name} did not come back: see {new.log}")
    if cl.mode == "kademlia" and any(cl.procs[i].name.startswith(procs.AGENT_PREFIX) for i in idx):
        # Answering health is not having joined: the restarted agents bootstrap through their
        # recorded peers (the same addresses: a restart keeps its port), then are in the overlay.
        _await_overlay(cl, timeout)
    return [cl.procs[i] for i in idx]


_state = procs.state


def pause(run_dir: str | Path, name: str, timeout: float = 10.0) -> Proc:
    """SIGSTOP one process of the run (it hangs: no heartbeat, no request, its sockets open) and
    return once the kernel reports it stopped. `resume` continues it; `down` continues a paused
    process before stopping it."""
    cl = Cluster.load(run_dir)
    p = cl.procs[_find(cl, name)]
    if not _alive(p):
        raise FailedPrecondition(f"{name} (pid {p.pid}) is not running")
    os.kill(p.pid, signal.SIGSTOP)
    end = time.monotonic() + timeout
    while _state(p.pid) not in ("T", "t"):
        if time.monotonic() > end or not _alive(p):
            raise Unavailable(f"{name} (pid {p.pid}) did not stop {timeout:.0f}s after SIGSTOP")
        time.sleep(0.01)
    return p


def resume(run_dir: str | Path, name: str, timeout: float = 10.0) -> Proc:
    """SIGCONT a process `pause` stopped and return once it runs again."""
    cl = Cluster.load(run_dir)
    p = cl.procs[_find(cl, name)]
    if not _alive(p):
        raise FailedPrecondition(f"{name} (pid {p.pid}) is not running")
    os.kill(p.pid, signal.SIGCONT)
    end = time.monotonic() + timeout
    while _state(p.pid) in ("T", "t"):
        if time.monotonic() > end:
            raise Unavailable(f"{name} (pid {p.pid}) still stopped {timeout:.0f}s after SIGCONT")
        time.sleep(0.01)
    return p


# The settings of one agent's config that are its own; `add_agent` copies every other line.
_OWN_KEYS = ("agent_id", "listen", "data_dir", "source_ip")


def _config_of(p: Proc) -> Path:
    try:
        return Path(p.cmd[p.cmd.index("--config") + 1])
    except (ValueError, IndexError):
        raise ConfigError(f"{p.name}: recorded command {p.cmd!r} has no --config") from None


def agent_config(run_dir: str | Path, agent_id: str) -> dict:
    """The parsed config of one agent of the run (from its recorded command's --config)."""
    import tomllib

    cl = Cluster.load(run_dir)
    return tomllib.loads(_config_of(cl.procs[_find(cl, f"agent-{agent_id}")]).read_text())


def add_agent(run_dir: str | Path, group: str, timeout: float = 60.0) -> Proc:
    """Start one more agent in a running cluster (a join): `group` is an "isp-city" block as
    `up`'s groups ("isp-city#n" for its n-th agent). Its config is a copy of the first agent's
    (the same consultant, storage, hosts file, concurrency, politeness, fetch and scope settings)
    with its own id, listen address, data dir and source address; it is started the way `up`
    starts agents, recorded in cluster.json (so `down` stops it and `kill`/`pause` find it), and
    returned once it answers gRPC health. Blocking: not from a running event loop."""
    import tomllib

    from agent.settings import load_settings as agent_settings

    cl = Cluster.load(run_dir)
    run = Path(cl.run_dir)
    topo = topology.load(cl.topology or None)
    g, src = agent_group(topo, group)
    name = f"agent-{g}"
    if g in cl.agents or any(p.name == name for p in cl.procs):
        raise FailedPrecondition(f"agent {g} is already in the cluster of {run}")
    template = next((p for p in cl.procs if p.name.startswith("agent-")), None)
    if template is None:
        raise ConfigError(f"no agent in the cluster of {run} to copy the settings of")
    aport = free_port()
    settings = agent_settings(_config_of(template))
    if cl.mode == "kademlia":
        # It joins through every agent that runs now (the template's list names the template's
        # peers at `up`, some of which may have gone since, and not the template itself).
        settings = replace(settings, kademlia=replace(settings.kademlia, bootstrap=tuple(_live_agents(cl).values())))
    # Its own certificate: the template's [tls] table names the template's.
    tls = build(TlsSettings, tomllib.loads(_pki(run, "agent", g, src))["tls"], where="tls.", source=name)
    settings = replace(settings, agent_id=g, listen=f"127.0.0.1:{aport}", data_dir=str(run / "agents" / g), source_ip=src, tls=tls)
    cfg = run / "agents" / f"{g}.toml"
    cfg.write_text(f"# written by lab add_agent (a copy of {template.name})\n" + settings.to_toml())
    p = _start(name, ["agent.cli", "run", "--config", str(cfg)], run)
    p.address = settings.listen
    cl.procs.append(p)
    cl.agents[g] = p.address
    cl.agent_sources[g] = src
    cl.save()
    use_cluster_tls(cl)
    if not asyncio.run(_healthy(p.address, timeout)) or not _alive(p):
        raise Unavailable(f"{name} did not come up: see {p.log}")
    # An agent answers health before its registration is through: until the consultant lists
    # it, the cluster has not changed (the consultant's answers still name the old owners).
    if cl.consultant and not asyncio.run(_registered(cl.consultant, g, timeout)):
        raise Unavailable(f"{name} answers but the consultant does not list it alive: see {p.log}")
    if cl.mode == "kademlia":
        _await_overlay(cl, timeout)
    return p


def _live_agents(cl: Cluster) -> dict[str, str]:
    """Agent id -> address of the cluster's agents whose process runs (killed ones left out)."""
    running = {p.name for p in cl.procs if p.name.startswith(procs.AGENT_PREFIX) and _alive(p)}
    return {g: a for g, a in cl.agents.items() if f"{procs.AGENT_PREFIX}{g}" in running}


def overlay_complete(views: dict[str, set[str] | None], expected: set[str]) -> list[str]:
    """The agents whose overlay view (member ids, None: it did not answer) misses one of
    `expected`; [] when the overlay is formed. Members that are not expected (a killed agent
    not yet declared dead) do not count against it."""
    return sorted(g for g, v in views.items() if v is None or not expected <= v)


async def overlay_views(agents: dict[str, str]) -> dict[str, set[str] | None]:
    """Every agent's Members as a set of agent ids (None for one that does not answer)."""
    from agent.client import AgentPool
    from wancrawl.errors import WancrawlError

    async def one(pool: AgentPool, address: str) -> set[str] | None:
        try:
            return {m.agent_id for m in (await pool.get(address).members(timeout=5)).members}
        except WancrawlError:
            return None

    async with AgentPool(timeout=5) as pool:
        got = await asyncio.gather(*(one(pool, a) for a in agents.values()))
    return dict(zip(agents, got))


async def wait_overlay(agents: dict[str, str], timeout: float, skip: Collection[str] = ()) -> list[str]:
    """Poll until every agent's Members lists every agent of `agents` (the joins and
    ping-backs are done, so they agree on placement); the agents still missing someone at the
    timeout ([] once formed). Polling: the agents are other processes, with no event to await.
    `skip`: agents whose own view is not awaited (a liar's), though the others must list them."""
    end = time.monotonic() + timeout
    while True:
        missing = [g for g in overlay_complete(await overlay_views(agents), set(agents)) if g not in skip]
        if not missing or time.monotonic() > end:
            return missing
        await asyncio.sleep(0.1)


def _await_overlay(cl: Cluster, timeout: float) -> None:
    live = _live_agents(cl)
    missing = asyncio.run(wait_overlay(live, timeout, skip={cl.liar}))
    if missing:
        raise Unavailable(f"the Kademlia overlay did not form in {timeout:.0f}s: {', '.join(missing)} do not list "
                          f"all of {', '.join(sorted(live))} (see {cl.run_dir}/logs/agent-*.log)")


async def _registered(consultant: str, agent_id: str, timeout: float) -> bool:
    from consultant.client import ConsultantClient
    from wancrawl.errors import WancrawlError

    end = time.monotonic() + timeout
    async with ConsultantClient(consultant) as c:
        while time.monotonic() < end:
            try:
                if any(a.agent_id == agent_id for a in (await c.list_agents()).agents):
                    return True
            except WancrawlError:
                pass
            await asyncio.sleep(0.1)
    return False
