"""Fetcher contract against the lab web, run on every backend: hostile sites stay bounded."""

import asyncio
import gzip
import time
import tracemalloc
import zlib

import pytest

from agent.fetch import FETCHERS, FetchRequest, FetchSettings, create_fetcher
from agent.fetch.base import BodySink, parse_content_type, parse_retry_after
from agent.fetch.guard import AddressGuard
from agent.links import extract_links
from lab import server as lab_server
from lab.testing import ServerThread, small_topology
from lab.web import Web
from wancrawl import config
from wancrawl.errors import ConfigError
from wancrawl.hostres import HostResolver

MiB = 1024 * 1024
DRIP = 64 * 1024  # bytes the slow-drip site sends, 64 at a time
LAB = ["127.0.0.0/8"]


@pytest.fixture(scope="module")
def lab():
    # time scale 100: the drip site sends 64 B every 10 ms, so its 64 KiB take 10 s: far beyond
    # the 1 s total timeout the test sets, so only that timeout can end the fetch early.
    web = Web(small_topology(gzip_bomb_mb=64, drip_total_bytes=DRIP), seed=5, time_scale=100.0)
    with ServerThread(web, zero_latency=True) as st:
        st.source = st.web.topology.agent_address("telecom", "beijing", 0)
        yield st


@pytest.fixture(params=sorted(FETCHERS))
def backend(request):
    return request.param


def settings(lab, **kw):
    return FetchSettings(**({"source_ip": lab.source, "allow_networks": LAB} | kw))


def run_fetches(backend, st, reqs, resolver=None, *, in_order=False):
    async def go():
        f = create_fetcher(backend, st, resolver)
        try:
            if in_order:  # one after the other on one fetcher: a kept-alive connection would be reused
                return [await f.fetch(r) for r in reqs]
            return await asyncio.gather(*(f.fetch(r) for r in reqs))
        finally:
            await f.close()

    return asyncio.run(go())


@pytest.fixture
def sinks(monkeypatch):
    """Every BodySink a backend makes, recording what it was fed: reads after the sink said
    stop, and how many wire bytes the fetcher read, come from here rather than from a clock."""
    made = []

    class RecordingSink(BodySink):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.fed: list[tuple[int, bool]] = []  # (chunk length, feed's answer)
            made.append(self)

        def feed(self, chunk):
            go_on = super().feed(chunk)
            self.fed.append((len(chunk), go_on))
            return go_on

    for name in FETCHERS:
        monkeypatch.setattr(f"agent.fetch.{name}_fetcher.BodySink", RecordingSink)
    return made


def stopped_at_first_no(sink):
    """The fetcher read nothing after the sink's first False, which came on its last chunk."""
    answers = [go_on for _, go_on in sink.fed]
    return answers and answers[-1] is False and all(answers[:-1])


def req(site, path="/", ip=True):
    return FetchRequest(site.base_url + path, site.host, site.ip if ip else None)


def hostile(lab, kind):
    return lab.web.topology.hostile_sites[kind]


def test_normal_page_headers_ip_timings_and_source_address(lab, backend):
    s = lab.web.topology.normal_sites[0]
    n0 = len(lab.server.log)
    t0 = time.time()
    (r,) = run_fetches(backend, settings(lab), [req(s)])
    assert r.error is None and r.truncated is None and r.ok
    assert r.status == 200 and r.reason == "OK" and r.http_version == "HTTP/1.1"
    assert r.body == lab.web.respond(s.host, "/").body and r.raw_length == len(r.body)
    assert ("Content-Type", "text/html; charset=utf-8") in r.headers
    assert (r.content_type, r.charset, r.location, r.retry_after) == ("text/html", "utf-8", None, None)
    sent = {k.lower(): v for k, v in r.request_headers}
    assert sent["host"] == f"{s.host}:{lab.port}"
    assert sent["user-agent"].startswith("wancrawl/") and sent["accept-encoding"] == "gzip, deflate"
    assert r.ip == s.ip
    assert t0 <= r.started_at <= r.ended_at <= time.time() and 0 < r.ttfb <= r.ended_at - r.started_at + 0.01
    entries = [e for e in lab.server.log[n0:] if e.host == s.host]
    assert [(e.client, e.path) for e in entries] == [(lab.source, "/")]  # the bound source address


def test_redirects_are_returned_not_followed(lab, backend):
    loop, chain = hostile(lab, "redirect-loop"), hostile(lab, "redirect-chain")
    n0 = len(lab.server.log)
    a, b, c = run_fetches(backend, settings(lab), [req(loop), req(loop, "/loop/b"), req(chain, "/hop/3")])
    assert (a.status, a.location) == (302, "/loop/a")
    assert (b.status, b.location) == (302, loop.base_url + "/loop/a")
    assert (c.status, c.location) == (307, "/hop/4")
    assert len(lab.server.log) - n0 == 3  # one request each: nothing followed


@pytest.mark.timeout(30)  # a hang guard only: the assertions below say what cut the fetch
def test_slow_drip_is_cut_by_total_timeout(lab, backend):
    # The drip sends a byte long before any read timeout: only the total timeout can end it early.
    (r,) = run_fetches(backend, settings(lab, total_timeout=1.0, read_timeout=3600.0), [req(hostile(lab, "slow-drip"))])
    assert r.status == 200 and r.truncated == "time" and r.error is None
    assert r.error_detail == "total timeout 1.0s"
    assert 0 < len(r.body) < DRIP and r.raw_length == len(r.body)  # some of the drip, not all of it
    assert r.body.startswith(b"<!DOCTYPE html>") and not r.body.rstrip().endswith(b"</html>")


@pytest.mark.timeout(30)
def test_never_answering_site_times_out(lab, backend):
    # Each run leaves only one timeout short enough to end the wait; the detail names which one did.
    (r,) = run_fetches(backend, settings(lab, read_timeout=0.3, total_timeout=3600.0), [req(hostile(lab, "never"))])
    assert (r.status, r.error, r.body, r.truncated) == (0, "timeout", b"", None)
    assert r.error_detail == "read timeout 0.3s"
    (r,) = run_fetches(backend, settings(lab, total_timeout=0.3, read_timeout=3600.0), [req(hostile(lab, "never"))])
    assert (r.status, r.error, r.body, r.truncated) == (0, "timeout", b"", None)
    assert r.error_detail == "total timeout 0.3s"


@pytest.mark.timeout(30)
def test_huge_body_truncated_at_cap(lab, backend, sinks, monkeypatch):
    s = hostile(lab, "huge")
    dialled = []  # connections the lab accepted for the huge site
    made = lab_server._Conn.connection_made

    def connection_made(conn, transport):
        made(conn, transport)
        if conn.site_ip == s.ip:
            dialled.append(conn)

    monkeypatch.setattr(lab_server._Conn, "connection_made", connection_made)
    n0 = len(lab.server.log)
    a, b = run_fetches(backend, settings(lab, max_body_bytes=MiB), [req(s), req(s)], in_order=True)
    for r in (a, b):
        assert (r.status, r.truncated, r.error) == (200, "length", None)
        assert len(r.body) == r.raw_length == MiB and r.body.startswith(b"<!DOCTYPE html>")
    # Bytes read are bounded: every chunk but the last fit under the 1 MiB cap, and nothing was
    # read after the sink said stop (not the other 9 MiB of the 10 MiB body).
    assert len(sinks) == 2
    for sk in sinks:
        assert stopped_at_first_no(sk), sk.fed
        assert sum(n for n, _ in sk.fed[:-1]) < MiB <= sum(n for n, _ in sk.fed)
    # The rest of the body was not drained to keep the connection: the second fetch dialled anew.
    assert len([e for e in lab.server.log[n0:] if e.host == s.host]) == 2
    assert len(dialled) == 2


@pytest.mark.timeout(30)
def test_gzip_bomb_stopped_by_decoded_cap(lab, backend, sinks):
    tracemalloc.start()
    try:
        (r,) = run_fetches(backend, settings(lab, max_decoded_bytes=2 * MiB), [req(hostile(lab, "gzip-bomb"))])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (r.status, r.truncated, r.error) == (200, "decoded", None)
    assert len(r.body) == 2 * MiB and r.body.startswith(b"<!DOCTYPE html>")
    assert r.raw_length < 256 * 1024  # stopped after a few wire chunks of a 64 MiB bomb
    (sk,) = sinks
    assert stopped_at_first_no(sk), sk.fed  # and read nothing more off the wire after that
    assert sum(n for n, _ in sk.fed) == r.raw_length
    assert peak < 24 * MiB


def test_wrong_content_types_are_reported(lab, backend):
    s = hostile(lab, "wrong-type")
    png, octet, none = run_fetches(backend, settings(lab), [req(s, "/binary.html"), req(s, "/document"), req(s, "/no-type")])
    assert png.content_type == "text/html" and png.body.startswith(b"\x89PNG")
    assert (octet.content_type, octet.charset) == ("application/octet-stream", None)
    assert (none.content_type, none.charset, none.status) == (None, None, 200)


def test_throttle_and_server_errors(lab, backend):
    t, e = hostile(lab, "throttle"), hostile(lab, "server-error")
    busy, unavail, maint, err, empty, gw = run_fetches(
        backend, settings(lab),
        [req(t, "/busy"), req(t, "/unavailable"), req(t, "/maintenance"), req(e, "/error"), req(e, "/empty-500"), req(e, "/bad-gateway")],
    )
    assert (busy.status, busy.retry_after) == (429, 1.0)  # 10 s / time scale 100, at least 1
    assert (unavail.status, unavail.retry_after) == (503, 2.0)
    assert maint.status == 503 and maint.retry_after > 365 * 86400  # an HTTP-date in 2099
    assert (err.status, empty.status, empty.body, gw.status) == (500, 500, b"", 502)
    assert all(r.error is None and not r.ok for r in (busy, unavail, maint, err, empty, gw))


def test_gbk_page_links_extracted(lab, backend):
    s = hostile(lab, "gbk")
    # (/latin1.html is not used: the lab cannot encode its own link text in latin-1.)
    page, mislabel = run_fetches(backend, settings(lab), [req(s), req(s, "/mislabel.html")])
    assert page.charset == "gbk"
    res = extract_links(page.body, page.url, page.charset)
    assert res.charset == "gb18030"
    assert res.links == [s.base_url + "/", s.base_url + "/gb/1.html", s.base_url + "/latin1.html", s.base_url + "/mislabel.html"]
    # Says UTF-8, is GBK: the text is garbled, the ASCII links survive.
    assert mislabel.charset == "utf-8"
    assert extract_links(mislabel.body, mislabel.url, mislabel.charset).links == [s.base_url + "/"]


def test_guard_refuses_loopback_unless_allowed(lab, backend):
    s = lab.web.topology.normal_sites[1]
    n0 = lab.server.counters.get(s.host, {}).get("requests", 0)
    (r,) = run_fetches(backend, settings(lab, allow_networks=[]), [req(s)])
    assert (r.status, r.error, r.ip) == (0, "forbidden_address", s.ip) and "loopback" in r.error_detail
    assert lab.server.counters.get(s.host, {}).get("requests", 0) == n0  # never dialled
    (r,) = run_fetches(backend, settings(lab, allow_networks=["127.1.0.0/16"]), [req(s)])
    assert r.ok if s.ip.startswith("127.1.") else r.error == "forbidden_address"
    (r,) = run_fetches(backend, settings(lab), [req(s)])
    assert r.ok


def test_resolution_through_resolver_is_guarded(lab, backend):
    s = lab.web.topology.normal_sites[2]
    res = HostResolver({s.host: s.ip}, system_dns=False)
    ok, missing = run_fetches(backend, settings(lab), [req(s, ip=False), FetchRequest("http://nowhere.lab/", "nowhere.lab")], res)
    assert ok.ok and ok.ip == s.ip
    assert (missing.status, missing.error) == (0, "dns")
    # A "public" name resolving to loopback is refused on the address actually dialled.
    evil = HostResolver({"www.example.com": "127.0.0.1"}, system_dns=False)
    (r,) = run_fetches(backend, settings(lab, allow_networks=[]), [FetchRequest("http://www.example.com/", "www.example.com")], evil)
    assert (r.error, r.ip) == ("forbidden_address", "127.0.0.1")


def test_connection_refused_is_connect_error(lab, backend):
    s = lab.web.topology.normal_sites[0]
    url = f"http://{s.host}:{lab.port + 1 if lab.port < 65535 else lab.port - 1}/"
    (r,) = run_fetches(backend, settings(lab), [FetchRequest(url, s.host, s.ip)])
    assert (r.status, r.error) == (0, "connect")


def test_one_connection_per_host_by_default(lab, backend):
    s = lab.web.topology.normal_sites[3]
    paths = ["/"] + [lab.web.page_path(s, i) for i in range(1, min(6, lab.web.pages(s)))]
    n0 = len(lab.server.log)
    rs = run_fetches(backend, settings(lab), [req(s, p) for p in paths])
    assert all(r.ok for r in rs)
    ports = {e.client_port for e in lab.server.log[n0:] if e.host == s.host}
    assert len(ports) == 1  # requests queued on one kept-alive connection


def test_registry_and_config():
    with pytest.raises(ConfigError, match="fetcher"):
        create_fetcher("curl")
    st = config.build(FetchSettings, {"read_timeout": 5, "allow_networks": ["127.0.0.0/8"], "source_ip": "127.1.1.2"}, source="agent.toml")
    assert st.read_timeout == 5.0 and st.max_connections_per_host == 1
    for bad, key in [({"allow_networks": ["127.0.0.0/33"]}, "allow_networks"), ({"total_timeout": 0}, "total_timeout"),
                     ({"source_ip": "nope"}, "source_ip"), ({"accept_encoding": "br"}, "accept_encoding"), ({"fetch": 1}, "fetch")]:
        with pytest.raises(ConfigError, match=key):
            config.build(FetchSettings, bad, source="agent.toml")


def test_guard_policy():
    g = AddressGuard()
    for ip, why in [("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("192.168.0.1", "private"), ("169.254.1.1", "link_local"),
                    ("224.0.0.1", "multicast"), ("0.0.0.0", "unspecified"), ("240.0.0.1", "reserved"), ("::1", "loopback"),
                    ("fe80::1", "link_local"), ("fc00::1", "private"), ("::ffff:127.0.0.1", "loopback"), ("100.64.0.1", "non_global"),
                    ("nonsense", "invalid")]:
        assert g.check(ip) == why, ip
    assert g.check("8.8.8.8") is None and g.check("2001:4860:4860::8888") is None
    g = AddressGuard(["127.0.0.0/8", "fc00::/7"])
    assert g.check("127.9.9.9") is None and g.check("::ffff:127.0.0.1") is None and g.check("fd00::1") is None
    assert g.check("10.0.0.1") == "private"


def _sink(**kw):
    return FetchSettings(**kw)


def test_body_sink_decodes_and_caps():
    data = b"<p>hello</p>" * 1000
    for enc, blob in [("gzip", gzip.compress(data)), ("deflate", zlib.compress(data)), ("deflate", _raw_deflate(data)), ("", data)]:
        sk = BodySink(_sink(), enc)
        for i in range(0, len(blob), 7):
            assert sk.feed(blob[i : i + 7])
        sk.finish()
        assert sk.body == data and sk.truncated is None and sk.raw_length == len(blob)
    sk = BodySink(_sink(max_decoded_bytes=len(data)), "gzip")  # exactly at the cap is not a truncation
    assert sk.feed(gzip.compress(data))
    sk.finish()
    assert sk.truncated is None and sk.body == data
    sk = BodySink(_sink(max_decoded_bytes=100), "gzip")
    assert not sk.feed(gzip.compress(data)) and sk.truncated == "decoded" and sk.body == data[:100]
    sk = BodySink(_sink(), "gzip")
    assert not sk.feed(b"not gzip at all") and sk.error


def _raw_deflate(data):
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


def test_header_parsing():
    assert parse_content_type('Text/HTML; Charset="GBK"') == ("text/html", "gbk")
    assert parse_content_type(None) == (None, None)
    assert parse_retry_after("120") == 120.0 and parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0) == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
