"""Fault harness: crawl the lab with four agents, inject one fault per scenario, and measure what
the crawl lost or did twice against the lab's truth.

    python bench/chaos.py                          # every scenario
    python bench/chaos.py --scenario restart,kill  # some (repeatable or comma separated)
    python bench/chaos.py --json                   # the rows as JSON

Each scenario starts a fresh `lab up` (web, consultant, storage, 4 agents with the lab's per-host
politeness delay) in its own run dir, injects the seeds with the manager's code, injects its fault,
waits for the crawl to end (`manager wait`'s logic against the consultant, bounded by --timeout;
a timeout is reported in the row), stops the cluster (always, also on Ctrl-C), then compares.

Scenarios (the fault comes when the lab's request log shows --fault-at (40%; consultant-stop 5%,
see FAULT_AT) of the truth URLs requested at least once, polled every 0.2 s; baseline has none):
  baseline    no fault.
  restart     kill -9 the victim agent, start it again 10 s later from its recorded command
              (same config, same data dir).
  consultant  kill -9 the consultant, start it again 20 s later.
  storage     kill -9 storage, start it again 30 s later.
  drain       `manager drain VICTIM` (the Drain RPC: deregister, hand queued URLs over, exit).
  kill        kill -9 the victim agent; it stays dead.
  kill2       kill -9 the victim; wait until the consultant no longer lists it alive (at most
              lease + 30 s) and every live agent's Status gauge `replica_unsynced` is 0 (at
              most 30 s more; an absent gauge counts as 0, noted); then kill -9 the agent that
              owns most of the victim's former hosts in the consultant's answer. Both stay dead.
  join        start a fifth agent (--join, default cernet-beijing: a block no default agent is
              in) with the others' settings (lab.cluster.add_agent); it takes hosts over (an
              epoch change) and their old owners must hand them over. The fault time is when
              the consultant lists it alive and answers Resolve at that epoch.
  flap        SIGSTOP the victim for lease + 5 s, then SIGCONT it (lab.cluster.pause/resume):
              the consultant declares it dead and its hosts go to their backups; it comes back
              and registers again, and must not fetch the hosts it lost until they are handed
              back.
  kill-owner-and-backup
              kill -9 the victim and, at the same moment (lab.cluster.kill_all), the agent the
              consultant names first backup of most of the victim's hosts (first_backup over
              its preference lists just before). Both stay dead: the hosts both held go on from
              the replica on their second backup, so the agents run with replication.backups
              = --backups (r, default 2) when they know the setting.
  storage-kill9
              kill -9 storage while it writes (its WARC files grew within the last 5 ms poll,
              waited for at most 10 s), start it again 3 s later on the same data dir. The note
              says how many batches the agents' spools held just after and how many bytes of
              WARC tail storage's recovery cut (records written but never acknowledged).
  consultant-stop
              SIGSTOP the consultant for 3 leases (45 s), then SIGCONT it: no agent's lease is
              renewed meanwhile, so every agent's fence must stop its fetching within the lease.
              The notes say the page requests while it was stopped (the last one's delay after
              the stop) and the consultant's epoch before and at the end.
  cluster-kill9
              kill -9 every process but the lab web (consultant, storage, every agent) at the
              same moment, start them all again 3 s later from their recorded commands (same
              configs, data dirs, addresses; lab.cluster.restart_all: consultant and storage
              first, then the agents).
  consultant-replica
              two consultant replicas over one PostgreSQL state (lab.cluster.up consultants=2;
              the agents list both); kill -9 the replica the agents use (the most common Status
              gauge `consultant_replica`); it stays dead. The notes say the agents' failovers,
              calls no replica answered and fence refusals after the fault (0: no lease lapsed).
  consultant-rolling
              the same two replicas; from 5% of truth requested, kill -9 the replica in use
              every 20 s and start it again 3 s after each kill, until the crawl ends. Agents
              keep a 0.2 s politeness delay (a crawl of about a minute and a half, so several
              kills fall in it). Notes as consultant-replica, and the kills.

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
                 and, for agent faults (restart, drain, kill, kill2, flap), owned by the
                 victim in the consultant's answer just before the fault.
                 For consultant and storage faults (consultant, storage, storage-kill9,
                 consultant-stop, cluster-kill9): every host with work left.
                 kill-owner-and-backup: the hosts of either victim, neither's requests counted. "(+N never)":
                 N affected hosts were not requested again at all (their rest is lost).
                 kill2: the first victim's hosts from the first kill (its own requests
                 ignored) and the second victim's hosts (the first's it took included) from
                 the second kill (both victims' requests ignored); a host in both keeps the
                 larger delay (merge_recovery).
                 join: the hosts the joiner owns once it is listed, with work left, and only
                 its own requests count: the delay until the new owner fetches them.
                 flap: like restart, any agent's request counts (the backup's or the resumed
                 victim's).
Two times per row: "last fetch s", seeding to the last page request in the log, and "end s",
seeding to when the end was observed (every live agent idle for --stable seconds; the harness
starts watching only after the outage, so a consultant or storage outage holds the end back).
The fault time is taken once the fault is in place: after the killed process is gone, or when
the Drain RPC is sent. The crawl ends when every live agent is idle or at the timeout; requests
and captures fetched after that (the teardown of a crawl that timed out) are not counted.
`worst:` is the largest lost and the largest stored twice, as a share of truth, over the
scenarios run.

Two more tables follow the main one when their scenarios ran:
  handover cost (join, flap; pure function `handover_cost`): hosts moved = the sum over the
                 live agents of the Status counter `hosts_handed_out` at the end minus at the
                 fault; bytes moved = the same for `handover_bytes_out` (bytes of HandOver
                 messages sent; "n/a" when no agent reports it); moved B/host = bytes moved /
                 hosts moved. Held B/host = the agents' per-host state on disk at the fault
                 (the sizes of frontier.sqlite and seen.sqlite in each agent's data_dir, with
                 their -wal and -journal files; -shm not counted) / the number of distinct
                 truth hosts (72 for seed 9). moved/held is the ratio. The end counters are read
                 before `lab down` (stopping agents hand over). drain is not in it: its victim
                 exits, taking its counters with it.
  flap (pure functions `flap_stale`, `handback_time`): lost hosts = the victim's hosts at the
                 pause that another agent requested (a page) between the pause and the resume.
                 handback s = seconds from the resume to the handback: the victim's Status is
                 polled every 0.1 s from the resume for lease s, and the handback is the answer
                 before the first one whose `hosts_handed_in` (against before the pause) has
                 grown by at least the number of lost hosts, i.e. the last moment it certainly
                 had not got them back ("n/a": not seen). Then, counting the victim's page
                 requests (by its source address) to lost hosts: "fetched before handback" (from
                 the resume to the handback; 0 for a correct agent, a lower bound by up to one
                 poll), "fetched in window" (from the pause to resume + lease; includes the
                 fetches after the handback, which are legitimate), "while another agent
                 fetched them" (those in the window made before another agent's last request
                 to the same host: both fetching one host).
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
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab import cluster
from lab.server import LogEntry
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical

CONSULTANT_ONLY = ("consultant", "consultant-stop", "consultant-replica", "consultant-rolling")
SCENARIOS = ("baseline", "restart", "consultant", "storage", "drain", "kill", "kill2", "join", "flap",
             "kill-owner-and-backup", "storage-kill9", "consultant-stop", "cluster-kill9",
             "consultant-replica", "consultant-rolling")
# Scenarios run with two consultant replicas over PostgreSQL (manager.procs.PG_URL).
REPLICA_SCENARIOS = ("consultant-replica", "consultant-rolling")
ROLLING_EVERY_S = 20.0  # consultant-rolling: a kill of the replica in use this often
ROLLING_DOWN_S = 3.0    # ... started again this long after each kill (a supervisor's restart)
# consultant-rolling's politeness delay: a crawl long enough for several kills.
SCENARIO_DELAY = {"consultant-rolling": 0.2}
# Storage at scale (issue 27): two storage writers over SeaweedFS and one PostgreSQL index.
STORAGE_SCENARIOS = ("storage-writer-kill", "object-store-down")
# Continuous crawling (issue 26; docs/continuous.md): the kill and drain faults on a crawl with
# revisits on, over a lab web whose pages change. The crawl never ends by itself: the harness
# ends it once every truth URL was requested, the victim is gone, the replicas are current and
# REVISIT_ROUNDS intervals more have passed; then it reads each live agent's schedule.
REVISIT_SCENARIOS = ("revisit-kill", "revisit-drain")
REVISIT_FAULT = {"revisit-kill": "kill", "revisit-drain": "drain"}
REVISIT_INTERVAL_S = 20.0     # [revisit] policy fixed: every page due again this long after its capture
REVISIT_ROUNDS = 2.0          # intervals the crawl goes on after the takeover (revisits by the new owners)
REVISIT_CHANGE_RATIO = 0.5    # the lab web's [web] change_ratio (hourly pages change every ~minute at time scale 60)
REVISIT_SLACK_S = 1.0         # two captures of a URL less than interval - this apart are stored twice (WARC-Date: 1 s)
SCENARIOS = SCENARIOS + STORAGE_SCENARIOS + REVISIT_SCENARIOS
AGENT_FAULTS = ("restart", "drain", "kill", "kill2", "flap", "kill-owner-and-backup") + REVISIT_SCENARIOS  # the ones with a victim
# Victims that stay gone: not expected running at the end, their requests are no recovery.
GONE_VICTIMS = ("drain", "kill", "kill2", "kill-owner-and-backup") + REVISIT_SCENARIOS
# Four agents: seed 002's scheme B (one agent per ISP, three cities) plus a second China Telecom
# agent, so the victim's hosts have a same-ISP agent to fail over to.
DEFAULT_GROUPS = ("unicom-beijing", "cernet-harbin", "telecom-guangzhou", "telecom-beijing")
DEFAULT_VICTIM = "telecom-beijing"
# join: a block none of the default groups is in. With the asn strategy (geo fallback) the
# cernet-beijing and cernet-guangzhou sites (16 hosts) move from cernet-harbin, the only CERNET
# agent, to it; at 40% of seed 9's truth both blocks still have work left (unicom-harbin's sites,
# the other natural choice, are all fetched by then).
DEFAULT_JOIN = "cernet-beijing"
# kill2: how long to wait for the consultant to declare the first victim dead (beyond the lease)
# and then for the live agents' replicas to catch up, before the second kill.
KILL2_DEAD_S = 30.0
KILL2_SYNC_S = 30.0
FLAP_EXTRA_S = 5.0  # flap: the victim stays stopped for lease + this
# Lab seed 0 gives 1,497 truth URLs (< 1,500); seed 9 gives 1,831 over 72 sites with a largest
# host of 278 pages, so a crawl under politeness still ends in ~20-30 s.
DEFAULT_SEED = 9
OUTAGE_S = {"restart": 10.0, "consultant": 20.0, "storage": 30.0,
            # A crash and an ordinary restart (a supervisor's), not an outage to ride out.
            "storage-kill9": 3.0, "cluster-kill9": 3.0,
            # storage-writer-kill: a supervisor restarts the writer; object-store-down: SeaweedFS away 30 s.
            "storage-writer-kill": 3.0, "object-store-down": 30.0}
# consultant-stop: the consultant stays stopped this many leases (45 s at the default 15 s), so
# every agent's lease runs out while it is stopped: the agents' fence must stop their fetching.
CONSULTANT_STOP_LEASES = 3.0
# When the fault comes (share of truth requested), unless --fault-at says: 40%, except for
# consultant-stop, whose fence is only exercised if more than a lease of fetching is left at the
# stop. A seed-9 crawl fetches ~18 s, its largest host's pages one after another to the end: at
# 40% (~3 s) about a lease is left and the crawl can end before any fence closes; at 5% (~1 s)
# the largest host is still being fetched when every lease has run out.
DEFAULT_FAULT_AT = 0.4
FAULT_AT = {"consultant-stop": 0.05, "consultant-rolling": 0.05}
# storage-kill9: the kill waits (at most this long) until storage's WARC files grow between two
# polls WARC_POLL_S apart, i.e. storage is writing an Ingest's records right then.
WARC_GROWTH_WAIT_S = 10.0
WARC_POLL_S = 0.005
# kill-owner-and-backup: replication.backups (r) in the agents' config, when the agents know the
# key (an older agent refuses unknown keys; it keeps one replica, on the first backup).
DEFAULT_BACKUPS = 2


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
    victim2: str = ""                     # kill2: the second victim
    fault2_after_s: float | None = None   # kill2: seconds from seeding to the second kill
    joined: str = ""                      # join: the agent that joined
    handover: HandoverCost | None = None  # join, flap: HandOver bytes per host moved against held
    flap: FlapFigure | None = None        # flap: the victim's fetches of hosts it had lost
    schedule: ScheduleCheck | None = None  # revisit-*: the live agents' revisit schedules at the end


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


def _placement(cl: cluster.Cluster) -> Any:
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
    async with _placement(cl) as c:
        accepted, failed = await inject(c, seeds)
    if failed:
        raise RuntimeError(f"{len(failed)} seeds could not be injected")
    return sum(accepted.values())


async def _owned_by(cl: cluster.Cluster, hosts: list[str], agent: str) -> set[str]:
    async with _placement(cl) as c:
        return {r.host for r in await c.resolve(hosts) if r.owner and r.owner[0] == agent}


async def _owned_once_listed(cl: cluster.Cluster, hosts: list[str], agent: str, timeout: float = 10.0) -> tuple[set[str], float]:
    """(the hosts `agent` owns, the time of that answer) in the first Resolve answer at or past
    the epoch ListAgents reports now. ListAgents reads the consultant's store, which holds a new
    agent a moment before Register has rebuilt the directory Resolve answers from: an answer in
    that moment still names the old owners. Past the timeout, the last answer."""
    async with _placement(cl) as c:
        epoch = (await c.list_agents()).epoch
        end = time.monotonic() + timeout
        while True:
            routes = await c.resolve(hosts)
            if (routes and routes[0].epoch >= epoch) or time.monotonic() > end:
                return {r.host for r in routes if r.owner and r.owner[0] == agent}, time.time()
            await asyncio.sleep(0.02)


async def _owners(cl: cluster.Cluster, hosts: list[str]) -> dict[str, str]:
    """host -> its owner's agent id in the consultant's answer ("" if none)."""
    async with _placement(cl) as c:
        return {r.host: (r.owner[0] if r.owner else "") for r in await c.resolve(hosts)}


async def _routes(cl: cluster.Cluster, hosts: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(host, its preference list: agent ids, owner first) per host in the consultant's answer."""
    async with _placement(cl) as c:
        return [(r.host, tuple(a for a, _ in r.agents)) for r in await c.resolve(hosts)]


async def _epoch(cl: cluster.Cluster) -> int:
    async with _placement(cl) as c:
        return (await c.list_agents()).epoch


async def _live_agents(cl: cluster.Cluster) -> dict[str, str]:
    """agent id -> address of the agents the consultant holds alive."""
    async with _placement(cl) as c:
        return {a.agent_id: a.address for a in (await c.list_agents()).agents}


async def _statuses(cl: cluster.Cluster) -> dict[str, dict[str, float] | None]:
    """agent id -> Status counters of every agent the consultant holds alive (None: no answer)."""
    from agent.client import AgentPool
    from wancrawl.errors import WancrawlError

    live = await _live_agents(cl)

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
    return {a: c for a, c in asyncio.run(_statuses(cl)).items() if c is not None}


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


async def _wait_gone(cl: cluster.Cluster, agent: str, timeout: float) -> float | None:
    """Poll the consultant until it no longer lists `agent` alive; the time then, None at the timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if agent not in await _live_agents(cl):
                return time.time()
        except Exception:  # noqa: BLE001 - the consultant is busy: poll again
            pass
        await asyncio.sleep(0.2)
    return None


async def _wait_replicas(cl: cluster.Cluster, timeout: float) -> tuple[float | None, int, bool]:
    """Poll every live agent's Status until each answers with the gauge `replica_unsynced` (hosts
    it owns whose backup copy is not current) at 0, an absent gauge counting as 0. Returns (the
    time that held or None at the timeout, the last sum of the gauge, whether any agent reported
    the gauge)."""
    end = time.monotonic() + timeout
    unsynced, reported = -1, False
    while True:
        st = await _statuses(cl)
        reported = reported or any(c is not None and "replica_unsynced" in c for c in st.values())
        if st and all(c is not None for c in st.values()):
            unsynced = int(sum(c.get("replica_unsynced", 0.0) for c in st.values() if c is not None))
            if unsynced == 0:
                return time.time(), 0, reported
        if time.monotonic() >= end:
            return None, unsynced, reported
        await asyncio.sleep(0.5)


async def wait_crawl_idle(cl: cluster.Cluster, timeout: float, stable: float) -> bool:
    from manager.status import wait_idle

    async with _placement(cl) as c:
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


@dataclass
class FaultContext:
    """What a scenario's fault needs and leaves for the comparison, besides the fault time."""
    args: argparse.Namespace
    truth_hosts: list[str]
    candidates: set[str] | None = None         # the victim's hosts just before the fault
    second_t: float | None = None              # kill2: the second kill
    second_victim: str = ""
    second_candidates: set[str] | None = None  # kill2: the second victim's hosts just before its kill
    resume_t: float | None = None              # flap: the SIGCONT
    poller: CounterPoller | None = None        # flap: the victim's hosts_handed_in after the resume
    joined: str = ""                           # join: the new agent
    joined_hosts: set[str] | None = None       # join: the hosts it owns once it answers
    counters_before: dict[str, dict[str, float]] | None = None  # join, flap: Status counters at the fault
    held_bytes: int = 0                        # join, flap: per-host state on disk at the fault
    epoch_before: int | None = None            # consultant-stop: the consultant's epoch before the stop
    replica_before: dict[str, dict[str, float]] | None = None  # replica scenarios: Status counters at the fault
    rolling: Rolling | None = None             # consultant-rolling: the kills going on
    gone: list[str] = field(default_factory=list)  # processes killed that stay dead by design


def _kill2_second(cl: cluster.Cluster, victim: str, t: float, notes: list[str], ctx: FaultContext) -> None:
    """kill2's second step: once the consultant declared the first victim dead and every live
    agent's replicas are current (or the waits timed out), kill -9 the agent that took most of the
    first victim's hosts."""
    lease = ctx.args.lease
    dead_at = asyncio.run(_wait_gone(cl, victim, lease + KILL2_DEAD_S))
    if dead_at is None:
        notes.append(f"{victim} still listed alive {lease + KILL2_DEAD_S:.0f}s after its kill: no second kill")
        return
    notes.append(f"declared dead {dead_at - t:.1f}s after the kill")
    synced_at, unsynced, reported = asyncio.run(_wait_replicas(cl, KILL2_SYNC_S))
    if not reported:
        notes.append("replica_unsynced not reported by any agent: taken as 0")
    elif synced_at is None:
        notes.append(f"replicas not current {KILL2_SYNC_S:.0f}s after: {unsynced} hosts unsynced at the second kill")
    else:
        notes.append(f"replicas current {synced_at - t:.1f}s after the kill")
    owners = asyncio.run(_owners(cl, sorted(ctx.candidates or ())))
    took = collections.Counter(o for o in owners.values() if o and o != victim)
    if not took:
        notes.append(f"no other agent owns {victim}'s hosts: no second kill")
        return
    victim2, k = took.most_common(1)[0]
    ctx.second_victim = victim2
    ctx.second_candidates = asyncio.run(_owned_by(cl, ctx.truth_hosts, victim2))
    cluster.kill(cl.run_dir, f"agent-{victim2}")
    ctx.second_t = time.time()
    notes.append(f"then killed {victim2} (owner of {k} of {victim}'s {len(owners)} hosts) {ctx.second_t - t:.1f}s after the first kill")


def replica_in_use(cl: cluster.Cluster) -> int:
    """The consultant replica most live agents answered through last (their Status gauge
    `consultant_replica`, an index into the replicas list); 0 when none says."""
    votes = collections.Counter(int(c.get("consultant_replica", 0)) for c in agent_counters(cl).values())
    return votes.most_common(1)[0][0] if votes else 0


def replica_notes(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> str:
    """The agents' side of a replica fault: counters summed over the agents that answered both
    times, the end minus the fault (pure)."""
    def delta(key: str) -> float:
        return sum(after[a].get(key, 0.0) - before[a].get(key, 0.0) for a in after if a in before)

    return (f"agents after the fault: {delta('consultant_failovers'):.0f} consultant calls failed over, "
            f"{delta('consultant_unanswered'):.0f} unanswered by every replica, {delta('fence_refusals'):.0f} fence "
            f"refusals, {delta('lease_ran_out') + delta('lease_lapses'):.0f} leases run out or forgotten")


class Rolling(threading.Thread):
    """consultant-rolling's kills: every ROLLING_EVERY_S from the first (made by `_fault`), kill -9
    the replica in use and start it again ROLLING_DOWN_S later. `stop()` ends the loop and
    returns once every replica runs again."""

    def __init__(self, cl: cluster.Cluster, first_t: float, notes: list[str]):
        super().__init__(daemon=True)
        self.cl, self.next_t, self.notes = cl, first_t + ROLLING_EVERY_S, notes
        self.kills: list[tuple[float, str]] = []
        self._stop_event = threading.Event()
        self.error = ""

    def run(self) -> None:
        try:
            while not self._stop_event.wait(max(0.0, self.next_t - time.time())):
                name = cluster.replica_name(replica_in_use(self.cl))
                cluster.kill(self.cl.run_dir, name)
                self.kills.append((time.time(), name))
                self.next_t = self.kills[-1][0] + ROLLING_EVERY_S
                self._stop_event.wait(ROLLING_DOWN_S)  # a stop still restarts it first
                cluster.restart(self.cl.run_dir, name)
        except Exception as exc:  # noqa: BLE001 - reported in the row
            self.error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        if self.error:
            self.notes.append(f"ERROR: rolling kills: {self.error}")


def fault_share(name: str, given: float | None) -> float:
    """The share of truth requested at which the scenario's fault comes: --fault-at if given."""
    return given if given is not None else FAULT_AT.get(name, DEFAULT_FAULT_AT)


def agent_backups_known() -> bool:
    """Whether this checkout's agent has the setting `replication.backups` (r): an agent refuses
    a config key it does not know."""
    import dataclasses

    from agent.settings import ReplicationSettings

    return any(f.name == "backups" for f in dataclasses.fields(ReplicationSettings))


def agent_tables(name: str, args: argparse.Namespace) -> str:
    """TOML tables appended to every agent's config for the scenario (lab.cluster.up's
    agent_tables): kill-owner-and-backup sets replication.backups (r) when the agent knows it."""
    if name == "kill-owner-and-backup" and agent_backups_known():
        return f"[replication]\nbackups = {args.backups}\n"
    if name in REVISIT_SCENARIOS:
        return revisit_table(REVISIT_INTERVAL_S)
    return ""


def revisit_table(interval: float) -> str:
    """Revisits on, the fixed policy, every page due again `interval` s after its capture (the
    policy's bounds set to it, so no revisit comes sooner)."""
    return (f"[revisit]\nenabled = true\npolicy = \"fixed\"\ninterval = {interval:g}\n"
            f"min_interval = {interval:g}\nmax_interval = {interval:g}\n")


def changing_topology(given: str | None, path: Path) -> str:
    """A topology file at `path`: `given`'s (or the default world) with a changing lab web
    (`[web] change_ratio`, docs/lab.md "A web that changes")."""
    text = Path(given).read_text() if given else ""
    if "[web]" in text:
        raise ValueError(f"{given} has a [web] table: the revisit scenarios write their own")
    path.write_text(text + f"\n[web]\nchange_ratio = {REVISIT_CHANGE_RATIO:g}\n")
    return str(path)


def read_schedule(data_dir: str | Path) -> set[str]:
    """The URLs an agent's frontier has in its revisit schedule (rows with a capture; a sitemap
    hint for a URL never fetched has none), read-only from its SQLite file while it runs."""
    import sqlite3

    path = Path(data_dir) / "frontier.sqlite"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return {u for (u,) in conn.execute("SELECT url FROM revisit WHERE last > 0")}
    finally:
        conn.close()


def wait_revisit_rounds(cl: cluster.Cluster, name: str, victim: str, tail: LogTail, truth: set[str],
                        seen: set[str], deadline: float, notes: list[str]) -> bool:
    """A revisit scenario's end (the crawl never ends by itself): every truth URL requested, the
    victim gone from the consultant's list, every live agent's replicas current, then
    REVISIT_ROUNDS intervals more, so the new owners revisit what they took. False at the deadline."""
    if not _wait_progress(tail, truth, cl.web_port, 1.0, deadline, seen):
        notes.append(f"TIMEOUT: {len(seen)} of {len(truth)} truth URLs requested")
        return False
    if REVISIT_FAULT[name] == "kill":
        gone = asyncio.run(_wait_gone(cl, victim, max(0.1, deadline - time.monotonic())))
        if gone is None:
            notes.append(f"TIMEOUT: {victim} still listed alive")
            return False
    synced, unsynced, _ = asyncio.run(_wait_replicas(cl, max(0.1, min(KILL2_SYNC_S, deadline - time.monotonic()))))
    if synced is None:
        notes.append(f"replicas not current ({unsynced} hosts) before the revisit rounds")
    rounds = REVISIT_ROUNDS * REVISIT_INTERVAL_S
    if time.monotonic() + rounds > deadline:
        notes.append(f"TIMEOUT: no time left for {REVISIT_ROUNDS:g} revisit rounds")
        return False
    time.sleep(rounds)  # the scenario's definition: this long of revisiting after the takeover
    return True


def revisit_notes(row: Row, requests: list[tuple[float, str, str, str]], truth: set[str],
                  victim_hosts: set[str] | None, fault_t: float | None, victim_source: str) -> str:
    """The schedule check and the revisits the victim's hosts got from their new owners."""
    sc = row.schedule
    out = ("schedule not read" if sc is None else
           f"schedule: {sc.scheduled} of {sc.truth} truth URLs scheduled by a live agent, {sc.unscheduled} dropped out"
           + (f" ({', '.join(sc.unscheduled_urls[:5])})" if sc.unscheduled_urls else "")
           + f", {sc.not_at_owner} not at their host's owner, {sc.rows} rows")
    if fault_t is not None and victim_hosts:
        before = {u for t, _c, _h, u in requests if t < fault_t and u in truth and host_of_canonical(u) in victim_hosts}
        again = {u for t, c, _h, u in requests if t >= fault_t and c != victim_source and u in before}
        out += f"; of the victim's {len(before)} URLs fetched before the fault, {len(again)} revisited by their new owners"
    pages = collections.Counter(u for _t, _c, _h, u in requests if u in truth)
    out += f"; {sum(pages.values()) - len(pages)} revisits of truth URLs in all"
    return out


def snapshot_schedules(cl: cluster.Cluster, truth: set[str], truth_hosts: list[str]) -> ScheduleCheck:
    """Every live agent's revisit schedule and the hosts' owners now, against the truth."""
    live = asyncio.run(_live_agents(cl))
    schedules = {a: read_schedule(cluster.agent_config(cl.run_dir, a)["data_dir"]) for a in live}
    owners = asyncio.run(_owners(cl, truth_hosts))
    return schedule_check(truth, schedules, owners)


def balance_lab(args: argparse.Namespace) -> dict[str, str]:
    """lab.cluster.up's keys for --balance (docs/balance.md): "on" or "off" writes the balancer's
    switch into the consultant's [balance] (consultant mode) or every agent's [kademlia] table
    (kademlia mode); "default" writes nothing, so the configs' defaults decide."""
    if args.balance == "default":
        return {}
    on = "true" if args.balance == "on" else "false"
    if args.mode == "kademlia":
        return {"kademlia_keys": f"balance = {on}\n"}
    return {"consultant_tables": f"[balance]\nenabled = {on}\ninterval = {args.balance_interval:g}\n"}


def _kill_owner_and_backup(cl: cluster.Cluster, victim: str, notes: list[str],
                           ctx: FaultContext) -> tuple[float, Callable[[], None]]:
    """kill -9 the victim and the first backup of most of its hosts (the consultant's preference
    lists just before) at the same moment; both stay dead. With r backups per host, the hosts
    both held go on from the replica on their second backup."""
    routes = asyncio.run(_routes(cl, sorted(ctx.candidates or ())))
    pick = first_backup(routes, victim)
    if pick is None:
        raise RuntimeError(f"no host of {victim} names a backup in the consultant's answer: nothing to kill with it")
    backup, k, n = pick
    ctx.second_victim = backup
    ctx.second_candidates = asyncio.run(_owned_by(cl, ctx.truth_hosts, backup))
    second = collections.Counter(a[2] for _, a in routes if a and a[0] == victim and a[1] == backup and len(a) > 2)
    cluster.kill_all(cl.run_dir, [f"agent-{victim}", f"agent-{backup}"])
    t = time.time()
    r = f"r = {ctx.args.backups}" if agent_backups_known() else "r = 1 (this agent has no replication.backups)"
    then = ", ".join(f"{a} {c}" for a, c in second.most_common()) or "none"
    notes.append(f"killed with {backup} at once (first backup of {k} of {victim}'s {n} hosts; their second backups: "
                 f"{then}); {r}")
    return t, lambda: None


def _storage_kill9(cl: cluster.Cluster, notes: list[str]) -> tuple[float, Callable[[], None]]:
    """kill -9 storage while it writes an Ingest's records (its WARC files grew within the last
    poll), restart it on the same data dir OUTAGE_S later; the note says how many bytes of WARC
    tail its recovery cut (records written but never acknowledged: the kill caught a write)."""
    from storage import config as storage_config

    warcs = storage_config.load(Path(cl.run_dir) / "storage.toml").warc_dir()
    end = time.monotonic() + WARC_GROWTH_WAIT_S
    last = sum(warc_sizes(warcs).values())
    growing = False
    while time.monotonic() < end:
        time.sleep(WARC_POLL_S)
        now = sum(warc_sizes(warcs).values())
        if now > last:
            growing = True
            break
        last = now
    cluster.kill(cl.run_dir, "storage")
    t = time.time()
    at_kill = warc_sizes(warcs)
    spooled = sum(c.get("spool_batches", 0.0) for c in agent_counters(cl).values())
    notes.append(("killed while its WARC files grew" if growing else
                  f"WARC files did not grow for {WARC_GROWTH_WAIT_S:g}s: killed anyway")
                 + f"; {spooled:.0f} batches in the agents' spools just after")

    def come_back() -> None:
        time.sleep(max(0.0, t + OUTAGE_S["storage-kill9"] - time.time()))
        cluster.restart(cl.run_dir, "storage")
        cut = warc_cut(at_kill, warc_sizes(warcs))
        notes.append(f"restarted at {OUTAGE_S['storage-kill9']:g}s; recovery cut {cut:,} B of unacknowledged WARC tail")

    return t, come_back


# --- storage at scale: storage-writer-kill, object-store-down ------------------------------------------


def storage_lab(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """lab.cluster.up's keys for a storage scenario: SeaweedFS, two writers (agent n ships to
    writer n mod 2) over one PostgreSQL index in a fresh schema (the previous runs' chaos_*
    schemas are dropped first); {} for the other scenarios."""
    if name not in STORAGE_SCENARIOS:
        return {}
    import uuid

    import sqlalchemy as sa

    engine = sa.create_engine(args.pg, connect_args={"connect_timeout": 3})
    try:
        with engine.begin() as conn:
            old = conn.execute(sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'chaos\\_%'")).scalars().all()
            for schema in old:
                conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        engine.dispose()
    return {"object_store": True, "storage_writers": 2, "index_url": args.pg,
            "index_schema": f"chaos_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"}


def _storage_scenario_fault(name: str, cl: cluster.Cluster, notes: list[str]) -> tuple[float, Callable[[], None]]:
    """storage-writer-kill: kill -9 the second writer mid-crawl (its agents fail over to the first
    or spool), restart it OUTAGE_S later; object-store-down: kill -9 SeaweedFS (its graceful stop
    takes ~25 s) and keep it away OUTAGE_S (both writers answer UNAVAILABLE, every agent spools),
    then start it again on its ports and volumes."""
    victim = "storage-2" if name == "storage-writer-kill" else "seaweedfs"
    cluster.kill(cl.run_dir, victim)
    t = time.time()
    spooled = sum(c.get("spool_batches", 0.0) for c in agent_counters(cl).values())
    notes.append(f"{victim} killed (-9); {spooled:.0f} batches in the agents' spools just after")

    def come_back() -> None:
        time.sleep(max(0.0, t + OUTAGE_S[name] - time.time()))
        cluster.restart(cl.run_dir, victim)
        notes.append(f"{victim} answering again {time.time() - t:.1f}s after (restarted at {OUTAGE_S[name]:g}s)")

    return t, come_back


def _fault(name: str, cl: cluster.Cluster, victim: str, notes: list[str],
           ctx: FaultContext) -> tuple[float, Callable[[], None]]:
    """Inject the scenario's fault; returns (fault time, a completion step to run before waiting
    for the end: the restart after the outage, the drain's exit, kill2's second kill, flap's
    resume)."""
    run = cl.run_dir
    name = REVISIT_FAULT.get(name, name)  # revisit-kill is kill, revisit-drain is drain, with revisits on
    if name == "kill2":
        cluster.kill(run, f"agent-{victim}")
        t = time.time()
        return t, lambda: _kill2_second(cl, victim, t, notes, ctx)
    if name == "join":
        ctx.counters_before, ctx.held_bytes = agent_counters(cl), held_bytes(cl)
        proc = cluster.add_agent(run, ctx.args.join)  # returns once the consultant lists it
        fresh = cluster.Cluster.load(run)
        cl.agents, cl.agent_sources, cl.procs = fresh.agents, fresh.agent_sources, fresh.procs
        cluster.use_cluster_tls(cl)  # this process dials the joiner too (its Status; kademlia: its overlay)
        ctx.joined = proc.name.removeprefix("agent-")
        # The fault is in place once the consultant's answers name the joiner.
        ctx.joined_hosts, t = asyncio.run(_owned_once_listed(cl, ctx.truth_hosts, ctx.joined))
        notes.append(f"joined {ctx.joined} ({cl.agent_sources[ctx.joined]}), owner of {len(ctx.joined_hosts)} hosts")
        return t, lambda: None
    if name == "flap":
        ctx.counters_before, ctx.held_bytes = agent_counters(cl), held_bytes(cl)
        cluster.pause(run, f"agent-{victim}")
        t = time.time()
        pause_s = ctx.args.lease + FLAP_EXTRA_S

        def resume() -> None:
            time.sleep(max(0.0, t + pause_s - time.time()))
            try:
                dead = victim not in asyncio.run(_live_agents(cl))
                notes.append(f"stopped {pause_s:g}s, " + ("declared dead before the resume" if dead else "still listed alive at the resume"))
            finally:
                cluster.resume(run, f"agent-{victim}")
                ctx.resume_t = time.time()
                ctx.poller = CounterPoller(cl.agents[victim], "hosts_handed_in", ctx.resume_t + ctx.args.lease)
                ctx.poller.start()

        return t, resume
    if name == "kill-owner-and-backup":
        return _kill_owner_and_backup(cl, victim, notes, ctx)
    if name == "storage-kill9":
        return _storage_kill9(cl, notes)
    if name in STORAGE_SCENARIOS:
        return _storage_scenario_fault(name, cl, notes)
    if name == "consultant-stop":
        ctx.epoch_before = asyncio.run(_epoch(cl))
        cluster.pause(run, "consultant")
        t = time.time()
        stop_s = CONSULTANT_STOP_LEASES * ctx.args.lease

        def cont() -> None:
            time.sleep(max(0.0, t + stop_s - time.time()))
            cluster.resume(run, "consultant")
            ctx.resume_t = time.time()
            notes.append(f"consultant stopped {ctx.resume_t - t:.1f}s (lease {ctx.args.lease:g}s)")

        return t, cont
    if name in REPLICA_SCENARIOS:
        ctx.replica_before = agent_counters(cl)
        victim_name = cluster.replica_name(replica_in_use(cl))
        cluster.kill(run, victim_name)
        t = time.time()
        if name == "consultant-replica":
            ctx.gone.append(victim_name)
            notes.append(f"killed {victim_name}, the replica in use; it stays dead")
            return t, lambda: None

        def start_rolling() -> None:
            # The first kill's restart, then the loop of the others.
            time.sleep(max(0.0, t + ROLLING_DOWN_S - time.time()))
            cluster.restart(run, victim_name)
            ctx.rolling = Rolling(cl, t, notes)
            ctx.rolling.kills.append((t, victim_name))
            ctx.rolling.start()

        return t, start_rolling
    if name == "cluster-kill9":
        # Every process of the cluster but the lab web (the Internet does not crash with it).
        names = [p.name for p in cl.procs if p.name != "web"]
        cluster.kill_all(run, names)
        t = time.time()

        def come_back_all() -> None:
            time.sleep(max(0.0, t + OUTAGE_S[name] - time.time()))
            cluster.restart_all(run, names)
            notes.append(f"killed {len(names)} processes at once ({', '.join(names)}); all answering again "
                         f"{time.time() - t:.1f}s after (restarted at {OUTAGE_S[name]:g}s)")

        return t, come_back_all
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
        where = (["--peers", ",".join(cl.agents.values())] if cl.mode == "kademlia" else ["--consultant", cl.consultant])
        p = subprocess.Popen([sys.executable, "-m", "manager.cli", *where, "drain", victim],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT), **operator_env(cl)})

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


def run_scenario(name: str, base: Path, args: argparse.Namespace) -> Row:
    run = fresh_run_dir(base / name)
    row = Row(name, run_dir=str(run))
    victim = args.victim if name in AGENT_FAULTS else ""
    row.victim = victim
    try:
        topology_path = args.topology
        if name in REVISIT_SCENARIOS:
            topology_path = changing_topology(args.topology, base / f"{name}-topology.toml")
        cl = cluster.up(run, strategy=args.strategy, groups=args.groups, topology_path=topology_path, seed=args.seed,
                        time_scale=args.time_scale, zero_latency=args.zero_latency,
                        delay=max(args.delay, SCENARIO_DELAY.get(name, 0.0)),
                        concurrency=args.concurrency, lease=args.lease, agent_tables=agent_tables(name, args),
                        mode=args.mode, consultants=2 if name in REPLICA_SCENARIOS else 1, **balance_lab(args),
                        **storage_lab(name, args))
    except Exception as exc:  # noqa: BLE001 - up stopped what it started; the next scenario goes on
        row.notes.append(f"ERROR: lab up: {type(exc).__name__}: {exc}")
        return row
    fault_t: float | None = None
    candidates: set[str] | None = None
    truth: set[str] = set()
    seeded_at: float | None = None
    ctx: FaultContext | None = None
    counters_after: dict[str, dict[str, float]] | None = None
    try:
        if victim and victim not in cl.agents:
            raise ValueError(f"victim {victim!r} is not one of the agents {sorted(cl.agents)}")
        truth = compute_truth(cl)
        ctx = FaultContext(args, sorted({host_of_canonical(u) for u in truth}))
        tail = LogTail(cl.web_log)
        t0, seeded_at = time.monotonic(), time.time()
        deadline = t0 + args.timeout
        asyncio.run(inject_seeds(cl))
        seen: set[str] = set()
        share = fault_share(name, args.fault_at)
        if name != "baseline" and not _wait_progress(tail, truth, cl.web_port, share, deadline, seen):
            row.notes.append(f"TIMEOUT before {share:.0%} of truth was requested (no fault injected)")
        else:
            if name != "baseline":
                row.fault_at = len(seen) / len(truth)
                if victim:
                    candidates = ctx.candidates = asyncio.run(_owned_by(cl, ctx.truth_hosts, victim))
                fault_t, complete = _fault(name, cl, victim, row.notes, ctx)
                row.fault_after_s = fault_t - seeded_at
                complete()
                if ctx.second_t is not None:
                    row.victim2, row.fault2_after_s = ctx.second_victim, ctx.second_t - seeded_at
                row.joined = ctx.joined
                if name == "kill-owner-and-backup":
                    row.victim2 = ctx.second_victim
            if name in REVISIT_SCENARIOS:
                row.finished = fault_t is not None and wait_revisit_rounds(cl, name, victim, tail, truth, seen, deadline, row.notes)
                if row.finished:
                    row.schedule = snapshot_schedules(cl, truth, ctx.truth_hosts)
            else:
                row.finished = asyncio.run(wait_crawl_idle(cl, deadline - time.monotonic(), args.stable))
            if not row.finished and name not in REVISIT_SCENARIOS:
                row.notes.append(f"TIMEOUT: not idle {args.timeout:.0f}s after seeding")
            if ctx.rolling is not None:
                ctx.rolling.stop()
                kills = ctx.rolling.kills
                row.notes.append(f"{len(kills)} kills of the replica in use (" + ", ".join(
                    f"{n} at +{k - (fault_t or k):.0f}s" for k, n in kills) + "), each restarted "
                    f"{ROLLING_DOWN_S:g}s later")
            if ctx.replica_before is not None:
                row.notes.append(replica_notes(ctx.replica_before, agent_counters(cl)))
            if ctx.poller is not None:
                ctx.poller.stop()
            if ctx.epoch_before is not None:
                # An epoch change means the consultant moved hosts: it declared agents dead.
                after = asyncio.run(_epoch(cl))
                row.notes.append(f"epoch {ctx.epoch_before} before the stop, {after} at the end")
            if args.mode == "kademlia":
                # Routing RPCs (FindNode: the lookups behind Resolve) per page, the host cache's
                # amortisation of them (issue 22: at most 0.05).
                final = agent_counters(cl)
                rpcs = sum(c.get("overlay_find_nodes", 0.0) for c in final.values())
                pages = sum(c.get("pages", 0.0) for c in final.values())
                row.notes.append(f"routing RPCs/page {rpcs / max(pages, 1.0):.3f} ({rpcs:.0f} FindNode, {pages:.0f} pages)")
            if ctx.counters_before is not None:
                # Before `down`: stopping agents deregister and hand their hosts over.
                counters_after = agent_counters(cl)
                if name == "flap" and victim not in counters_after:
                    row.notes.append(f"{victim} not alive (or not answering) at the end")
        row.crawl_s = time.monotonic() - t0
    except Exception as exc:  # noqa: BLE001 - the row says what failed, the other scenarios go on
        row.notes.append(f"ERROR: {type(exc).__name__}: {exc}")
    finally:
        # The crawl as measured ends here. `lab down` stops agents one at a time, and a stopping
        # agent deregisters, so its hosts move to agents still running: if the crawl had not
        # finished (a timeout), they fetch during the teardown. Those fetches are not counted.
        t_end = time.time()
        try:
            if ctx is not None and ctx.poller is not None:
                ctx.poller.stop()  # an error above left it polling
            if ctx is not None and ctx.rolling is not None and ctx.rolling.is_alive():
                ctx.rolling.stop()  # an error above left it killing
        finally:
            stopped = cluster.down(run)
    # A process that died by itself (not the victim of kill or drain) makes the row meaningless:
    # say so rather than blame the crawler (the web once died of SIGPIPE when an agent was killed).
    gone_by_design = {f"agent-{victim}"} if name in GONE_VICTIMS and fault_t is not None else set()
    if ctx is not None and ctx.second_victim:
        gone_by_design.add(f"agent-{ctx.second_victim}")
    if ctx is not None:
        gone_by_design.update(ctx.gone)
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
        if name in REVISIT_SCENARIOS:
            # A revisit stores (and requests) a URL again by design: only two closer together
            # than the schedule's minimum interval allows count (docs/chaos.md, "Revisits").
            gap = REVISIT_INTERVAL_S - REVISIT_SLACK_S
            row.metrics.stored_twice = twice_within(truth, ((u, f) for u, _t, f in read_captures(run) if f <= t_end), gap)
            row.metrics.fetched_twice = twice_within(
                truth, ((u, t) for t, _c, _h, u in requests if urlsplit(u).path != "/robots.txt"), gap)
            row.notes.append(revisit_notes(row, requests, truth, candidates, fault_t,
                                           cl.agent_sources.get(victim, "")))
        pages = [t for t, _, _, u in requests if urlsplit(u).path != "/robots.txt"]
        if pages and seeded_at is not None:
            row.last_fetch_s = max(pages) - seeded_at
        if fault_t is not None and ctx is not None:
            if name == "join":
                # The joiner's takeover: its first request to each host it took with work left.
                others = [src for a, src in cl.agent_sources.items() if a != ctx.joined]
                row.recovery = recovery(fault_t, requests, truth, ctx.joined_hosts, others)
            else:
                # Only a restarted (or resumed) victim recovers its own hosts; a drained or killed one does not.
                ignore = [cl.agent_sources[victim]] if name in GONE_VICTIMS else []
                if name == "kill-owner-and-backup" and ctx.second_victim:
                    # Both victims' hosts, and neither victim's requests.
                    candidates = (candidates or set()) | (ctx.second_candidates or set())
                    ignore.append(cl.agent_sources[ctx.second_victim])
                row.recovery = recovery(fault_t, requests, truth, candidates, ignore)
            if name == "kill2" and ctx.second_t is not None:
                # The second victim's hosts (the first's it took included), from the second kill.
                second = recovery(ctx.second_t, requests, truth, ctx.second_candidates,
                                  [cl.agent_sources[victim], cl.agent_sources[ctx.second_victim]])
                row.recovery = merge_recovery(row.recovery, second)
            if ctx.counters_before is not None and counters_after is not None:
                row.handover = handover_cost(ctx.counters_before, counters_after, ctx.held_bytes, len(ctx.truth_hosts))
            if name == "flap" and ctx.resume_t is not None and candidates is not None:
                src = cl.agent_sources[victim]
                lost = flap_stale(requests, src, candidates, fault_t, ctx.resume_t, ctx.resume_t + args.lease).lost_hosts
                baseline = (ctx.counters_before or {}).get(victim, {}).get("hosts_handed_in", 0.0)
                samples = ctx.poller.samples if ctx.poller is not None else []
                back = handback_time(samples, baseline, len(lost), ctx.resume_t)
                row.flap = flap_stale(requests, src, candidates, fault_t, ctx.resume_t, ctx.resume_t + args.lease, back)
                if not samples:
                    row.notes.append(f"{victim}'s Status did not answer after the resume")
                elif all(v is None for _, v in samples):
                    row.notes.append("hosts_handed_in not reported")
            if name == "consultant-stop" and ctx.resume_t is not None:
                last, first, n = fence_gap(pages, fault_t, ctx.resume_t)
                left = len(truth - {u for t, _, _, u in requests if t < ctx.resume_t})
                row.notes.append(f"{n} page requests while it was stopped, the last {_secs(last)}s after the stop; "
                                 f"{left} truth URLs not yet requested at the SIGCONT, first request after it "
                                 f"{_secs(first)}s after")
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
            notes.insert(1 if r.victim else 0, f"fault at {r.fault_at:.0%} ({_secs(r.fault_after_s)}s)")
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
    p.add_argument("--mode", choices=("consultant", "kademlia"), default="consultant",
                   help="kademlia: no consultant process; the agents' overlay places hosts (docs/kademlia.md)")
    p.add_argument("--groups", default=",".join(DEFAULT_GROUPS), help="four ISP-city agent groups")
    p.add_argument("--victim", default=DEFAULT_VICTIM,
                   help="the agent that restart, drain, kill, kill2 (first), flap and kill-owner-and-backup (the owner) hit")
    p.add_argument("--join", default=DEFAULT_JOIN, help=f"join: the ISP-city group of the agent that joins (default {DEFAULT_JOIN})")
    p.add_argument("--fault-at", type=float, default=None,
                   help=f"share of truth requested when the fault comes (default {DEFAULT_FAULT_AT:.0%}%; consultant-stop "
                        f"{FAULT_AT['consultant-stop']:.0%}%)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds from seeding to the end of the crawl")
    p.add_argument("--stable", type=float, default=2.0, help="seconds every live agent must stay idle to call the crawl finished")
    p.add_argument("--time-scale", type=float, default=60.0)
    p.add_argument("--zero-latency", action="store_true")
    p.add_argument("--delay", type=float, default=0.05, help="agents' per-host politeness delay (lab up's default)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--lease", type=float, default=15.0,
                   help="the consultant's agent lease (its default, 15 s): restart comes back within it, kill outlives it")
    p.add_argument("--balance", choices=("default", "on", "off"), default="default",
                   help="load balancing (docs/balance.md): on or off in every run; default: as the configs' defaults say")
    p.add_argument("--balance-interval", type=float, default=2.0, help="with --balance on/off: the balancer's interval (s)")
    p.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
                   help="PostgreSQL of the storage scenarios' shared index (a fresh chaos_* schema per run)")
    p.add_argument("--backups", type=int, default=DEFAULT_BACKUPS,
                   help=f"kill-owner-and-backup: the agents' replication.backups (r; default {DEFAULT_BACKUPS}), when the agent knows the setting")
    args = p.parse_args(argv)
    args.groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    names = parse_scenarios(args.scenario)
    if args.mode == "kademlia":
        # Nothing to kill or stop: there is no consultant in this mode.
        skipped = [n for n in names if n in CONSULTANT_ONLY]
        names = [n for n in names if n not in CONSULTANT_ONLY]
        if skipped:
            print(f"chaos: kademlia mode has no consultant: {', '.join(skipped)} not run", file=sys.stderr)

    base = Path(args.run_dir).resolve() if args.run_dir else Path(tempfile.mkdtemp(prefix="wancrawl-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    header = [
        "$ python bench/chaos.py " + " ".join(sys.argv[1:] if argv is None else argv),
        f"lab seed {args.seed}, topology {args.topology or 'default (seed 002)'}, strategy {args.strategy}, "
        f"time scale {args.time_scale:g}{', zero latency' if args.zero_latency else ''}, politeness delay {args.delay:g}s, "
        f"concurrency {args.concurrency}, balancing {args.balance}",
        f"agents {', '.join(args.groups)}; victim {args.victim}; join {args.join}; fault at "
        + (f"{args.fault_at:.0%}" if args.fault_at is not None else
           f"{DEFAULT_FAULT_AT:.0%} ({', '.join(f'{n} {v:.0%}' for n, v in FAULT_AT.items())})") + " of truth requested",
        f"lease {args.lease:g}s; outages: restart {OUTAGE_S['restart']:g}s, consultant {OUTAGE_S['consultant']:g}s, storage {OUTAGE_S['storage']:g}s, "
        f"flap {args.lease + FLAP_EXTRA_S:g}s (lease + {FLAP_EXTRA_S:g}s), storage-kill9 {OUTAGE_S['storage-kill9']:g}s, "
        f"cluster-kill9 {OUTAGE_S['cluster-kill9']:g}s, consultant-stop {CONSULTANT_STOP_LEASES * args.lease:g}s "
        f"({CONSULTANT_STOP_LEASES:g} leases); kill-owner-and-backup r = "
        f"{args.backups if agent_backups_known() else '1 (no replication.backups)'}; "
        f"end: every live agent idle for {args.stable:g}s, timeout {args.timeout:g}s after seeding",
        f"consultant-replica, consultant-rolling: 2 consultant replicas over PostgreSQL; rolling: a kill every "
        f"{ROLLING_EVERY_S:g}s, each down {ROLLING_DOWN_S:g}s, politeness delay {SCENARIO_DELAY['consultant-rolling']:g}s",
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
            from manager import procs

            for n in names:  # the replicas' state goes with the temporary run dirs
                if n in REPLICA_SCENARIOS:
                    procs.drop_schema(procs.PG_URL, procs.run_schema(base / n, "lab"))
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
    for k in ("fault_at", "fault_after_s", "crawl_s", "last_fetch_s", "fault2_after_s"):
        d[k] = None if d[k] is None else round(d[k], 3)
    if d["handover"] is not None:
        d["handover"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d["handover"].items()}
    if d["flap"] is not None:
        for k in ("window_s", "handback_s"):
            d["flap"][k] = None if d["flap"][k] is None else round(d["flap"][k], 3)
    return d


if __name__ == "__main__":
    sys.exit(main())
