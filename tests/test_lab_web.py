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
        return not site.hostile and any(u[len(site.base_url):].startswith(d) for d in w.site_info(site).disallow)

    assert polite < rude
    assert any(disallowed(u) for u in rude)
    assert not any(disallowed(u) for u in polite)


def test_read_seeds_reports_bad_lines():
    seeds, errors = read_seeds("# c\nhttp://WWW.A.lab:80/x/../y\n\nmailto:x@y\nnot a url\n")
    assert seeds == ["http://www.a.lab/y"]
    assert [e.split(":")[0] for e in errors] == ["line 4", "line 5"]
