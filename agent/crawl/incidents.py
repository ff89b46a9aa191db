"""What the hostile web did to this agent, for an operator: counts per reason, a rate-limited log
line per reason, and the hosts that cost the most (pages, bytes, give-ups)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

# The reasons (the label of wancrawl_agent_incidents_total). What one counts: a host given up
# (*_budget on the dispatcher, forbidden_address, dns_failure; an origin: robots_unreachable), a URL given up after its
# retries (retries_exhausted), URLs refused (domain_hosts, domain_page_budget at intake,
# trap_*), a page (truncated_*, bomb, links_capped).
GIVE_UPS = ("retries_exhausted", "host_page_budget", "domain_page_budget", "forbidden_address", "robots_unreachable",
            "dns_failure")
REASONS = (
    *GIVE_UPS,
    "domain_hosts",  # URLs of a host new here refused: its registered domain has max_hosts_per_domain hosts
    "truncated_length", "truncated_decoded", "truncated_time", "truncated_disconnect", "truncated_excess",
    "bomb",          # a body that hit the decoded cap at over BOMB_RATIO times its wire bytes
    "links_capped",  # a page whose links or parse stopped at a cap (scope.max_outlinks_per_page and its work budget)
    "trap_depth", "trap_url_length", "trap_path_depth", "trap_repeated_segments", "trap_query_params",
    "trap_query_churn", "trap_redirect_hops",
)
TRAP_SCOPE_REASONS = frozenset({"depth", "url_length", "path_depth", "repeated_segments", "query_params"})
BOMB_RATIO = 20  # gzip's best is ~1,000:1; ordinary HTML compresses ~4-10:1


@dataclass(frozen=True)
class HostCost:
    host: str
    pages: int
    bytes: int
    give_ups: int


class HostTally:
    """Pages, wire bytes and give-ups per host, for the hosts that cost the most. Bounded: past
    4 x `keep` hosts the tally keeps the top `keep` by each measure and forgets the rest (a host
    forgotten starts again from 0: the top is approximate for hosts near its edge)."""

    def __init__(self, keep: int = 256):
        self.keep = keep
        self._rows: dict[str, list[int]] = {}

    def add(self, host: str, pages: int = 0, nbytes: int = 0, give_ups: int = 0) -> None:
        row = self._rows.get(host)
        if row is None:
            if len(self._rows) >= 4 * self.keep:
                self._prune()
            row = self._rows[host] = [0, 0, 0]
        row[0] += pages
        row[1] += nbytes
        row[2] += give_ups

    def _prune(self) -> None:
        keep: set[str] = set()
        for i in range(3):
            keep.update(sorted(self._rows, key=lambda h: self._rows[h][i], reverse=True)[: self.keep])
        self._rows = {h: self._rows[h] for h in keep}

    def top(self, n: int) -> list[HostCost]:
        """The union of the n first hosts by pages, by bytes and by give-ups (each with all three)."""
        hosts: dict[str, None] = {}
        for i in range(3):
            for h in sorted(self._rows, key=lambda h: self._rows[h][i], reverse=True)[:n]:
                if self._rows[h][i]:
                    hosts[h] = None
        return [HostCost(h, *self._rows[h]) for h in hosts]


class Incidents:
    """Counts per reason (REASONS), a log line per reason at most every `log_every` seconds
    (saying how many were not logged since), and the HostTally. The dispatcher and intake note
    what they do; status and metrics read `counts` and `hosts`."""

    def __init__(self, clock: Callable[[], float], *, log_every: float = 10.0, keep: int = 256,
                 log: logging.Logger | None = None):
        self.clock = clock
        self.log_every = log_every
        self.log = log or logging.getLogger("agent")
        self.counts: dict[str, float] = dict.fromkeys(REASONS, 0.0)
        self.hosts = HostTally(keep)
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def note(self, reason: str, host: str, detail: str = "", n: int = 1) -> None:
        if reason not in self.counts:
            raise ValueError(f"unknown incident reason {reason!r}")
        self.counts[reason] += n
        if reason in GIVE_UPS:
            self.hosts.add(host, give_ups=n)
        now = self.clock()
        last = self._last.get(reason)
        if last is not None and now - last < self.log_every:
            self._quiet[reason] = self._quiet.get(reason, 0) + n
            return
        quiet = self._quiet.pop(reason, 0)
        self._last[reason] = now
        more = f" (and {quiet} more since the last such line)" if quiet else ""
        self.log.warning("hostile web: %s on %s%s%s", reason, host, f": {detail}" if detail else "", more)

    def page(self, host: str, nbytes: int) -> None:
        self.hosts.add(host, pages=1, nbytes=nbytes)
