"""The faults themselves: kill, restart, pause, drain, join, consultant replicas killed in turn,
storage killed while it writes; `inject_fault` injects a scenario's fault into a running cluster and
returns the fault time and the step that completes it (the restart after the outage, the second
kill, the resume). What the comparison needs from the fault goes into a FaultContext."""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lab import cluster
from lab.faults import observe
from lab.faults.measure import first_backup, warc_cut, warc_sizes
from lab.faults.observe import CounterPoller, agent_counters, held_bytes, operator_env
from lab.faults.scenarios import (
    CONSULTANT_STOP_LEASES,
    FLAP_EXTRA_S,
    KILL2_DEAD_S,
    KILL2_SYNC_S,
    OUTAGE_S,
    REPLICA_SCENARIOS,
    REVISIT_FAULT,
    ROLLING_DOWN_S,
    ROLLING_EVERY_S,
    STORAGE_SCENARIOS,
    WARC_GROWTH_WAIT_S,
    WARC_POLL_S,
    agent_backups_known,
)

# The repository: `manager drain` runs as a process from it.
ROOT = Path(__file__).resolve().parents[2]


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
    dead_at = asyncio.run(observe.wait_gone(cl, victim, lease + KILL2_DEAD_S))
    if dead_at is None:
        notes.append(f"{victim} still listed alive {lease + KILL2_DEAD_S:.0f}s after its kill: no second kill")
        return
    notes.append(f"declared dead {dead_at - t:.1f}s after the kill")
    synced_at, unsynced, reported = asyncio.run(observe.wait_replicas(cl, KILL2_SYNC_S))
    if not reported:
        notes.append("replica_unsynced not reported by any agent: taken as 0")
    elif synced_at is None:
        notes.append(f"replicas not current {KILL2_SYNC_S:.0f}s after: {unsynced} hosts unsynced at the second kill")
    else:
        notes.append(f"replicas current {synced_at - t:.1f}s after the kill")
    owners = asyncio.run(observe.owners(cl, sorted(ctx.candidates or ())))
    took = collections.Counter(o for o in owners.values() if o and o != victim)
    if not took:
        notes.append(f"no other agent owns {victim}'s hosts: no second kill")
        return
    victim2, k = took.most_common(1)[0]
    ctx.second_victim = victim2
    ctx.second_candidates = asyncio.run(observe.owned_by(cl, ctx.truth_hosts, victim2))
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
    """consultant-rolling's kills: every ROLLING_EVERY_S from the first (made by `inject_fault`), kill -9
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


def _kill_owner_and_backup(cl: cluster.Cluster, victim: str, notes: list[str],
                           ctx: FaultContext) -> tuple[float, Callable[[], None]]:
    """kill -9 the victim and the first backup of most of its hosts (the consultant's preference
    lists just before) at the same moment; both stay dead. With r backups per host, the hosts
    both held go on from the replica on their second backup."""
    routes = asyncio.run(observe.routes(cl, sorted(ctx.candidates or ())))
    pick = first_backup(routes, victim)
    if pick is None:
        raise RuntimeError(f"no host of {victim} names a backup in the consultant's answer: nothing to kill with it")
    backup, k, n = pick
    ctx.second_victim = backup
    ctx.second_candidates = asyncio.run(observe.owned_by(cl, ctx.truth_hosts, backup))
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


def inject_fault(name: str, cl: cluster.Cluster, victim: str, notes: list[str],
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
        ctx.joined_hosts, t = asyncio.run(observe.owned_once_listed(cl, ctx.truth_hosts, ctx.joined))
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
                dead = victim not in asyncio.run(observe.live_agents(cl))
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
        ctx.epoch_before = asyncio.run(observe.epoch(cl))
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
