"""What the console shows, as JSON, from the snapshots `manager status` reads (pure: no I/O).

`History` owns the samples between polls (pages per second per agent and in total, a bounded
window); `view` turns one snapshot and the history into the page's one JSON document.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from manager.columns import COLUMNS
from manager.status import PageRates, Snapshot, cost_rows, give_up_kind, revisit_summary

# Figures that say what the web did to the crawl, summed over the agents (the flat counters of
# Status; the per-reason incident counts are in Prometheus, docs/metrics.md).
INCIDENTS = (
    ("retries", "retries"), ("errors", "URLs given up without a response"), ("redirects", "redirects"),
    ("robots_denied", "URLs robots.txt denied"), ("robots_given_up", "origins given up: robots.txt unreachable"),
    ("hosts_dns_failed", "hosts whose name did not resolve"), ("truncated", "bodies truncated at a cap"),
    ("over_page_budget", "URLs over a host's page budget"), ("over_domain_page_budget", "URLs over a domain's page budget"),
    ("over_queue_budget", "URLs over a host's queue budget"), ("query_churn", "URLs refused as query churn (a trap)"),
    ("links_over_cap", "links over the per-page cap"), ("out_of_scope", "URLs out of scope"),
    ("not_html", "responses that were not HTML"), ("push_failures", "pushes to peers that failed"),
    ("storage_failures", "batches storage did not take (spooled, retried)"),
)

# Said on the page, so nobody takes a missing panel for an empty one.
NOT_BUILT = (
    "operator actions (drain an agent, reload the strategy, seed a file): read-only for now; use `manager drain`, "
    "`lab strategy`, `manager seed`",
    "agents on a geographic map: a grid of ISP x city instead (no map tiles offline)",
    "access control beyond loopback: `--listen` off loopback requires `--token`; no operator certificate login yet",
    "a browser test of a crawl in progress (the page updating, actions clicked): tests/test_e2e.py loads the page in "
    "headless Chromium once the crawl is over (its DOM and a screenshot)",
)


@dataclass
class History:
    """Pages/s samples, newest last, at most `keep` of them (the chart's window)."""

    keep: int = 600
    rates: PageRates = field(default_factory=PageRates)
    t: deque[float] = field(default_factory=deque)
    total: deque[float] = field(default_factory=deque)
    per_agent: dict[str, deque[float | None]] = field(default_factory=dict)

    def add(self, snap: Snapshot, now: float, wall: float) -> dict[str, float]:
        """Record the snapshot taken at monotonic `now` (wall clock `wall` for the chart's axis);
        returns each agent's pages/s since the last one (none at the first)."""
        rates = self.rates.update(snap, now)
        self.t.append(wall)
        self.total.append(sum(rates.values()))
        for a in snap.agents:  # None: no rate yet (an agent's first sample) or no longer listed
            series = self.per_agent.setdefault(a.agent_id, deque([None] * (len(self.t) - 1)))
            series.append(rates.get(a.agent_id))
        for series in self.per_agent.values():
            if len(series) < len(self.t):
                series.append(None)
        while len(self.t) > self.keep:
            self.t.popleft()
            self.total.popleft()
            for series in self.per_agent.values():
                series.popleft()
        return rates

    def as_json(self) -> dict[str, Any]:
        return {"t": list(self.t), "total": list(self.total), "agents": {k: list(v) for k, v in self.per_agent.items()}}


def _agent(a: Any, rate: float) -> dict[str, Any]:
    c = a.counters
    row = {col.header: col.cell(a, rate) for col in COLUMNS}
    return {
        "agent_id": a.agent_id, "address": a.address, "state": row["state"], "isp": a.isp, "city": a.city,
        "pages": c.get("pages", 0), "pages_per_second": rate, "queue": c.get("frontier", 0),
        "in_flight": c.get("in_flight", 0), "errors": c.get("errors", 0), "parked": len(a.parked),
        "given_up": len(a.given_up), "load_level": c.get("load_level", 0), "hosts": c.get("hosts_with_work", 0),
        "spool": c.get("spool_batches", 0), "replicas": c.get("replica_hosts", 0), "repl_lag": row["repl lag"],
        "idle": c.get("idle") == 1.0,
    }


def view(snap: Snapshot, rates: dict[str, float], history: History, mode: str, now: float | None = None) -> dict[str, Any]:
    """The page's JSON: the same figures as `manager status --json` (agents, storage, writers),
    the rates and their history, hosts by cost, parked and given-up hosts with their reasons,
    incidents, and what the console does not do yet."""
    now = time.time() if now is None else now
    agents = [_agent(a, rates.get(a.agent_id, 0.0)) for a in snap.agents]
    alive = [a for a in agents if a["state"] == "alive"]
    parked = sorted(((h, a.agent_id, until, reason) for a in snap.agents for h, until, reason in a.parked),
                    key=lambda p: p[2])
    given = [(h, a.agent_id, reason) for a in snap.agents for h, reason in a.given_up]
    return {
        "time": now, "mode": mode, "epoch": snap.epoch, "strategy": snap.strategy, "idle": snap.idle(),
        "agents": agents,
        "totals": {
            "agents_alive": len(alive), "agents": len(agents),
            **{k: sum(a[k] for a in agents) for k in ("pages", "pages_per_second", "queue", "in_flight", "errors",
                                                        "parked", "given_up", "spool")},
        },
        "history": history.as_json(),
        "top_hosts": [{"host": h, "pages": p, "bytes": b, "give_ups": g, "top_by": by}
                      for h, p, b, g, by in cost_rows(snap.agents, 10)],
        "parked": [{"host": h, "agent": aid, "next_try_in": max(0.0, until - now), "reason": r}
                   for h, aid, until, r in parked[:100]],
        "given_up": [{"host": h, "agent": aid, "kind": give_up_kind(r), "reason": r} for h, aid, r in given[:100]],
        "incidents": [{"counter": k, "what": what, "count": sum(a.counters.get(k, 0) for a in snap.agents)}
                      for k, what in INCIDENTS],
        "revisits": revisit_summary(snap),
        "storage": snap.storage, "writers": [w.__dict__ for w in snap.writers],
        "not_built": list(NOT_BUILT),
    }
