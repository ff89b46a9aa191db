"""Reading a running lab cluster, for the fault harness and the benches that crawl the lab: the
request log (LogTail), the truth, storage's captures, the seeds injected as the manager does, the
placement service's answers (consultant or the agents' overlay), the agents' Status counters,
and the waits (crawl idle, an agent declared dead, replicas current, a share of truth requested).
It injects no fault (inject.py does)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from lab import cluster
from lab.server import LogEntry
from wancrawl.urls import InvalidUrl, canonicalize


class LogTail:
    """The request log read incrementally: the web appends whole lines every 0.2 s."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0
        self.partial = b""

    def poll(self) -> list[LogEntry]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        # Keep a trailing line without its newline for the next poll.
        complete, sep, rest = (self.partial + data).rpartition(b"\n")
        if not sep:
            self.partial = rest
            return []
        self.partial = rest
        return [LogEntry(**json.loads(line)) for line in complete.splitlines() if line.strip()]


def log_url(e: LogEntry, port: int) -> str | None:
    try:
        return canonicalize(f"http://{e.host}:{port}{e.path}")
    except InvalidUrl:
        return None


def compute_truth(cl: cluster.Cluster) -> set[str]:
    from lab import topology
    from lab.truth import Scope, Truth
    from lab.web import Web
    from manager.seed import parse_seeds

    web = Web(topology.load(cl.topology or None), cl.seed, time_scale=cl.time_scale).with_port(cl.web_port)
    seeds = parse_seeds(Path(cl.seeds_file).read_text()).urls
    return {r.url for r in Truth(web, Scope(allow_domains=cl.allowed_domains, respect_robots=True)).reachable(seeds)}


def read_captures(run_dir: Path) -> list[tuple[str, str, float]]:
    """(canonical URL, record type, fetch time) of every row of storage's index, located by the
    run's storage.toml."""
    import sqlalchemy as sa

    from storage import config as storage_config
    from storage.index import make_tables

    s = storage_config.load(run_dir / "storage.toml")
    url = s.index_url()
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        return []  # storage never indexed anything
    _md, captures, _files = make_tables(s.index.schema)
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            c = captures.c
            return [(u, t, f) for u, t, f in conn.execute(sa.select(c.canonical_url, c.record_type, c.fetched_at))]
    finally:
        engine.dispose()


def placement(cl: cluster.Cluster) -> Any:
    """Who answers "which agents live, who owns which host": the consultant, or in kademlia mode
    the agents' overlay (manager/peers.py asks any agent, as `manager --peers` does)."""
    if cl.mode == "kademlia":
        from manager.peers import PeerDirectory

        return PeerDirectory(list(cl.agents.values()))
    from consultant.client import ConsultantClient

    return ConsultantClient(cl.consultant)


async def inject_seeds(cl: cluster.Cluster) -> int:
    from manager.seed import inject, parse_seeds

    seeds = parse_seeds(Path(cl.seeds_file).read_text()).urls
    async with placement(cl) as c:
        accepted, failed = await inject(c, seeds)
    if failed:
        raise RuntimeError(f"{len(failed)} seeds could not be injected")
    return sum(accepted.values())


async def owned_by(cl: cluster.Cluster, hosts: list[str], agent: str) -> set[str]:
    async with placement(cl) as c:
        return {r.host for r in await c.resolve(hosts) if r.owner and r.owner[0] == agent}


async def owned_once_listed(cl: cluster.Cluster, hosts: list[str], agent: str, timeout: float = 10.0) -> tuple[set[str], float]:
    """(the hosts `agent` owns, the time of that answer) in the first Resolve answer at or past
    the epoch ListAgents reports now. ListAgents reads the consultant's store, which holds a new
    agent a moment before Register has rebuilt the directory Resolve answers from: an answer in
    that moment still names the old owners. Past the timeout, the last answer."""
    async with placement(cl) as c:
        epoch = (await c.list_agents()).epoch
        end = time.monotonic() + timeout
        while True:
            routes = await c.resolve(hosts)
            if (routes and routes[0].epoch >= epoch) or time.monotonic() > end:
                return {r.host for r in routes if r.owner and r.owner[0] == agent}, time.time()
            await asyncio.sleep(0.02)


async def owners(cl: cluster.Cluster, hosts: list[str]) -> dict[str, str]:
    """host -> its owner's agent id in the consultant's answer ("" if none)."""
    async with placement(cl) as c:
        return {r.host: (r.owner[0] if r.owner else "") for r in await c.resolve(hosts)}


async def routes(cl: cluster.Cluster, hosts: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(host, its preference list: agent ids, owner first) per host in the consultant's answer."""
    async with placement(cl) as c:
        return [(r.host, tuple(a for a, _ in r.agents)) for r in await c.resolve(hosts)]


async def epoch(cl: cluster.Cluster) -> int:
    async with placement(cl) as c:
        return (await c.list_agents()).epoch


async def live_agents(cl: cluster.Cluster) -> dict[str, str]:
    """agent id -> address of the agents the consultant holds alive."""
    async with placement(cl) as c:
        return {a.agent_id: a.address for a in (await c.list_agents()).agents}


async def statuses(cl: cluster.Cluster) -> dict[str, dict[str, float] | None]:
    """agent id -> Status counters of every agent the consultant holds alive (None: no answer)."""
    from agent.client import AgentPool
    from wancrawl.errors import WancrawlError

    live = await live_agents(cl)

    async def one(pool: AgentPool, address: str) -> dict[str, float] | None:
        try:
            return dict((await pool.get(address).status(timeout=3)).counters)
        except WancrawlError:
            return None

    async with AgentPool() as pool:
        got = await asyncio.gather(*(one(pool, a) for a in live.values()))
    return dict(zip(live, got))


class CounterPoller(threading.Thread):
    """One agent's Status counter polled in the background every `interval` s until `until`
    (unix time) or stop(): `samples` are (time of the answer, value or None when absent)."""

    def __init__(self, address: str, key: str, until: float, interval: float = 0.1):
        super().__init__(daemon=True)
        self.address, self.key, self.until, self.interval = address, key, until, interval
        self.samples: list[tuple[float, float | None]] = []
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        asyncio.run(self._poll())

    async def _poll(self) -> None:
        from agent.client import AgentClient
        from wancrawl.errors import WancrawlError

        async with AgentClient(self.address) as c:
            while not self._halt.is_set() and time.time() < self.until:
                try:
                    counters = (await c.status(timeout=1)).counters
                    self.samples.append((time.time(), counters[self.key] if self.key in counters else None))
                except WancrawlError:
                    pass
                await asyncio.sleep(self.interval)


def agent_counters(cl: cluster.Cluster) -> dict[str, dict[str, float]]:
    """agent id -> Status counters of the live agents that answer."""
    return {a: c for a, c in asyncio.run(statuses(cl)).items() if c is not None}


# The per-host state of an agent on disk: its frontier (queues, host records) and seen set.
# The -shm files are SQLite's shared-memory WAL index, not data: not counted.
STATE_FILES = tuple(f"{base}{suffix}" for base in ("frontier.sqlite", "seen.sqlite") for suffix in ("", "-wal", "-journal"))


def state_bytes(data_dir: str | Path) -> int:
    total = 0
    for name in STATE_FILES:
        try:
            total += (Path(data_dir) / name).stat().st_size
        except OSError:
            pass
    return total


def held_bytes(cl: cluster.Cluster) -> int:
    """The agents' per-host state on disk now (every agent of the cluster, by its config's data_dir)."""
    return sum(state_bytes(cluster.agent_config(cl.run_dir, a)["data_dir"]) for a in cl.agents)


async def wait_gone(cl: cluster.Cluster, agent: str, timeout: float) -> float | None:
    """Poll the consultant until it no longer lists `agent` alive; the time then, None at the timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if agent not in await live_agents(cl):
                return time.time()
        except Exception:  # noqa: BLE001 - the consultant is busy: poll again
            pass
        await asyncio.sleep(0.2)
    return None


def replicas_settled(st: dict[str, dict[str, float] | None]) -> tuple[bool, int]:
    """Are the live agents' replicas current, read from their Status counters (pure)? Every agent
    answered; the sum of `replica_unsynced` (hosts owned whose backup copy is not current) is 0;
    no host is held for settling (`hosts_settling`); and every agent has made the moves of the
    newest epoch any of them knows (`epoch_settled` = that epoch, when reported). Without the
    last two, a sum read just after an epoch change is trivially 0: the moves it brings (a dead
    owner's replicas handed to the new owner) have not happened yet (chaos kill2, session 12).
    Absent gauges count as 0 / as settled. Returns (settled, the sum of replica_unsynced)."""
    if not st or any(c is None for c in st.values()):
        return False, -1
    cs = [c for c in st.values() if c is not None]
    unsynced = int(sum(c.get("replica_unsynced", 0.0) for c in cs))
    newest = max(c.get("epoch", 0.0) for c in cs)
    behind = [c for c in cs if "epoch_settled" in c and (c.get("epoch", 0.0) != newest or c["epoch_settled"] != newest)]
    settling = sum(c.get("hosts_settling", 0.0) for c in cs)
    return unsynced == 0 and not behind and settling == 0, unsynced


async def wait_replicas(cl: cluster.Cluster, timeout: float) -> tuple[float | None, int, bool]:
    """Poll every live agent's Status until replicas_settled holds twice in a row (half a second
    apart). Returns (the time that held or None at the timeout, the last sum of replica_unsynced,
    whether any agent reported that gauge)."""
    end = time.monotonic() + timeout
    unsynced, reported, streak = -1, False, 0
    while True:
        st = await statuses(cl)
        reported = reported or any(c is not None and "replica_unsynced" in c for c in st.values())
        ok, n = replicas_settled(st)
        unsynced = n if n >= 0 else unsynced
        streak = streak + 1 if ok else 0
        if streak >= 2:
            return time.time(), 0, reported
        if time.monotonic() >= end:
            return None, unsynced, reported
        await asyncio.sleep(0.5)


async def wait_crawl_idle(cl: cluster.Cluster, timeout: float, stable: float) -> bool:
    from manager.status import wait_idle

    async with placement(cl) as c:
        return await wait_idle(c, max(timeout, 0.1), stable=stable, quiet=True)


def wait_progress(tail: LogTail, truth: set[str], port: int, share: float, deadline: float, seen: set[str]) -> bool:
    """Poll the request log until `share` of truth was requested; False at the deadline."""
    goal = share * len(truth)
    while time.monotonic() < deadline:
        for e in tail.poll():
            u = log_url(e, port)
            if u in truth:
                seen.add(u)
        if len(seen) >= goal:
            return True
        time.sleep(0.2)
    return False


def operator_env(cl: cluster.Cluster) -> dict[str, str]:
    """The lab operator's credentials for a `manager` process (the services require mutual TLS)."""
    t = cluster.lab_tls(cl.run_dir)
    return {"WANCRAWL_TLS_CA": t.ca, "WANCRAWL_TLS_CERT": t.cert, "WANCRAWL_TLS_KEY": t.key}


def fresh_run_dir(run: Path) -> Path:
    """`run`, empty: a cluster an earlier run left there is stopped first."""
    if run.exists():
        if (run / "cluster.json").is_file():
            cluster.down(run)
        shutil.rmtree(run)
    return run
