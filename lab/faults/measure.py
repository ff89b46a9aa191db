"""The fault harness's comparisons, pure: what a crawl lost or did twice against the lab's truth
(`compare`), how long the affected hosts waited (`recovery`), the handover's cost, a flapping
agent's stale fetches, and the row one scenario reports (`Row`). Inputs are plain data (the truth
set, storage's index rows, the lab's request log); no clock, no I/O but `warc_sizes`' stat calls.
Used by bench/chaos.py and the benches that count as it does (abuse, balance, seeds)."""

from __future__ import annotations

import collections
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from wancrawl.urls import host_of_canonical

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


def twice_within(truth: Collection[str], captures: Iterable[tuple[str, float]], gap: float) -> int:
    """Truth URLs with two captures (any record type) less than `gap` seconds apart: "stored twice"
    on a crawl with revisits, where a revisit stores a URL again by design but never sooner than
    the schedule's minimum interval (`captures`: (canonical URL, fetch time) per index row; the
    same reading serves the request log's fetches)."""
    times: dict[str, list[float]] = collections.defaultdict(list)
    for url, t in captures:
        times[url].append(t)
    n = 0
    for url in set(truth):
        ts = sorted(times.get(url, ()))
        if any(b - a < gap for a, b in zip(ts, ts[1:])):
            n += 1
    return n


@dataclass
class ScheduleCheck:
    """The revisit schedules of the live agents at the end, against the truth."""
    truth: int
    scheduled: int                 # truth URLs in some live agent's schedule
    unscheduled: int               # truth URLs in no live agent's schedule: dropped out
    not_at_owner: int              # truth URLs not in the schedule of their host's owner
    rows: int                      # schedule rows over the live agents (a URL twice counts twice)
    unscheduled_urls: list[str] = field(default_factory=list)


def schedule_check(truth: Collection[str], schedules: dict[str, set[str]], owners: dict[str, str]) -> ScheduleCheck:
    """`schedules`: live agent -> the URLs it has scheduled (a capture of its own or inherited);
    `owners`: host -> its owner now."""
    truth = set(truth)
    anywhere = set().union(*schedules.values()) if schedules else set()
    missing = sorted(truth - anywhere)
    at_owner = sum(1 for u in truth if u in schedules.get(owners.get(host_of_canonical(u), ""), ()))
    return ScheduleCheck(truth=len(truth), scheduled=len(truth) - len(missing), unscheduled=len(missing),
                         not_at_owner=len(truth) - at_owner, rows=sum(len(v) for v in schedules.values()),
                         unscheduled_urls=missing)


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


def merge_recovery(a: Recovery, b: Recovery) -> Recovery:
    """Two faults' recoveries as one (kill2: the first victim's hosts from the first kill, the
    second victim's from the second). A host affected by both keeps the larger delay, and counts
    as never requested again if it was not after either fault."""
    never = set(a.never) | set(b.never)
    per_host: dict[str, float] = {}
    for d in (a.per_host, b.per_host):
        for h, v in d.items():
            if h not in never:
                per_host[h] = max(per_host.get(h, v), v)
    affected = set(a.per_host) | set(a.never) | set(b.per_host) | set(b.never)
    return Recovery(len(affected), max(per_host.values()) if per_host else None, sorted(never), per_host)


@dataclass
class HandoverCost:
    hosts_moved: int                # hosts handed out by HandOver, fault to end (Status `hosts_handed_out`)
    bytes_moved: int | None         # bytes of HandOver messages sent, same span (`handover_bytes_out`); None: not reported
    held_bytes: int                 # the agents' per-host state on disk at the fault (frontier and seen SQLite files)
    held_hosts: int                 # the hosts that state is divided over
    moved_per_host: float | None    # bytes_moved / hosts_moved
    held_per_host: float | None     # held_bytes / held_hosts
    ratio: float | None             # moved_per_host / held_per_host


def handover_cost(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], held_bytes: int,
                  held_hosts: int) -> HandoverCost:
    """`before`, `after`: agent id -> Status counters at the fault and at the end. Each counter
    counts from the agent's start, so the figure is the sum over the agents of `after` of
    after - before (an agent absent from `before`, a joiner, started from 0; one absent from
    `after`, dead at the end, is not counted). Bytes moved is None when no agent of `after`
    reports `handover_bytes_out`."""
    def moved(key: str) -> float:
        return sum(c.get(key, 0.0) - before.get(a, {}).get(key, 0.0) for a, c in after.items())

    hosts = int(moved("hosts_handed_out"))
    nbytes = int(moved("handover_bytes_out")) if any("handover_bytes_out" in c for c in after.values()) else None
    per_moved = nbytes / hosts if nbytes is not None and hosts else None
    per_held = held_bytes / held_hosts if held_hosts else None
    ratio = per_moved / per_held if per_moved is not None and per_held else None
    return HandoverCost(hosts, nbytes, held_bytes, held_hosts, per_moved, per_held, ratio)


def handback_time(samples: Iterable[tuple[float, float | None]], baseline: float, need: int, start: float) -> float | None:
    """When the victim of flap had its hosts handed back, from polls of its Status counter
    `hosts_handed_in` after the resume: `samples` are (time of the answer, counter value or None
    when absent), `baseline` the counter before the pause. The handback counts as done at the
    first answer showing at least `need` more hosts handed in; the figure returned is the time of
    the answer before that one (`start`, the resume, if it is the first): the last moment the
    victim certainly did not have them back. None: no answer showed it."""
    last = start
    for t, value in sorted(samples, key=lambda s: s[0]):
        if value is not None and value - baseline >= max(need, 1):
            return last
        last = t
    return None


@dataclass
class FlapFigure:
    lost_hosts: list[str]          # the victim's hosts another agent requested while the victim was stopped
    stale: int                     # victim page requests to those hosts from the stop to the window's end
    overlapping: int               # of those, made before another agent's last page request to the same host
    window_s: float                # the window's end, in seconds after the resume
    before_handback: int | None = None   # of the stale ones, made before the handback (None: handback not seen)
    handback_s: float | None = None      # the handback (handback_time), in seconds after the resume
    per_host: dict[str, int] = field(default_factory=dict)  # stale requests per lost host


def flap_stale(requests: Iterable[tuple[float, str, str, str]], victim_client: str, victim_hosts: Collection[str],
               stop_t: float, resume_t: float, window_end: float, handback_t: float | None = None) -> FlapFigure:
    """The flap figures, from the request log (and the handback time). `requests`: (time, client
    address, host, canonical URL) per log line, robots.txt requests ignored throughout.

    Lost hosts: hosts of `victim_hosts` (the victim's just before it was stopped) that a client
    other than `victim_client` requested in [stop_t, resume_t): taken over while the victim hung.
    Stale: the victim's requests to a lost host in [stop_t, window_end) (the harness passes
    resume + lease; a stopped process sends nothing, so in practice these follow the resume). A
    victim that waits for its hosts to be handed back still fetches them after the handback, so
    this is not 0 for a correct agent. Before handback: the stale requests made before
    `handback_t` (see handback_time): fetches of hosts it had lost and not yet got back, 0 for a
    correct agent; None when `handback_t` is None. Overlapping: the stale requests made before
    another client's last request (at or after stop_t) to the same host, i.e. while the host's
    other owner was still fetching it (both fetching one host)."""
    victim_hosts = set(victim_hosts)
    lost: set[str] = set()
    last_other: dict[str, float] = {}
    mine: list[tuple[float, str]] = []
    for t, client, host, url in requests:
        if host not in victim_hosts or t < stop_t or urlsplit(url).path == "/robots.txt":
            continue
        if client == victim_client:
            mine.append((t, host))
            continue
        if t < resume_t:
            lost.add(host)
        last_other[host] = max(last_other.get(host, t), t)
    per_host: collections.Counter[str] = collections.Counter()
    overlapping = early = 0
    for t, host in mine:
        if host in lost and t < window_end:
            per_host[host] += 1
            overlapping += t < last_other[host]
            early += handback_t is not None and t < handback_t
    return FlapFigure(sorted(lost), sum(per_host.values()), overlapping, window_end - resume_t,
                      early if handback_t is not None else None,
                      None if handback_t is None else handback_t - resume_t, dict(per_host))


def worst(rows: Iterable[Row]) -> tuple[int, float]:
    """(largest lost, largest stored twice as a percentage of truth) over the rows."""
    rows = [r for r in rows if r.metrics is not None]
    lost = max((r.metrics.lost for r in rows if r.metrics), default=0)
    pct = max((100.0 * r.metrics.stored_twice / r.metrics.truth for r in rows if r.metrics and r.metrics.truth), default=0.0)
    return lost, pct


def first_backup(routes: Iterable[tuple[str, Sequence[str]]], owner: str) -> tuple[str, int, int] | None:
    """kill-owner-and-backup's second victim, from the consultant's preference lists (`routes`:
    (host, agent ids, owner first) per host): the agent named first backup (second in the list)
    of most of the hosts `owner` owns. Returns (that agent, of how many of them, how many hosts
    `owner` owns); a tie goes to the first name in sorted order (the same pick every run). None:
    no host of `owner` names a backup."""
    owned = [list(agents) for _, agents in routes if agents and agents[0] == owner]
    counts = collections.Counter(a[1] for a in owned if len(a) > 1 and a[1] != owner)
    if not counts:
        return None
    agent, k = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return agent, k, len(owned)


def warc_sizes(directory: str | Path) -> dict[str, int]:
    """File name -> size of every WARC file in storage's WARC directory ({} if it is absent)."""
    try:
        return {p.name: p.stat().st_size for p in Path(directory).iterdir() if p.name.endswith(".warc.gz")}
    except OSError:
        return {}


def warc_cut(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes cut from WARC files between two `warc_sizes` readings (storage's recovery truncates a
    tail the index never acknowledged: a kill mid-write). A file gone since is not a cut."""
    return sum(before[n] - after[n] for n in before if n in after and after[n] < before[n])


def fence_gap(page_times: Iterable[float], stop_t: float, resume_t: float) -> tuple[float | None, float | None, int]:
    """consultant-stop: (seconds from the stop to the last page request before the resume, seconds
    from the resume to the first page request at or after it, page requests in [stop, resume)).
    With the consultant stopped the agents' leases are not renewed, so the first figure is at
    most the lease (plus a heartbeat interval and a fetch under way); None: no such request."""
    during = [t for t in page_times if stop_t <= t < resume_t]
    after = [t for t in page_times if t >= resume_t]
    return (max(during) - stop_t if during else None, min(after) - resume_t if after else None, len(during))


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
    victim2: str = ""                     # kill2: the second victim
    fault2_after_s: float | None = None   # kill2: seconds from seeding to the second kill
    joined: str = ""                      # join: the agent that joined
    handover: HandoverCost | None = None  # join, flap: HandOver bytes per host moved against held
    flap: FlapFigure | None = None        # flap: the victim's fetches of hosts it had lost
    schedule: ScheduleCheck | None = None  # revisit-*: the live agents' revisit schedules at the end
