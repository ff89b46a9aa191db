"""The lab server over real sockets: hostile sites, link-model delays, interconnect sharing, logs."""

import dataclasses
import gzip
import http.client
import socket
import threading
import time
import zlib

import pytest
from selectolax.lexbor import LexborHTMLParser

from lab import checks
from lab.linkmodel import LinkModel
from lab.testing import ServerThread, connect, fetch, small_topology
from lab.web import CHAIN_LENGTH, Web
from wancrawl.urls import UnsupportedScheme, canonicalize

OUTSIDE = "127.0.0.1"  # a client outside the plan sees no link model


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "requests.jsonl"
    web = Web(small_topology(gzip_bomb_mb=64, drip_total_bytes=2048, robots_disallow_ratio=1.0), seed=5, time_scale=100.0)
    with ServerThread(web, log_path=str(log)) as st:
        st.log_file = log
        yield st


def hostile(lab, kind):
    return lab.web.topology.hostile_sites[kind]


def test_normal_page_keep_alive_and_vhost_checks(lab):
    s = lab.web.topology.normal_sites[0]
    c = http.client.HTTPConnection(s.ip, lab.port, timeout=5, source_address=(OUTSIDE, 0))
    a = fetch(s, lab.port, "/", conn=c)
    b = fetch(s, lab.port, lab.web.page_path(s, 1), conn=c)  # same connection
    assert a.status == b.status == 200
    assert a.headers["content-type"] == "text/html; charset=utf-8"
    assert a.body == lab.web.respond(s.host, "/").body
    assert fetch(s, lab.port, "/./", conn=c).body == a.body  # dot segments tolerated
    assert fetch(s, lab.port, "/", host=s.host.upper() + f":{lab.port}").status == 200
    other = lab.web.topology.normal_sites[5]
    assert fetch(s, lab.port, "/", host=other.host).status == 421  # host is served elsewhere
    assert fetch(s, lab.port, "/nope").status == 404
    c.close()


def test_redirect_loop_and_chain(lab):
    s = hostile(lab, "redirect-loop")
    seen, target = [], "/"
    for _ in range(6):
        r = fetch(s, lab.port, target)
        assert r.status in (301, 302)
        seen.append(target)
        target = canonicalize(r.headers["location"], s.base_url + target).split(f":{lab.port}", 1)[1]
    assert seen == ["/"] + ["/loop/a", "/loop/b"] * 2 + ["/loop/a"]
    s = hostile(lab, "redirect-chain")
    target, hops = "/", 0
    while True:
        r = fetch(s, lab.port, target)
        if r.status == 200:
            break
        assert r.status in (301, 302, 303, 307, 308)
        hops += 1
        target = r.headers["location"]
    assert hops == CHAIN_LENGTH and target == "/final"


def test_calendar_is_infinite(lab):
    s = hostile(lab, "calendar")
    r = fetch(s, lab.port, "/")
    target = LexborHTMLParser(r.body.decode()).css_first("a[href]").attributes["href"]
    months = set()
    for _ in range(30):
        r = fetch(s, lab.port, target)
        assert r.status == 200
        months.add(target)
        hrefs = [a.attributes["href"] for a in LexborHTMLParser(r.body.decode()).css("a[href]")]
        target = hrefs[1]  # "next month"
    assert len(months) == 30


def test_slow_drip_and_never(lab):
    s = hostile(lab, "slow-drip")
    sock = connect(s, lab.port, OUTSIDE)
    sock.sendall(f"GET / HTTP/1.1\r\nHost: {s.host}\r\n\r\n".encode())
    t0 = time.perf_counter()
    first = sock.recv(65536)
    t_first = time.perf_counter() - t0
    data = first
    while b"</html>" not in data:
        chunk = sock.recv(65536)
        assert chunk
        data += chunk
    total = time.perf_counter() - t0
    sock.close()
    # 2048 bytes, 64 bytes per model second, time scale 100: 32 model s = 0.32 s wall.
    assert t_first < 0.1 and 0.25 < total < 1.5
    s = hostile(lab, "never")
    sock = connect(s, lab.port, OUTSIDE, timeout=0.4)
    sock.sendall(f"GET /robots.txt HTTP/1.1\r\nHost: {s.host}\r\n\r\n".encode())
    with pytest.raises(socket.timeout):
        sock.recv(1)
    sock.close()


def test_huge_and_gzip_bomb(lab):
    r = fetch(hostile(lab, "huge"), lab.port, "/")
    assert r.status == 200 and len(r.body) == 10 * 1024 * 1024 and int(r.headers["content-length"]) == len(r.body)
    r = fetch(hostile(lab, "gzip-bomb"), lab.port, "/")
    assert r.headers["content-encoding"] == "gzip" and r.headers["content-type"].startswith("text/html")
    d = zlib.decompressobj(31)
    decoded = len(d.decompress(r.body, 0))
    assert d.eof and decoded >= 64 * 1024 * 1024 and len(r.body) * 500 < decoded
    assert gzip.decompress(r.body)[:15] == b"<!DOCTYPE html>"


def test_wrong_content_types(lab):
    s = hostile(lab, "wrong-type")
    b = fetch(s, lab.port, "/binary.html")
    assert b.headers["content-type"].startswith("text/html") and b.body.startswith(b"\x89PNG")
    with pytest.raises(UnicodeDecodeError):
        b.body.decode("utf-8")
    d = fetch(s, lab.port, "/document")
    assert d.headers["content-type"] == "application/octet-stream" and d.body.startswith(b"<!DOCTYPE html>")
    n = fetch(s, lab.port, "/no-type")
    assert "content-type" not in n.headers and b"<html>" in n.body


def test_throttle_and_server_errors(lab):
    s = hostile(lab, "throttle")
    busy, unavailable, maint = (fetch(s, lab.port, p) for p in ("/busy", "/unavailable", "/maintenance"))
    assert busy.status == 429 and busy.headers["retry-after"] == "1"  # 10 s scaled by 100, at least 1
    assert unavailable.status == 503 and unavailable.headers["retry-after"] == "2"  # 120 s / 100
    assert maint.status == 503 and maint.headers["retry-after"].endswith("GMT")
    s = hostile(lab, "server-error")
    assert [fetch(s, lab.port, p).status for p in ("/error", "/empty-500", "/bad-gateway")] == [500, 500, 502]
    assert fetch(s, lab.port, "/empty-500").body == b""


def test_malformed_bad_schemes_long_urls_and_gbk(lab):
    s = hostile(lab, "malformed")
    for target in ("/", "/m/3"):
        r = fetch(s, lab.port, target)
        hrefs = [a.attributes["href"] for a in LexborHTMLParser(r.body.decode()).css("a[href]")]
        assert hrefs == list(lab.web.resolve(s.host, target).links)  # truth agrees with a parser
    s = hostile(lab, "bad-schemes")
    hrefs = [a.attributes["href"] for a in LexborHTMLParser(fetch(s, lab.port, "/").body.decode()).css("a[href]")]
    schemes = set()
    for h in hrefs:
        try:
            canonicalize(h, s.base_url + "/")
        except UnsupportedScheme as exc:
            schemes.add(exc.scheme)
        except Exception:
            pass
    assert {"javascript", "mailto", "data"} <= schemes
    s = hostile(lab, "long-urls")
    target = "/"
    lengths = []
    while True:
        r = fetch(s, lab.port, target)
        if r.status == 414:
            break
        assert r.status == 200
        target = LexborHTMLParser(r.body.decode()).css_first("a[href]").attributes["href"]
        lengths.append(len(target))
    assert max(lengths) > 16000
    s = hostile(lab, "gbk")
    r = fetch(s, lab.port, "/")
    assert r.headers["content-type"] == "text/html; charset=gbk"
    with pytest.raises(UnicodeDecodeError):
        r.body.decode("utf-8")
    assert "中文网页" in r.body.decode("gbk")
    m = fetch(s, lab.port, "/mislabel.html")
    assert "utf-8" in m.headers["content-type"]
    with pytest.raises(UnicodeDecodeError):
        m.body.decode("utf-8")


def test_request_log_and_politeness_checks(lab):
    topo = lab.web.topology
    s = topo.normal_sites[1]
    src = topo.agent_address(s.isp, s.city, 3)
    disallowed = next(lab.web.page_path(s, i) for i in range(1, 5) if lab.web.page_path(s, i).startswith(lab.web.site_info(s).disallow[0]))
    for target in ("/robots.txt", "/", disallowed):
        fetch(s, lab.port, target, source=src)
    lab.server.flush_log()
    mine = [e for e in checks.read_log(lab.log_file) if e.client == src]
    assert [(e.host, e.path, e.status) for e in mine] == [(s.host, "/robots.txt", 200), (s.host, "/", 200), (s.host, disallowed, 200)]
    assert mine[1].bytes == len(lab.web.respond(s.host, "/").body) and mine[1].site_ip == s.ip
    assert [e.path for e in lab.server.log if e.client == src] == [e.path for e in mine]
    assert lab.server.counters[s.host]["requests"] >= 3
    too_fast = checks.too_close(mine, 5.0)
    assert [v.entry.path for v in too_fast] == ["/", disallowed]
    assert checks.too_close(mine, 0.0) == []
    rv = checks.robots_violations(mine, checks.web_robots(lab.web))
    assert [v.entry.path for v in rv] == [disallowed]
    assert [v.entry.path for v in checks.wrong_owner(mine, {s.host: "127.9.9.9"})] == ["/robots.txt", "/", disallowed]
    assert checks.wrong_owner(mine, {s.host: {src}}) == []


def _link_web(**link):
    topo = small_topology()
    spec = dataclasses.replace(topo.spec, link=dataclasses.replace(topo.spec.link, **link))
    return Web(type(topo)(spec), seed=5, time_scale=1.0)


def test_measured_delays_match_the_model():
    web = _link_web()
    model = LinkModel(web.topology)
    topo = web.topology
    near = next(s for s in topo.normal_sites if (s.isp, s.city) == ("telecom", "beijing"))
    far = next(s for s in topo.normal_sites if (s.isp, s.city) == ("unicom", "guangzhou"))
    src = topo.agent_address("telecom", "beijing")
    with ServerThread(web) as st:
        for site in (near, far):
            size = len(web.respond(site.host, "/").body)
            c = http.client.HTTPConnection(site.ip, st.port, timeout=5, source_address=(src, 0))
            first = fetch(site, st.port, "/", conn=c).seconds
            again = fetch(site, st.port, "/", conn=c).seconds
            c.close()
            want_first = model.expected_time(src, site.ip, size + 150, first=True)
            want_again = model.expected_time(src, site.ip, size + 150, first=False)
            assert first == pytest.approx(want_first, rel=0.25, abs=0.006)
            assert again == pytest.approx(want_again, rel=0.25, abs=0.006)
        # The far site: 3 hops x 2 ms + ~1890 km + 30 ms penalty = ~55 ms RTT.
        assert 0.05 < model.path(src, far.ip).rtt < 0.06


def test_interconnect_is_shared_by_concurrent_flows():
    # No latency, fast flows, a 2 Mbit/s telecom-unicom interconnect: bandwidth alone decides.
    web = _link_web(hop_ms=0.0, ms_per_100km=0.0, inter_isp_penalty_ms=0.0, flow_kbps=80_000.0,
                    interconnect_kbps=2000.0, interconnect_burst_kb=0.0)
    topo = web.topology
    far = [s for s in topo.normal_sites if s.isp == "unicom"][:4]
    pages = [(s, web.page_path(s, 0)) for s in far]
    results = {}

    def get(k, s, p, src):
        results[k] = fetch(s, st.port, p, source=src)

    with ServerThread(web) as st:
        single = fetch(far[0], st.port, "/", source=topo.agent_address("telecom", "beijing", 7)).seconds
        time.sleep(single)  # let the bucket drain before the concurrent run
        total = sum(len(st.web.respond(s.host, p).body) for s, p in pages)
        t0 = time.perf_counter()
        threads = [threading.Thread(target=get, args=(k, s, p, topo.agent_address("telecom", "beijing", k))) for k, (s, p) in enumerate(pages)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        together = time.perf_counter() - t0
        # Same-ISP flows do not touch the interconnect: far faster for the same bytes.
        t1 = time.perf_counter()
        fetch(far[0], st.port, "/", source=topo.agent_address("unicom", "harbin"))
        local = time.perf_counter() - t1
    rate = 2000 * 125.0
    assert single == pytest.approx(len(st.web.respond(far[0].host, "/").body) / rate, rel=0.3)
    assert together == pytest.approx(total / rate, rel=0.25)
    assert local < single / 4
    assert all(r.status == 200 for r in results.values())
