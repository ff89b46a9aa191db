"""HostLedger: one host's whole state, exported, imported and dropped in one place.

Everything that moves a host between agents (a drain today; failover, join and load balancing
later) goes through here, so no feature has to know where a host's state lives: the frontier
(its queue), the seen set (its history), the dispatcher (politeness, robots.txt, page count).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.crawl.dispatcher import Dispatcher, HostCrawlState
from agent.crawl.robots import RobotsState
from agent.state.frontier import Frontier, Item
from agent.state.revisit import Entry
from agent.state.seen import SeenSet, fingerprint
from wancrawl.v1 import agent_pb2

# Items or fingerprints per HandOver message: a host of millions of URLs goes in parts of a
# few MB, under gRPC's message limit and without one huge allocation.
PART_ITEMS = 20_000
PART_FINGERPRINTS = 200_000


@dataclass
class HostState:
    """One host's state, or one part of it (`crawl` only in the first part). Parts of one host
    are imported in order: queue parts before fingerprint parts, so a queued URL is never
    taken for seen before it is queued."""

    host: str
    queue: list[Item] = field(default_factory=list)  # queued and in flight, breadth-first
    seen: list[int] = field(default_factory=list)    # fingerprints (agent.seen.fingerprint)
    crawl: HostCrawlState | None = None
    revisits: list[Entry] = field(default_factory=list)  # the revisit schedule (issue 26)

    def parts(self) -> list[HostState]:
        """The state in messages of bounded size: queue parts first, then fingerprint parts; the
        crawl state rides in the first."""
        q, s = self.queue, self.seen
        out = [HostState(self.host, q[i : i + PART_ITEMS]) for i in range(0, len(q), PART_ITEMS)]
        out += [HostState(self.host, [], s[i : i + PART_FINGERPRINTS]) for i in range(0, len(s), PART_FINGERPRINTS)]
        r = self.revisits
        out += [HostState(self.host, revisits=r[i : i + PART_ITEMS]) for i in range(0, len(r), PART_ITEMS)]
        if not out:
            out = [HostState(self.host)]
        out[0].crawl = self.crawl
        return out

    def to_proto(self) -> agent_pb2.HostState:
        m = agent_pb2.HostState(
            host=self.host, seen=self.seen,
            queue=[agent_pb2.QueuedUrl(url=i.url, depth=i.depth, via=i.via, not_before=i.not_before, seq=max(i.seq, 0))
                   for i in self.queue],
            revisits=[revisit_to_proto(e) for e in self.revisits],
        )
        c = self.crawl
        if c is not None:
            m.crawl_delay = c.crawl_delay or 0.0
            m.backoff_until, m.backoff_level, m.pages = c.backoff_until, c.backoff_level, c.pages
            for origin, r in c.robots:
                m.robots.append(agent_pb2.RobotsState(
                    origin=origin, status=r.status, body=r.text.encode(), expires=r.expires, fetched_ok=r.fetched_ok or 0.0,
                    failing_since=r.failing_since or 0.0))
        return m

    @classmethod
    def from_proto(cls, m: agent_pb2.HostState, first: bool) -> HostState:
        """A received part; `first`: the first part of its host (it carries the crawl state)."""
        crawl = None
        if first:
            robots = [(r.origin, RobotsState(r.status, r.body.decode("utf-8", "replace"), r.expires, r.fetched_ok or None,
                                             r.failing_since or None)) for r in m.robots]
            crawl = HostCrawlState(m.crawl_delay or None, m.backoff_until, m.backoff_level, robots, m.pages)
        return cls(m.host, [Item(q.url, m.host, q.depth, q.via, q.not_before) for q in m.queue], list(m.seen), crawl,
                   [revisit_of_proto(m.host, r) for r in m.revisits])


def revisit_to_proto(e: Entry) -> agent_pb2.RevisitEntry:
    """An Entry on the wire (due inf, a hint only, as 0)."""
    return agent_pb2.RevisitEntry(
        url=e.url, due=e.due if math.isfinite(e.due) else 0.0, interval=e.interval, last=e.last, digest=e.digest, etag=e.etag,
        modified=e.modified, length=e.length, visits=e.visits, changes=e.changes, span=e.span, depth=e.depth, lastmod=e.lastmod,
        changefreq=e.changefreq)


def revisit_of_proto(host: str, r: agent_pb2.RevisitEntry) -> Entry:
    return Entry(r.url, host, r.due or math.inf, r.interval, r.last, r.digest, r.etag, r.modified, r.length, r.visits, r.changes,
                 r.span, r.depth, r.lastmod, r.changefreq)


class HostLedger:
    """Per-host ownership: export(host), import_(state), drop(host), owned_hosts()."""

    def __init__(self, frontier: Frontier, seen: SeenSet, dispatcher: Dispatcher, wake: Callable[[str], None]):
        self.frontier = frontier
        self.seen = seen
        self.dispatcher = dispatcher
        self.wake = wake

    def owned_hosts(self) -> list[str]:
        """Hosts whose state this agent holds: every host with a history (a queued URL is in the
        seen set too), and queued hosts in case a seen set was lost."""
        return list(dict.fromkeys(self.seen.hosts() + list(self.frontier.hosts_ready())))

    def hosts_moving(self, me: int, newcomer: int) -> list[str]:
        """The hosts held here whose key is closer to `newcomer` than to `me`, read from the
        host-key indexes (seed 000's firstdiff: only the key ranges that move)."""
        return list(dict.fromkeys(self.seen.hosts_moving(me, newcomer) + self.frontier.hosts_moving(me, newcomer)))

    def holds(self, host: str) -> bool:
        """Does this agent hold any state of the host (history or queue)?"""
        return self.seen.holds(host) or self.frontier.has_work(host) or self.frontier.in_flight_of(host) > 0

    def queued(self, host: str) -> int:
        return self.frontier.queue_len(host)

    def crawl(self, host: str) -> HostCrawlState:
        """The host's crawl state without robots.txt (what a replica delta carries)."""
        return self.dispatcher.export_host(host, robots=False)

    def export(self, host: str) -> HostState:
        """A copy of the host's state; nothing changes here (drop or release does)."""
        return HostState(host, self.frontier.export_host(host), self.seen.export_host(host), self.dispatcher.export_host(host),
                         self.frontier.export_schedule(host))

    def import_(self, st: HostState) -> tuple[int, int]:
        """Merge a received host state (or part); returns (URLs queued, fingerprints new here).
        A handed URL this agent has seen already is not queued again. Durable at the next
        group commit.

        All or nothing: a part with a value this agent's disk cannot hold (a page count past
        2^63-1, a NaN, a fingerprint out of range: agent/state/storable.py) is refused with
        Unstorable (INVALID_ARGUMENT to the HandOver) before anything of it is taken in, so
        the sender keeps the host whole and no URL is left seen here but not queued."""
        items = [Item(i.url, st.host, i.depth, i.via, i.not_before) for i in st.queue]
        self.frontier.check(items)
        fps = self.seen.check(st.seen)
        if st.crawl is not None:
            self.frontier.check_pages(st.host, st.crawl.pages)
        flags = self.seen.add_new(st.host, [i.url for i in items])
        fresh = [i for i, new in zip(items, flags) if new]
        self.frontier.add(fresh)
        n_seen = self.seen.import_host(st.host, fps) + len(fresh)
        if st.crawl is not None:
            self.dispatcher.import_host(st.host, st.crawl)
        if st.revisits:
            self.frontier.import_schedule(st.revisits)
        if fresh or (st.revisits and self.frontier.has_work(st.host)):
            self.wake(st.host)
        return len(fresh), n_seen

    def merge(self, st: HostState) -> tuple[int, int]:
        """Import a whole host state from the agent that owned the host until now (a handover,
        or a replica of a dead owner): what it says it has seen and no longer queues was done
        there, so a copy queued here meanwhile goes (it would be fetched twice)."""
        res = self.import_(st)
        self.reconcile(st.host, {i.url for i in st.queue}, set(st.seen))
        return res

    def reconcile(self, host: str, their_queue: set[str], their_seen: set[int]) -> int:
        """Drop the host's queued URLs that another agent's authoritative state has seen and not
        queued (it fetched them). Returns how many went. A URL being fetched here right now
        stays in flight (the frontier never queues it again: that was a page fetched twice)."""
        if not their_seen:
            return 0
        gone = {i.url for i in self.frontier.export_host(host) if i.url not in their_queue and fingerprint(i.url) in their_seen}
        return self.frontier.drop_queued(host, gone) if gone else 0

    def defer_done(self, host: str, their_queue: set[str], their_seen: set[int], until: float) -> list[str]:
        """A peer's HandOver says these queued URLs were done there (seen, not queued): they are
        not dropped on its word (issue 36: a compromised backup's `seen` = the fingerprints of a
        host's queue erased the host) but put back to wait until `until`, by which an honest
        sender has shipped them; the caller has storage asked before each is fetched
        (agent/crawl/refetch.py), so a page stored there is still not fetched twice, and a lie
        costs one wait. In-flight items stay in flight (drop_queued). Returns the URLs deferred."""
        if not their_seen:
            return []
        items = [i for i in self.frontier.export_host(host)
                 if i.url not in their_queue and fingerprint(i.url) in their_seen and i.not_before < until]
        if not items:
            return []
        urls = {i.url for i in items}
        self.frontier.drop_queued(host, urls)
        queued_now = {i.url for i in self.frontier.export_host(host)}  # in flight: left as they are
        back = [Item(i.url, host, i.depth, i.via, until) for i in items if i.url not in queued_now]
        self.frontier.add(back)
        return [i.url for i in back]

    def drop(self, host: str) -> None:
        """Forget the host everywhere (it changed owner)."""
        self.frontier.drop_host(host)
        self.seen.drop_host(host)
        self.dispatcher.drop_host(host)

    def release(self, st: HostState) -> int:
        """The receiver acknowledged `st`: drop the host here, but keep (as new) URLs queued
        since the export, which `st` does not carry; they go with the next handover. Returns
        how many were kept."""
        sent = {i.url for i in st.queue}
        keep = [Item(i.url, i.host, i.depth, i.via, i.not_before) for i in self.frontier.export_host(st.host) if i.url not in sent]
        # Schedule entries written since the export (a revisit done meanwhile) are not in `st`:
        # the receiver has the older entry of those URLs (revisited once more early, never lost).
        self.drop(st.host)
        if keep:
            self.seen.add_new(st.host, [i.url for i in keep])
            self.frontier.add(keep)
        return len(keep)
