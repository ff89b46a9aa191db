"""RobotsCache: RFC 9309 status semantics, TTLs, crawl-delay and sitemaps, on the lab's robots files."""

from agent.crawl.robots import RobotsCache
from lab.testing import small_topology
from lab.web import Web

UA = "wancrawl/0.1 (+https://example.invalid/wancrawl)"
TXT = b"User-agent: *\nDisallow: /private/\nCrawl-delay: 2\nSitemap: http://a.lab/sitemap.xml\n\nUser-agent: wancrawl\nDisallow: /search\nAllow: /\n"


def test_2xx_rules_ua_group_delay_and_sitemaps():
    rc = RobotsCache(UA, ttl=100)
    assert rc.needs_fetch("a.lab", 0) and not rc.allowed("http://a.lab/x", "a.lab")  # unknown: not yet
    assert rc.allowed("http://a.lab/robots.txt", "a.lab")
    rc.update("a.lab", 200, TXT, now=0)
    assert not rc.needs_fetch("a.lab", 99) and rc.needs_fetch("a.lab", 100)
    # Our own group applies (by product token), not the * group.
    assert rc.allowed("http://a.lab/private/x", "a.lab") and not rc.allowed("http://a.lab/search?q=1", "a.lab")
    other = RobotsCache("OtherBot/2")
    other.update("a.lab", 200, TXT, 0)
    assert not other.allowed("http://a.lab/private/x", "a.lab") and other.crawl_delay("a.lab") == 2.0
    assert other.sitemaps("a.lab") == ["http://a.lab/sitemap.xml"]
    assert rc.crawl_delay("a.lab") is None and rc.crawl_delay("b.lab") is None and rc.sitemaps("b.lab") == []


def test_an_infinite_crawl_delay_is_the_largest_delay_capped_like_any():
    """protego drops `Crawl-delay: inf` (not a finite number): it read as no delay at all, while
    1e9 was capped at politeness.max_crawl_delay. It is the largest delay; NaN is still ignored."""
    from agent.crawl.politeness import Politeness

    rc = RobotsCache(UA)
    for host, value in (("inf.lab", "inf"), ("big.lab", "1e9"), ("word.lab", "Infinity  # never"), ("nan.lab", "nan")):
        rc.update(host, 200, f"User-agent: *\nCrawl-delay: {value}\nDisallow: /x\n".encode(), 0)
    assert rc.crawl_delay("inf.lab") == rc.crawl_delay("word.lab") >= rc.crawl_delay("big.lab") == 1e9
    assert rc.crawl_delay("nan.lab") is None
    p = Politeness(default_delay=1.0, max_delay=60.0)
    assert p.set_delay("inf.lab", rc.crawl_delay("inf.lab")) == 60.0 == p.set_delay("big.lab", rc.crawl_delay("big.lab"))
    assert not rc.allowed("http://inf.lab/x/1", "inf.lab"), "the rest of the group still applies"


def test_an_unreachable_robots_txt_is_named_by_its_failure_not_status_0():
    """Issue 37: a host refusing connections was reported as "robots.txt unreachable (last status
    0)": the failure is named as the fetch named it."""
    rc = RobotsCache(UA)
    rc.update("refuse.lab", 0, None, 0, "connect: ConnectionRefusedError: [Errno 111] Connection refused")
    rc.update("busy.lab", 503, b"", 0)
    rc.update("quiet.lab", 0, None, 0)
    assert rc.failure("refuse.lab") == "connect: ConnectionRefusedError: [Errno 111] Connection refused"
    assert rc.failure("busy.lab") == "status 503" and rc.failure("quiet.lab") == "no response"
    rc.update("refuse.lab", 200, TXT, 5)
    assert rc.failure("refuse.lab") == "status 200" and rc.unreachable("refuse.lab") is None


def test_4xx_allows_all_5xx_and_network_errors_disallow_temporarily():
    rc = RobotsCache(UA, ttl=1000, error_ttl=10, retry_base=2)
    rc.update("nf.lab", 404, b"", 0)
    assert rc.allowed("http://nf.lab/anything", "nf.lab") and not rc.needs_fetch("nf.lab", 999)
    assert rc.unreachable("nf.lab") is None
    # Unreachable: disallowed for now, asked again after 2, 4, 8 s, then every error_ttl (10 s).
    for status, wait in ((500, 2), (503, 4), (429, 8), (0, 10), (502, 10)):
        rc.update("down.lab", status, b"", 0)
        assert not rc.allowed("http://down.lab/x", "down.lab")
        assert rc.needs_fetch("down.lab", wait) and not rc.needs_fetch("down.lab", wait - 0.1)
        assert rc.unreachable("down.lab") == (0, wait, status)
    rc.update("down.lab", 200, b"User-agent: *\nDisallow: /a\n", 20)
    assert rc.allowed("http://down.lab/x", "down.lab") and not rc.allowed("http://down.lab/a", "down.lab")
    assert rc.unreachable("down.lab") is None
    rc.update("down.lab", 503, b"", 30)  # failing again, with rules from a good answer: they stand in
    assert rc.unreachable("down.lab") is None and rc.needs_fetch("down.lab", 32)


def test_error_after_success_keeps_cached_rules_and_long_outage_allows():
    rc = RobotsCache(UA, ttl=100, error_ttl=10, unreachable_allow_after=1000)
    rc.update("h.lab", 200, b"User-agent: *\nDisallow: /a\n", 0)
    rc.update("h.lab", 503, b"", 100)
    assert rc.allowed("http://h.lab/x", "h.lab") and not rc.allowed("http://h.lab/a", "h.lab")
    assert rc.needs_fetch("h.lab", 110)
    rc2 = RobotsCache(UA, error_ttl=10, unreachable_allow_after=1000)
    rc2.update("d.lab", 0, None, 0)
    rc2.update("d.lab", 0, None, 500)
    assert not rc2.allowed("http://d.lab/x", "d.lab")
    rc2.update("d.lab", 0, None, 1000)  # unreachable for the whole period: treated as no robots.txt
    assert rc2.allowed("http://d.lab/x", "d.lab")


def test_redirect_given_up_and_size_cap_and_garbage():
    rc = RobotsCache(UA, error_ttl=5, max_bytes=40)
    rc.update("r.lab", 301, b"", 0)
    assert rc.allowed("http://r.lab/x", "r.lab") and rc.needs_fetch("r.lab", 5)
    # Only the first max_bytes are parsed: the rule after the cap is ignored.
    rc.update("big.lab", 200, b"User-agent: *\nDisallow: /a\n" + b"#" * 100 + b"\nDisallow: /b\n", 0)
    assert not rc.allowed("http://big.lab/a", "big.lab") and rc.allowed("http://big.lab/b", "big.lab")
    rc.update("bin.lab", 200, bytes(range(256)) * 10, 0)
    assert rc.allowed("http://bin.lab/x", "bin.lab")
    assert len(rc) == 3 and rc.purge(10**9) == 3 and len(rc) == 0


def test_agrees_with_lab_robots_files():
    web = Web(small_topology(robots_disallow_ratio=1.0, crawl_delay_ratio=1.0), seed=3, time_scale=10.0)
    rc = RobotsCache(UA)
    bad = RobotsCache("BadBot/1.0")
    for s in web.topology.normal_sites[:6]:
        rc.update(s.host, 200, web.robots_txt(s).encode(), 0)
        bad.update(s.host, 200, web.robots_txt(s).encode(), 0)
        sec = web.site_info(s).sections[-1]
        assert not rc.allowed(f"{s.base_url}/{sec}/x.html", s.host) and not rc.allowed(s.base_url + "/search", s.host)
        assert rc.allowed(s.base_url + "/", s.host) and not bad.allowed(s.base_url + "/", s.host)
        assert rc.crawl_delay(s.host) == web.crawl_delay(s)


def test_purge_keeps_the_history_of_an_unreachable_robots_txt():
    """The dispatcher purges expired entries every minute; a failing entry is due again (expired)
    while its retry is under way, and purging it restarted its backoff and its give-up and park
    clocks: an unreachable host was retried every few seconds forever."""
    rc = RobotsCache(UA, ttl=1000, error_ttl=60, retry_base=5)
    rc.update("never.lab", 0, b"", 0)      # retry at 5
    assert rc.purge(25) == 0, "due for a retry, not forgotten"
    rc.update("never.lab", 0, b"", 25)     # the second failure of the same run
    assert rc.unreachable("never.lab") == (0, 35, 0), "failing since 0, backoff doubled to 10 s"
    assert rc.purge(35 + 60 + 1) == 1, "gone once an error_ttl past its retry with no retry made"
