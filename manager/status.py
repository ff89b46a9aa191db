"""`manager status|agents|wait|drain`: the crawl as the agents and storage report it."""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agent.client import AgentClient, AgentPool
from manager.directory import Directory, open_directory
from wancrawl.errors import NotFound, WancrawlError
from wancrawl.v1 import agent_pb2

STATE = {1: "alive", 2: "dead", 3: "left"}


@dataclass
class AgentView:
    agent_id: str
    address: str
    state: str
    city: str
    isp: str
    counters: dict[str, float] = field(default_factory=dict)
    reachable: bool = False
    parked: list[tuple[str, float, str]] = field(default_factory=list)  # (host, until, reason)
    given_up: list[tuple[str, str]] = field(default_factory=list)       # (host, reason)
    top_hosts: list[tuple[str, int, int, int]] = field(default_factory=list)  # (host, pages, bytes, give-ups)


@dataclass
class WriterView:
    """One storage writer as its Stats answered (storage.proto WriterStatus), or why it did not."""

    address: str
    up: bool = False
    error: str = ""
    writer_id: str = ""
    sink: str = ""
    uptime: float = 0.0
    pages: int = 0
    duplicates: int = 0
    bytes_written: int = 0
    queued_batches: int = 0
    lag: float = 0.0             # age of the oldest batch received and not yet durable
    since_durable: float = -1.0  # -1: nothing made durable since the writer started


@dataclass
class Snapshot:
    epoch: int
    strategy: str
    agents: list[AgentView]
    storage: dict | None = None  # the archive's totals (the index every writer shares)
    writers: list[WriterView] = field(default_factory=list)

    def idle(self) -> bool:
        """See finished(): the one definition of "the crawl is finished"."""
        return finished(self)

    def progress_key(self) -> tuple:
        """Changes whenever any agent did something (for 'stays idle'), and only then: sorted by
        agent, because a directory may list the agents in any order (an overlay lists them by XOR
        distance from whichever agent answered), and a reordering is not progress."""
        return tuple(sorted((a.agent_id, a.counters.get("pages"), a.counters.get("pushed_in"), a.counters.get("routed"))
                            for a in self.agents))

    def as_json(self) -> dict:
        return {
            "epoch": self.epoch, "strategy": self.strategy, "idle": self.idle(),
            "agents": [a.__dict__ for a in self.agents], "storage": self.storage,
            "writers": [w.__dict__ for w in self.writers],
        }


async def _agent_status(client: AgentClient) -> agent_pb2.StatusResponse | None:
    try:
        return await client.status(timeout=3)
    except WancrawlError:  # shown as unreachable
        return None


async def _none() -> None:
    return None


async def snapshot(consultant: Directory, include_dead: bool = False, storage: str | None = None) -> Snapshot:
    """The agents as the directory lists them and their Status; with `storage` (one address or
    several writers separated by commas) each writer's status and the archive's totals."""
    listed = await consultant.list_agents(include_dead=include_dead)
    views = [
        AgentView(a.agent_id, a.address, STATE.get(a.state, "?"), a.location.city, a.location.isp)
        for a in listed.agents
    ]
    async with AgentPool() as pool:
        results = await asyncio.gather(*(_agent_status(pool.get(v.address)) if v.state == "alive" else _none() for v in views))
    for v, r in zip(views, results):
        if r is not None:
            v.counters, v.reachable = dict(r.counters), True
            v.parked = [(p.host, p.until, p.reason) for p in r.parked]
            v.given_up = [(g.host, g.reason) for g in r.given_up]
            v.top_hosts = [(t.host, t.pages, t.bytes, t.give_ups) for t in r.top_hosts]
    snap = Snapshot(listed.epoch, listed.strategy, views)
    if storage:
        snap.storage, snap.writers = await storage_status(storage)
    return snap


def top_hosts(agents: list[AgentView], n: int = 5) -> dict[str, list[tuple[str, int, int, int]]]:
    """The hosts that cost the crawl the most, by pages, by bytes and by give-ups, over every
    agent's tally (a host that moved between agents adds up). A host may be in several lists
    (the most pages are most often the most bytes too): cost_rows lists each host once."""
    sums: dict[str, list[int]] = {}
    for a in agents:
        for host, pages, nbytes, give_ups in a.top_hosts:
            row = sums.setdefault(host, [0, 0, 0])
            row[0] += pages
            row[1] += nbytes
            row[2] += give_ups
    out = {}
    for i, key in enumerate(("pages", "bytes", "give_ups")):
        best = sorted((h for h in sums if sums[h][i]), key=lambda h: (-sums[h][i], h))[:n]
        out[key] = [(h, sums[h][0], sums[h][1], sums[h][2]) for h in best]
    return out


def cost_rows(agents: list[AgentView], n: int = 5) -> list[tuple[str, int, int, int, str]]:
    """Each host of any top-n list once: (host, pages, bytes, give-ups, the lists it tops),
    by pages, then bytes, then give-ups."""
    rows: dict[str, tuple[str, int, int, int, list[str]]] = {}
    for key, listed in top_hosts(agents, n).items():
        for host, pages, nbytes, give_ups in listed:
            rows.setdefault(host, (host, pages, nbytes, give_ups, []))[4].append(key.replace("_", "-"))
    ordered = sorted(rows.values(), key=lambda r: (-r[1], -r[2], -r[3], r[0]))
    return [(h, p, b, g, ", ".join(by)) for h, p, b, g, by in ordered]


def render_top_hosts(snap: Snapshot, n: int = 5):
    """The top hosts table `manager status` prints under the agents: the n first hosts by each
    measure, each host once, "top by" naming the measures it is among the n first of."""
    from rich import box
    from rich.table import Table

    t = Table(title=f"hosts that cost the most (the {n} first by pages, by wire bytes, by give-ups; each host once)",
              box=box.SIMPLE_HEAD, show_edge=False)
    for col in ("host", "pages", "MB", "give-ups", "top by"):
        t.add_column(col, justify="left" if col in ("host", "top by") else "right", no_wrap=col == "host")
    for host, pages, nbytes, give_ups, by in cost_rows(snap.agents, n):
        t.add_row(host, f"{pages}", f"{nbytes / 1e6:.1f}", f"{give_ups}", by)
    return t


async def storage_status(addresses: str) -> tuple[dict, list[WriterView]]:
    """(the archive's totals, each writer's view): every writer is asked for its own status at
    once; the totals (an index query) from the first writer that answers."""
    from google.protobuf import json_format

    from storage.client import GrpcStorageClient
    from wancrawl.failover import parse_addresses

    async def ask(address: str, totals: bool):
        try:
            async with GrpcStorageClient(address, timeout=5) as s:
                return await s.stats(top=0, writer_only=not totals)
        except WancrawlError as exc:
            return exc

    writers = parse_addresses(addresses, where="--storage")
    answers = list(await asyncio.gather(*(ask(a, False) for a in writers)))
    views = [writer_view(a, r) for a, r in zip(writers, answers)]
    totals: dict = {"error": "no storage writer answered: " + "; ".join(v.error for v in views)}
    for v in views:
        if v.up:
            r = await ask(v.address, True)
            if not isinstance(r, WancrawlError):
                r.ClearField("writer")
                totals = json_format.MessageToDict(r, preserving_proto_field_name=True)
                break
    return totals, views


def writer_view(address: str, answer) -> WriterView:
    if isinstance(answer, WancrawlError):
        return WriterView(address, error=str(answer))
    w = answer.writer
    return WriterView(address, True, "", w.writer_id, w.sink, w.uptime_seconds, w.pages, w.duplicates,
                      w.bytes_written, w.queued_batches, w.lag_seconds, w.since_durable_seconds)


def render(snap: Snapshot, rates: dict[str, float], width: int | None = None, wide: bool = False):
    """The agents' table: the columns that fit `width` (None: all; manager/columns.py), the
    storage totals, the columns left out and the revisits line under it."""
    from manager.columns import fitted

    title = f"wancrawl — strategy {snap.strategy}, epoch {snap.epoch}" + ("  [idle]" if snap.idle() else "")
    t, hidden = fitted(title, snap.agents, rates, width, wide)
    notes = []
    if snap.storage:
        st = snap.storage
        notes.append(f"storage: {st.get('error')}" if "error" in st else
                     f"storage: {st.get('pages', 0)} pages, ratio {float(st.get('compression_ratio', 0) or 0):.2f}")
    if hidden:
        notes.append(f"not shown at this width ({len(hidden)}): {', '.join(c.header for c in hidden)} "
                     "(--wide, or --json; docs/manager.md explains each)")
    line = revisit_line(snap)
    if line:
        notes.append(line)
    if notes:
        t.caption = "\n".join(notes)
    return t


def revisit_summary(snap: Snapshot) -> dict[str, float] | None:
    """A continuous crawl's figures over every agent (issue 26): URLs scheduled and due,
    revisits, pages found changed, 304s and the bytes they saved, and the freshness estimate
    (the share of revisits that found the page unchanged); None when no agent revisits."""
    agents = [a.counters for a in snap.agents if "revisits_scheduled" in a.counters]
    if not agents:
        return None
    out = {k: sum(c.get(k, 0.0) for c in agents) for k in (
        "revisits_scheduled", "revisits_due", "revisits", "revisits_changed", "revisits_unchanged", "not_modified",
        "not_modified_bytes")}
    seen = out["revisits_changed"] + out["revisits_unchanged"]
    out["freshness"] = out["revisits_unchanged"] / seen if seen else 1.0
    return out


def revisit_line(snap: Snapshot) -> str:
    r = revisit_summary(snap)
    if r is None:
        return ""
    return (f"revisits: {r['revisits_scheduled']:.0f} scheduled, {r['revisits_due']:.0f} due, {r['revisits']:.0f} done, "
            f"{r['revisits_changed']:.0f} pages changed, {r['not_modified']:.0f} not modified "
            f"({r['not_modified_bytes'] / 1e6:.1f} MB saved), freshness estimate {r['freshness']:.2f}")


def render_writers(snap: Snapshot, rates: dict[str, tuple[float, float]]):
    """Each storage writer: its ingest over the last interval and its lag (docs/storage.md)."""
    from rich.table import Table

    t = Table(title="storage writers")
    for col in ("writer", "address", "state", "pages/s", "MB/s", "lag s", "queued", "last durable", "pages", "duplicates"):
        t.add_column(col, justify="left" if col in ("writer", "address", "state") else "right")
    for w in snap.writers:
        if not w.up:
            t.add_row("-", w.address, "down", *["-"] * 7)
            continue
        pages, nbytes = rates.get(w.address, (None, None))
        t.add_row(w.writer_id or w.sink, w.address, "up", "-" if pages is None else f"{pages:.1f}",
                  "-" if nbytes is None else f"{nbytes / 1e6:.2f}", f"{w.lag:.1f}", f"{w.queued_batches}",
                  "never" if w.since_durable < 0 else f"{w.since_durable:.0f}s ago", f"{w.pages}", f"{w.duplicates}")
    return t


class WriterRates:
    """Pages and bytes per second per storage writer between two snapshots (owns the last reading
    of each). A writer that restarted (its counters went back) starts over."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float, int, int]] = {}

    def update(self, snap: Snapshot, now: float) -> dict[str, tuple[float, float]]:
        rates: dict[str, tuple[float, float]] = {}
        for w in snap.writers:
            if not w.up:
                self._last.pop(w.address, None)
                continue
            last = self._last.get(w.address)
            if last is not None and last[1] <= w.uptime:
                t0, _, p0, b0 = last
                dt = max(1e-9, now - t0)
                rates[w.address] = (max(0.0, (w.pages - p0) / dt), max(0.0, (w.bytes_written - b0) / dt))
            self._last[w.address] = (now, w.uptime, w.pages, w.bytes_written)
        return rates


async def run_status(args) -> int:
    async with open_directory(args) as c:
        if args.json:
            print(json.dumps((await snapshot(c, True, args.storage)).as_json(), indent=2))
            return 0
        from rich.console import Console
        from rich.live import Live

        rates, writer_rates = PageRates(), WriterRates()
        console = Console()
        piped = not console.is_terminal
        wide = getattr(args, "wide", False)

        async def frame():
            from rich.console import Group

            snap = await snapshot(c, True, args.storage)
            now = time.monotonic()
            # Piped: every column at its natural width (a log keeps it all, nothing cut).
            agents = render(snap, rates.update(snap, now), None if piped else console.width, wide)
            parts = [agents, render_top_hosts(snap)] + ([render_writers(snap, writer_rates.update(snap, now))] if snap.writers else [])
            return Group(*parts)

        if piped:
            from manager.columns import natural_width

            # Piped or logged: a table per interval instead of redrawing in place.
            while True:
                f = await frame()
                Console(width=max(80, natural_width(f))).print(f)
                await asyncio.sleep(args.interval)
        with Live(await frame(), refresh_per_second=4, screen=False, console=console) as live:
            while True:
                await asyncio.sleep(args.interval)
                live.update(await frame())


class PageRates:
    """Pages per second per agent between two snapshots (owns the last count it saw of each)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def update(self, snap: Snapshot, now: float) -> dict[str, float]:
        rates = {}
        for a in snap.agents:
            p = a.counters.get("pages", 0.0)
            if a.agent_id in self._last:
                t0, p0 = self._last[a.agent_id]
                rates[a.agent_id] = max(0.0, (p - p0) / max(1e-9, now - t0))
            self._last[a.agent_id] = (now, p)
        return rates


async def run_agents(args) -> int:
    async with open_directory(args) as c:
        snap = await snapshot(c, args.all)
    if args.json:
        print(json.dumps(snap.as_json()["agents"], indent=2))
        return 0
    for a in snap.agents:
        print(f"{a.agent_id:<24} {a.state:<6} {a.address:<22} {a.isp or '-':<10} {a.city or '-':<12} "
              f"pages={a.counters.get('pages', 0):.0f} queue={a.counters.get('frontier', 0):.0f}")
    return 0


def finished(snap: Snapshot) -> bool:
    """The crawl is finished: nothing fetchable is left. Every live agent answers and says it is
    idle: nothing in flight, owed to peers or waiting for storage, and every URL still queued
    waits beyond its park horizon (its origin's robots.txt unreachable, its host or origin backed
    off: agent/crawl/dispatcher.py only_parked), so it is listed by leftovers() with its reason.
    `manager wait`, `manager crawl`, bench/chaos.py and the lab's Kademlia wait all end on this
    (through wait_finished)."""
    alive = [a for a in snap.agents if a.state == "alive"]
    return bool(alive) and all(a.reachable and a.counters.get("idle") == 1.0 for a in alive)


async def wait_finished(take: Callable[[], Awaitable[Snapshot]], timeout: float, stable: float,
                        progress: Callable[[Snapshot, float], None] | None = None) -> bool:
    """True once finished() holds and nothing moved for `stable` seconds; False after `timeout`
    seconds (0: none). `take` makes a snapshot (the consultant's or the overlay's view); one that
    fails (a consultant restarting) counts as not finished."""
    start = time.monotonic()
    since, key = None, None
    while True:
        try:
            snap: Snapshot | None = await take()
        except WancrawlError:
            snap = None
        now = time.monotonic()
        if snap is not None and finished(snap):
            k = snap.progress_key()
            if k != key:
                since, key = now, k
            elif since is not None and now - since >= stable:
                return True
        else:
            since, key = None, None
        if progress is not None and snap is not None:
            progress(snap, now)
        if timeout and now - start > timeout:
            return False
        await asyncio.sleep(0.25)


async def wait_idle(consultant: Directory, timeout: float, stable: float, quiet: bool = True) -> bool:
    """wait_finished over the consultant's (or a peer directory's) agents; not quiet: a progress
    line on stderr."""
    last_print = 0.0

    def show(snap: Snapshot, now: float) -> None:
        nonlocal last_print
        if quiet or not (sys.stderr.isatty() or now - last_print >= 5.0):
            return
        last_print = now
        pages = sum(a.counters.get("pages", 0) for a in snap.agents)
        queued = sum(a.counters.get("frontier", 0) for a in snap.agents)
        line = f"{pages:.0f} pages, {queued:.0f} queued, {len(snap.agents)} agents"
        print(f"\r{line}" if sys.stderr.isatty() else line, end="" if sys.stderr.isatty() else "\n", file=sys.stderr)

    return await wait_finished(lambda: snapshot(consultant), timeout, stable, show)


async def run_wait(args) -> int:
    async with open_directory(args) as c:
        done = await wait_idle(c, args.timeout, args.stable, args.quiet)
        try:
            notes = leftovers(await snapshot(c), time.time())
        except WancrawlError as exc:  # the consultant went away meanwhile: the verdict stands
            notes = [f"(no list of what is left: {exc})"]
    if not args.quiet:
        print(file=sys.stderr)
    print("crawl finished: nothing fetchable is left" if done else f"timed out after {args.timeout:.0f}s: the crawl is still running")
    for line in notes:
        print(line)
    return 0 if done else 1


# Given-up reasons by kind (the agents' wording: agent/crawl/dispatcher.py, agent/routing/intake.py).
GIVE_UP_KINDS = (("DNS:", "DNS failure"), ("page budget", "budget spent"), ("budget", "budget spent"),
                 ("robots.txt unreachable", "robots.txt unreachable"), ("forbidden", "forbidden address"))


def give_up_kind(reason: str) -> str:
    return next((kind for prefix, kind in GIVE_UP_KINDS if prefix in reason), "other")


def leftovers(snap: Snapshot, now: float, limit: int = 20) -> list[str]:
    """What is left and why, once the crawl is finished (or at a timeout): a summary line, then
    parked hosts and origins with their reason and next try, then given-up hosts and origins by
    kind (budget spent, DNS failure, robots.txt unreachable...), at most `limit` lines of each."""
    parked = [(host, a.agent_id, until, reason) for a in snap.agents for host, until, reason in a.parked]
    given = [(host, a.agent_id, reason) for a in snap.agents for host, reason in a.given_up]
    if not parked and not given:
        return []
    kinds = collections.Counter(give_up_kind(r) for *_, r in given)
    head = f"left: {len(parked)} parked (waiting, not fetchable within the park horizon), {len(given)} given up"
    if kinds:
        head += " (" + ", ".join(f"{n} {k}" for k, n in kinds.most_common()) + ")"
    out = [head]
    for host, agent, until, reason in sorted(parked, key=lambda p: p[2])[:limit]:
        out.append(f"parked    {host} ({agent}): {reason}; next try in {max(0.0, until - now):.0f}s")
    if len(parked) > limit:
        out.append(f"parked    ... and {len(parked) - limit} more")
    for kind in kinds:
        of_kind = [g for g in given if give_up_kind(g[2]) == kind]
        for host, agent, reason in of_kind[:limit]:
            out.append(f"given up  {host} ({agent}): {reason}")
        if len(of_kind) > limit:
            out.append(f"given up  ... and {len(of_kind) - limit} more ({kind})")
    return out


host_notes = leftovers  # the name bench/hostile.py knows


async def run_drain(args) -> int:
    async with open_directory(args) as c:
        agents = {a.agent_id: a.address for a in (await c.list_agents()).agents}
    if args.agent not in agents:
        raise NotFound(f"no live agent {args.agent!r} (known: {', '.join(sorted(agents)) or 'none'})")
    async with AgentClient(agents[args.agent]) as client:
        handed, remaining = await client.drain(args.timeout)
    print(f"{args.agent}: {handed} queued URLs handed over with their hosts' state, {remaining} still held or owed")
    return 0 if remaining == 0 else 1
