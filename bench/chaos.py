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
  liar-first, liar-last, liar-fabricate (--mode kademlia only; issue 36)
              no fault during the crawl: one agent runs as lab/liar.py from the start, its
              FindNode answering itself alone (liar-fabricate: ten made-up contacts next to
              each target) and its Members itself alone, first (liar-first, liar-fabricate) or
              last (liar-last) in storage's `peers`. Storage must store the whole truth whatever
              the liar's place (docs/kademlia.md, "Trusting no single peer").

Columns (pure functions `compare` and `recovery` in lab/faults/measure.py; inputs: the truth set, storage's index
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
import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The harness lives in lab/faults/ (shared with bench/abuse.py, bench/balance.py and the seed
# benches); this script is its command line and its JSON.
from lab.faults.measure import Row, worst
from lab.faults.run import run_scenario
from lab.faults.scenarios import (
    CONSULTANT_ONLY,
    KADEMLIA_ONLY,
    CONSULTANT_STOP_LEASES,
    DEFAULT_BACKUPS,
    DEFAULT_FAULT_AT,
    DEFAULT_GROUPS,
    DEFAULT_JOIN,
    DEFAULT_SEED,
    DEFAULT_VICTIM,
    FAULT_AT,
    FLAP_EXTRA_S,
    OUTAGE_S,
    REPLICA_SCENARIOS,
    ROLLING_DOWN_S,
    ROLLING_EVERY_S,
    SCENARIO_DELAY,
    SCENARIOS,
    agent_backups_known,
)
from lab.faults.table import HEADERS, print_table, table_rows


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
    else:
        skipped = [n for n in names if n in KADEMLIA_ONLY]
        names = [n for n in names if n not in KADEMLIA_ONLY]
        if skipped:
            print(f"chaos: consultant mode asks no agent who is placed where: {', '.join(skipped)} not run", file=sys.stderr)

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
