"""`manager status`'s agent table: every figure a column, and the columns that fit the width.

Seventeen columns do not fit a terminal: at 120 characters rich cut every one to three letters
("age…", "sta…"). So each column has a rank, and the table takes the columns in rank order that
still let the whole table, measured by rich at its natural width, fit; cells are never cut. What
is left out is named under the table (`--wide` shows it all). Piped, the table is as wide as it
needs to be. Each column's `doc` is what docs/manager.md says of it (a test keeps them equal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class AgentView(Protocol):
    """What a column reads of an agent (manager.status.AgentView; not imported: status imports us)."""

    agent_id: str
    state: str
    isp: str
    city: str
    counters: dict[str, float]
    reachable: bool
    parked: list[tuple[str, float, str]]
    given_up: list[tuple[str, str]]


Cell = Callable[[AgentView, float], str]


def _n(key: str, fmt: str = ".0f") -> Cell:
    return lambda a, _rate: format(a.counters.get(key, 0), fmt)


def _state(a: AgentView, _rate: float) -> str:
    return a.state if a.reachable or a.state != "alive" else "unreachable"


@dataclass(frozen=True)
class Column:
    header: str
    rank: int    # 0 first: kept at any width
    cell: Cell   # (agent, its pages/s) -> the text
    doc: str
    left: bool = False


COLUMNS: tuple[Column, ...] = (
    Column("agent", 0, lambda a, _: a.agent_id, "the agent's id (never cut)", left=True),
    Column("state", 1, _state, "alive, dead (lease expired), left (drained or deregistered), or unreachable "
           "(alive for the consultant, but its Status call failed)", left=True),
    Column("ISP/city", 9, lambda a, _: f"{a.isp or '-'}/{a.city or '-'}",
           "where the consultant placed it: its ISP and city (-/- in Kademlia mode: no consultant, no places)", left=True),
    Column("hosts", 11, _n("hosts_with_work"), "hosts with URLs queued at this agent"),
    Column("queue", 4, _n("frontier"), "URLs queued in its frontier"),
    Column("load L", 12, _n("load_level", "+.1f"),
           "seed 000's load level as of the last heartbeat, in blocks of 20 URLs: (queue - work area) / 20, the "
           "work area being what the agent fetches in 10 s at its peak rate; below 0 light (an idle agent that "
           "peaked at 40 pages/s shows -20.0), above 0 heavy: the balancer moves hosts from heavy to light agents"),
    Column("in flight", 8, _n("in_flight"), "fetches under way"),
    Column("pages", 2, _n("pages"), "URLs fetched with a response (any status, truncated ones too), counted by this agent process"),
    Column("pages/s", 3, lambda _a, rate: f"{rate:.1f}", "pages per second over the last refresh interval"),
    Column("errors", 5, _n("errors"), "URLs given up without any response, after their last retry"),
    Column("parked", 6, lambda a, _: f"{len(a.parked)}",
           "hosts and origins that cannot be fetched within politeness.park_horizon (300 s): backed off after "
           "errors, a Retry-After, an origin's robots.txt unreachable; kept and retried later, listed with their "
           "reason by `manager wait`"),
    Column("given up", 7, lambda a, _: f"{len(a.given_up)}",
           "hosts and origins the agent stopped crawling for good (DNS failure, page budget spent, forbidden "
           "address, robots.txt unreachable too long); listed with their reason by `manager wait`"),
    Column("pushes", 16, _n("pushes"), "PushUrls batches sent to peers (URLs of hosts other agents own)"),
    Column("spool", 13, _n("spool_batches"), "page batches on disk waiting for storage (grows while storage is down)"),
    Column("replicas", 15, _n("replica_hosts"), "other agents' hosts backed up here (r = 2: docs/replication.md)"),
    Column("repl lag", 14,
           lambda a, _: f"{a.counters.get('replica_unsynced', 0):.0f}/{a.counters.get('replica_lag_items', 0):.0f}",
           "U/N: U of this agent's hosts whose backup has no full copy yet / N frontier changes not yet at a "
           "backup; 0/0 when every backup is current"),
)


def chosen(columns: tuple[Column, ...], fits: Callable[[list[Column]], bool], wide: bool) -> list[Column]:
    """Columns in rank order while `fits` says the table holds them (all with `wide`), returned
    in the table's order."""
    if wide:
        return list(columns)
    keep: list[Column] = []
    for col in sorted(columns, key=lambda c: c.rank):
        if col.rank <= 1 or fits(keep + [col]):
            keep.append(col)  # one that does not fit is skipped: a narrower one of a lower rank may
    order = {c.header: i for i, c in enumerate(columns)}
    return sorted(keep, key=lambda c: order[c.header])


def agent_table(title: str, agents: Sequence[AgentView], rates: dict[str, float], cols: list[Column]) -> Any:
    from rich import box
    from rich.table import Table

    # No vertical rules: 17 of them are a column's worth of width at 120 characters.
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    for c in cols:
        t.add_column(c.header, justify="left" if c.left else "right", no_wrap=True,
                     overflow="fold" if c.header == "agent" else "ellipsis")
    for a in agents:
        t.add_row(*(c.cell(a, rates.get(a.agent_id, 0.0)) for c in cols))
    return t


def fitted(title: str, agents: Sequence[AgentView], rates: dict[str, float], width: int | None,
           wide: bool = False) -> tuple[Any, list[Column]]:
    """(the agent table, the columns left out): as many columns as fit `width` characters
    (None: all of them, at their natural width)."""
    from rich.console import Console
    from rich.measure import Measurement

    if width is None:
        return agent_table(title, agents, rates, list(COLUMNS)), []
    console = Console(width=10_000)

    def fits(cols: list[Column]) -> bool:
        return Measurement.get(console, console.options, agent_table(title, agents, rates, cols)).maximum <= width

    cols = chosen(COLUMNS, fits, wide)
    return agent_table(title, agents, rates, cols), [c for c in COLUMNS if c not in cols]


def natural_width(renderable: Any) -> int:
    """The width a renderable takes uncut (a piped table is printed at it)."""
    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=10_000)
    return Measurement.get(console, console.options, renderable).maximum


def doc_table() -> str:
    """The table docs/manager.md shows (`python -m manager.columns`)."""
    rows = [f"| {c.header} | {c.doc} |" for c in COLUMNS]
    return "\n".join(["| column | what it is |", "| --- | --- |", *rows])


if __name__ == "__main__":
    print(doc_table())
