"""Origins (issue 25): robots.txt, backoff, parking and give-ups per origin (scheme, host, port),
politeness per host and per IP, DNS failures given up quickly.

* A property test over the frontier and the scheduler: for any mix of origins, outcomes and
  times, once the dispatcher's loop has picked all it can, no queued URL is fetchable now, and
  every URL it picked was fetchable when picked (fetchable: its host and IP allow a start, its
  origin is not waiting). The model is written here from those rules, not from the code.
* The real-docs finding in small: one host served on loopback with a live http origin and a
  closed https origin, its pages linking absolutely to both; every live page is fetched before
  the agent counts as finished, and the closed origin is listed as parked with its reason.
* Names that do not resolve are given up at once with the DNS reason and counted.
"""

from __future__ import annotations

import asyncio
import http.server
import random
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.crawl.politeness import Politeness, Scheduler
from agent.node import AgentNode
from agent.settings import load_settings
from agent.state.frontier import Frontier, Item, origin_of
from wancrawl import hostres

from test_agent_budgets import AnyName, Placement, until

HOSTS = ("a.test", "b.test", "c.test")
IP_OF = {"a.test": "ip0", "b.test": "ip0", "c.test": "ip1"}  # a and b share a server
ORIGINS = ("http://{h}", "https://{h}", "http://{h}:8181")

op_st = st.lists(
    st.one_of(
        # queue URLs: host, origin, depths
        st.tuples(st.just("add"), st.integers(0, 2), st.integers(0, 2), st.lists(st.integers(0, 3), min_size=1, max_size=5)),
        # an origin made to wait (robots.txt unreachable, transport backoff) or let go (0)
        st.tuples(st.just("wait"), st.integers(0, 2), st.integers(0, 2), st.sampled_from([0.0, 0.5, 3.0, 60.0, 1e9])),
        # a fetch in flight ends: which, and how
        st.tuples(st.just("end"), st.integers(0, 20), st.sampled_from(["ok", "ok", "transport", "429", "503", "retry"])),
        st.tuples(st.just("time"), st.sampled_from([0.0, 0.25, 1.0, 2.0, 10.0, 100.0])),
    ),
    max_size=60,
)


@settings(max_examples=250, deadline=None)
@given(op_st)
def test_whenever_a_queued_url_is_fetchable_one_fetchable_url_is_picked(tmp_path_factory, ops):
    f = Frontier(tmp_path_factory.mktemp("fr") / "f.db", hot_per_host=2, max_hot_items=6)
    pol = Politeness(1.0, max_per_host=1, max_per_ip=2, ip_delay=0.5, max_backoff=30.0, rng=random.Random(0))
    sched = Scheduler(pol)
    wait: dict[str, float] = {}  # origin -> absolute time it may be fetched
    now = 1000.0
    in_flight: list[Item] = []
    queued: dict[str, Item] = {}  # url -> item (the model's queue)
    n = 0

    def wait_of(origin: str) -> float:
        return wait.get(origin, 0.0)

    def schedule(host: str) -> None:  # the dispatcher's _schedule
        ready = f.ready_at(host, wait_of)
        if ready is not None:
            sched.wake(host, IP_OF[host], ready)

    def fetchable(it: Item) -> bool:
        return wait_of(origin_of(it.url)) <= now and pol.ready(it.host, IP_OF[it.host], now) and it.not_before <= now

    def dispatch() -> None:
        """The dispatcher's loop (Dispatcher.run/_start) until it picks nothing."""
        for _ in range(500):
            host = sched.pop_ready(now)
            if host is None:
                return
            ip = IP_OF[host]
            it = f.pop(host, now, wait_of)
            if it is None:
                ready = f.ready_at(host, wait_of)
                if ready is None:
                    sched.remove(host)
                else:
                    assert ready > now, "a host popped for nothing would be popped again and again"
                    sched.wake(host, ip, ready)
                continue
            assert fetchable(it), f"picked {it.url}, which may not be fetched now"
            del queued[it.url]
            sched.started(host, ip, now)
            in_flight.append(it)
            schedule(host)
        raise AssertionError("the loop never ran out of picks")

    for op in ops:
        if op[0] == "add":
            host = HOSTS[op[1]]
            items = []
            for d in op[3]:
                n += 1
                items.append(Item(f"{ORIGINS[op[2]].format(h=host)}/{n}", host, d))
            f.add(items)
            queued.update((it.url, it) for it in items)
            schedule(host)
        elif op[0] == "wait":
            host = HOSTS[op[1]]
            wait[ORIGINS[op[2]].format(h=host)] = now + op[3] if op[3] else 0.0
            schedule(host)  # origin waits change on an event of their host, which reschedules it
        elif op[0] == "end" and in_flight:
            it = in_flight.pop(op[1] % len(in_flight))
            ip = IP_OF[it.host]
            outcome = op[2]
            if outcome == "ok":
                f.done(it)
                sched.finished(it.host, ip, now, 200, has_work=f.has_work(it.host))
            else:
                f.retry(it)
                queued[it.url] = it
                status = {"transport": 0, "429": 429, "503": 503, "retry": 200}[outcome]
                if outcome == "transport":
                    wait[origin_of(it.url)] = now + 5.0
                sched.finished(it.host, ip, now, status, 7.0 if status == 429 else None, has_work=True)
                schedule(it.host)
        elif op[0] == "time":
            now += op[1]
        dispatch()
        left = [u for u, it in queued.items() if fetchable(it)]
        assert not left, f"fetchable now but not picked: {left}"
        assert len(f) == len(queued)


# --- one host, a live http origin and a closed https origin ---------------------------------------

PAGES = 30


class _Site(http.server.BaseHTTPRequestHandler):
    netloc = ""
    log: list[str]

    def do_GET(self) -> None:
        self.log.append(self.path)
        if self.path == "/robots.txt":
            self.send_error(404)
            return
        host = self.netloc.split(":")[0]
        # Every page links to the next pages on both origins, absolutely (as real docs do).
        i = int(self.path.strip("/p") or 0) if self.path.startswith("/p") or self.path == "/" else None
        if i is None:
            self.send_error(404)
            return
        links = "".join(f'<a href="http://{self.netloc}/p{j}">p{j}</a> <a href="https://{host}/p{j}">tls</a>\n'
                        for j in (2 * i + 1, 2 * i + 2) if j < PAGES)
        body = f"<html><body>{links}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _closed(ip: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((ip, port)) != 0


def _node(tmp_path, hosts: dict[str, str], **keys) -> AgentNode:
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("".join(f"{ip} {h}\n" for h, ip in hosts.items()))
    over = {"agent_id": "me", "data_dir": str(tmp_path / "me"), "storage_out.fsync": False, "commit_interval": 0.02,
            "concurrency": 8, "progress_interval": 0.0, "heartbeat_interval": 5.0, "hosts_file": str(hosts_file),
            "system_dns": False, "fetch.allow_networks": ["127.0.0.0/8"], "fetch.connect_timeout": 2.0}
    over.update({k.replace("__", "."): v for k, v in keys.items()})
    return AgentNode(load_settings(None, over), placement=Placement("me"))  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_a_closed_https_origin_never_holds_back_the_live_http_origin_and_the_crawl_ends_after_it(tmp_path, run):
    ip, host = "127.0.78.1", "docs.origins.test"
    if not _closed(ip, 443):
        pytest.skip(f"something listens on {ip}:443")
    log: list[str] = []
    handler = type("H", (_Site,), {"log": log})
    srv = http.server.ThreadingHTTPServer((ip, 0), handler)
    port = srv.server_address[1]
    handler.netloc = f"{host}:{port}"
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    # The https origin's robots.txt is refused from the first try: after park_after (0.3 s here,
    # far less than the live origin's ~1.5 s of pages at 0.05 s each) it counts as parked. Before
    # origins had their own lanes, the whole host was parked then and the agent went idle with
    # the live origin's pages unfetched.
    n = _node(tmp_path, {host: ip}, politeness__delay=0.05, robots__retry_base=0.2, robots__park_after=0.3)
    live = {f"/p{j}" for j in range(1, PAGES)} | {"/"}

    async def go():
        await n.start()
        n.intake.accept_local([Item(f"https://{host}/", host), Item(f"http://{host}:{port}/", host)])
        await until(lambda: n.dispatcher.stats["robots"].robots_fetches >= 1, "a first robots.txt")
        await until(n.idle, "the crawl to finish", timeout=40)
        fetched_at_idle = set(log) - {"/robots.txt"}
        parked = n.dispatcher.parked(n.clock())
        queued = len(n.frontier)
        await n.stop()
        return fetched_at_idle, parked, queued

    try:
        fetched, parked, queued = run(go())
    finally:
        srv.shutdown()
        srv.server_close()
    assert fetched == live, f"live pages missing when the agent said it was finished: {sorted(live - fetched)}"
    assert [p.host for p in parked] == [f"https://{host}"] and "robots.txt unreachable" in parked[0].reason
    assert queued == PAGES, "the closed origin's URLs are kept (parked, not dropped)"


# --- DNS -----------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_names_that_do_not_resolve_are_given_up_at_once_in_parallel_with_no_fetch(tmp_path, run):
    """Issue 37's hostile probe in small: 300 names that do not exist, at the default politeness
    delay (1 s: a per-IP delay of 0.25 s). They were each given a turn in one shared politeness
    bucket ("unresolved") and a robots.txt fetch that failed on DNS: 4 a second, 75 s for these.
    Now each is given up as its look-up answers, all in parallel, with no fetch."""
    names = [f"gone{i}.nowhere.test" for i in range(300)]
    n = _node(tmp_path, {"live.test": "127.0.78.9"}, politeness__delay=1.0)

    async def go():
        await n.start()
        n.intake.accept_local([Item(f"http://{h}/p{j}", h) for h in names for j in range(3)])
        await until(lambda: n.dispatcher.hosts.stats.hosts_dns_failed == len(names), "every name given up", timeout=20)
        c = n.status_counters()
        given_up = dict(n.dispatcher.given_up)
        queued = len(n.frontier)
        await n.stop()
        return c, given_up, queued

    c, given_up, queued = run(go())
    assert set(given_up) == set(names) and all(r.startswith("DNS:") for r in given_up.values()), given_up
    assert c["hosts_dns_failed"] == len(names) and queued == 0
    assert c["fetches"] == 0, "given up on the look-up's answer: no robots.txt fetch to learn it"
    assert c["robots_deferred"] == 0, "not retried as 'robots.txt unreachable'"


def test_the_resolver_tells_a_missing_name_from_a_temporary_failure(run, monkeypatch):
    answers = {"gone.test": socket.EAI_NONAME, "flaky.test": socket.EAI_AGAIN}

    async def fake_getaddrinfo(self, host, *a, **kw):
        raise socket.gaierror(answers[host], "fake")

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", fake_getaddrinfo)
    r = hostres.HostResolver({"here.test": "127.0.0.5"})

    async def go():
        return [await r.resolve(h) for h in ("gone.test", "flaky.test", "here.test")]

    assert run(go()) == [None, None, "127.0.0.5"]
    assert r.failure("gone.test") == hostres.NXDOMAIN and r.failure("flaky.test") == hostres.TEMPORARY
    assert r.failure("here.test") is None
    assert hostres.HostResolver({}, system_dns=False).failure("x.test") == hostres.NOT_LISTED


def _answer(url: str):
    """The fake fetchers' answer: robots.txt 404, any other URL a one-byte page."""
    from agent.fetch import FetchResponse

    status = 404 if url.endswith("/robots.txt") else 200
    return FetchResponse(url, status=status, body=b"x", content_type="text/html", raw_length=1,
                         headers=[("Content-Type", "text/html")])


def _fake_fetcher_node(tmp_path, fetcher, **keys) -> AgentNode:
    over = {"agent_id": "me", "data_dir": str(tmp_path / "me"), "storage_out.fsync": False, "commit_interval": 0.02,
            "progress_interval": 0.0, "heartbeat_interval": 5.0, **keys}
    return AgentNode(load_settings(None, over), placement=Placement("me"), fetcher=fetcher)  # type: ignore[arg-type]


def test_a_retry_of_a_dead_origins_robots_txt_does_not_take_the_hosts_slot(tmp_path, run):
    """The dead origin's second robots.txt try hangs (as a connect timeout would) until the live
    origin has fetched five more pages: were the try holding the host's one slot, none could."""
    from agent.fetch import FetchResponse

    log: list[str] = []
    tries = 0
    live_after_probe: list[str] = []
    during_probe: list[int] = []

    class Fetcher:
        async def fetch(self, req):
            nonlocal tries
            log.append(req.url)
            if req.url.startswith("https://"):
                tries += req.url.endswith("/robots.txt")
                if tries == 2:  # the probe: no answer until the live origin got on without it (or 5 s)
                    try:
                        await until(lambda: len(live_after_probe) >= 5, "live pages during the probe", timeout=5)
                    except AssertionError:
                        pass
                    during_probe.append(len(live_after_probe))
                return FetchResponse(req.url, error="connect")
            if tries >= 2 and not req.url.endswith("/robots.txt"):
                live_after_probe.append(req.url)
            return _answer(req.url)

        async def close(self):
            pass

    n = _fake_fetcher_node(tmp_path, Fetcher(), **{"politeness.delay": 0.02, "concurrency": 4, "robots.retry_base": 0.05})
    n.dispatcher.resolver.hosts = AnyName()

    async def go():
        await n.start()
        n.intake.accept_local([Item("https://two.test/s", "two.test")]
                              + [Item(f"http://two.test:8181/p{i}", "two.test") for i in range(40)])
        await until(lambda: during_probe, "the probe's end")
        await n.stop()

    run(go())
    assert during_probe[0] >= 5, "the live origin waited for the dead origin's robots.txt retry"


def test_the_per_ip_delay_is_on_by_default_and_holds_a_flood_of_names_on_one_ip(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _node(tmp_path / "a", {}).dispatcher.politeness.ip_delay == 0.25, "on by default"
    assert _node(tmp_path / "b", {}, politeness__delay=0.05).dispatcher.politeness.ip_delay == 0.05, "never above delay"
    # 2,000 generated names on one server, each with work, each fetch taking 10 ms: the server
    # sees one start per ip_delay, not one per name (before: up to max_per_ip at once, no delay).
    pol = Politeness(1.0, max_per_host=1, max_per_ip=4, ip_delay=0.25)
    sched = Scheduler(pol)
    for k in range(2000):
        sched.wake(f"n{k}.flood.test", "10.0.0.1")
    now, starts, ends = 0.0, [], []
    while now < 10.0:
        host = sched.pop_ready(now)
        if host is not None:
            sched.started(host, "10.0.0.1", now)
            starts.append(now)
            ends.append((now + 0.01, host))
            continue
        nxt = min([t for t, _ in ends] + [sched.next_wakeup(now) or 1e9])
        now = nxt
        for t, h in [e for e in ends if e[0] <= now]:
            ends.remove((t, h))
            sched.finished(h, "10.0.0.1", t, 200, has_work=True)
    assert 38 <= len(starts) <= 41 and min(b - a for a, b in zip(starts, starts[1:])) >= 0.25


def test_an_origin_that_stops_answering_is_given_up_on_its_own_budget(tmp_path, run):
    """robots.txt answered, then every page request of the https origin fails without an answer:
    after politeness.origin_give_up_after the origin is given up (its URLs dropped with the
    reason) and the crawl ends; the http origin of the same host is crawled whole."""
    from test_agent_budgets import Web, node

    def pages(url):
        if url.endswith("/robots.txt"):
            return 404, b"", {}
        if url.startswith("https://"):
            return 0, b"", {"error": "connect"}
        return 200, b"<html>x</html>", {}

    web = Web(pages)
    n = node(tmp_path, web, politeness__origin_give_up_after=0.3, politeness__max_backoff=0.1,
             politeness__max_retries=100)
    https = [Item(f"https://dark.test/s{i}", "dark.test") for i in range(30)]
    http = [Item(f"http://dark.test:8181/p{i}", "dark.test") for i in range(10)]

    async def go():
        await n.start()
        n.intake.accept_local(https + http)
        await until(n.idle, "the crawl to end")
        given_up, c, queued = dict(n.dispatcher.given_up), n.status_counters(), len(n.frontier)
        await n.stop()
        return given_up, c, queued

    given_up, c, queued = run(go())
    assert list(given_up) == ["https://dark.test"] and given_up["https://dark.test"].startswith("no answer for")
    assert c["origins_given_up"] == 1 and queued == 0
    assert {i.url for i in http} <= set(web.log)
    assert len([u for u in web.log if u.startswith("https://") and not u.endswith("robots.txt")]) < 30


def test_an_address_past_its_ttl_is_looked_up_again_and_the_new_one_fetched(tmp_path, run):
    """DNS answers live their TTL in the agent too (issue 37): the host's address, looked up when
    it came, is asked again once the resolver's cache lets it go (an injected clock past the
    TTL, no sleep), in the background, and the fetches after the answer dial the new address."""
    from wancrawl.dns.answers import Lookup

    now = [0.0]
    answers = {"moved.test": Lookup("127.0.0.21", 30)}
    dialed: list[str] = []

    class Backend:
        async def lookup(self, host):
            return answers[host]

        async def close(self):
            pass

    class Fetcher:
        async def fetch(self, req):
            dialed.append(req.ip)
            if len(dialed) == 5:  # the server moves and its old answer's TTL passes
                answers["moved.test"] = Lookup("127.0.0.22", 30)
                now[0] += 31
            return _answer(req.url)

        async def close(self):
            pass

    n = _fake_fetcher_node(tmp_path, Fetcher(), **{"politeness.delay": 0.0, "concurrency": 1})
    r = n.dispatcher.resolver
    r.backend, r.clock, r.cache.min_ttl = Backend(), (lambda: now[0]), 0.0

    async def go():
        await n.start()
        n.intake.accept_local([Item(f"http://moved.test/p{i}", "moved.test") for i in range(30)])
        await until(n.idle, "the crawl to finish")
        await n.stop()

    run(go())
    assert dialed[0] == "127.0.0.21" and dialed[-1] == "127.0.0.22", dialed
    assert dialed.index("127.0.0.22") > 4 and r.lookups == 2
    assert n.dispatcher.hosts.ip("moved.test") == "127.0.0.22"
