"""The generator: deterministic, realistic sizes, links that parse as written, truth by BFS."""

import random

import pytest
from protego import Protego
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from lab.testing import small_topology
from lab.truth import Scope, Truth, TruthTooLarge, read_seeds
from lab.web import Web
from wancrawl.urls import InvalidUrl, UnsupportedScheme, canonicalize, host_of


@pytest.fixture(scope="module")
def web():
    return Web(small_topology(), seed=7)


def _hrefs(body: bytes, encoding: str = "utf-8") -> list[str]:
    return [a.attributes.get("href") for a in HTMLParser(body.decode(encoding, "replace")).css("a[href]")]


def test_same_seed_same_web_other_seed_other_web(web):
    again = Web(small_topology(), seed=7)
    other = Web(small_topology(), seed=8)
    samples = [(s, 0) for s in web.topology.normal_sites] + [(web.topology.normal_sites[0], 1)]
    assert all(web.respond(s.host, web.page_path(s, i)).body == again.respond(s.host, again.page_path(s, i)).body for s, i in samples)
    assert [web.pages(s) for s in web.topology.normal_sites] == [again.pages(s) for s in again.topology.normal_sites]
    assert any(web.respond(s.host, "/").body != other.respond(s.host, "/").body for s, _ in samples)
    for s in web.topology.sites:
        assert web.respond(s.host, "/robots.txt").body == again.respond(s.host, "/robots.txt").body


def test_pages_are_5_to_60_kb_with_heavy_tailed_site_sizes():
    w = Web(small_topology(pages_max=3000), seed=3)
    sizes = [len(w.render_page(s, i)) for s in w.topology.normal_sites for i in range(min(w.pages(s), 20))]
    assert min(sizes) >= 5 * 1024 and max(sizes) <= 60 * 1024
    counts = sorted(w.pages(s) for s in w.topology.normal_sites)
    assert counts[0] >= 5 and counts[-1] >= 5 * counts[len(counts) // 2]  # a long tail


def test_html_links_are_exactly_the_graph_and_canonicalize_to_served_pages(web):
    rng = random.Random(1)
    for s in web.topology.normal_sites:
        for i in rng.sample(range(web.pages(s)), min(4, web.pages(s))):
            path = web.page_path(s, i)
            r = web.respond(s.host, path)
            assert r.status == 200 and b"<title>" in r.body and b"<nav" in r.body
            page = web.resolve(s.host, path)
            # Logo and sidebar repeat nav links, as real templates do: the graph is the set.
            assert set(_hrefs(r.body)) == set(page.links)
            base = web.url(s, path)
            for href in page.links:
                try:
                    u = canonicalize(href, base)
                except UnsupportedScheme:
                    assert href.startswith(("mailto:", "javascript:"))
                    continue
                site = web.topology.site(host_of(u))
                assert site is not None
                if site.hostile:
                    continue
                target = u.split(f":{site.port}", 1)[1]
                assert web.resolve(site.host, target).status in (200, 302)


def test_links_are_spelled_many_ways(web):
    hrefs = [h for s in web.topology.normal_sites for i in range(web.pages(s)) for h in web.links(s, i)]
    assert any(h.startswith("./") for h in hrefs)
    assert any(h.startswith("../") for h in hrefs)
    assert any("/../" in h or "/./" in h for h in hrefs)
    assert any(h.startswith("HTTP://") or ".LAB" in h for h in hrefs)
    assert any(h.startswith("//") for h in hrefs)
    assert any("#" in h for h in hrefs)
    assert any("?id=" in h for h in hrefs)


def test_cross_site_links_prefer_same_city_or_isp():
    topo = small_topology(same_city_bias=20.0, same_isp_bias=0.0, cross_site_ratio=0.5)
    w = Web(topo, seed=1)
    same = other = 0
    for s in topo.normal_sites:
        for i in range(min(w.pages(s), 10)):
            for h in w.links(s, i):
                try:
                    t = topo.site(host_of(canonicalize(h, w.url(s, "/"))))
                except InvalidUrl:
                    continue
                if t is None or t.index == s.index or t.hostile:
                    continue
                same += t.city == s.city
                other += t.city != s.city
    # Weights: same city 21 x 2 other ISPs' sites (+own block) vs 1 x 12 elsewhere.
    assert same > 3 * other


def test_robots_disallow_crawl_delay_and_sitemaps():
    w = Web(small_topology(robots_disallow_ratio=1.0, crawl_delay_ratio=1.0, sitemap_ratio=1.0), seed=2, time_scale=10)
    s = w.topology.normal_sites[0]
    rp = Protego.parse(w.respond(s.host, "/robots.txt").body.decode())
    info = w.site_info(s)
    assert not rp.can_fetch(f"{s.base_url}{info.disallow[0]}x.html", "wancrawl")
    assert rp.can_fetch(f"{s.base_url}/", "wancrawl")
    assert rp.crawl_delay("wancrawl") == pytest.approx(info.crawl_delay / 10)  # time-scaled
    assert w.crawl_delay(s) == pytest.approx(info.crawl_delay / 10)
    assert rp.sitemaps and w.respond(s.host, "/sitemap.xml").body.count(b"<loc>") == w.pages(s)


def test_unknown_paths_and_hosts_are_404(web):
    s = web.topology.normal_sites[0]
    assert web.respond(s.host, "/nope.html").status == 404
    assert web.respond(s.host, "/news/x-99999.html").status == 404
    assert web.respond("www.example.com", "/").status == 404


def test_truth_covers_every_page_and_hostile_cases_within_depth(web):
    topo = web.topology
    seeds = [s.base_url + "/" for s in topo.sites]
    reached = Truth(web, Scope(max_depth=12)).reachable(seeds)
    urls = [r.url for r in reached]
    assert len(urls) == len(set(urls))
    assert set(web.all_page_urls()) <= set(urls)
    chain = topo.hostile_sites["redirect-chain"].base_url
    assert f"{chain}/final" not in urls  # 20 redirects need depth 20
    deep = Truth(web, Scope(max_depth=25, allow_domains=[topo.hostile_sites["redirect-chain"].host])).reachable([chain + "/"])
    assert deep[-1].url == f"{chain}/final" and deep[-1].depth == 20 and deep[-1].status == 200
    cal = topo.hostile_sites["calendar"].host
    assert all(r.depth <= 12 for r in reached)
    assert sum(host_of(u) == cal for u in urls) > 12
    assert not any(u.startswith(("mailto:", "javascript:", "data:")) for u in urls)


def test_truth_scope_rules(web):
    topo = web.topology
    s = topo.normal_sites[0]
    only = Truth(web, Scope(max_depth=3, allow_domains=[f"{s.isp}-{s.city}.lab"])).reachable([s.base_url + "/"])
    assert {host_of(r.url) for r in only} <= {x.host for x in topo.sites if x.isp == s.isp and x.city == s.city}
    assert [r.url for r in Truth(web, Scope(max_depth=0)).reachable([s.base_url])] == [s.base_url + "/"]
    with pytest.raises(TruthTooLarge):
        Truth(web, Scope(max_urls=500)).reachable([topo.hostile_sites["calendar"].base_url + "/"])


def test_truth_respects_robots():
    w = Web(small_topology(robots_disallow_ratio=1.0), seed=4)
    seeds = [s.base_url + "/" for s in w.topology.normal_sites]
    polite = {r.url for r in Truth(w, Scope(max_depth=4, respect_robots=True)).reachable(seeds)}
    rude = {r.url for r in Truth(w, Scope(max_depth=4)).reachable(seeds)}
    def disallowed(u):
        site = w.topology.site(host_of(u))
        return site is not None and not site.hostile and any(u[len(site.base_url):].startswith(d) for d in w.site_info(site).disallow)

    assert polite < rude
    assert any(disallowed(u) for u in rude)
    assert not any(disallowed(u) for u in polite)


def test_read_seeds_reports_bad_lines():
    seeds, errors = read_seeds("# c\nhttp://WWW.A.lab:80/x/../y\n\nmailto:x@y\nnot a url\n")
    assert seeds == ["http://www.a.lab/y"]
    assert [e.split(":")[0] for e in errors] == ["line 4", "line 5"]


# --- hostile sites of issue 11 ---------------------------------------------------------------

def _hostile_truth(web, kind, **scope):
    s = web.topology.hostile_sites[kind]
    reached = Truth(web, Scope(allow_domains=[s.host], **scope)).reachable([s.base_url + "/"])
    return s, [(r.url[len(s.base_url):], r.depth, r.status) for r in reached]


def test_every_hostile_site_is_linked_from_a_normal_home_page(web):
    topo = web.topology
    normal = topo.normal_sites
    for k, h in enumerate(topo.hostile_sites.values()):
        assert h.base_url + "/" in web.links(normal[k % len(normal)], 0)
    seeds = [s.base_url + "/" for s in normal]
    met = {r.url for r in Truth(web, Scope(max_depth=1)).reachable(seeds)}
    assert {h.base_url + "/" for h in topo.hostile_sites.values()} <= met
    # The truth of the normal sites (their hosts allowed) holds no hostile host at all.
    fenced = Truth(web, Scope(max_depth=3, allow_domains=[s.host for s in normal])).reachable(seeds)
    assert not any(topo.site(host_of(r.url)).hostile for r in fenced)
    off = Web(small_topology(hostile_home_links=False, hostile_link_ratio=0.0), seed=7)
    assert not any(".lab" in h and topo.site(host_of(canonicalize(h, s.base_url))).hostile
                   for s in off.topology.normal_sites for h in off.links(s, 0) if h.startswith("http"))


def test_session_trap_links_10000_fresh_sids_per_page_and_truth_keeps_the_real_pages(web):
    s = web.topology.hostile_sites["session-trap"]
    page = web.resolve(s.host, "/shop/2.html")
    real = ("/", "/shop/1.html", "/shop/2.html", "/shop/3.html", "/shop/4.html")
    assert page.status == 200 and page.links[:5] == real and page.follow == real
    fresh = page.links[5:]
    assert len(fresh) == 10_000 == len(set(fresh))
    assert all(h.startswith("/shop/2.html?sid=") and len(h) == len("/shop/2.html?sid=") + 16 for h in fresh)
    body = web.respond(s.host, "/shop/2.html").body
    assert _hrefs(body) == list(page.links)  # what a parser finds, in order
    assert web.respond(s.host, "/shop/2.html").body == body == Web(small_topology(), seed=7).respond(s.host, "/shop/2.html").body
    # A sid URL is the same page with 10,000 other fresh links: the trap never ends.
    again = web.resolve(s.host, fresh[0])
    assert again.status == 200 and again.links[:5] == real and not set(again.links[5:]) & set(fresh)
    assert all(h.startswith("/shop/2.html?sid=") for h in again.links[5:])
    assert web.resolve(s.host, "/shop/2.html?page=2").status == 404
    assert web.resolve(s.host, "/shop/9.html").status == 404
    assert len(Web(small_topology(session_trap_links=3), seed=7).resolve(s.host, "/").links) == 8
    _, reached = _hostile_truth(web, "session-trap", max_depth=12)
    assert reached == [("/", 0, 200)] + [(p, 1, 200) for p in real[1:]]


def test_robots_503_for_the_first_model_seconds_then_normal():
    w = Web(small_topology(), seed=7, time_scale=60)
    s = w.topology.hostile_sites["robots-503"]
    for now in (0.0, 19.99):
        r = w.respond(s.host, "/robots.txt", now=now)
        assert (r.status, r.headers, r.body) == (503, [("Content-Type", "text/plain")], b"robots.txt is not available yet\n")
    for now in (20.0, None):  # None: long after the start (truth's view)
        r = w.respond(s.host, "/robots.txt", now=now)
        assert (r.status, r.body) == (200, b"User-agent: *\nDisallow: /private/\n")
    assert w.respond(s.host, "/", now=0.0).status == 200  # only robots.txt is flaky
    short = Web(small_topology(robots_unavailable_s=5.0), seed=7)
    assert [short.respond(s.host, "/robots.txt", now=t).status for t in (4.9, 5.0)] == [503, 200]
    assert Web(small_topology(robots_unavailable_s=0.0), seed=7).respond(s.host, "/robots.txt", now=0.0).status == 200
    _, reached = _hostile_truth(w, "robots-503")
    pages = {p for p, _, st in reached if st == 200}
    assert pages == {"/"} | {f"/p/{k}.html" for k in range(1, 20)} | {"/private/1.html"}
    _, polite = _hostile_truth(w, "robots-503", respect_robots=True)
    assert {p for p, _, _ in polite} == pages - {"/private/1.html"}


def test_retry_forever_answers_429_with_an_hour_of_retry_after():
    w = Web(small_topology(), seed=7, time_scale=1.0)
    s = w.topology.hostile_sites["retry-forever"]
    for _ in range(3):
        r = w.respond(s.host, "/wait")
        assert r.status == 429 and r.headers == [("Content-Type", "text/html; charset=utf-8"), ("Retry-After", "3600")]
    assert Web(small_topology(), seed=7, time_scale=60.0).respond(s.host, "/wait").headers[1] == ("Retry-After", "60")
    assert [w.respond(s.host, p).status for p in ("/", "/a.html", "/b.html", "/c.html")] == [200] * 4
    _, reached = _hostile_truth(w, "retry-forever")
    assert reached == [("/", 0, 200), ("/wait", 1, 429), ("/a.html", 1, 200), ("/b.html", 1, 200), ("/c.html", 1, 200)]


def test_length_lie_declares_100_bytes_of_a_longer_body(web):
    s = web.topology.hostile_sites["length-lie"]
    r = web.respond(s.host, "/liar.html")
    page = web.resolve(s.host, "/liar.html")
    assert r.status == 200 and r.declared_length == 100 and len(r.body) > 50 * 100
    assert r.body[:100].startswith(b'<!DOCTYPE html><html><head><title>Liar</title></head><body><p><a href="/kept.html">kept</a>')
    # Honouring Content-Length, a parser sees one link; the rest lie past the declared end.
    assert _hrefs(r.body[:100]) == ["/kept.html"] == list(page.follow)
    assert _hrefs(r.body) == list(page.links) == ["/kept.html"] + [f"/beyond/{k}.html" for k in range(1, 6)]
    assert all(web.resolve(s.host, p).status == 200 for p in page.links)  # they exist: fetching them shows
    assert web.respond(s.host, "/").declared_length is None
    assert Web(small_topology(length_lie_bytes=50), seed=7).resolve(s.host, "/liar.html").follow == ()
    _, reached = _hostile_truth(web, "length-lie")
    assert reached == [("/", 0, 200), ("/liar.html", 1, 200), ("/kept.html", 2, 200)]


def test_many_links_page_has_100000_links_and_truth_stays_small(web):
    s = web.topology.hostile_sites["many-links"]
    r = web.respond(s.host, "/")
    hrefs = _hrefs(r.body)
    real = [f"/real/{k}.html" for k in range(1, 6)]
    assert len(hrefs) == 100_005 and hrefs[:5] == real and hrefs[5:] == [f"/gone/{k}.html" for k in range(100_000)]
    assert hrefs == list(web.resolve(s.host, "/").links) and web.resolve(s.host, "/").follow == tuple(real)
    assert web.respond(s.host, "/").body is r.body  # built once
    assert web.resolve(s.host, "/gone/99999.html").status == 404 and web.resolve(s.host, "/real/5.html").status == 200
    _, reached = _hostile_truth(web, "many-links")
    assert reached == [("/", 0, 200)] + [(p, 1, 200) for p in real]


def test_meta_refresh_meta_robots_and_rel_nofollow(web):
    s = web.topology.hostile_sites["meta-robots"]
    body = {p: web.respond(s.host, p).body.decode() for p in ("/refresh", "/nofollow.html", "/noindex.html", "/rel.html")}
    assert '<meta http-equiv="refresh" content="0; url=/refreshed">' in body["/refresh"] and _hrefs(body["/refresh"].encode()) == []
    assert '<meta name="robots" content="nofollow">' in body["/nofollow.html"]
    assert _hrefs(body["/nofollow.html"].encode()) == ["/hidden/1.html", "/hidden/2.html"]
    assert '<meta name="robots" content="noindex">' in body["/noindex.html"] and web.resolve(s.host, "/noindex.html").noindex
    rels = {a.attributes["href"]: a.attributes.get("rel") for a in HTMLParser(body["/rel.html"]).css("a[href]")}
    assert rels == {"/rel/followed.html": None, "/rel/skipped.html": "nofollow",
                    "/rel/skipped-too.html": "noopener NoFollow", "/rel/both.html": "nofollow"}
    # Every target exists, so a crawler that ignores the directives shows in the request log.
    for p in ("/refreshed", "/hidden/1.html", "/hidden/2.html", "/noindex/next.html", "/rel/skipped.html", "/rel/skipped-too.html"):
        assert web.resolve(s.host, p).status == 200
    _, reached = _hostile_truth(web, "meta-robots")
    assert reached == [
        ("/", 0, 200), ("/refresh", 1, 200), ("/nofollow.html", 1, 200), ("/noindex.html", 1, 200), ("/rel.html", 1, 200),
        ("/refreshed", 2, 200), ("/noindex/next.html", 2, 200), ("/rel/followed.html", 2, 200),
        ("/rel/both.html", 3, 200),  # linked with nofollow, and plainly from /rel/followed.html
    ]


def test_shift_jis_query_is_served_only_in_shift_jis():
    from lab.truth import encode_query

    w = Web(small_topology(), seed=7)
    s = w.topology.hostile_sites["shift-jis"]
    r = w.respond(s.host, "/")
    assert r.headers == [("Content-Type", "text/html; charset=Shift_JIS")]
    with pytest.raises(UnicodeDecodeError):
        r.body.decode("utf-8")
    text = r.body.decode("shift_jis")
    assert '<meta charset="Shift_JIS">' in text and "日本語のページ" in text
    assert _hrefs(r.body, "shift_jis") == ["/search?q=日本", "/日本.html"]
    base = s.base_url + "/"
    # A browser sends the query in the page's encoding and the path in UTF-8.
    assert canonicalize(encode_query("/search?q=日本", "shift_jis"), base) == s.base_url + "/search?q=%93%FA%96%7B"
    assert canonicalize("/search?q=日本", base) == s.base_url + "/search?q=%E6%97%A5%E6%9C%AC"  # the UTF-8 form
    statuses = {t: w.resolve(s.host, t).status for t in (
        "/search?q=%93%FA%96%7B", "/search?q=%93%fa%96%7b", "/search?q=%93%FA%96{", "/search?q=%E6%97%A5%E6%9C%AC",
        "/%E6%97%A5%E6%9C%AC.html", "/%93%FA%96%7B.html")}
    assert list(statuses.values()) == [200, 200, 200, 404, 200, 404]
    found = w.respond(s.host, "/search?q=%93%FA%96%7B")
    assert "検索結果：日本" in found.body.decode("shift_jis") and found.headers == r.headers
    _, reached = _hostile_truth(w, "shift-jis")
    assert reached == [("/", 0, 200), ("/search?q=%93%FA%96%7B", 1, 200), ("/%E6%97%A5%E6%9C%AC.html", 1, 200)]
