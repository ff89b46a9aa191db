"""`manager report`: PNG plots and summary.json of a crawl, from storage's index and the consultant's view of places."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from wancrawl.errors import FailedPrecondition, InvalidArgument, Unavailable, WancrawlError

EXPLAIN_CHUNK = 50  # Explain calls in flight at once
MAX_BINS = 300  # points per line in the pages/s plot
NICE_BINS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
FILES = {"rate": "pages_per_second.png", "pages": "pages_per_agent.png", "locality": "locality.png", "summary": "summary.json"}


# --- reading storage's index --------------------------------------------------------------------


@dataclass
class Fetches:
    """What the index says, aggregated in SQL so a large crawl does not come into memory row by row."""

    total: int
    start: float
    end: float
    bin_seconds: float
    per_agent_host: dict[str, dict[str, int]]  # agent -> host -> pages
    series: dict[str, dict[int, int]]  # agent -> bin number -> pages
    # The hosts with the most pages and the most wire bytes stored: (host, pages, bytes, truncated pages)
    top_by_pages: list[tuple[str, int, int, int]] = field(default_factory=list)
    top_by_bytes: list[tuple[str, int, int, int]] = field(default_factory=list)

    def bins(self) -> int:
        return int((self.end - self.start) // self.bin_seconds) + 1


def index_location(args) -> tuple[str, str | None]:
    """(SQLAlchemy URL, schema) of storage's index from --index or --storage-config."""
    index = getattr(args, "index", None)
    cfg = getattr(args, "storage_config", None)
    if index and cfg:
        raise InvalidArgument("give --index URL or --storage-config FILE, not both")
    if index:
        return index, None
    if cfg:
        from storage import config as storage_config

        s = storage_config.load(cfg)
        return s.index_url(), s.index.schema
    raise InvalidArgument("give --storage-config FILE (storage's TOML) or --index URL (its SQLAlchemy URL)")


def _shown(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a bad URL is reported by the caller
        return url


def _read_only_engine(url: str) -> sa.Engine:
    try:
        u = sa.engine.make_url(url)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises several types for bad URLs
        raise InvalidArgument(f"index URL {url!r}: {exc}") from None
    if u.get_backend_name() == "sqlite":
        db = u.database or ""
        if not db or db == ":memory:":
            raise InvalidArgument(f"index URL {url!r} names no SQLite file")
        if not Path(db).is_file():
            raise Unavailable(f"storage index {db} does not exist (has storage run with this config?)")
        # mode=ro: a report must never create or change the index it reads.
        return sa.create_engine(f"sqlite:///file:{Path(db).resolve()}?mode=ro&uri=true")
    try:
        return sa.create_engine(u)
    except Exception as exc:  # noqa: BLE001
        raise Unavailable(f"index {_shown(url)}: {exc}") from None


def choose_bin(span: float) -> float:
    """The smallest round bin (1 s, 2 s, 5 s, ... 1 day) that keeps the plot under MAX_BINS points."""
    for b in NICE_BINS:
        if span / b <= MAX_BINS:
            return float(b)
    return float(math.ceil(span / MAX_BINS / 86400) * 86400)


def read_fetches(url: str, schema: str | None = None, bin_seconds: float | None = None) -> Fetches:
    from storage.index import make_tables

    engine = _read_only_engine(url)
    _md, captures, _files = make_tables(schema)
    c = captures.c
    try:
        with engine.connect() as conn:
            total, start, end = conn.execute(sa.select(sa.func.count(), sa.func.min(c.fetched_at), sa.func.max(c.fetched_at))).one()
            if not total:
                raise FailedPrecondition(f"storage index {_shown(url)} has no captures yet: nothing to report")
            start, end = float(start), float(end)
            b = float(bin_seconds) if bin_seconds else choose_bin(end - start)
            per: dict[str, dict[str, int]] = defaultdict(dict)
            for agent, host, n in conn.execute(sa.select(c.agent_id, c.host, sa.func.count()).group_by(c.agent_id, c.host)):
                per[agent][host] = int(n)
            offset = (c.fetched_at - start) / b
            # PostgreSQL rounds a float cast to integer; SQLite truncates and may lack floor().
            raw = sa.func.floor(offset) if engine.dialect.name == "postgresql" else sa.cast(offset, sa.Integer)
            bucket = raw.label("bucket")
            series: dict[str, dict[int, int]] = defaultdict(dict)
            for agent, k, n in conn.execute(sa.select(c.agent_id, bucket, sa.func.count()).group_by(c.agent_id, bucket)):
                series[agent][int(k)] = int(n)
            cols = (c.host, sa.func.count(), sa.func.coalesce(sa.func.sum(c.raw_length), 0),
                    sa.func.sum(sa.case((c.truncated != "", 1), else_=0)))
            tops = [[(h, int(n), int(b), int(t or 0)) for h, n, b, t in conn.execute(
                sa.select(*cols).group_by(c.host).order_by(order.desc(), c.host).limit(TOP_HOSTS))]
                for order in (sa.func.count(), sa.func.coalesce(sa.func.sum(c.raw_length), 0))]
    except sa.exc.DBAPIError as exc:
        missing = "storage_captures" in str(exc.orig) or "no such table" in str(exc.orig)
        what = "has no storage_captures table (is it storage's index?)" if missing else f"cannot be read: {exc.orig}"
        raise Unavailable(f"storage index {_shown(url)} {what}".strip()) from None
    finally:
        engine.dispose()
    return Fetches(int(total), start, end, b, dict(per), dict(series), tops[0], tops[1])


# --- places: the consultant's view --------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    city: str = ""
    isp: str = ""  # the consultant's ISP group name, else "AS<n>", else "" (unknown)
    asn: int = 0

    @classmethod
    def of(cls, loc) -> "Place":
        isp = loc.isp or (f"AS{loc.asn}" if loc.asn else "")
        return cls(loc.city.strip(), isp, int(loc.asn))


@dataclass
class Places:
    strategy: str = ""
    agents: dict[str, Place] = field(default_factory=dict)
    sites: dict[str, Place] = field(default_factory=dict)


async def ask_consultant(address: str, hosts: list[str], chunk: int = EXPLAIN_CHUNK) -> Places:
    """Agents' locations (ListAgents, departed ones too) and each host's site (one Explain per host)."""
    from consultant.client import ConsultantClient

    places = Places()
    async with ConsultantClient(address) as client:
        try:
            r = await client.list_agents(include_dead=True)
        except Unavailable as exc:
            raise Unavailable(f"consultant at {address} is unreachable ({exc}); the report needs it for agents' and sites' locations") from None
        places.strategy = r.strategy
        places.agents = {a.agent_id: Place.of(a.location) for a in r.agents}

        async def explain(host: str) -> tuple[str, Place]:
            try:
                return host, Place.of((await client.explain(host)).site)
            except InvalidArgument:  # a host the consultant cannot parse has no known place
                return host, Place()

        for i in range(0, len(hosts), chunk):
            places.sites.update(await asyncio.gather(*(explain(h) for h in hosts[i:i + chunk])))
    return places


# --- numbers -----------------------------------------------------------------------------------------


def _share(n: int, d: int) -> float | None:
    return n / d if d else None


def summarize(f: Fetches, places: Places) -> dict[str, Any]:
    """Pages, rates and locality (site in the agent's own ISP, own city, both) per agent and overall."""
    span = f.end - f.start
    nbins = f.bins()
    # A crawl shorter than a second still ran for at least one bin's worth of time.
    seconds = max(span, f.bin_seconds)
    agents = sorted(set(f.per_agent_host) | set(places.agents))
    per: dict[str, Any] = {}
    overall: defaultdict[str, int] = defaultdict(int)
    for agent in agents:
        hosts = f.per_agent_host.get(agent, {})
        pages = sum(hosts.values())
        home = places.agents.get(agent)
        row: dict[str, Any] = {
            "pages": pages, "hosts": len(hosts), "pages_per_second": pages / seconds,
            "city": home.city if home else None, "isp": home.isp if home else None, "asn": home.asn if home else None,
            "location_known": home is not None,
        }
        if home is not None:
            k: defaultdict[str, int] = defaultdict(int)
            for host, n in hosts.items():
                site = places.sites.get(host, Place())
                same_isp = bool(home.isp and site.isp and home.isp == site.isp)
                same_city = bool(home.city and site.city and home.city.casefold() == site.city.casefold())
                k["same_isp"] += n * same_isp
                k["same_city"] += n * same_city
                k["same_isp_and_city"] += n * (same_isp and same_city)
                k["site_isp_unknown"] += n * (not site.isp)
                k["site_city_unknown"] += n * (not site.city)
            for key in ("same_isp", "same_city", "same_isp_and_city", "site_isp_unknown", "site_city_unknown"):
                row[key] = k[key]
                overall[key] += k[key]
            overall["pages"] += pages
            row["share"] = {key: _share(k[key], pages) for key in ("same_isp", "same_city", "same_isp_and_city")}
        per[agent] = row
    return {
        "pages": f.total,
        "agents": len(agents),
        "hosts": len({h for hosts in f.per_agent_host.values() for h in hosts}),
        "start": f.start,
        "end": f.end,
        "span_seconds": span,
        "pages_per_second": f.total / seconds,
        "bin_seconds": f.bin_seconds,
        "strategy": places.strategy,
        "peak_pages_per_second": max(sum(f.series.get(a, {}).get(i, 0) for a in f.series) for i in range(nbins)) / f.bin_seconds,
        # pages per bin, per agent: what the pages/s plot draws
        "series": {a: [f.series.get(a, {}).get(i, 0) for i in range(nbins)] for a in agents},
        "per_agent": per,
        "locality": {
            "pages_counted": overall["pages"],  # pages of agents whose location the consultant knows
            "same_isp": overall["same_isp"], "same_city": overall["same_city"],
            "same_isp_and_city": overall["same_isp_and_city"],
            "site_isp_unknown": overall["site_isp_unknown"], "site_city_unknown": overall["site_city_unknown"],
            "share": {key: _share(overall[key], overall["pages"]) for key in ("same_isp", "same_city", "same_isp_and_city")},
        },
    }


# --- plots ---------------------------------------------------------------------------------------------


def _colors(agents: list[str]) -> dict[str, Any]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if len(agents) <= 10 else "tab20"]
    return {a: cmap(i % cmap.N) for i, a in enumerate(agents)}


def plot(f: Fetches, summary: dict[str, Any], out: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt

    agents = sorted(summary["per_agent"])
    colors = _colors(agents)
    width = max(7.0, 0.9 * len(agents) + 3)
    paths = {k: out / v for k, v in FILES.items()}
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(f.start))

    fig, ax = plt.subplots(figsize=(10, 5), dpi=110)
    nbins = f.bins()
    total = [0.0] * nbins
    for agent in agents:
        counts = f.series.get(agent, {})
        ys = [counts.get(i, 0) / f.bin_seconds for i in range(nbins)]
        total = [t + y for t, y in zip(total, ys)]
        ax.plot([i * f.bin_seconds for i in range(nbins)], ys, label=agent, color=colors[agent], linewidth=1.4)
    if len(agents) > 1:
        ax.plot([i * f.bin_seconds for i in range(nbins)], total, label="all agents", color="black", linestyle="--", linewidth=1)
    ax.set(xlabel=f"seconds since the first fetch ({when})", ylabel="pages/s",
           title=f"Pages per second per agent ({f.bin_seconds:g} s bins)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", ncol=2 if len(agents) > 6 else 1, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(paths["rate"])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(width, 5), dpi=110)
    pages = [summary["per_agent"][a]["pages"] for a in agents]
    bars = ax.bar(agents, pages, color=[colors[a] for a in agents])
    ax.bar_label(bars, labels=[f"{p:,}" for p in pages], fontsize="small")
    ax.set(ylabel="pages", title=f"Pages per agent ({summary['pages']:,} in all)")
    ax.tick_params(axis="x", labelrotation=30)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths["pages"])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(width + 1, 5), dpi=110)
    groups = [a for a in agents if summary["per_agent"][a].get("share")] + ["overall"]
    kinds = (("same_isp", "own ISP"), ("same_city", "own city"), ("same_isp_and_city", "both"))
    step = 0.8 / len(kinds)
    for j, (key, label) in enumerate(kinds):
        shares = [(summary["locality"] if g == "overall" else summary["per_agent"][g])["share"][key] for g in groups]
        xs = [i + (j - 1) * step for i in range(len(groups))]
        vals = [100 * (s or 0) for s in shares]
        b = ax.bar(xs, vals, width=step, label=label)
        ax.bar_label(b, labels=[f"{v:.0f}" for v in vals], fontsize="x-small")
    ax.set_xticks(range(len(groups)), groups, rotation=30)
    ax.set(ylabel="% of the agent's fetches", ylim=(0, 110),
           title=f"Fetches that stayed in the agent's own ISP / city (strategy {summary['strategy'] or '?'})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths["locality"])
    plt.close(fig)
    return paths


# --- the command ---------------------------------------------------------------------------------


async def agents_give_ups(consultant: str) -> list[tuple[str, int, int, int]]:
    """The hosts the live agents gave up most (the index knows only what was stored): (host,
    pages, bytes, give-ups) from their Status; [] when none answers (said on stderr)."""
    from consultant.client import ConsultantClient
    from manager.status import snapshot, top_hosts

    try:
        async with ConsultantClient(consultant) as client:
            snap = await snapshot(client)
    except WancrawlError as exc:
        print(f"report: no give-ups from the agents ({exc})", file=sys.stderr)
        return []
    return top_hosts(snap.agents, TOP_HOSTS)["give_ups"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


TOP_HOSTS = 10  # hosts per measure in the report


def text_summary(s: dict[str, Any]) -> str:
    lines = [f"{s['pages']:,} pages by {s['agents']} agents from {s['hosts']:,} hosts over {s['span_seconds']:.1f} s "
             f"({s['pages_per_second']:.1f} pages/s), strategy {s['strategy'] or '?'}",
             f"{'agent':<24} {'pages':>9} {'pages/s':>8} {'own ISP':>8} {'own city':>9} {'both':>7}"]
    for agent, r in sorted(s["per_agent"].items()):
        sh = r.get("share") or {}
        lines.append(f"{agent:<24} {r['pages']:>9,} {r['pages_per_second']:>8.1f} {_pct(sh.get('same_isp')):>8} "
                     f"{_pct(sh.get('same_city')):>9} {_pct(sh.get('same_isp_and_city')):>7}"
                     + ("" if r["location_known"] else "  (location unknown to the consultant)"))
    sh = s["locality"]["share"]
    lines.append(f"{'overall':<24} {s['pages']:>9,} {s['pages_per_second']:>8.1f} {_pct(sh['same_isp']):>8} "
                 f"{_pct(sh['same_city']):>9} {_pct(sh['same_isp_and_city']):>7}")
    top = s.get("top_hosts") or {}
    for key, what in (("pages", "pages"), ("bytes", "wire bytes"), ("give_ups", "give-ups (the agents' count)")):
        rows = top.get(key) or []
        if rows:
            lines.append(f"top hosts by {what}: " + ", ".join(
                f"{h} ({n} pages, {b / 1e6:.1f} MB" + (f", {x} {'given up' if key == 'give_ups' else 'truncated'})" if x else ")")
                for h, n, b, x in rows[:5]))
    return "\n".join(lines)


def run_report(args) -> int:
    """Read the index, ask the consultant where agents and sites are, write the plots and summary.json."""
    out = Path(args.out)
    url, schema = index_location(args)
    fetches = read_fetches(url, schema, getattr(args, "bin", None))
    hosts = sorted({h for hs in fetches.per_agent_host.values() for h in hs})
    from manager.directory import peer_addresses

    consultant = "" if peer_addresses(getattr(args, "peers", "")) else args.consultant
    if consultant:
        places = asyncio.run(ask_consultant(consultant, hosts))
    else:  # Kademlia mode: pages and rates from the index; places are the consultant's alone
        print("report: the locality plot needs a consultant (it alone knows where agents and sites are); without "
              "one (--peers, Kademlia mode) it is left empty", file=sys.stderr)
        places = Places(strategy="kademlia")
    summary = summarize(fetches, places)
    summary["top_hosts"] = {"pages": fetches.top_by_pages, "bytes": fetches.top_by_bytes,
                            "give_ups": asyncio.run(agents_give_ups(consultant)) if consultant else []}
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgument(f"--out {out}: {exc}") from None
    paths = plot(fetches, summary, out)
    summary["index"] = _shown(url)
    summary["consultant"] = consultant or None
    summary["files"] = {k: str(p) for k, p in paths.items()}
    paths["summary"].write_text(json.dumps(summary, indent=2) + "\n")
    print(text_summary(summary))
    for p in paths.values():
        print(f"wrote {p}")
    return 0


def write_report(out: Path, storage_config: Path, consultant: str) -> dict | None:
    """run_report for a crawl that just ended (`lab demo`, `manager crawl`): the summary written
    to OUT/summary.json, or None when it could not be (said on stderr: the crawl is stored, the
    plots are a bonus). consultant "": a crawl without one (Kademlia mode), no locality."""
    import argparse
    import json

    ns = argparse.Namespace(out=str(out), storage_config=str(storage_config), index=None, consultant=consultant)
    try:
        if run_report(ns) == 0 and (out / "summary.json").is_file():
            return json.loads((out / "summary.json").read_text())
    except Exception as exc:  # noqa: BLE001 - the summary goes on without plots
        print(f"report: not written ({exc})", file=sys.stderr)
    return None
