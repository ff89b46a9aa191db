"""The lab's changing web (issue 26 item 4): per-page Poisson change processes from the seed,
versions that change the text and never the links, ETag / Last-Modified / 304, and the truth's
version_at against what the server serves."""

from __future__ import annotations

import http.client

from agent.crawl.links import extract_links
from lab.testing import ServerThread, fetch, small_topology
from lab.web import Web


def _web(**kw) -> Web:
    return Web(small_topology(change_ratio=0.6, change_means=[100.0], **kw), seed=3, time_scale=1.0)


def test_the_default_web_is_static_and_serves_no_validators():
    web = Web(small_topology(), seed=3)
    site = web.topology.normal_sites[0]
    assert not web.changing and web.change_rate(site, 1) == 0.0 and web.version_at(site, 1, 1e9) == 0
    r = web.respond(site.host, "/", now=1e6, if_none_match="*")
    assert r.status == 200 and not any(k in ("ETag", "Last-Modified") for k, _ in r.headers)


def test_change_processes_are_poisson_with_rates_from_the_seed():
    web, again = _web(), _web()
    site = web.topology.normal_sites[0]
    n = web.pages(site)
    rates = [web.change_rate(site, i) for i in range(n)]
    assert rates == [again.change_rate(site, i) for i in range(n)]  # a pure function of the seed
    changing = [i for i, r in enumerate(rates) if r > 0]
    assert 0.35 < len(changing) / n < 0.85  # change_ratio 0.6
    assert all(web.version_at(site, i, 1e6) == 0 for i, r in enumerate(rates) if r == 0)
    # Over a long time, the count of changes is rate * T within a few standard deviations.
    T = 100_000.0
    expected = sum(rates) * T
    got = sum(web.version_at(site, i, T) for i in changing)
    assert abs(got - expected) < 4 * expected ** 0.5, (got, expected)
    # Versions only grow with time, and a version begins at its change time.
    i = changing[0]
    vs = [web.version_at(site, i, t) for t in range(0, 2000, 10)]
    assert vs == sorted(vs) and vs[-1] > 0
    v = web.version_at(site, i, 1500.0)
    assert web.changed_at(site, i, v) <= 1500.0 and web.version_at(site, i, web.changed_at(site, i, v)) == v


def test_versions_change_the_text_never_the_links():
    web = _web()
    site = web.topology.normal_sites[0]
    i = next(i for i in range(web.pages(site)) if web.change_rate(site, i) > 0)
    url = web.url(site, web.page_path(site, i))
    bodies = [web.render_version(site, i, v) for v in (0, 1, 2)]
    assert len(set(bodies)) == 3
    links = [extract_links(b, url, "utf-8").links for b in bodies]
    assert links[0] == links[1] == links[2] and links[0]


def test_the_server_serves_the_current_version_with_validators_and_304():
    web = _web()
    site = web.topology.normal_sites[0]
    i = next(i for i in range(1, web.pages(site)) if web.change_rate(site, i) > 0)
    path = web.page_path(site, i)
    with ServerThread(web) as srv:
        web = srv.web  # on the server's port (absolute links carry it)
        site = web.topology.normal_sites[0]
        r = fetch(site, srv.port, path)
        t = srv.server.model_now()
        etag = r.headers["etag"]
        v = int(etag.strip('"').rsplit("-", 1)[1])
        # The version served is the truth's at the time of the request (between send and now).
        assert web.version_at(site, i, 0.0) <= v <= web.version_at(site, i, t)
        assert r.body == web.render_version(site, i, v)
        c = http.client.HTTPConnection(site.ip, srv.port, timeout=10)
        try:
            for headers in ({"If-None-Match": etag}, {"If-None-Match": f'W/{etag}, "other"'}, {"If-None-Match": "*"}):
                now = srv.server.model_now()
                c.request("GET", path, headers={"Host": site.host, **headers})
                x = c.getresponse()
                body = x.read()
                if web.version_at(site, i, now) == v:  # not changed since: 304, no body, no length
                    assert x.status == 304 and body == b"" and x.getheader("Content-Length") is None
                    assert x.getheader("ETag") == etag
            c.request("GET", path, headers={"Host": site.host, "If-None-Match": '"nope"',
                                            "If-Modified-Since": r.headers["last-modified"]})
            x = c.getresponse()
            assert x.status == 200 and x.read()  # If-None-Match decides when sent (RFC 9110 13.2.2)
            c.request("GET", path, headers={"Host": site.host, "If-Modified-Since": "Thu, 01 Jan 1970 00:00:00 GMT"})
            x = c.getresponse()
            assert x.status == 200 and x.read()
        finally:
            c.close()
