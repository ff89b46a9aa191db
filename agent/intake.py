"""Intake: URLs of hosts this agent owns (found here or pushed by peers) to the seen set and frontier."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from agent.frontier import Frontier, Item
from agent.scope import Scope
from agent.seen import SeenSet
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
        try:
            url = canonicalize(u.url, sort_query=sort_query)
            parsed.append((i, Item(url, host_of_canonical(url), u.depth, u.via)))
        except InvalidUrl as exc:
            errs.append(f"{i}: {exc}")
    return parsed, errs


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
        durable: Callable[[], Awaitable[None]],
        sort_query: bool = False,
    ):
        self.seen = seen
        self.frontier = frontier
        self.scope = scope
        self.owners = owners        # host -> owned by this agent? (None: cannot say now)
        self.refusing = refusing    # True once this agent has left: nothing is its own any more
        self.wake = wake            # a host got work (the dispatcher's signal)
        self.durable = durable      # returns after the next group commit
        self.sort_query = sort_query
        self.counters: dict[str, float] = {"duplicates": 0, "pushed_in": 0, "not_mine_sent": 0, "out_of_scope": 0,
                                           "agent_rpcs": 0}

    def accept_local(self, items: list[Item]) -> int:
        """Dedup through the seen set, queue the new ones; returns how many were new. Durable
        at the next commit."""
        by_host: dict[str, list[Item]] = {}
        for it in items:
            by_host.setdefault(it.host, []).append(it)
        fresh: list[Item] = []
        for host, its in by_host.items():
            flags = self.seen.add_new(host, [i.url for i in its])
            fresh += [Item(i.url, host, i.depth, i.via) for i, new in zip(its, flags) if new]
            self.counters["duplicates"] += len(its) - sum(flags)
        if fresh:
            self.frontier.add(fresh)
            for host in {i.host for i in fresh}:
                self.wake(host)
        return len(fresh)

    def screen(self, urls: Sequence[agent_pb2.UrlItem]) -> tuple[list[Item], list[str]]:
        """Seeds to be routed by this agent (PushUrls with route): the valid, in-scope items and
        the errors of the others."""
        self.counters["agent_rpcs"] += 1
        parsed, errs = parse_push(urls, self.sort_query)
        items = [it for _, it in parsed if self.scope.check(it.url, it.host, it.depth) is None]
        self.counters["out_of_scope"] += len(parsed) - len(items)
        return items, errs

    async def accept_push(self, epoch: int, urls: Sequence[agent_pb2.UrlItem]) -> IntakeResult:
        """PushUrls from a peer: keep the URLs of hosts this agent owns, answer "not mine" for the
        others, then wait for the commit so an acknowledged URL is durable."""
        self.counters["agent_rpcs"] += 1
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
            if self.scope.check(it.url, it.host, it.depth) is not None:
                self.counters["out_of_scope"] += 1
                continue
            accepted.append(it)
        self.accept_local(accepted)
        self.counters["pushed_in"] += len(accepted)
        self.counters["not_mine_sent"] += len(not_mine)
        await self.durable()
        return IntakeResult(len(accepted), not_mine, errs)
