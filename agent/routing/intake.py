"""Intake: URLs of hosts this agent owns (found here or pushed by peers) to the seen set and frontier."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from agent.crawl.incidents import Incidents
from agent.crawl.scope import Scope, query_shape
from agent.state.commit import Durable
from agent.state.frontier import Frontier, Item, item_problem
from agent.state.seen import SeenSet
from agent.validate import url_problem
from wancrawl.stats import Counters
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical
from wancrawl.v1 import agent_pb2


@dataclass
class IntakeResult:
    accepted: int
    not_mine: list[int]
    errors: list[str]


def parse_push(urls: Sequence[agent_pb2.UrlItem], sort_query: bool) -> tuple[list[tuple[int, Item]], list[str]]:
    """Wire URLs as canonical items with their index in the request; "index: reason" for the bad."""
    parsed: list[tuple[int, Item]] = []
    errs: list[str] = []
    for i, u in enumerate(urls):
        problem = url_problem(u)
        if problem is not None:
            errs.append(f"{i}: {problem}")
            continue
        try:
            url = canonicalize(u.url, sort_query=sort_query)
            it = Item(url, host_of_canonical(url), u.depth, u.via, force=u.force)
        except InvalidUrl as exc:
            errs.append(f"{i}: {exc}")
            continue
        # What the frontier could not store is refused here, this URL alone (issue 21).
        problem = item_problem(it)
        if problem is not None:
            errs.append(f"{i}: {problem}")
            continue
        parsed.append((i, it))
    return parsed, errs


@dataclass(slots=True)
class IntakeCounters(Counters):
    """URLs arriving: pushes received, URLs taken, and those dropped by reason (the metric names:
    agent/metrics.py HELP). SHARED, summed in status: out_of_scope with the dispatcher's links,
    agent_rpcs with the routing service's."""
    SHARED: ClassVar[frozenset[str]] = frozenset({"agent_rpcs", "out_of_scope"})
    duplicates: int = 0
    pushed_in: int = 0
    not_mine_sent: int = 0
    out_of_scope: int = 0
    agent_rpcs: int = 0
    over_queue_budget: int = 0
    over_page_budget: int = 0
    query_churn: int = 0
    over_domain_page_budget: int = 0
    over_domain_hosts: int = 0
    pushes_received: int = 0
    urls_received: int = 0
    unstorable: int = 0


class Intake:
    """The only way URLs enter this agent's frontier. PushUrls answers "not mine" only with an
    answer at least as new as the sender's epoch; an acknowledged URL is durable (the answer
    waits for the next commit)."""

    def __init__(
        self,
        seen: SeenSet,
        frontier: Frontier,
        scope: Scope,
        *,
        owners: Callable[[list[str], int], Awaitable[dict[str, bool | None]]],
        refusing: Callable[[], bool],
        wake: Callable[[str], None],
        durable: Durable,
        arriving: Callable[[list[str]], None] = lambda hosts: None,
        replicated: Callable[[set[str]], Awaitable[None]] | None = None,
        sort_query: bool = False,
        incidents: Incidents | None = None,
    ):
        self.seen = seen
        self.frontier = frontier
        self.scope = scope
        self.owners = owners        # host -> owned by this agent? (None: cannot say now)
        self.refusing = refusing    # True once this agent has left: nothing is its own any more
        self.wake = wake            # a host got work (the dispatcher's signal)
        self.durable = durable      # returns after the next group commit (raises if it dropped our rows)
        self.arriving = arriving    # hosts about to get URLs (ownership may hold a new one first)
        self.replicated = replicated  # returns once what is committed of these hosts is at their backups
        self.sort_query = sort_query
        self.incidents = incidents   # refusals by reason, for the operator (the dispatcher's)
        self.stats = IntakeCounters()
        # host -> query shape -> URLs queued with it (the parameter-churn guard); in memory, so a
        # restart forgives a host once (its queue budget, on disk, still holds).
        self._shapes: dict[str, dict[str, int]] = {}
        self._shape_count = 0

    def attach(self, *, arriving: Callable[[list[str]], None],
               replicated: Callable[[set[str]], Awaitable[None]] | None) -> None:
        """The node's second wiring phase: ownership's hook and the replicator's barrier. Both are
        built after intake (routing needs intake, the dispatcher routing, the ledger the dispatcher,
        ownership and the replicator the ledger), so they are attached here, once, before start."""
        self.arriving = arriving
        self.replicated = replicated

    def accept_local(self, items: list[Item]) -> int:
        """Dedup through the seen set, queue the new ones within the host's budgets; returns how
        many were queued. Durable at the next commit. A URL over the queue budget is dropped
        without being recorded as seen: found again once the queue has room, it is taken.
        An item the frontier could not store (a link no check before caught) is dropped and
        counted (`unstorable`) before anything is recorded: one bad link cannot take its
        batch with it."""
        by_host: dict[str, list[Item]] = {}
        for it in items:
            if item_problem(it) is not None:
                self.stats.unstorable += 1
                continue
            by_host.setdefault(it.host, []).append(it)
        self.arriving(list(by_host))
        fresh: list[Item] = []
        joining: dict[str, int] = {}  # registered domain -> hosts new to the frontier in this call
        for host, its in by_host.items():
            if self.scope.host_full(self.frontier.pages(host)):
                self.stats.over_page_budget += len(its)
                continue
            if self.scope.domain_full(self.frontier.domain_pages(host)):
                self.stats.over_domain_page_budget += len(its)
                self._note("domain_page_budget", host, len(its))
                continue
            if not self.frontier.holds(host):
                # A host new here, of a domain with max_hosts_per_domain hosts already: a subdomain
                # flood is held to the domain's budget (found again later, it is refused again).
                # The hosts this call queues count too (the frontier sees them at the end).
                dom = self.frontier.domain_of(host)
                if self.scope.domain_crowded(self.frontier.domain_hosts(host) + joining.get(dom, 0)):
                    self.stats.over_domain_hosts += len(its)
                    self._note("domain_hosts", host, len(its), f"{dom} has {self.frontier.domain_hosts(host)} hosts here")
                    continue
                joining[dom] = joining.get(dom, 0) + 1
            if self.scope.settings.max_urls_per_query_shape is not None:
                # Before the seen set: a trap's endless URLs must not grow it (memory, rehash stalls).
                its = self._churn_guard(host, its)
            fresh += self._record(host, its)
        if fresh:
            # Every item of `fresh` passed item_problem above (made by _record from one that did,
            # with the same url, host, depth and via): the frontier does not check it again.
            self.frontier.add(fresh, checked=True)
            for host in {i.host for i in fresh}:
                self.wake(host)
        return len(fresh)

    def _note(self, reason: str, host: str, n: int, detail: str = "") -> None:
        if self.incidents is not None:
            self.incidents.note(reason, host, f"{n} URLs refused" + (f" ({detail})" if detail else ""), n)

    def _record(self, host: str, its: list[Item]) -> list[Item]:
        room = self.scope.queue_room(self.frontier.queue_len(host))
        if room is None or room >= len(its):
            flags = self.seen.add_new(host, [i.url for i in its])
            self.stats.duplicates += len(its) - sum(flags)
            return [Item(i.url, host, i.depth, i.via) for i, new in zip(its, flags) if new or i.force]
        out: list[Item] = []  # near the budget: one URL at a time
        for i in its:
            if i.url in self.seen and not (i.force and len(out) < room):
                self.stats.duplicates += 1
            elif len(out) < room and (self.seen.add_new(host, [i.url])[0] or i.force):
                out.append(Item(i.url, host, i.depth, i.via))
            else:
                self.stats.over_queue_budget += 1
        return out

    def _churn_guard(self, host: str, items: list[Item]) -> list[Item]:
        """Drop URLs of a query shape (the URL with its query values blanked) that already had
        max_urls_per_query_shape distinct URLs: session ids, endless calendars, sort orders.
        Distinct: a URL already seen passes (the seen set counts it as a duplicate) and is not
        counted again."""
        cap = self.scope.settings.max_urls_per_query_shape
        assert cap is not None
        shapes = self._shapes.setdefault(host, {})
        out = []
        for it in items:
            if "?" not in it.url:  # no query, no shape (query_shape's None, without the call)
                out.append(it)
                continue
            shape = query_shape(it.url)
            if shape is None or it.url in self.seen:
                out.append(it)
                continue
            n = shapes.get(shape, 0)
            if n >= cap:
                self.stats.query_churn += 1
                self._note("trap_query_churn", host, 1, shape[:200])
                continue
            if not n:
                self._shape_count += 1
            shapes[shape] = n + 1
            out.append(it)
        if self._shape_count > 1_000_000:  # bounded memory: start counting afresh
            self._shapes.clear()
            self._shape_count = 0
        return out

    def screen(self, urls: Sequence[agent_pb2.UrlItem]) -> tuple[list[Item], list[str]]:
        """Seeds to be routed by this agent (PushUrls with route): the valid, in-scope items and
        the errors of the others."""
        self.stats.agent_rpcs += 1
        parsed, errs = parse_push(urls, self.sort_query)
        items: list[Item] = []
        for i, it in parsed:
            why = self.scope.check(it.url, it.host, it.depth)
            if why is None:
                items.append(it)
            else:
                errs.append(f"{i}: out of scope ({why})")  # the manager lists it as refused
        self.stats.out_of_scope += len(parsed) - len(items)
        return items, errs

    async def accept_push(self, epoch: int, urls: Sequence[agent_pb2.UrlItem]) -> IntakeResult:
        """PushUrls from a peer: keep the URLs of hosts this agent owns, answer "not mine" for the
        others, then wait for the commit so an acknowledged URL is durable."""
        self.stats.agent_rpcs += 1
        self.stats.pushes_received += 1
        self.stats.urls_received += len(urls)
        parsed, errs = parse_push(urls, self.sort_query)
        owns = await self.owners(sorted({it.host for _, it in parsed}), epoch)
        accepted: list[Item] = []
        not_mine: list[int] = []
        refusing = self.refusing()
        for i, it in parsed:
            if refusing or owns[it.host] is False:
                not_mine.append(i)
                continue
            # Owner, or placement cannot say now: keep it (the sender routed it here).
            why = self.scope.check(it.url, it.host, it.depth)
            if why is not None:
                self.stats.out_of_scope += 1
                errs.append(f"{i}: out of scope ({why})")
                continue
            accepted.append(it)
        self.accept_local(accepted)
        self.stats.pushed_in += len(accepted)
        self.stats.not_mine_sent += len(not_mine)
        # Raises (and this push fails, so its sender keeps the URLs) if the commit had to leave
        # out rows of these hosts as unwritable (agent/state/commit.py).
        await self.durable({it.host for it in accepted})
        if accepted and self.replicated is not None:
            # The sender forgets these URLs once answered: they must outlive this agent too.
            await self.replicated({it.host for it in accepted})
        return IntakeResult(len(accepted), not_mine, errs)
