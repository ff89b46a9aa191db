"""Intake: URLs of hosts this agent owns (pushed by peers or found here) to the seen set and frontier."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from agent.frontier import Item
from agent.router import UrlItem
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")


@dataclass
class IntakeResult:
    accepted: int
    not_mine: list[int]
    errors: list[str]


class Intake:
    """Part of AgentNode. PushUrls answers "not mine" only with an answer at least as new as
    the sender's epoch; an acknowledged URL is durable (it waits for the next commit)."""

    def _intake_local(self, items: list[UrlItem]) -> int:
        """Dedup through the seen set, queue the new ones; returns how many were new. Durable
        at the next commit (outbox rows of bounced URLs are released at the same time)."""
        by_host: dict[str, list[UrlItem]] = {}
        for it in items:
            by_host.setdefault(it.host, []).append(it)
        fresh: list[Item] = []
        for host, its in by_host.items():
            flags = self.seen.add_new(host, [i.url for i in its])
            fresh += [Item(i.url, host, i.depth, i.via) for i, new in zip(its, flags) if new]
            self.counters["duplicates"] += len(its) - sum(flags)
        self.outbox.delivered([i for i in items if i.seq])
        if fresh:
            self.frontier.add(fresh)
            for host in {i.host for i in fresh}:
                if host in self.host_ip:
                    self._wake_known(host)
                else:
                    self._background(self._wake_host(host))
        return len(fresh)

    def _background(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self.bg_tasks.add(t)
        t.add_done_callback(self.bg_tasks.discard)

    def _wake_known(self, host: str) -> None:
        if not self.politeness.tracks(host):
            # New to politeness (or forgotten while idle): its robots.txt Crawl-delay again.
            delay = self.robots.crawl_delay(host)
            if delay is not None:
                self.politeness.set_delay(host, delay)
        ip = self.host_ip.get(host)
        self.scheduler.wake(host, ip or "unresolved", self.frontier.ready_at(host) or 0.0)
        self.wakeup.set()

    async def _wake_host(self, host: str) -> None:
        if host not in self.host_ip:
            self.host_ip[host] = await self.resolver.resolve(host)
        self._wake_known(host)

    async def intake_push(self, epoch: int, urls: list[agent_pb2.UrlItem]) -> IntakeResult:
        """PushUrls: keep the URLs of hosts this agent owns, answer "not mine" for the others
        (only when it knows an answer at least as new as the sender's), then wait for the
        commit so an acknowledged URL is durable."""
        self.counters["agent_rpcs"] += 1
        self._saw_epoch(epoch)
        now = self.clock()
        parsed: list[tuple[int, UrlItem]] = []
        errs: list[str] = []
        for i, u in enumerate(urls):
            try:
                url = canonicalize(u.url, sort_query=self.s.sort_query)
                parsed.append((i, UrlItem(url, host_of_canonical(url), u.depth, u.via)))
            except InvalidUrl as exc:
                errs.append(f"{i}: {exc}")
        # One cache look-up per host; hosts without a fresh answer are resolved first.
        owns = {h: self.router.owns(h, now) for h in {it.host for _, it in parsed}}
        unknown = sorted(h for h, o in owns.items() if o is None)
        for i in range(0, len(unknown), self.s.routing.beta):
            answer = await self._consult(unknown[i : i + self.s.routing.beta])
            for r in answer[0] if answer else []:
                self.cache.put(r)
        for h in unknown:
            owns[h] = self.router.owns(h, self.clock(), count=False)
        accepted: list[UrlItem] = []
        not_mine: list[int] = []
        for i, it in parsed:
            if self.router.leaving or owns[it.host] is False:
                not_mine.append(i)
                continue
            # Owner, or the consultant cannot say now: keep it (the sender routed it here).
            reason = self.scope.check(it.url, it.host, it.depth)
            if reason is not None:
                self.counters["out_of_scope"] += 1
                continue
            accepted.append(it)
        self._intake_local(accepted)
        self.counters["pushed_in"] += len(accepted)
        self.counters["not_mine_sent"] += len(not_mine)
        await self.commit_barrier()
        return IntakeResult(len(accepted), not_mine, errs)
