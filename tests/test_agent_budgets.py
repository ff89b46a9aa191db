"""The hostile web against one agent with a fake fetcher: per-host budgets that drop a queue in one
operation and never stall other hosts, robots.txt 5xx deferred (not dropped), parked hosts that do
not hold the crawl open, and the parameter-churn guard."""

from __future__ import annotations

import asyncio
from collections import Counter

from agent.fetch import FetchRequest, FetchResponse
from agent.state.frontier import Item
from agent.node import AgentNode
from agent.settings import load_settings
from consultant.client import HostRoute, Registration


class Placement:
    """Every host is this agent's."""

    def __init__(self, me: str):
        self.me = me

    async def register(self, agent_id, address, **kw) -> Registration:
        return Registration(1, 60.0)

    async def heartbeat(self, agent_id, load) -> int:
        return 1

    async def deregister(self, agent_id) -> int:
        return 2

    async def resolve(self, hosts):
        return [HostRoute(h, ((self.me, ""),), 300, 1) for h in hosts]

    async def close(self) -> None:
        pass


class Web:
    """A fake fetcher: `pages(url)` -> (status, body, extra response fields); every request logged."""

    def __init__(self, pages):
        self.pages = pages
        self.log: list[str] = []

    async def fetch(self, req: FetchRequest) -> FetchResponse:
        self.log.append(req.url)
        await asyncio.sleep(0)
        status, body, extra = self.pages(req.url)
        return FetchResponse(req.url, status=status, body=body, content_type="text/html", raw_length=len(body),
                             headers=[("Content-Type", "text/html")], **extra)

    async def close(self) -> None:
        pass


class AnyName(dict):
    """A hosts table listing every name (at 127.0.0.1): the fake fetcher answers for all of them,
    and no look-up asks a DNS server (a name that does not resolve is given up unfetched)."""

    def get(self, key, default=None):  # type: ignore[no-untyped-def]
        return "127.0.0.1"


def node(tmp_path, web: Web, **keys) -> AgentNode:
    over = {"agent_id": "me", "data_dir": str(tmp_path / "me"), "storage_out.fsync": False, "politeness.delay": 0.0,
            "commit_interval": 0.02, "concurrency": 4, "progress_interval": 0.0, "heartbeat_interval": 5.0}
    over.update({k.replace("__", "."): v for k, v in keys.items()})
    n = AgentNode(load_settings(None, over), placement=Placement("me"), fetcher=web)  # type: ignore[arg-type]
    n.dispatcher.resolver.hosts = AnyName()
    return n


async def until(pred, what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def items(host: str, n: int, prefix: str = "p") -> list[Item]:
    return [Item(f"http://{host}/{prefix}{i}", host) for i in range(n)]


def ok(url: str):
    return (404, b"", {}) if url.endswith("/robots.txt") else (200, b"<html>x</html>", {})


def test_a_host_at_its_page_budget_is_dropped_at_once_and_blocks_nobody(tmp_path, run):
    web = Web(ok)
    n = node(tmp_path, web, scope__max_pages_per_host=3)

    async def go():
        await n.start()
        n.intake.accept_local(items("trap.lab", 5000) + items("fine.lab", 20))
        await until(n.idle, "the crawl to end")
        counters = n.status_counters()
        queued = n.frontier.queue_len("trap.lab")
        given_up = dict(n.dispatcher.given_up)
        await n.stop()
        return counters, queued, given_up

    counters, queued, given_up = run(go())
    fetched = Counter(u.split("/")[2] for u in web.log if not u.endswith("robots.txt"))
    assert fetched == {"trap.lab": 3, "fine.lab": 3}, "each host stops at its budget"
    assert queued == 0 and counters["budget_dropped"] == 4997 + 17
    assert set(given_up) == {"trap.lab", "fine.lab"} and "page budget" in given_up["trap.lab"]


def test_page_counts_survive_a_restart(tmp_path, run):
    web = Web(ok)

    async def crawl(urls):
        n = node(tmp_path, web, scope__max_pages_per_host=4)
        await n.start()
        n.intake.accept_local(urls)
        await until(n.idle, "the crawl to end")
        await n.stop()

    run(crawl(items("h.lab", 3)))
    run(crawl(items("h.lab", 10, prefix="q")))
    assert len([u for u in web.log if not u.endswith("robots.txt")]) == 4, "the budget counts pages of earlier runs"


def test_queue_budget_drops_without_recording_and_the_churn_guard_caps_a_query_shape(tmp_path, run):
    web = Web(ok)
    n = node(tmp_path, web, scope__max_queued_per_host=10, scope__max_urls_per_query_shape=5)
    n.intake.accept_local(items("q.lab", 50))
    assert n.frontier.queue_len("q.lab") == 10 and n.intake.stats.over_queue_budget == 40
    assert "http://q.lab/p10" not in n.seen, "a URL over the budget is not recorded: found again later, it is taken"
    n.intake.accept_local([Item(f"http://s.lab/a?sid={i}&x=1", "s.lab") for i in range(9)] + [Item("http://s.lab/b", "s.lab")])
    assert n.frontier.queue_len("s.lab") == 6 and n.intake.stats.query_churn == 4
    assert "http://s.lab/a?sid=8&x=1" not in n.seen, "a trap's URLs do not grow the seen set"


def test_robots_txt_5xx_defers_the_host_and_it_is_crawled_once_robots_recovers(tmp_path, run):
    robots_answers = iter([503, 503, 0])

    def pages(url):
        if url.endswith("/robots.txt"):
            status = next(robots_answers, 200)
            return (status, b"User-agent: *\nDisallow: /private\n" if status == 200 else b"",
                    {"error": "connect"} if status == 0 else {})
        return 200, b"<html>x</html>", {}

    web = Web(pages)
    n = node(tmp_path, web, robots__retry_base=0.1, politeness__max_backoff=0.02)

    async def go():
        await n.start()
        n.intake.accept_local(items("flaky.lab", 10) + [Item("http://flaky.lab/private/x", "flaky.lab")])
        await until(n.idle, "the crawl to end")
        c = n.status_counters()
        await n.stop()
        return c

    c = run(go())
    robots = [u for u in web.log if u.endswith("robots.txt")]
    got = {u for u in web.log if not u.endswith("robots.txt")}
    assert len(robots) == 4, "asked again, with backoff, until it answered"
    assert got == {f"http://flaky.lab/p{i}" for i in range(10)}, "nothing dropped while robots.txt failed"
    assert c["robots_deferred"] >= 1 and c["robots_denied"] == 1


def test_robots_txt_unreachable_for_too_long_gives_the_host_up_with_a_reason(tmp_path, run):
    web = Web(lambda url: (503, b"", {}) if url == "http://down.lab/robots.txt" else ok(url))
    n = node(tmp_path, web, robots__retry_base=0.02, robots__give_up_after=0.2, politeness__max_backoff=0.02)

    async def go():
        await n.start()
        n.intake.accept_local(items("down.lab", 30) + items("up.lab", 3))
        await until(n.idle, "the crawl to end")
        given_up = dict(n.dispatcher.given_up)
        await n.stop()
        return given_up

    given_up = run(go())
    assert list(given_up) == ["http://down.lab"] and "robots.txt unreachable" in given_up["http://down.lab"]
    assert not [u for u in web.log if "down.lab" in u and not u.endswith("robots.txt")]
    assert {u for u in web.log if "up.lab" in u and not u.endswith("robots.txt")} == {f"http://up.lab/p{i}" for i in range(3)}


def test_a_host_parked_by_retry_after_does_not_hold_the_crawl_open(tmp_path, run):
    def pages(url):
        if url.endswith("/robots.txt"):
            return 404, b"", {}
        if "slow.lab" in url:
            return 429, b"", {"retry_after": 3600.0}
        return 200, b"x", {}

    web = Web(pages)
    n = node(tmp_path, web)

    async def go():
        await n.start()
        n.intake.accept_local(items("slow.lab", 2) + items("fast.lab", 5))
        await until(n.idle, "idle with only a parked host left")
        now = n.clock()
        parked = n.dispatcher.parked(now)
        queued = len(n.frontier)
        await n.stop()
        return parked, queued, now

    parked, queued, now = run(go())
    assert queued == 2, "the parked host keeps its URLs"
    assert [p.host for p in parked] == ["slow.lab"] and parked[0].until > now + 3000


def test_refused_urls_never_starve_the_loop(tmp_path, run):
    """A host whose every URL is refused by robots.txt: heartbeats-like work on the loop still runs."""
    def pages(url):
        if url.endswith("/robots.txt"):
            return 200, b"User-agent: *\nDisallow: /\n", {}
        return 200, b"x", {}

    web = Web(pages)
    n = node(tmp_path, web, scope__max_queued_per_host=None)

    async def go():
        await n.start()
        n.intake.accept_local(items("denied.lab", 20_000))
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        await until(lambda: n.status_counters()["robots_denied"] >= 5_000, "denials")
        seen_ticks = ticks
        t.cancel()
        await until(n.idle, "the crawl to end", timeout=60)
        await n.stop()
        return seen_ticks

    assert run(go()) >= 5_000 // 256, "the dispatcher yields between batches of refused items"


def test_an_origin_refusing_connections_does_not_hold_back_the_hosts_other_origin(tmp_path, run):
    def pages(url):
        if url.startswith("https://"):
            return 0, b"", {"error": "connect"}
        return ok(url)

    web = Web(pages)
    n = node(tmp_path, web, politeness__max_backoff=3600.0)
    http = [Item(f"http://two.lab:8181/p{i}", "two.lab") for i in range(10)]
    https = [Item(f"https://two.lab/s{i}", "two.lab") for i in range(10)]

    async def go():
        await n.start()
        n.intake.accept_local([x for pair in zip(https, http) for x in pair])  # interleaved, https first
        await until(lambda: {i.url for i in http} <= set(web.log), "every http page")
        backoff = n.dispatcher.politeness.backoff_state("two.lab")
        await n.stop()
        return backoff

    assert run(go()) == (0.0, 0), "the host's rate was not backed off by its https origin's failures"
    assert len([u for u in web.log if u.startswith("https://")]) < 10, "the refusing origin waits (its robots.txt retry, its backoff)"


def test_a_host_whose_robots_txt_stays_unreachable_counts_as_parked(tmp_path, run):
    """Its robots.txt retries back off for many minutes before passing the park horizon; after
    robots.park_after of failures the host is parked (the crawl can end), its URLs kept."""
    web = Web(lambda url: (503, b"", {}) if url == "http://down.lab/robots.txt" else ok(url))
    n = node(tmp_path, web, robots__retry_base=0.05, robots__park_after=1.5, politeness__max_backoff=0.05)

    async def go():
        await n.start()
        n.intake.accept_local(items("down.lab", 5) + items("up.lab", 3))
        await until(lambda: n.dispatcher.stats["robots"].robots_fetches >= 1 and n.dispatcher.stats["outcome"].pages >= 3, "a first try")
        early = n.idle()
        await until(n.idle, "idle with only the robots-failing host left")
        parked = [p.host for p in n.dispatcher.parked(n.clock())]
        queued = len(n.frontier)
        await n.stop()
        return early, parked, queued

    early, parked, queued = run(go())
    assert not early, "not parked before robots.park_after"
    assert parked == ["http://down.lab"] and queued == 5, "the origin is parked (RFC 9309: robots.txt is per origin)"


def test_a_registered_domain_is_held_to_its_page_budget_across_its_hosts_and_restarts(tmp_path, run):
    # Issue 25: budgets per host only let a site of many subdomains fetch max_pages_per_host on each.
    web = Web(ok)

    async def crawl(urls):
        n = node(tmp_path, web, scope__max_pages_per_domain=6, concurrency=1)
        await n.start()
        n.intake.accept_local(urls)
        await until(n.idle, "the crawl to end")
        given_up = dict(n.dispatcher.given_up)
        await n.stop()
        return given_up

    given_up = run(crawl([it for k in range(4) for it in items(f"u{k}.flood.co.uk", 3)] + items("other.co.uk", 8)))
    fetched = Counter(u.split("/")[2] for u in web.log if not u.endswith("robots.txt"))
    assert sum(n for h, n in fetched.items() if h.endswith(".flood.co.uk")) == 6, "the domain stops at its budget"
    assert fetched["other.co.uk"] == 6, "another registered domain under the same public suffix has its own"
    assert any("domain page budget" in why for why in given_up.values())
    run(crawl(items("u9.flood.co.uk", 3)))
    assert not [u for u in web.log if u.startswith("http://u9.") and not u.endswith("robots.txt")], "counts survive a restart"


def test_a_domain_with_its_hosts_budget_refuses_new_hosts(tmp_path, run):
    n = node(tmp_path, Web(ok), scope__max_hosts_per_domain=3)
    n.intake.accept_local([it for k in range(10) for it in items(f"n{k}.flood.lab", 2)] + items("www.other.lab", 2))
    assert sorted(h for h in (f"n{k}.flood.lab" for k in range(10)) if n.frontier.holds(h)) == ["n0.flood.lab", "n1.flood.lab", "n2.flood.lab"]
    assert n.frontier.holds("www.other.lab") and n.intake.stats.over_domain_hosts == 14
    n.intake.accept_local(items("n1.flood.lab", 3, prefix="q"))  # a host it has takes more URLs
    assert n.frontier.queue_len("n1.flood.lab") == 5


def test_a_promoted_replica_is_taken_whole_over_the_domain_budgets_and_a_spent_budget_gives_up_visibly(tmp_path, run):
    """Budgets per registered domain refuse hosts new here at intake; a host a promoted replica
    (or a handover) brings in is this agent's already and is taken whole, even when its domain
    is at max_hosts_per_domain: its URLs are fetched. Only a domain page budget that is truly
    spent drops URLs, and then as a give-up with its reason and counts, never silently."""
    from agent.crawl.dispatcher import HostCrawlState
    from agent.ownership.ledger import HostState
    from agent.state.seen import fingerprint

    web = Web(ok)
    n = node(tmp_path, web, scope__max_hosts_per_domain=3, scope__max_pages_per_domain=12, concurrency=1)
    n.intake.accept_local([it for k in range(3) for it in items(f"n{k}.flood.lab", 2)])  # the domain's 3 hosts
    promoted = items("n7.flood.lab", 4)
    done_there = "http://n7.flood.lab/fetched-by-the-dead-owner"
    n.ledger.merge(HostState("n7.flood.lab", promoted, [fingerprint(i.url) for i in promoted] + [fingerprint(done_there)],
                             HostCrawlState(None, 0.0, 0, [], 3)))
    assert n.frontier.queue_len("n7.flood.lab") == 4 and n.intake.stats.over_domain_hosts == 0
    n.intake.accept_local(items("n7.flood.lab", 2, prefix="more") + items("n8.flood.lab", 2))
    assert n.frontier.queue_len("n7.flood.lab") == 6, "a host held here takes more URLs"
    assert not n.frontier.holds("n8.flood.lab") and n.intake.stats.over_domain_hosts == 2
    assert n.incidents.counts["domain_hosts"] == 2, "the refusal is counted by reason"

    async def go():
        await n.start()
        await until(n.idle, "the crawl to end")
        given_up = dict(n.dispatcher.given_up)
        c = n.status_counters()
        await n.stop()
        return given_up, c

    given_up, c = run(go())
    fetched = [u for u in web.log if not u.endswith("robots.txt")]
    queued = [i.url for k in range(3) for i in items(f"n{k}.flood.lab", 2)] + [i.url for i in promoted] + \
        [i.url for i in items("n7.flood.lab", 2, prefix="more")]
    # The budget of 12 less the 3 pages the replica brought: 9 fetched, one at a time (concurrency 1).
    assert len(fetched) == 9 and set(fetched) <= set(queued) and len(set(fetched)) == 9
    left = {u.split("/")[2] for u in set(queued) - set(fetched)}
    assert left and all("domain page budget" in given_up.get(h, "") for h in left), given_up
    assert c["budget_dropped"] == len(queued) - 9, "every URL not fetched is counted as dropped"
    assert n.incidents.counts["domain_page_budget"] >= 1
