"""The revisit scenarios' own steps (continuous crawling, docs/continuous.md): a changing lab web,
the agents' revisit schedules read from their frontiers, the wait for the revisit rounds after the
takeover, and the notes that say what the new owners revisited."""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

from lab import cluster
from lab.faults import observe
from lab.faults.measure import Row, ScheduleCheck, schedule_check
from lab.faults.observe import LogTail
from lab.faults.scenarios import KILL2_SYNC_S, REVISIT_CHANGE_RATIO, REVISIT_FAULT, REVISIT_INTERVAL_S, REVISIT_ROUNDS
from wancrawl.urls import host_of_canonical


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
    if not observe.wait_progress(tail, truth, cl.web_port, 1.0, deadline, seen):
        notes.append(f"TIMEOUT: {len(seen)} of {len(truth)} truth URLs requested")
        return False
    if REVISIT_FAULT[name] == "kill":
        gone = asyncio.run(observe.wait_gone(cl, victim, max(0.1, deadline - time.monotonic())))
        if gone is None:
            notes.append(f"TIMEOUT: {victim} still listed alive")
            return False
    synced, unsynced, _ = asyncio.run(observe.wait_replicas(cl, max(0.1, min(KILL2_SYNC_S, deadline - time.monotonic()))))
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
    live = asyncio.run(observe.live_agents(cl))
    schedules = {a: read_schedule(cluster.agent_config(cl.run_dir, a)["data_dir"]) for a in live}
    owners = asyncio.run(observe.owners(cl, truth_hosts))
    return schedule_check(truth, schedules, owners)
