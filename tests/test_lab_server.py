"""The lab server over real sockets: hostile sites, link-model delays, interconnect sharing, logs.

Delays are checked on the server's model clock, not on the wall clock: a VirtualClock stands in
for LabServer.model_now / sleep_until, records every wake-up the server asks for and returns at
once, so the schedule is exact and a busy machine cannot change it. What those schedules come
to in wall time is measured in bench/lab_linkmodel.py.
"""

import dataclasses
import gzip
import http.client
import re
import socket
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


class VirtualClock:
    """The server's model clock, by hand: sleep_until records the wake-up and returns at once,
    advancing the clock to it, or (frozen) leaving it where it is, so every request arrives at
    the same model instant as if all were sent together."""

    def __init__(self, frozen: bool = False):
        self.now = 0.0
        self.frozen = frozen
        self.wakes: list[float] = []

    def install(self, monkeypatch, server):
        monkeypatch.setattr(server, "model_now", lambda: self.now)
        monkeypatch.setattr(server, "sleep_until", self.sleep_until)
        return self

    async def sleep_until(self, model_t: float) -> None:
        self.wakes.append(model_t)
        if not self.frozen:
            self.now = max(self.now, model_t)

    def take(self) -> list[float]:
        out, self.wakes = self.wakes, []
        return out


def raw_get(sock, host, target="/"):
    """One GET on an open socket: (head, body, bytes on the wire for the response)."""
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    while len(body) < n:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    assert len(body) == n  # nothing beyond the declared length
    return head, body, len(head) + 4 + n


def model_wakes(flow, now, nbytes):
    """The wake-ups the link model gives one response of `nbytes` on `flow` arriving at `now`:
    the first byte after the RTT(s), then one per chunk of pacing."""
    t = flow.response_start(now)
    out = [t]
    step = flow.model.spec.chunk_bytes
    for off in range(0, nbytes, step):
        t = flow.send(min(step, nbytes - off), t)
        out.append(t)
    return out


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


def test_slow_drip_and_never(lab, monkeypatch):
    s = hostile(lab, "slow-drip")
    clock = VirtualClock().install(monkeypatch, lab.server)
    want = lab.web.respond(s.host, "/")
    assert (want.mode, len(want.body)) == ("drip", 2048)
    sock = connect(s, lab.port, OUTSIDE)
    head, body, _ = raw_get(sock, s.host)
    # The drip's last pause comes after its last bytes: a second request on the connection is
    # answered only once the drip is over, so its answer means the schedule is complete.
    assert raw_get(sock, s.host, "/robots.txt")[0].startswith(b"HTTP/1.1 200 ")
    sock.close()
    assert head.startswith(b"HTTP/1.1 200 ") and body == want.body
    # 2048 bytes, 64 bytes per model second: one wake-up a model second after each 64 bytes,
    # 32 model s in all (0.32 s wall at time scale 100; bench/lab_linkmodel.py measures it).
    assert clock.take() == [float(k) for k in range(1, 33)]
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


def test_server_paces_responses_by_the_model(monkeypatch):
    web = _link_web()
    topo = web.topology
    near = next(s for s in topo.normal_sites if (s.isp, s.city) == ("telecom", "beijing"))
    far = next(s for s in topo.normal_sites if (s.isp, s.city) == ("unicom", "guangzhou"))
    src = topo.agent_address("telecom", "beijing")
    model = LinkModel(topo)  # a second model, driven through the same requests by hand
    with ServerThread(web) as st:
        web = st.web  # moved to the server's port
        clock = VirtualClock().install(monkeypatch, st.server)
        for site in (near, far):
            flow = model.flow(src, site.ip)
            sock = connect(site, st.port, src)
            for first in (True, False):  # a new connection, then the same one kept alive
                now = clock.now
                _, body, nbytes = raw_get(sock, site.host)
                assert body == web.respond(site.host, "/").body
                wakes = clock.take()
                assert wakes == model_wakes(flow, now, nbytes)
                # On this idle network that is the model's figure for one response.
                assert wakes[-1] - now == pytest.approx(model.expected_time(src, site.ip, nbytes, first=first), rel=1e-9)
            sock.close()
    spec = topo.spec.link
    # The near site: one hop, no distance; a new connection pays two RTTs before the first byte.
    assert model.path(src, near.ip).rtt == pytest.approx(spec.hop_ms / 1000)
    assert model.expected_time(src, near.ip, 0) == pytest.approx(2 * spec.hop_ms / 1000)
    # The far site: 3 hops x 2 ms + ~1890 km + 30 ms penalty = ~55 ms RTT.
    km = topo.distance_km("beijing", "guangzhou")
    far_rtt = (3 * spec.hop_ms + km / 100 * spec.ms_per_100km + spec.inter_isp_penalty_ms) / 1000
    assert model.path(src, far.ip).rtt == pytest.approx(far_rtt) and 0.05 < far_rtt < 0.06


def test_interconnect_is_shared_by_concurrent_flows(monkeypatch):
    # No latency, fast flows, a 2 Mbit/s telecom-unicom interconnect: bandwidth alone decides.
    web = _link_web(hop_ms=0.0, ms_per_100km=0.0, inter_isp_penalty_ms=0.0, flow_kbps=80_000.0,
                    interconnect_kbps=2000.0, interconnect_burst_kb=0.0)
    topo = web.topology
    far = [s for s in topo.normal_sites if s.isp == "unicom"][:4]
    rate, flow_rate = 2000 * 125.0, 80_000 * 125.0  # bytes per second
    with ServerThread(web) as st:
        web = st.web  # moved to the server's port
        # A frozen clock: every request arrives at model time 0, as if the four were sent at once.
        clock = VirtualClock(frozen=True).install(monkeypatch, st.server)
        sizes, ends = [], []
        for k, s in enumerate(far):  # four telecom clients, four connections, four unicom sites
            sock = connect(s, st.port, topo.agent_address("telecom", "beijing", k))
            _, body, nbytes = raw_get(sock, s.host, web.page_path(s, 0))
            sock.close()
            assert body == web.respond(s.host, web.page_path(s, 0)).body
            sizes.append(nbytes)
            ends.append(clock.take()[-1])
        # Same-ISP flows do not touch the interconnect: for the same bytes, only their own pacing.
        sock = connect(far[0], st.port, topo.agent_address("unicom", "harbin"))
        _, _, local_bytes = raw_get(sock, far[0].host, web.page_path(far[0], 0))
        sock.close()
        local = clock.take()[-1]
    # One bucket for the ISP pair: each flow finishes when all bytes before it and its own have
    # crossed at 250 KB/s; had each connection its own bucket, each would end at its size / rate.
    cumulative = [sum(sizes[: k + 1]) for k in range(len(sizes))]
    assert ends == pytest.approx([c / rate for c in cumulative], rel=1e-9)
    assert local_bytes == sizes[0] and local == pytest.approx(local_bytes / flow_rate, rel=1e-9)
    assert local * 4 < ends[0]  # 40x: 10 MB/s of the flow vs 250 KB/s of the interconnect
    # The model on its own says the same for flows interleaved chunk by chunk from time 0.
    model = LinkModel(topo)
    flows = [model.flow(topo.agent_address("telecom", "beijing", k), s.ip) for k, s in enumerate(far)]
    step, sent, done = model.spec.chunk_bytes, [0] * 4, [0.0] * 4
    while any(sent[k] < sizes[k] for k in range(4)):
        for k, f in enumerate(flows):
            if sent[k] < sizes[k]:
                n = min(step, sizes[k] - sent[k])
                done[k] = f.send(n, done[k])
                sent[k] += n
    assert max(done) == pytest.approx(sum(sizes) / rate, rel=1e-9)
    assert model.expected_time(topo.agent_address("telecom", "beijing", 7), far[0].ip, sizes[0]) == pytest.approx(sizes[0] / rate, rel=1e-9)


# --- hostile sites of issue 11, over sockets -----------------------------------------------------

def read_to_eof(sock):
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_session_trap_over_the_wire(lab):
    s = hostile(lab, "session-trap")
    want = lab.web.respond(s.host, "/shop/1.html?sid=0123456789abcdef")
    r = fetch(s, lab.port, "/shop/1.html?sid=0123456789abcdef")
    assert r.status == 200 and r.body == want.body and r.headers["content-type"] == "text/html; charset=utf-8"
    hrefs = [a.attributes["href"] for a in LexborHTMLParser(r.body.decode()).css("a[href]")]
    assert len(hrefs) == 10_005 and len({h for h in hrefs if "?sid=" in h}) == 10_000
    assert fetch(s, lab.port, "/shop/1.html?x=1").status == 404


def test_robots_503_while_the_lab_is_young(lab, monkeypatch):
    s = hostile(lab, "robots-503")
    clock = VirtualClock().install(monkeypatch, lab.server)  # model seconds since the server started
    got = []
    for now in (0.0, 19.5, 20.0, 500.0):
        clock.now = now
        r = fetch(s, lab.port, "/robots.txt", source=OUTSIDE)
        got.append((r.status, r.headers["content-type"], r.body))
    down = (503, "text/plain", b"robots.txt is not available yet\n")
    up = (200, "text/plain", b"User-agent: *\nDisallow: /private/\n")
    assert got == [down, down, up, up]
    clock.now = 0.0
    assert fetch(s, lab.port, "/", source=OUTSIDE).status == 200  # the pages are there all along
    assert fetch(s, lab.port, "/private/1.html", source=OUTSIDE).status == 200
    mine = [e for e in lab.server.log if e.host == s.host]
    assert [(e.path, e.status) for e in mine] == [("/robots.txt", 503)] * 2 + [("/robots.txt", 200)] * 2 + [("/", 200), ("/private/1.html", 200)]
    # The steady-state robots.txt is what the checks hold a crawler to.
    assert [v.entry.path for v in checks.robots_violations(mine, checks.web_robots(lab.web))] == ["/private/1.html"]


def test_retry_forever(lab):
    s = hostile(lab, "retry-forever")
    for _ in range(3):
        r = fetch(s, lab.port, "/wait")
        assert r.status == 429 and r.headers["retry-after"] == "36"  # 3600 model s at time scale 100
    assert [fetch(s, lab.port, p).status for p in ("/", "/a.html", "/b.html", "/c.html")] == [200] * 4


@pytest.mark.parametrize("source", [OUTSIDE, "agent"])
def test_length_lie_sends_a_body_longer_than_its_content_length(lab, monkeypatch, source):
    s = hostile(lab, "length-lie")
    if source == "agent":  # through the link model's paced path too (a virtual clock: no waiting)
        VirtualClock().install(monkeypatch, lab.server)
        source = lab.web.topology.agent_address(s.isp, s.city)
    body = lab.web.respond(s.host, "/liar.html").body
    sock = connect(s, lab.port, source)
    # Keep-alive asked for, a second request pipelined: the server still closes after the lie.
    sock.sendall(f"GET /liar.html HTTP/1.1\r\nHost: {s.host}\r\n\r\nGET / HTTP/1.1\r\nHost: {s.host}\r\n\r\n".encode())
    data = read_to_eof(sock)
    sock.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.split(b"\r\n") == [
        b"HTTP/1.1 200 OK", b"Content-Type: text/html; charset=utf-8", b"Content-Length: 100",
        b"Server: wancrawl-lab", b"Connection: close",
    ]
    assert rest == body and len(body) > 5000  # the whole body, nothing after it
    # A client honouring the length reads 100 bytes, and in them one link.
    r = fetch(s, lab.port, "/liar.html")
    assert r.body == body[:100]
    assert [a.attributes["href"] for a in LexborHTMLParser(r.body.decode()).css("a[href]")] == ["/kept.html"]
    head = http.client.HTTPConnection(s.ip, lab.port, timeout=5)
    head.request("HEAD", "/liar.html", headers={"Host": s.host})
    h = head.getresponse()
    assert h.getheader("content-length") == "100" and h.read() == b""
    head.close()


def test_many_links_meta_robots_and_shift_jis_over_the_wire(lab):
    s = hostile(lab, "many-links")
    r = fetch(s, lab.port, "/")
    assert r.status == 200 and r.body == lab.web.many_links_body() and int(r.headers["content-length"]) == len(r.body)
    assert fetch(s, lab.port, "/gone/7.html").status == 404 and fetch(s, lab.port, "/real/1.html").status == 200
    s = hostile(lab, "meta-robots")
    r = fetch(s, lab.port, "/refresh")
    assert r.body == lab.web.respond(s.host, "/refresh").body
    assert b'<meta http-equiv="refresh" content="0; url=/refreshed">' in r.body
    assert fetch(s, lab.port, "/refreshed").status == 200
    assert b'<meta name="robots" content="nofollow">' in fetch(s, lab.port, "/nofollow.html").body
    assert b'<meta name="robots" content="noindex">' in fetch(s, lab.port, "/noindex.html").body
    assert b'<a href="/rel/skipped.html" rel="nofollow">' in fetch(s, lab.port, "/rel.html").body
    s = hostile(lab, "shift-jis")
    r = fetch(s, lab.port, "/")
    assert r.headers["content-type"] == "text/html; charset=Shift_JIS" and r.body == lab.web.respond(s.host, "/").body
    assert '<a href="/search?q=日本">'.encode("shift_jis") in r.body
    statuses = [fetch(s, lab.port, t).status for t in (
        "/search?q=%93%FA%96%7B", "/search?q=%93%fa%96%7b", "/search?q=%E6%97%A5%E6%9C%AC",
        "/%E6%97%A5%E6%9C%AC.html", "/%93%FA%96%7B.html")]
    assert statuses == [200, 200, 404, 200, 404]
