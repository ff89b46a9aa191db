"""One scenario end to end (`run_scenario`): a fresh `lab up`, the seeds, the fault when its share
of truth was requested, the wait for the end, `lab down` (always), then the comparison into a Row."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from urllib.parse import urlsplit

from lab import cluster
from lab.faults import observe
from lab.faults.inject import FaultContext, inject_fault, replica_notes
from lab.faults.measure import (
    Row,
    compare,
    fence_gap,
    flap_stale,
    handback_time,
    handover_cost,
    merge_recovery,
    recovery,
    twice_within,
)
from lab.faults.observe import (
    LogTail,
    agent_counters,
    compute_truth,
    fresh_run_dir,
    inject_seeds,
    log_url,
    read_captures,
    wait_crawl_idle,
)
from lab.faults.revisits import changing_topology, revisit_notes, snapshot_schedules, wait_revisit_rounds
from lab.faults.scenarios import (
    AGENT_FAULTS,
    GONE_VICTIMS,
    LIAR_SCENARIOS,
    REPLICA_SCENARIOS,
    REVISIT_INTERVAL_S,
    REVISIT_SCENARIOS,
    REVISIT_SLACK_S,
    ROLLING_DOWN_S,
    SCENARIO_DELAY,
    agent_tables,
    balance_lab,
    fault_share,
    liar_lab,
    storage_lab,
)
from lab.faults.table import secs
from wancrawl.urls import host_of_canonical


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
                        **storage_lab(name, args), **liar_lab(name))
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
        faulted = name != "baseline" and name not in LIAR_SCENARIOS  # a liar lies from the start
        if faulted and not observe.wait_progress(tail, truth, cl.web_port, share, deadline, seen):
            row.notes.append(f"TIMEOUT before {share:.0%} of truth was requested (no fault injected)")
        else:
            if name in LIAR_SCENARIOS:
                how, at = LIAR_SCENARIOS[name]
                row.notes.append(f"{list(cl.agents)[at]} lies ({how}), position {at % len(cl.agents) + 1} of "
                                 f"{len(cl.agents)} in storage's peers")
            if faulted:
                row.fault_at = len(seen) / len(truth)
                if victim:
                    candidates = ctx.candidates = asyncio.run(observe.owned_by(cl, ctx.truth_hosts, victim))
                fault_t, complete = inject_fault(name, cl, victim, row.notes, ctx)
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
                after = asyncio.run(observe.epoch(cl))
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
                row.notes.append(f"{n} page requests while it was stopped, the last {secs(last)}s after the stop; "
                                 f"{left} truth URLs not yet requested at the SIGCONT, first request after it "
                                 f"{secs(first)}s after")
    return row
