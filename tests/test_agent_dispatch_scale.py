"""The dispatcher over a long crawl (issue 24 item 3): fetches that end together are processed
over several loop passes (the pass budget), and no per-URL state is kept after its URL is done."""

from __future__ import annotations

import asyncio

from agent.crawl import page as page_steps
from agent.crawl.dispatcher import Dispatcher
from agent.crawl.scope import Scope
from agent.fetch import FetchResponse
from agent.settings import ScopeSettings, load_settings
from agent.state.frontier import Frontier, Item
from agent.waker import HostSignal
from wancrawl.runtime.looplag import PassBudget
from wancrawl.stats import StatsRegistry

from test_looplag import _Passes


def _page(url: str, links: list[str]) -> FetchResponse:
    body = ("<html><body>" + "".join(f'<a href="{u}">x</a>' for u in links) + "</body></html>").encode()
    return FetchResponse(url, status=200, reason="OK", http_version="HTTP/1.1", headers=[("Content-Type", "text/html")],
                         body=body, raw_length=len(body), content_type="text/html", started_at=1.0, ended_at=1.0)


class _Resolver:
    """A host of its own IP each (h<i>.test -> 127.0.1.<i>): the per-IP cap (politeness.max_per_ip)
    must not be what spreads the pages over passes."""

    async def resolve(self, host):
        digits = "".join(c for c in host if c.isdigit())
        return f"127.0.1.{int(digits or 0) % 250 + 1}"

    def failure(self, host):
        return None

    def fresh(self, host):
        return True  # never expires: the dispatcher re-resolves nothing


def _dispatcher(tmp_path, fetcher, *, route, finish, budget: PassBudget | None = None,
                epoch=None) -> tuple[Dispatcher, Frontier, HostSignal]:
    settings = load_settings(None, {"agent_id": "me", "data_dir": str(tmp_path), "concurrency": 64,
                                    "politeness.delay": 0.0, "robots.enabled": False, "progress_interval": 0.0})
    frontier = Frontier(tmp_path / "f.sqlite")
    signal = HostSignal()
    d = Dispatcher(settings, frontier, fetcher, _Resolver(), Scope(ScopeSettings()), signal,  # type: ignore[arg-type]
                   route=route, finish=finish, clock=lambda: 1000.0, pass_budget=budget, epoch=epoch)
    return d, frontier, signal


def test_fetches_that_end_together_are_processed_over_several_passes(tmp_path):
    """64 fetches whose responses come back in the same pass (a zero-latency web): without the
    budget all 64 pages are parsed and recorded in that one pass (bench/scale.py's 220 ms stall)."""
    hosts = [f"h{i}.test" for i in range(64)]

    class Fetcher:
        def __init__(self) -> None:
            self.release = asyncio.Event()
            self.waiting = 0

        async def fetch(self, req):
            self.waiting += 1
            await self.release.wait()
            return _page(req.url, [f"/next-{req.host}"])

    now = [0.0]  # the budget's clock: each page finished takes 5 ms of it
    passes = _Passes()
    finished: list[int] = []
    routed: list[str] = []

    def finish(item, cap) -> None:
        finished.append(passes.n)
        now[0] += 0.005

    fetcher = Fetcher()
    d, frontier, signal = _dispatcher(tmp_path, fetcher, route=lambda items: routed.extend(i.url for i in items),
                                      finish=finish, budget=PassBudget(0.019, clock=lambda: now[0]))
    frontier.add([Item(f"http://{h}/", h, 0, "") for h in hosts])

    async def main() -> None:
        loop = asyncio.create_task(d.run())
        for h in hosts:
            signal.wake(h)
        while fetcher.waiting < len(hosts):
            await asyncio.sleep(0)
        fetcher.release.set()  # every response at once
        while len(finished) < len(hosts):
            await asyncio.sleep(0)
        d.stopping = True
        signal.poke()
        await loop

    passes.run(main())
    per_pass: dict[int, int] = {}
    for p in finished:
        per_pass[p] = per_pass.get(p, 0) + 1
    assert sum(per_pass.values()) == 64 and len(routed) == 64, "every page finished and its link routed"
    assert max(per_pass.values()) <= 4, per_pass


def test_redirect_hop_counts_end_with_their_chain_and_stay_bounded(tmp_path, monkeypatch):
    """Each /r<i> redirects to /t<i>, a page. A hop count is kept for each redirect target while
    its chain goes on; once the target is fetched as a page, or when the target is another
    agent's (routed away, never fetched here), nothing may stay: a million-page crawl with a
    redirect every few pages grew this dict without end."""
    monkeypatch.setattr(page_steps, "REDIRECT_HOPS_KEPT", 8)
    host = "r.test"

    class Fetcher:
        async def fetch(self, req):
            path = req.url.split(host, 1)[1]
            if path.startswith("/r"):
                return FetchResponse(req.url, status=302, reason="Found", http_version="HTTP/1.1",
                                     headers=[("Location", "/t" + path[2:])], location="/t" + path[2:],
                                     started_at=1.0, ended_at=1.0)
            return _page(req.url, [])

    done: list[str] = []
    d: Dispatcher
    frontier: Frontier
    n = 20
    keep_here = set(range(0, n, 2))  # the other targets are routed to another agent

    def route(items: list[Item]) -> None:
        mine = [i for i in items if int(i.url.rsplit("/t", 1)[1]) in keep_here]
        frontier.add(mine)
        signal.wake(host)

    d, frontier, signal = _dispatcher(tmp_path, Fetcher(), route=route, finish=lambda item, cap: done.append(item.url) if item else None)
    frontier.add([Item(f"http://{host}/r{i}", host, 0, "") for i in range(n)])

    async def main() -> None:
        loop = asyncio.create_task(d.run())
        signal.wake(host)
        while len(done) < n + len(keep_here):
            await asyncio.sleep(0.001)
        d.stopping = True
        signal.poke()
        await loop

    asyncio.run(main())
    assert sorted(u for u in done if "/t" in u) == sorted(f"http://{host}/t{i}" for i in keep_here)
    fetched_targets = {f"http://{host}/t{i}" for i in keep_here}
    assert not fetched_targets & set(d.page.redirect.hops), "a target fetched as a page keeps its hop count"
    assert len(d.page.redirect.hops) <= 8, f"{len(d.page.redirect.hops)} hop counts kept (at most 8)"


def test_a_url_routed_before_an_epoch_change_is_routed_again_when_found_again(tmp_path):
    """Issue 23, kill2 with balancing on (docs/balance.md, "Stored twice after a move at a
    death"): an agent routed a URL to its host's owner (the push acknowledged while one backup
    lagged); the owner died, the URL in no surviving replica. The agent that promoted the lagging
    replica found the URL again on 16 pages and routed it none of those times: its filter of URLs
    routed lately skipped it, and the URL was lost. Found again within one epoch it is skipped
    (the owner has it); after an epoch change it is routed again (the owner's seen set drops it
    if it has it)."""
    epoch = [7]
    routed: list[str] = []
    done: list[str] = []

    class Fetcher:
        async def fetch(self, req):
            return _page(req.url, ["http://other.test/x"])

    d, frontier, signal = _dispatcher(tmp_path, Fetcher(), route=lambda items: routed.extend(i.url for i in items),
                                      finish=lambda item, cap: done.append(item.url), epoch=lambda: epoch[0])

    async def main() -> None:
        loop = asyncio.create_task(d.run())
        for i, page in enumerate(("a", "b", "c")):
            if page == "c":
                epoch[0] += 1  # a death, a join, a balance move: owners changed
            frontier.add([Item(f"http://h.test/{page}", "h.test", 1, "")])
            signal.wake("h.test")
            while len(done) < i + 1:
                await asyncio.sleep(0.01)
        d.stopping = True
        signal.poke()
        await loop

    asyncio.run(main())
    assert done == ["http://h.test/a", "http://h.test/b", "http://h.test/c"]
    assert routed.count("http://other.test/x") == 2, "skipped on b (same epoch), routed again on c"


# The dispatcher's counters as they were named in its one dict before issue 34 split it: every
# status, Prometheus and chaos reader knows them by these names.
NAMES = {
    "fetches", "pages", "bytes", "errors", "request_errors", "robots_fetches", "robots_denied", "out_of_scope", "dropped_schemes", "invalid_urls",
    "redirects", "not_html", "truncated", "retries", "given_up", "recent_skips", "budget_dropped", "hosts_given_up",
    "robots_deferred", "robots_given_up", "links_over_cap", "nofollow_skipped", "noindex_pages", "fenced_results",
    "hosts_dns_failed", "origins_given_up", "revisits", "revisits_changed", "revisits_unchanged", "not_modified",
    "not_modified_bytes", "sitemaps", "sitemap_urls", "sitemap_refused", "sitemap_errors", "sitemaps_skipped",
    "parse_waits", "parse_pieces", "parse_pieces_skipped",
}


def test_the_parts_count_under_todays_names_and_register_once(tmp_path):
    """The typed parts carry exactly the old names; a name two parts count (out_of_scope,
    invalid_urls, dropped_schemes) is declared shared by each, so one registry sums them."""
    d, _, _ = _dispatcher(tmp_path, None, route=lambda items: None, finish=lambda item, cap: None)
    owners: dict[str, list[str]] = {}
    for part, counters in d.stats.items():
        for name, value in counters.items():
            assert value == 0
            owners.setdefault(name, []).append(part)
    assert set(owners) == NAMES
    assert {n for n, parts in owners.items() if len(parts) > 1} == {"out_of_scope", "invalid_urls", "dropped_schemes"}
    registry = StatsRegistry()
    registry.register("dispatch", d.stats)
    d.stats["links"].out_of_scope += 2  # type: ignore[attr-defined]
    d.stats["redirect"].out_of_scope += 1  # type: ignore[attr-defined]
    assert registry.snapshot()["out_of_scope"] == 3 and registry.counter_names() == NAMES
