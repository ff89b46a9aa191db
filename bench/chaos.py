"""Fault harness: crawl the lab with four agents, inject one fault per scenario, and measure what
the crawl lost or did twice against the lab's truth.

    python bench/chaos.py                          # every scenario
    python bench/chaos.py --scenario restart,kill  # some (repeatable or comma separated)
    python bench/chaos.py --json                   # the rows as JSON

Each scenario starts a fresh `lab up` (web, consultant, storage, 4 agents with the lab's per-host
politeness delay) in its own run dir, injects the seeds with the manager's code, injects its fault,
waits for the crawl to end (`manager wait`'s logic against the consultant, bounded by --timeout;
a timeout is reported in the row), stops the cluster (always, also on Ctrl-C), then compares.

Scenarios (the fault comes when the lab's request log shows --fault-at (40%) of the truth URLs
requested at least once, polled every 0.2 s; baseline has none):
  baseline    no fault.
  restart     kill -9 the victim agent, start it again 10 s later from its recorded command
              (same config, same data dir).
  consultant  kill -9 the consultant, start it again 20 s later.
  storage     kill -9 storage, start it again 30 s later.
  drain       `manager drain VICTIM` (the Drain RPC: deregister, hand queued URLs over, exit).
  kill        kill -9 the victim agent; it stays dead.

Columns (pure functions `compare` and `recovery` below; inputs: the truth set, storage's index
rows (canonical URL, record type), the lab's request log):
  truth          URLs of `lab truth` from the run's seeds (robots respected, the run's allowed
                 domains), i.e. what a perfect crawl stores.
  stored         truth URLs with at least one `response` record in storage's index (revisit
                 and warcinfo records do not count: they carry no page of their own).
  lost           truth URLs with no response record.
  stored twice   truth URLs with more than one capture record in the index, of any type: a
                 refetch of an unchanged page is stored as a revisit record (storage
                 deduplicates by payload digest), and that is a page stored twice all the same.
  fetched twice  URLs (canonicalised) requested more than once in the lab's request log, any
                 agent, robots.txt excluded.
  recovery s     for each affected host, seconds from the fault until its first request
                 (robots.txt excluded) at or after the fault, by any agent but a drained or
                 killed victim; the column is the largest. Affected hosts: hosts with work
                 left at the fault (a truth URL of the host not requested before the fault)
                 and, for agent faults (restart, drain, kill), owned by the victim in the
                 consultant's answer just before the fault.
                 For consultant and storage faults: every host with work left. "(+N never)":
                 N affected hosts were not requested again at all (their rest is lost).
Two times per row: "last fetch s", seeding to the last page request in the log, and "end s",
seeding to when the end was observed (every live agent idle for --stable seconds; the harness
starts watching only after the outage, so a consultant or storage outage holds the end back).
The fault time is taken once the fault is in place: after the killed process is gone, or when
the Drain RPC is sent. The crawl ends when every live agent is idle or at the timeout; requests
and captures fetched after that (the teardown of a crawl that timed out) are not counted.
`worst:` is the largest lost and the largest stored twice, as a share of truth, over the
scenarios run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab import cluster  # noqa: E402
from lab.server import LogEntry  # noqa: E402
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical  # noqa: E402

SCENARIOS = ("baseline", "restart", "consultant", "storage", "drain", "kill")
AGENT_FAULTS = ("restart", "drain", "kill")
# Four agents: seed 002's scheme B (one agent per ISP, three cities) plus a second China Telecom
# agent, so the victim's hosts have a same-ISP agent to fail over to.
DEFAULT_GROUPS = ("unicom-beijing", "cernet-harbin", "telecom-guangzhou", "telecom-beijing")
DEFAULT_VICTIM = "telecom-beijing"
# Lab seed 0 gives 1,497 truth URLs (< 1,500); seed 9 gives 1,831 over 72 sites with a largest
# host of 278 pages, so a crawl under politeness still ends in ~20-30 s.
DEFAULT_SEED = 9
OUTAGE_S = {"restart": 10.0, "consultant": 20.0, "storage": 30.0}


# --- the comparison: pure ---------------------------------------------------------------------------


@dataclass
class Comparison:
    truth: int
    stored: int            # truth URLs with >= 1 response record
    lost: int              # truth URLs with no response record
    stored_twice: int      # truth URLs with > 1 record of any type (response or revisit)
    fetched_twice: int     # URLs requested > 1 times (robots.txt excluded)
    outside_truth: int     # distinct stored URLs that are not truth URLs
    lost_urls: list[str] = field(default_factory=list)


def compare(truth: Collection[str], captures: Iterable[tuple[str, str]], requested: Iterable[str]) -> Comparison:
    """`captures`: (canonical URL, record type) per index row; `requested`: the canonical URL of
    every request in the log, in any order, robots.txt included (dropped here)."""
    truth = set(truth)
    responses: collections.Counter[str] = collections.Counter()
    records: collections.Counter[str] = collections.Counter()
    for url, record_type in captures:
        records[url] += 1
        if record_type == "response":
            responses[url] += 1
    fetches = collections.Counter(u for u in requested if urlsplit(u).path != "/robots.txt")
    lost = sorted(u for u in truth if not responses[u])
    return Comparison(
        truth=len(truth),
        stored=len(truth) - len(lost),
        lost=len(lost),
        stored_twice=sum(1 for u in truth if records[u] > 1),
        fetched_twice=sum(1 for n in fetches.values() if n > 1),
        outside_truth=sum(1 for u in records if u not in truth),
        lost_urls=lost,
    )


@dataclass
class Recovery:
    affected: int                  # hosts with work left at the fault (among the candidates)
    seconds: float | None          # largest delay until an affected host was requested again
    never: list[str] = field(default_factory=list)  # affected hosts never requested again
    per_host: dict[str, float] = field(default_factory=dict)


def recovery(fault_t: float, requests: Iterable[tuple[float, str, str, str]], truth: Collection[str],
             candidates: Collection[str] | None = None, ignore_clients: Collection[str] = ()) -> Recovery:
    """`requests`: (time, client address, host, canonical URL) per log line. A host is affected
    when some truth URL of it had not been requested before `fault_t` (and it is among
    `candidates`, if given); its delay is the time from `fault_t` to its first non-robots request
    at or after `fault_t` from a client not in `ignore_clients` (a draining agent's last requests
    are not a recovery)."""
    before: set[str] = set()
    first_after: dict[str, float] = {}
    for t, client, host, url in requests:
        if t < fault_t:
            before.add(url)
        elif (client not in ignore_clients and urlsplit(url).path != "/robots.txt"
              and (host not in first_after or t < first_after[host])):
            first_after[host] = t
    left = {host_of_canonical(u) for u in truth if u not in before}
    if candidates is not None:
        left &= set(candidates)
    per_host = {h: first_after[h] - fault_t for h in left if h in first_after}
    return Recovery(len(left), max(per_host.values()) if per_host else None,
                    sorted(h for h in left if h not in first_after), per_host)


def worst(rows: Iterable["Row"]) -> tuple[int, float]:
    """(largest lost, largest stored twice as a percentage of truth) over the rows."""
    rows = [r for r in rows if r.metrics is not None]
    lost = max((r.metrics.lost for r in rows if r.metrics), default=0)
    pct = max((100.0 * r.metrics.stored_twice / r.metrics.truth for r in rows if r.metrics and r.metrics.truth), default=0.0)
    return lost, pct


# --- I/O: the lab run --------------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    metrics: Comparison | None = None
    recovery: Recovery | None = None
    victim: str = ""
    fault_at: float | None = None        # share of truth requested when the fault came
    fault_after_s: float | None = None   # seconds from seeding to the fault
    crawl_s: float | None = None         # seconds from seeding to the end (or the timeout)
    last_fetch_s: float | None = None    # seconds from seeding to the last page request
    finished: bool = False
    notes: list[str] = field(default_factory=list)
    run_dir: str = ""


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


async def _inject(cl: cluster.Cluster) -> int:
    from consultant.client import ConsultantClient
    from manager.seed import inject, parse_seeds

    seeds = parse_seeds(Path(cl.seeds_file).read_text()).urls
    async with ConsultantClient(cl.consultant) as c:
        accepted, failed = await inject(c, seeds)
    if failed:
        raise RuntimeError(f"{len(failed)} seeds could not be injected")
    return sum(accepted.values())


async def _owned_by(cl: cluster.Cluster, hosts: list[str], agent: str) -> set[str]:
    from consultant.client import ConsultantClient

    async with ConsultantClient(cl.consultant) as c:
        return {r.host for r in await c.resolve(hosts) if r.owner and r.owner[0] == agent}


async def _wait_idle(cl: cluster.Cluster, timeout: float, stable: float) -> bool:
    from consultant.client import ConsultantClient
    from manager.status import wait_idle

    async with ConsultantClient(cl.consultant) as c:
        return await wait_idle(c, max(timeout, 0.1), stable=stable, quiet=True)


def _wait_progress(tail: LogTail, truth: set[str], port: int, share: float, deadline: float, seen: set[str]) -> bool:
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


def _fault(name: str, cl: cluster.Cluster, victim: str, notes: list[str]) -> tuple[float, Callable[[], None]]:
    """Inject the scenario's fault; returns (fault time, a completion step to run before waiting
    for the end: the restart after the outage, or the drain's exit)."""
    run = cl.run_dir
    if name in ("restart", "kill"):
        cluster.kill(run, f"agent-{victim}")
        t = time.time()
        if name == "kill":
            return t, lambda: None
    elif name in ("consultant", "storage"):
        cluster.kill(run, name)
        t = time.time()
    elif name == "drain":
        t = time.time()
        # The operator's command, as a process: it blocks until the agent has handed over.
        p = subprocess.Popen([sys.executable, "-m", "manager.cli", "--consultant", cl.consultant, "drain", victim],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})

        def finish_drain() -> None:
            try:
                out, _ = p.communicate(timeout=180)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            notes.append(f"drain exit {p.returncode}: {out.strip().splitlines()[-1] if out.strip() else ''}")

        return t, finish_drain
    else:
        raise ValueError(name)
    proc = f"agent-{victim}" if name == "restart" else name

    def come_back() -> None:
        # The outage is the scenario's definition (10/20/30 s), not a wait for an event.
        time.sleep(max(0.0, t + OUTAGE_S[name] - time.time()))
        cluster.restart(run, proc)

    return t, come_back


def run_scenario(name: str, base: Path, args: argparse.Namespace) -> Row:
    run = base / name
    if run.exists():
        if (run / "cluster.json").is_file():
            cluster.down(run)
        shutil.rmtree(run)
    row = Row(name, run_dir=str(run))
    victim = args.victim if name in AGENT_FAULTS else ""
    row.victim = victim
    try:
        cl = cluster.up(run, strategy=args.strategy, groups=args.groups, topology_path=args.topology, seed=args.seed,
                        time_scale=args.time_scale, zero_latency=args.zero_latency, delay=args.delay,
                        concurrency=args.concurrency, lease=args.lease)
    except Exception as exc:  # noqa: BLE001 - up stopped what it started; the next scenario goes on
        row.notes.append(f"ERROR: lab up: {type(exc).__name__}: {exc}")
        return row
    fault_t: float | None = None
    candidates: set[str] | None = None
    truth: set[str] = set()
    seeded_at: float | None = None
    try:
        if victim and victim not in cl.agents:
            raise ValueError(f"victim {victim!r} is not one of the agents {sorted(cl.agents)}")
        truth = compute_truth(cl)
        tail = LogTail(cl.web_log)
        t0, seeded_at = time.monotonic(), time.time()
        deadline = t0 + args.timeout
        asyncio.run(_inject(cl))
        seen: set[str] = set()
        if name != "baseline" and not _wait_progress(tail, truth, cl.web_port, args.fault_at, deadline, seen):
            row.notes.append(f"TIMEOUT before {args.fault_at:.0%} of truth was requested (no fault injected)")
        else:
            if name != "baseline":
                row.fault_at = len(seen) / len(truth)
                if victim:
                    candidates = asyncio.run(_owned_by(cl, sorted({host_of_canonical(u) for u in truth}), victim))
                fault_t, complete = _fault(name, cl, victim, row.notes)
                row.fault_after_s = time.monotonic() - t0
                complete()
            row.finished = asyncio.run(_wait_idle(cl, deadline - time.monotonic(), args.stable))
            if not row.finished:
                row.notes.append(f"TIMEOUT: not idle {args.timeout:.0f}s after seeding")
        row.crawl_s = time.monotonic() - t0
    except Exception as exc:  # noqa: BLE001 - the row says what failed, the other scenarios go on
        row.notes.append(f"ERROR: {type(exc).__name__}: {exc}")
    finally:
        # The crawl as measured ends here. `lab down` stops agents one at a time, and a stopping
        # agent deregisters, so its hosts move to agents still running: if the crawl had not
        # finished (a timeout), they fetch during the teardown. Those fetches are not counted.
        t_end = time.time()
        stopped = cluster.down(run)
    # A process that died by itself (not the victim of kill or drain) makes the row meaningless:
    # say so rather than blame the crawler (the web once died of SIGPIPE when an agent was killed).
    gone_by_design = {f"agent-{victim}"} if name in ("kill", "drain") and fault_t is not None else set()
    for p in cluster.Cluster.load(run).procs:
        if p.name not in stopped and p.name not in gone_by_design:
            row.notes.append(f"ERROR: {p.name} was not running at the end (see {p.log})")
    # Everything is stopped: the web has flushed its log and storage's index is final.
    if truth:
        entries = LogTail(cl.web_log).poll()
        late = sum(1 for e in entries if e.t > t_end)
        if late:
            row.notes.append(f"{late} requests during the teardown not counted")
        urls = [(e.t, e.client, e.host, log_url(e, cl.web_port)) for e in entries if e.t <= t_end]
        requests = [(t, c, h, u) for t, c, h, u in urls if u is not None]
        captures = [(u, t) for u, t, fetched in read_captures(run) if fetched <= t_end]
        row.metrics = compare(truth, captures, [r[3] for r in requests])
        pages = [t for t, _, _, u in requests if urlsplit(u).path != "/robots.txt"]
        if pages and seeded_at is not None:
            row.last_fetch_s = max(pages) - seeded_at
        if fault_t is not None:
            # Only a restarted victim recovers its own hosts; a drained or killed one does not.
            ignore = [cl.agent_sources[victim]] if name in ("drain", "kill") else []
            row.recovery = recovery(fault_t, requests, truth, candidates, ignore)
    return row


# --- output ---------------------------------------------------------------------------------------


def _recovery_cell(r: Row) -> str:
    if r.recovery is None:
        return "-"
    rec = r.recovery
    cell = "no host had work left" if rec.affected == 0 else (f"{rec.seconds:.1f}" if rec.seconds is not None else "never")
    if rec.never and rec.seconds is not None:
        cell += f" (+{len(rec.never)} never)"
    return cell


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        m = r.metrics
        cells = ([str(m.truth), str(m.stored), str(m.lost), str(m.stored_twice), str(m.fetched_twice)]
                 if m else ["-"] * 6)
        notes = list(r.notes)
        if r.victim:
            notes.insert(0, f"victim {r.victim}")
        if r.fault_at is not None:
            notes.insert(1 if r.victim else 0, f"fault at {r.fault_at:.0%} ({r.fault_after_s:.1f}s)")
        if r.recovery is not None:
            notes.append(f"{r.recovery.affected} hosts affected")
        if m and m.outside_truth:
            notes.append(f"{m.outside_truth} stored URLs outside truth")
        out.append([r.scenario, *cells, _recovery_cell(r), _secs(r.last_fetch_s), _secs(r.crawl_s), "; ".join(notes)])
    return out


def _secs(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


HEADERS = ["scenario", "truth", "stored", "lost", "stored twice", "fetched twice", "recovery s", "last fetch s",
           "end s", "notes"]


def print_table(rows: list[Row], header: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=200)
    for line in header:
        console.print(line, highlight=False, markup=False)
    t = Table(show_edge=False, box=None, pad_edge=False)
    for h in HEADERS:
        t.add_column(h, justify="left" if h in ("scenario", "notes") else "right", overflow="fold")
    for cells in table_rows(rows):
        t.add_row(*cells)
    console.print(t)
    lost, pct = worst(rows)
    console.print(f"worst: lost {lost}, stored twice {pct:.1f}%", highlight=False, markup=False)


def parse_scenarios(values: list[str] | None) -> list[str]:
    if not values:
        return list(SCENARIOS)
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        raise SystemExit(f"chaos: unknown scenario(s) {', '.join(bad)} (known: {', '.join(SCENARIOS)})")
    return list(dict.fromkeys(names))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", action="append", help=f"one of {', '.join(SCENARIOS)}; repeatable or comma separated (default: all)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    p.add_argument("--run-dir", help="base directory for the runs (one subdirectory per scenario, kept); default: a temporary one, removed")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"lab web seed (default {DEFAULT_SEED}: 1,831 truth URLs)")
    p.add_argument("--topology", help="lab topology TOML (default: seed 002's world)")
    p.add_argument("--strategy", default="asn")
    p.add_argument("--groups", default=",".join(DEFAULT_GROUPS), help="four ISP-city agent groups")
    p.add_argument("--victim", default=DEFAULT_VICTIM, help="the agent that restart, drain and kill hit")
    p.add_argument("--fault-at", type=float, default=0.4, help="share of truth requested when the fault comes")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds from seeding to the end of the crawl")
    p.add_argument("--stable", type=float, default=2.0, help="seconds every live agent must stay idle to call the crawl finished")
    p.add_argument("--time-scale", type=float, default=60.0)
    p.add_argument("--zero-latency", action="store_true")
    p.add_argument("--delay", type=float, default=0.05, help="agents' per-host politeness delay (lab up's default)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--lease", type=float, default=15.0,
                   help="the consultant's agent lease (its default, 15 s): restart comes back within it, kill outlives it")
    args = p.parse_args(argv)
    args.groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    names = parse_scenarios(args.scenario)

    base = Path(args.run_dir).resolve() if args.run_dir else Path(tempfile.mkdtemp(prefix="wancrawl-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    header = [
        "$ python bench/chaos.py " + " ".join(sys.argv[1:] if argv is None else argv),
        f"lab seed {args.seed}, topology {args.topology or 'default (seed 002)'}, strategy {args.strategy}, "
        f"time scale {args.time_scale:g}{', zero latency' if args.zero_latency else ''}, politeness delay {args.delay:g}s, "
        f"concurrency {args.concurrency}",
        f"agents {', '.join(args.groups)}; victim {args.victim}; fault at {args.fault_at:.0%} of truth requested",
        f"lease {args.lease:g}s; outages: restart {OUTAGE_S['restart']:g}s, consultant {OUTAGE_S['consultant']:g}s, storage {OUTAGE_S['storage']:g}s; "
        f"end: every live agent idle for {args.stable:g}s, timeout {args.timeout:g}s after seeding",
        f"runs under {base}",
    ]
    rows: list[Row] = []
    try:
        for n in names:
            if not args.json:
                print(f"chaos: {n} ...", file=sys.stderr, flush=True)
            r = run_scenario(n, base, args)
            rows.append(r)
            if not args.json:
                print(f"chaos: {n}: " + "  ".join(f"{h}={c}" for h, c in zip(HEADERS[1:], table_rows([r])[0][1:])),
                      file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("chaos: interrupted (the cluster of the running scenario was stopped)", file=sys.stderr)
        return 130
    finally:
        if not args.run_dir:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        lost, pct = worst(rows)
        out = {"command": header[0].removeprefix("$ ").strip(), "params": {k: v for k, v in vars(args).items() if k not in ("json", "scenario")},
               "scenarios": [_row_json(r) for r in rows], "worst": {"lost": lost, "stored_twice_pct": round(pct, 2)}}
        print(json.dumps(out, indent=2))
    else:
        print_table(rows, header)
    return 0 if all(r.finished for r in rows) else 1


def _row_json(r: Row) -> dict:
    d = asdict(r)
    if r.metrics is not None:
        d["metrics"]["lost_urls"] = r.metrics.lost_urls[:50]  # a sample: the full list can be long
    if r.recovery is not None:
        d["recovery"]["per_host"] = {h: round(s, 3) for h, s in sorted(r.recovery.per_host.items())}
        d["recovery"]["seconds"] = None if r.recovery.seconds is None else round(r.recovery.seconds, 3)
    for k in ("fault_at", "fault_after_s", "crawl_s", "last_fetch_s"):
        d[k] = None if d[k] is None else round(d[k], 3)
    return d


if __name__ == "__main__":
    sys.exit(main())
