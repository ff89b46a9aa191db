"""bench/chaos.py's tables: the main one (a row per scenario), and the handover and flap tables
when those scenarios ran."""

from __future__ import annotations

import sys

from lab.faults.measure import Row, worst


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
            notes.insert(1 if r.victim else 0, f"fault at {r.fault_at:.0%} ({secs(r.fault_after_s)}s)")
        if r.recovery is not None:
            notes.append(f"{r.recovery.affected} hosts affected")
        if m and m.outside_truth:
            notes.append(f"{m.outside_truth} stored URLs outside truth")
        out.append([r.scenario, *cells, _recovery_cell(r), secs(r.last_fetch_s), secs(r.crawl_s), "; ".join(notes)])
    return out


def secs(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


HEADERS = ["scenario", "truth", "stored", "lost", "stored twice", "fetched twice", "recovery s", "last fetch s",
           "end s", "notes"]


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "n/a" if x is None else format(x, fmt)


HANDOVER_HEADERS = ["scenario", "hosts moved", "bytes moved", "moved B/host", "held B/host", "moved/held", "held at the fault"]
FLAP_HEADERS = ["scenario", "lost hosts", "handback s", "fetched before handback", "fetched in window",
                "while another agent fetched them", "window"]


def handover_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        h = r.handover
        if h is not None:
            out.append([r.scenario, str(h.hosts_moved), _num(h.bytes_moved), _num(h.moved_per_host), _num(h.held_per_host),
                        _num(h.ratio, ".3g"), f"{h.held_bytes:,} B over {h.held_hosts} hosts"])
    return out


def flap_rows(rows: list[Row]) -> list[list[str]]:
    return [[r.scenario, str(len(r.flap.lost_hosts)), _num(r.flap.handback_s, ".1f"), _num(r.flap.before_handback, "d"),
             str(r.flap.stale), str(r.flap.overlapping), f"pause to resume + {r.flap.window_s:.0f}s"]
            for r in rows if r.flap is not None]


def _small_table(console, title: str, headers: list[str], cells: list[list[str]]) -> None:
    from rich.table import Table

    console.print(title, highlight=False, markup=False)
    t = Table(show_edge=False, box=None, pad_edge=False)
    for h in headers:
        t.add_column(h, justify="left" if h in ("scenario", "held at the fault", "window") else "right", overflow="fold")
    for c in cells:
        t.add_row(*c)
    console.print(t)


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
    if handover_rows(rows):
        _small_table(console, "handover cost (HandOver bytes per host moved, fault to end, against per-host state held at the fault):",
                     HANDOVER_HEADERS, handover_rows(rows))
    if flap_rows(rows):
        _small_table(console, "flap (the victim's page requests to the hosts another agent fetched while it was stopped; handback s: after the resume):",
                     FLAP_HEADERS, flap_rows(rows))
