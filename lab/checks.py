"""Politeness checks over a lab request log: too-fast requests, robots violations, wrong owners."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from protego import Protego

from lab.server import LogEntry


@dataclass(frozen=True)
class Violation:
    kind: str  # "too-close", "robots", "wrong-owner"
    host: str
    entry: LogEntry
    detail: str


def read_log(path: str | Path) -> list[LogEntry]:
    """Entries of a JSONL request log (as written by `lab web --log`), in file order."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(LogEntry(**json.loads(line)))
    return out


def too_close(
    entries: Iterable[LogEntry],
    min_gap: float | Callable[[str], float | None],
    *,
    tolerance: float = 0.0,
    exclude_robots: bool = False,
) -> list[Violation]:
    """Requests to one host that arrived less than the host's minimum gap after the previous one.

    `min_gap` is seconds for every host, or a function host -> seconds (None: no limit), e.g.
    Web.crawl_delay. `tolerance` absorbs scheduling jitter.
    """
    gap_of = min_gap if callable(min_gap) else (lambda _h, g=min_gap: g)
    last: dict[str, LogEntry] = {}
    out = []
    for e in sorted(entries, key=lambda e: e.t):
        if exclude_robots and e.path == "/robots.txt":
            continue
        prev = last.get(e.host)
        last[e.host] = e
        if prev is None:
            continue
        g = gap_of(e.host)
        if g is not None and e.t - prev.t < g - tolerance:
            out.append(Violation("too-close", e.host, e, f"{e.t - prev.t:.3f}s after the previous request (minimum {g:.3f}s)"))
    return out


def robots_violations(
    entries: Iterable[LogEntry], robots_txt: Callable[[str], str | None], *, user_agent: str = "wancrawl"
) -> list[Violation]:
    """Requests to paths the host's robots.txt disallows for `user_agent`.

    `robots_txt` maps a host to its robots.txt text (e.g. lambda h: web.robots_txt(topo.site(h))).
    """
    parsed: dict[str, Protego | None] = {}
    out = []
    for e in entries:
        if e.path == "/robots.txt":
            continue
        if e.host not in parsed:
            text = robots_txt(e.host)
            parsed[e.host] = None if text is None else Protego.parse(text)
        rp = parsed[e.host]
        if rp is not None and not rp.can_fetch(f"http://{e.host}{e.path}", user_agent):
            out.append(Violation("robots", e.host, e, f"{e.path} is disallowed for {user_agent}"))
    return out


def wrong_owner(entries: Iterable[LogEntry], owner: Mapping[str, str | Iterable[str]]) -> list[Violation]:
    """Requests from a client address that does not own the host (hosts absent from `owner` pass)."""
    out = []
    for e in entries:
        want = owner.get(e.host)
        if want is None:
            continue
        allowed = {want} if isinstance(want, str) else set(want)
        if e.client not in allowed:
            out.append(Violation("wrong-owner", e.host, e, f"fetched by {e.client}, owned by {', '.join(sorted(allowed))}"))
    return out


def web_robots(web) -> Callable[[str], str | None]:  # type: ignore[no-untyped-def]
    """A robots_txt function for robots_violations backed by the generator."""

    def robots(host: str) -> str | None:
        site = web.topology.site(host)
        return None if site is None else web.robots_txt(site)

    return robots
