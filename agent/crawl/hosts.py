"""The crawl state of this agent's hosts, one object per host (issue 34): what the dispatcher
knows of a host that no other component holds. Its address (looked up once), why it was given
up, and its origins (scheme://host:port, RFC 9309's scope of robots.txt) with why an origin was
given up. Politeness, robots.txt rules, sitemap bounds and the queue stay with their owners
(agent/crawl/politeness.py, robots.py, sitemap.py, agent/state/frontier.py), keyed by host or
origin; `export`/`import` of a host for a handover gathers them in the dispatcher.

Per URL state (retry counts, redirect hops) is not here: it belongs to the page's steps that
keep it (agent/crawl/page.py), and it ends with its URL.

The table is the only writer of the HostCrawl objects; a give-up is also the only place the
host's queue is dropped for budget, DNS or a forbidden address (counted, noted as an incident).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agent.crawl.incidents import Incidents
from agent.crawl.robots import RobotsState
from wancrawl.stats import Counters

# The scheduler's IP key of a host whose address is not known (not looked up yet, or a
# temporary DNS failure): UNRESOLVED + the host, one key per host. One key shared by all such
# hosts put every name that failed behind one per-IP delay and cap (issue 37: 2.5 DNS give-ups
# a second, 4,590 hosts still queued after 8 minutes); they are given up in parallel now.
UNRESOLVED = "unresolved:"


def unresolved(ip: str | None) -> bool:
    """The scheduler's key stands for no address (the fetcher then looks the name up itself)."""
    return ip is None or ip.startswith(UNRESOLVED)


@dataclass(frozen=True)
class HostCrawlState:
    """The dispatcher's part of one host's state (agent/ownership/ledger.py HostState holds the rest)."""

    crawl_delay: float | None
    backoff_until: float
    backoff_level: int
    robots: list[tuple[str, RobotsState]]  # (origin, its robots.txt entry)
    pages: int


@dataclass(slots=True)
class HostCounters(Counters):
    hosts_given_up: int = 0     # hosts whose queue was dropped (budget, DNS, forbidden address)
    budget_dropped: int = 0     # the queued URLs those give-ups dropped
    hosts_dns_failed: int = 0   # of them, hosts whose name did not resolve
    origins_given_up: int = 0   # origins finished unfetched (robots.txt unreachable, no answer)


@dataclass(slots=True, eq=False)
class HostCrawl:
    """One host. `resolved`: its address was looked up (`ip` None then: it has none). `origins`:
    the origins this agent fetched robots.txt from (or took over with the host) or gave up,
    each mapped to why it was given up (None: it was not)."""

    resolved: bool = False
    ip: str | None = None
    given_up: str | None = None
    origins: dict[str, str | None] = field(default_factory=dict)


class CrawlHosts:
    """host -> HostCrawl, and origin -> its host's HostCrawl for the origins it lists (the
    frontier asks an origin's wait for every origin it passes over: one dict read).
    `clear_queue(host)` drops a host's queue (the frontier's), `unschedule(host)` takes it out
    of the scheduler."""

    def __init__(self, clear_queue: Callable[[str], int], unschedule: Callable[[str], None], incidents: Incidents):
        self.clear_queue = clear_queue
        self.unschedule = unschedule
        self.incidents = incidents
        self._hosts: dict[str, HostCrawl] = {}
        self._by_origin: dict[str, HostCrawl] = {}
        self.given_up_count = 0  # hosts and origins given up now (the progress line)
        self.stats = HostCounters()

    def _of(self, host: str) -> HostCrawl:
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = HostCrawl()
        return h

    # -- reads --------------------------------------------------------------------------------------
    def resolved(self, host: str) -> bool:
        h = self._hosts.get(host)
        return h is not None and h.resolved

    def ip(self, host: str) -> str:
        """The host's address, or its own UNRESOLVED key (not looked up, or no address)."""
        h = self._hosts.get(host)
        return (h.ip if h is not None else None) or UNRESOLVED + host

    def given_up(self, host: str) -> str | None:
        h = self._hosts.get(host)
        return None if h is None else h.given_up

    def origin_given_up(self, origin: str) -> str | None:
        h = self._by_origin.get(origin)
        return None if h is None else h.origins.get(origin)

    def origins(self, host: str) -> Iterable[str]:
        h = self._hosts.get(host)
        return () if h is None else h.origins

    def all_given_up(self) -> dict[str, str]:
        """Every host and origin given up here -> why (the operator's and the tests' view)."""
        out: dict[str, str] = {}
        for host, h in self._hosts.items():
            if h.given_up is not None:
                out[host] = h.given_up
            out.update((o, why) for o, why in h.origins.items() if why is not None)
        return out

    # -- writes -------------------------------------------------------------------------------------
    def resolve(self, host: str, ip: str | None) -> None:
        h = self._of(host)
        h.resolved, h.ip = True, ip

    def add_origin(self, host: str, origin: str) -> None:
        h = self._of(host)
        h.origins.setdefault(origin, None)
        self._by_origin[origin] = h

    def give_up(self, host: str, reason: str, kind: str) -> None:
        """Drop the host's queue (at its budget, its name gone, its address forbidden) in one
        range delete; the URLs found for it later go as it comes up again (the dispatcher)."""
        n = self.clear_queue(host)
        self.unschedule(host)
        self.stats.budget_dropped += n
        h = self._of(host)
        if h.given_up is None:
            self.given_up_count += 1
            self.stats.hosts_given_up += 1
            self.stats.hosts_dns_failed += kind == "dns_failure"
            self.incidents.note(kind, host, f"given up, {reason}; {n} queued URLs dropped")
        h.given_up = reason

    def give_up_origin(self, host: str, origin: str, reason: str) -> None:
        """The origin's URLs are finished as they come up; the host's other origins go on."""
        h = self._of(host)
        if h.origins.get(origin) is None:
            self.given_up_count += 1
            self.stats.origins_given_up += 1
            self.incidents.note("robots_unreachable", host, f"{origin} given up: {reason}; the host's other origins go on")
        h.origins[origin] = reason
        self._by_origin[origin] = h

    def drop(self, host: str) -> list[str]:
        """Forget the host (its queue went with a handover); returns the origins it had."""
        h = self._hosts.pop(host, None)
        if h is None:
            return []
        self.given_up_count -= (h.given_up is not None) + sum(why is not None for why in h.origins.values())
        for o in h.origins:
            self._by_origin.pop(o, None)
        return list(h.origins)
