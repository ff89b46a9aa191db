"""A URL's fetch and the page's steps after it, in order (issue 34; Scrapy's engine is the model:
small steps, each with its own counters). `PageSteps.run` is the order:

    stored?   a URL a dead owner may have stored is asked of storage first (refetch.StoredCheck)
    fetch     one counted request (fetches.Requests), then the page waits for its turn of the pass
    outcome   ours to keep (the lease held)? the whole host failed? then outcome.decide (pure)
    retry     a transient failure goes back to its queue, its try counted
    truncation a body cut by a limit is noted (a bomb too)
    redirect  the target is a new URL one level deeper, through routing (hops bounded)
    parse     an HTML 200's links extracted (in a thread when big), within the parse memory
    links     scope and the recent filter, then routing (Discovery.discover)
    sitemaps  a non-HTML 200 that is a sitemap is read (agent/crawl/sitemap_reader.py)
    record    the capture built, the visit told to the frontier (revisits), the URL finished

Each step owns its counters (a slotted `Counters` dataclass: an attribute increment per page,
no string key) and any per-URL state it needs (retry counts, redirect hops), which ends with its
URL. The steps are made once; a page allocates nothing beyond what its own work needs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from agent.crawl.bytebudget import ByteBudget
from agent.crawl.fetches import Requests, host_failure
from agent.crawl.hosts import CrawlHosts
from agent.crawl.incidents import BOMB_RATIO, TRAP_SCOPE_REASONS, Incidents
from agent.crawl.links import THREAD_PARSE_BYTES, extract_links
from agent.crawl.outcome import MAX_REDIRECT_HOPS, Outcome, Policy, decide, http_class
from agent.crawl.politeness import OriginBackoff, Scheduler, origin_of
from agent.crawl.refetch import StoredCheck
from agent.crawl.scope import Scope
from agent.crawl.sitemap_reader import SitemapReader
from agent.fetch import FetchResponse
from agent.placement.gate import Gate
from agent.settings import AgentSettings
from agent.state.frontier import Frontier, Item
from agent.state.revisit import Visit, changed, conditional_headers, validators
from wancrawl import errors
from wancrawl.runtime.looplag import PassBudget
from wancrawl.stats import Counters
from wancrawl.urls import InvalidUrl, UnsupportedScheme, canonicalize, host_of_canonical
from wancrawl.warcrecords import Capture, FetchResult, build_capture

log = logging.getLogger("agent")

REDIRECT_HOPS_KEPT = 100_000  # redirect targets whose hop count is remembered (oldest dropped)


@dataclass(frozen=True)
class Shared:
    """What the steps share, made once by the dispatcher: `finish(item, capture)` ends a URL
    (the commit log), `route(items)` sends URLs found to routing, `schedule(host)` wakes a host
    (with its origins' new waits); `fetch_errors` is the dispatcher's family by kind."""

    settings: AgentSettings
    frontier: Frontier
    scheduler: Scheduler
    hosts: CrawlHosts
    scope: Scope
    incidents: Incidents
    fetch_errors: dict[str, float]
    clock: Callable[[], float]
    finish: Callable[[Item | None, Capture | None], None]
    route: Callable[[list[Item]], None]
    schedule: Callable[[str], None]


# -- outcome -----------------------------------------------------------------------------------------
@dataclass(slots=True)
class OutcomeCounters(Counters):
    pages: int = 0           # responses kept as pages (redirects and error statuses included)
    errors: int = 0          # URLs done without a response
    given_up: int = 0        # URLs whose retries ran out
    not_html: int = 0        # 200s that are not HTML (not parsed; a sitemap maybe)
    fenced_results: int = 0  # fetches that ended after the lease lapsed (not kept)


class Outcomes:
    """Whether the answer is ours to keep and what it is: the origin's transport backoff, the
    error kind, then outcome.decide; a page counted (pages/s from `rate_window`)."""

    def __init__(self, c: Shared, gate: Gate, origins: OriginBackoff, stopping: Callable[[], bool]):
        p = c.settings.politeness
        self.policy = Policy(p.max_retries, p.max_retry_after)
        self.origin_give_up_after = p.origin_give_up_after
        self.gate, self.origins, self.stopping = gate, origins, stopping
        self.frontier, self.scheduler, self.hosts = c.frontier, c.scheduler, c.hosts
        self.incidents, self.fetch_errors, self.finish = c.incidents, c.fetch_errors, c.finish
        self.rate_window: deque[float] = deque()  # times of recent pages (pages/s for heartbeats)
        self.stats = OutcomeCounters()

    def fenced(self, item: Item, ip: str, now: float) -> bool:
        """The lease lapsed while this fetch was under way: another agent may own the host
        now, so the result is not ours to store; the URL stays queued (the gate wakes it)."""
        if self.gate.lease_ok(now):
            return False
        self.gate.allows(item.host, now)
        self.stats.fenced_results += 1
        self.scheduler.finished(item.host, ip, now, 0, None, has_work=False)
        self.frontier.retry(item)
        return True

    def host_failed(self, item: Item, ip: str, resp: FetchResponse, now: float) -> bool:
        """The host's address is forbidden or its name is gone: the host is given up."""
        failed = host_failure(resp)
        if failed is None:
            return False
        self.frontier.retry(item)
        self.scheduler.finished(item.host, ip, now, 0, None, has_work=False)
        self.hosts.give_up(item.host, *failed)
        return True

    def decide(self, item: Item, resp: FetchResponse, tries: int, now: float) -> Outcome:
        # A transport failure backs off the URL's origin; an HTTP 429/5xx the host (its rate).
        origin = origin_of(item.url)
        if not resp.status:
            self.origins.failed(origin, now)
            if self.origins.failing_for(origin, now) >= self.origin_give_up_after:
                # The origin's failure budget is spent: its URLs are finished as they come up.
                self.hosts.give_up_origin(item.host, origin, f"no answer for {self.origins.failing_for(origin, now):.0f}s "
                                                             f"({self.origins.level(origin)} transport failures in a row)")
        else:
            self.origins.ok(origin)
        kind = http_class(resp.status)
        if kind is not None:
            self.fetch_errors[kind] += 1
        return decide(resp, tries, self.policy, stopping=self.stopping())

    def settle(self, item: Item, resp: FetchResponse, o: Outcome, now: float) -> bool:
        """Count a URL that is done; True when it is a page (its steps go on), else it is finished."""
        self.stats.given_up += o.given_up
        if o.given_up:
            self.incidents.note("retries_exhausted", item.host, f"{item.url} after {self.policy.max_retries} retries")
        if not o.page:
            self.stats.errors += 1
            self.finish(item, None)
            return False
        self.stats.pages += 1
        self.stats.not_html += o.not_html
        self.frontier.add_pages(item.host)
        self.incidents.page(item.host, resp.raw_length)
        self.rate_window.append(now)
        return True

    def pages_per_second(self, now: float, window: float) -> float:
        while self.rate_window and self.rate_window[0] < now - window:
            self.rate_window.popleft()
        return len(self.rate_window) / window


# -- retry ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class RetryCounters(Counters):
    retries: int = 0  # transient failures put back to be tried again


class Retries:
    """`attempts`: URL -> failed tries so far, until the URL is done."""

    def __init__(self, c: Shared, capture: Callable[[Item, FetchResponse], Capture | None]):
        self.frontier, self.scheduler, self.finish, self.schedule = c.frontier, c.scheduler, c.finish, c.schedule
        self.capture = capture
        self.attempts: dict[str, int] = {}
        self.stats = RetryCounters()

    def tries(self, url: str) -> int:
        return self.attempts.get(url, 0)

    def forget(self, url: str) -> None:
        self.attempts.pop(url, None)

    def put_back(self, item: Item, ip: str, resp: FetchResponse, o: Outcome, now: float) -> None:
        if o.attempt is not None:
            self.attempts[item.url] = o.attempt
            self.stats.retries += 1
        if o.record:
            self.finish(None, self.capture(item, resp))  # the response is kept; the URL is not done
        # The wait is the host's (politeness backs it off: Retry-After, 5xx) or the origin's
        # (transport failure): not the URL's, so no URL of a live origin waits behind it.
        self.frontier.retry(item)
        self.scheduler.finished(item.host, ip, now, resp.status, resp.retry_after, has_work=True)
        self.schedule(item.host)  # with the origin's new wait


# -- truncation -------------------------------------------------------------------------------------------
@dataclass(slots=True)
class TruncationCounters(Counters):
    truncated: int = 0  # pages whose body a limit cut


class Truncation:
    def __init__(self, incidents: Incidents):
        self.incidents = incidents
        self.stats = TruncationCounters()

    def note(self, item: Item, resp: FetchResponse) -> None:
        """A truncated body (resp.truncated set): counted, and noted by kind."""
        self.stats.truncated += 1
        self.incidents.note(f"truncated_{resp.truncated}", item.host, f"{item.url} ({len(resp.body)} bytes kept)")
        if resp.truncated == "decoded" and len(resp.body) >= BOMB_RATIO * max(1, resp.raw_length):
            self.incidents.note("bomb", item.host, f"{item.url}: {resp.raw_length} bytes decoded past {len(resp.body)}")


# -- redirect -------------------------------------------------------------------------------------------
@dataclass(slots=True)
class RedirectCounters(Counters):
    SHARED = frozenset({"out_of_scope", "dropped_schemes", "invalid_urls"})  # links, parse, sitemaps, intake too
    redirects: int = 0
    out_of_scope: int = 0
    dropped_schemes: int = 0
    invalid_urls: int = 0


class Redirects:
    """A redirect is a new URL one level deeper, through routing; at most MAX_REDIRECT_HOPS in
    a row (counted on this agent: `hops`, redirect target -> hops so far, until its chain ends)."""

    def __init__(self, c: Shared):
        self.s, self.scope, self.incidents, self.route = c.settings, c.scope, c.incidents, c.route
        self.hops: dict[str, int] = {}
        self.stats = RedirectCounters()

    def end(self, url: str) -> None:
        """The URL was fetched as anything but a redirect: its chain ends here."""
        self.hops.pop(url, None)

    def follow(self, item: Item, location: str) -> None:
        self.stats.redirects += 1
        hops = self.hops.pop(item.url, 0) + 1
        try:
            url = canonicalize(location, item.url, sort_query=self.s.sort_query)
            host = host_of_canonical(url)
        except UnsupportedScheme:
            self.stats.dropped_schemes += 1
            return
        except InvalidUrl:
            self.stats.invalid_urls += 1
            return
        why = "redirect_hops" if hops > MAX_REDIRECT_HOPS else self.scope.check(url, host, item.depth + 1)
        if why is not None:
            self.stats.out_of_scope += 1
            if why == "redirect_hops" or why in TRAP_SCOPE_REASONS:
                self.incidents.note(f"trap_{why}", host, url[:200])
            return
        hops_of = self.hops
        if len(hops_of) >= REDIRECT_HOPS_KEPT:
            # A target that is not a redirect itself (or is routed to another agent) is never
            # popped: the oldest eighth goes, or the dict grows with every redirect of a crawl.
            for old in list(itertools.islice(hops_of, len(hops_of) // 8 or 1)):
                del hops_of[old]
        hops_of[url] = hops
        self.route([Item(url, host, item.depth + 1, item.url)])


# -- parse ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class ParseCounters(Counters):
    SHARED = frozenset({"dropped_schemes", "invalid_urls"})  # redirects, sitemaps, routing too
    parse_waits: int = 0           # parses that waited for room (memory.parse_bytes_in_flight)
    parse_pieces: int = 0
    parse_pieces_skipped: int = 0
    links_over_cap: int = 0        # links past scope.max_outlinks_per_page
    nofollow_skipped: int = 0
    noindex_pages: int = 0         # kept all the same: noindex is a search engine's directive
    dropped_schemes: int = 0
    invalid_urls: int = 0


class Parse:
    """An HTML page's links (canonical), with the link limits and meta robots. `parses`: bytes
    under the HTML parser at once (memory.parse_bytes_in_flight), threads included."""

    def __init__(self, c: Shared):
        s = c.settings
        self.sort_query, self.max_links, self.nofollow = s.sort_query, s.scope.max_outlinks_per_page, s.scope.follow_rel_nofollow
        self.piece = s.memory.parse_piece_bytes
        self.incidents = c.incidents
        self.parses = ByteBudget(s.memory.parse_bytes_in_flight)
        self.stats = ParseCounters()

    async def links(self, item: Item, resp: FetchResponse) -> list[str]:
        parse = functools.partial(extract_links, resp.body, item.url, resp.charset, sort_query=self.sort_query,
                                  max_links=self.max_links, follow_rel_nofollow=self.nofollow, piece_bytes=self.piece)
        # The parser holds one piece at a time: parses wait for room by bytes, not by count.
        async with self.parses.hold(min(len(resp.body), self.piece)):
            # Lexbor parses without the GIL: a big page goes to a thread so the loop (other
            # fetches, RPCs, heartbeats) does not stall for the ~15 ms per MiB it takes.
            res = await asyncio.to_thread(parse) if len(resp.body) > THREAD_PARSE_BYTES else parse()
        st = self.stats
        st.parse_waits = self.parses.waits
        st.parse_pieces += res.pieces
        st.parse_pieces_skipped += res.pieces_skipped
        st.dropped_schemes += sum(res.dropped_schemes.values())
        st.invalid_urls += res.invalid
        st.links_over_cap += res.over_cap
        if res.over_cap:
            self.incidents.note("links_capped", item.host, f"{item.url}: {len(res.links)} links kept, ~{res.over_cap} left")
        st.nofollow_skipped += res.nofollow_skipped
        st.noindex_pages += res.noindex
        return res.links


# -- links -----------------------------------------------------------------------------------------------
@dataclass(slots=True)
class LinkCounters(Counters):
    SHARED = frozenset({"out_of_scope"})  # redirects, sitemaps and intake count it too
    out_of_scope: int = 0
    recent_skips: int = 0  # links routed a moment ago, skipped before any other work


class Discovery:
    """A page's links (canonical already) to routing, past scope and the recent filter.

    `recent`: URLs routed lately (in scope), oldest first; a pure traffic/CPU saver: the owner's
    seen set is what guarantees each URL is crawled once. Forgotten whenever the placement epoch
    changes (`epoch`: the directory's): a URL routed before went to an owner that may have died
    since with the URL in no surviving replica (its push acknowledged while a backup lagged),
    and skipped here again it would be lost (issue 23, kill2 with balancing on: docs/balance.md
    "Stored twice after a move at a death")."""

    def __init__(self, c: Shared, epoch: Callable[[], int] | None):
        self.scope, self.incidents, self.route = c.scope, c.incidents, c.route
        self.limit = c.settings.routing.recent_filter
        self.recent: dict[str, None] = {}
        self.epoch = epoch
        self._recent_epoch = epoch() if epoch is not None else 0
        self.stats = LinkCounters()

    def discover(self, item: Item, links: list[str]) -> None:
        depth = item.depth + 1
        if self.epoch is not None and (e := self.epoch()) != self._recent_epoch:
            self._recent_epoch = e
            self.recent.clear()  # owners changed: what was routed may be nowhere now
        via = item.url
        recent = self.recent
        limit = self.limit
        check = self.scope.check
        out: list[Item] = []
        skips = 0
        for url in links:
            # Navigation repeats the same links on every page: a URL routed a moment ago is
            # already with its owner (or owed to it), so skip it before any more work.
            if url in recent:
                skips += 1
                continue
            host = host_of_canonical(url)
            why = check(url, host, depth)
            if why is not None:
                self.stats.out_of_scope += 1
                if why in TRAP_SCOPE_REASONS:
                    self.incidents.note(f"trap_{why}", host, url[:200])
                continue
            if len(recent) >= limit:
                # Forget the oldest eighth (dicts keep insertion order): a cheap bounded FIFO.
                for old in list(itertools.islice(recent, len(recent) // 8 or 1)):
                    del recent[old]
            recent[url] = None
            out.append(Item(url, host, depth, via))
        self.stats.recent_skips += skips
        self.route(out)


# -- record ----------------------------------------------------------------------------------------------
@dataclass(slots=True)
class RevisitCounters(Counters):
    """Continuous crawling (issue 26): revisits fetched, of them those that found the page
    changed / unchanged, 304 answers, and the payload bytes those 304s did not send."""

    revisits: int = 0
    revisits_changed: int = 0
    revisits_unchanged: int = 0
    not_modified: int = 0
    not_modified_bytes: int = 0


class Record:
    """The page's capture (a WARC record) to the commit log, and what its fetch found to the
    item (the frontier schedules the URL's next visit from it)."""

    def __init__(self, c: Shared):
        s = c.settings
        self.agent_id, self.gzip_level, self.revisit_on = s.agent_id, s.storage_out.gzip_level, s.revisit.enabled
        self.clock, self.commit = c.clock, c.finish
        self.stats = RevisitCounters()

    def finish(self, item: Item, resp: FetchResponse) -> None:
        self.commit(item, self._visited(item, resp, self.capture(item, resp)))

    def capture(self, item: Item, resp: FetchResponse) -> Capture | None:
        # WARC-Truncated knows length, time, disconnect and unspecified; a server that sent more
        # than its Content-Length ("excess") had its message cut at that length by us.
        # A body whose encoding broke mid-stream ("encoding") is cut where it broke: "unspecified".
        trunc = {"decoded": "length", "excess": "unspecified", "encoding": "unspecified"}.get(resp.truncated or "", resp.truncated)
        # A body still in its Content-Encoding (one the agent cannot undo, or a header that lied
        # about it) keeps the header in the record, and the metadata record says why.
        note = (("encoding-note", resp.error_detail),) if (resp.encoded or resp.truncated == "encoding") and resp.error_detail else ()
        fr = FetchResult(
            url=item.url, status=resp.status, response_headers=resp.headers, body=resp.body, agent_id=self.agent_id,
            started_at=resp.started_at, ended_at=resp.ended_at, request_headers=resp.request_headers,
            reason=resp.reason, http_version=resp.http_version or "HTTP/1.1", ip=resp.ip or "",
            truncated=trunc, body_decoded=not resp.encoded, extra_metadata=note,
        )
        try:
            return build_capture(fr, level=self.gzip_level)
        except errors.InvalidArgument as exc:
            log.warning("cannot record %s: %s", item.url, exc)
            return None

    def _visited(self, item: Item, resp: FetchResponse, cap: Capture | None) -> Capture | None:
        """Tell the item what its fetch found and count revisits. A 304 confirms the capture the
        revisit entry names: its record goes to storage with that capture's payload digest
        (storage writes a server-not-modified revisit record referring to it)."""
        rv = item.revisit
        if rv is None and not self.revisit_on:
            return cap  # no schedule to feed: the fetch path pays nothing for revisits when they are off
        etag, modified = validators(resp.headers)
        digest = cap.payload_digest if cap is not None else ""
        if rv is not None and resp.status == 304:
            self.stats.not_modified += 1
            self.stats.not_modified_bytes += rv.length
            digest = rv.digest
            if cap is not None and rv.digest:
                cap = dataclasses.replace(cap, payload_digest=rv.digest)
        if rv is not None and cap is not None and rv.last > 0:
            cap = dataclasses.replace(cap, refetch=True)  # storage compares it with the URL's latest capture
        item.visit = Visit(resp.started_at or self.clock(), resp.status, digest, etag, modified, len(resp.body))
        if rv is not None:
            self.stats.revisits += 1
            c = changed(rv, item.visit)
            if c is not None:
                if c:
                    self.stats.revisits_changed += 1
                else:
                    self.stats.revisits_unchanged += 1
        return cap


# -- the steps in order -----------------------------------------------------------------------------------
class PageSteps:
    """One URL whose host slot the dispatcher took: fetched, then its steps in order (module
    docstring). `stored_check`: URLs a dead owner may have stored (asked of storage first)."""

    def __init__(self, c: Shared, requests: Requests, discovery: Discovery, sitemaps: SitemapReader, *, gate: Gate,
                 origins: OriginBackoff, stopping: Callable[[], bool], stored_check: StoredCheck | None, pass_budget: PassBudget):
        self.s = c.settings
        self.frontier, self.scheduler, self.clock, self.finish = c.frontier, c.scheduler, c.clock, c.finish
        self.requests, self.links, self.sitemaps = requests, discovery, sitemaps
        self.stored_check, self.pass_budget = stored_check, pass_budget
        self.record = Record(c)
        self.outcome = Outcomes(c, gate, origins, stopping)
        self.retry = Retries(c, self.record.capture)
        self.truncation = Truncation(c.incidents)
        self.redirect = Redirects(c)
        self.parse = Parse(c)

    def stats(self) -> dict[str, Counters]:
        return {"outcome": self.outcome.stats, "retry": self.retry.stats, "truncation": self.truncation.stats,
                "redirect": self.redirect.stats, "parse": self.parse.stats, "links": self.links.stats,
                "revisits": self.record.stats}

    async def run(self, item: Item, ip: str) -> None:
        host = item.host
        # The guards are inline: a page pays no call for a step that has nothing to do.
        check = self.stored_check
        if check is not None and item.revisit is None and item.url in check and await self._stored(item, ip):
            return
        rv = item.revisit
        resp = await self.requests.fetch(item.url, host, ip, conditional_headers(rv) if rv is not None and self.s.revisit.conditional else None)
        await self.pass_budget.turn()
        now = self.clock()
        outcome = self.outcome
        if outcome.fenced(item, ip, now) or (resp.error is not None and outcome.host_failed(item, ip, resp, now)):
            return
        o = outcome.decide(item, resp, self.retry.tries(item.url), now)
        if o.retry:
            self.retry.put_back(item, ip, resp, o, now)
            return
        self.scheduler.finished(host, ip, now, resp.status, resp.retry_after, has_work=self.frontier.has_work(host))
        self.retry.forget(item.url)
        if o.follow is None:
            self.redirect.end(item.url)  # the chain ends here
        if not outcome.settle(item, resp, o, now):
            return
        if resp.truncated:
            self.truncation.note(item, resp)
        if o.follow is not None:
            self.redirect.follow(item, o.follow)
        elif o.parse:
            self.links.discover(item, await self.parse.links(item, resp))
        elif o.not_html and self.sitemaps.enabled and resp.status == 200:
            await self.sitemaps.read_if_sitemap(item, resp.body)
        self.record.finish(item, resp)

    async def _stored(self, item: Item, ip: str) -> bool:
        """Whether storage holds the URL already (a first visit of a URL the check watches): the
        owner it was promoted from stored it before its "done" reached the replica. The URL is
        then finished unfetched."""
        assert self.stored_check is not None
        stored = await self.stored_check.stored(item.url)
        if not stored:
            return False
        host, now = item.host, self.clock()
        if self.s.revisit.enabled and 200 <= stored < 300 and not self.frontier.scheduled(host, item.url):
            # ... and maybe before its schedule entry did: the URL enters this agent's schedule
            # as fetched now (no digest or validators known here: its first revisit asks
            # unconditionally, and storage compares it with the URL's latest capture).
            item.visit = Visit(now, stored)
        self.scheduler.finished(host, ip, now, 0, None, has_work=self.frontier.has_work(host))
        self.finish(item, None)
        return True
