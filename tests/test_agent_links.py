"""Link extraction: lexbor finds what truth expects; base, schemes, charsets, malformed HTML, href cache."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.links import _CACHE, _fast, _split_base, choose_charset, extract_links
from lab.testing import small_topology
from lab.web import Web
from wancrawl.urls import InvalidUrl, canonicalize

WEB = Web(small_topology(), seed=2)


def _truth_links(url, hrefs):
    out = []
    for h in hrefs:
        try:
            u = canonicalize(h, url)
        except InvalidUrl:
            continue
        if u not in out:
            out.append(u)
    return out


def test_lab_pages_match_truth():
    for s in WEB.topology.normal_sites[:8]:
        for i in range(min(WEB.pages(s), 15)):
            path = WEB.page_path(s, i)
            url = canonicalize(s.base_url + path)
            res = extract_links(WEB.respond(s.host, path).body, url, "utf-8")
            assert res.links == _truth_links(url, WEB.links(s, i)), url
            assert res.dropped_schemes == Counter({"mailto": 1, "javascript": 1}) and res.invalid == 0


def test_bad_schemes_and_malformed_hostile_pages():
    s = WEB.topology.hostile_sites["bad-schemes"]
    res = extract_links(WEB.respond(s.host, "/").body, s.base_url + "/", None)
    assert res.links == _truth_links(s.base_url + "/", WEB.resolve(s.host, "/").links)
    assert s.base_url + "/ok/1" in res.links and s.base_url + "/ok/2" in res.links
    assert res.dropped_schemes == Counter({"javascript": 2, "mailto": 1, "data": 1, "tel": 1, "ftp": 1, "about": 1})
    # canonicalize resolves "http://" and "http:///no-host" against the page, as truth does.
    assert res.invalid == 0 and res.hrefs == 11
    m = WEB.topology.hostile_sites["malformed"]
    res = extract_links(WEB.respond(m.host, "/").body, m.base_url + "/", "utf-8")
    assert res.links == _truth_links(m.base_url + "/", WEB.resolve(m.host, "/").links)
    assert not any("not-a-link" in u or "commented-out" in u for u in res.links)


def test_base_href_area_link_rels_and_dedup():
    html = b"""<html><head><base href="http://Other.LAB/dir/sub/"><link rel="next" href="p2"><link rel="stylesheet" href="s.css">
    </head><body><a href="x">1</a><a href="x#frag">dup</a><map><area href="/top"></map><a>no href</a><a href="">self</a></body></html>"""
    res = extract_links(html, "http://a.lab/page", None)
    assert res.base_used == "http://other.lab/dir/sub/"
    assert res.links == ["http://other.lab/dir/sub/x", "http://other.lab/top"]
    assert res.invalid == 1  # the empty href
    res = extract_links(html, "http://a.lab/page", None, link_rels={"next"})
    assert res.links[0] == "http://other.lab/dir/sub/p2" and not any(u.endswith(".css") for u in res.links)
    bad_base = b'<base href="javascript:x"><a href="y">'
    assert extract_links(bad_base, "http://a.lab/d/p", None).links == ["http://a.lab/d/y"]
    assert extract_links(b'<a href="/b?z=1&a=2">', "http://a.lab/", None, sort_query=True).links == ["http://a.lab/b?a=2&z=1"]


def test_charsets_and_garbage_never_crash():
    gbk = '<html><head><meta charset="gbk"></head><body><a href="/中文">链接</a></body></html>'.encode("gbk")
    res = extract_links(gbk, "http://a.lab/", None)
    assert res.charset == "gb18030" and res.links == [canonicalize("/中文", "http://a.lab/")]
    assert choose_charset(b"\xef\xbb\xbf<html>", "gbk") == "utf-8"  # BOM wins
    assert choose_charset(b'<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">', None) == "shift_jis"
    assert choose_charset(b"", "no-such-charset") == "utf-8"
    for junk in (b"", b"\x00\xff" * 1000, b"<a href='" + b"x" * 10000, b"<<<>>><a href=http://[::1:80/>", bytes(range(256))):
        extract_links(junk, "http://a.lab/", "utf-8")


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet="abcAB09-_./?&=#%:@ ~hHtTpPsS", max_size=40),
    st.sampled_from(["http://a.lab/", "http://a.lab:8080/d/e.html?q=1", "https://x.y.lab/a/b/"]),
    st.booleans(),
)
def test_fast_path_agrees_with_canonicalize(href, base, sort_query):
    origin, directory = _split_base(base)
    fast = _fast(href, origin, directory, sort_query)
    if fast is None:
        return
    assert fast == canonicalize(href, base, sort_query=sort_query), href


def test_fast_path_takes_the_plain_hrefs_of_real_pages():
    # The property test above only checks agreement when _fast answers: check that it does.
    origin, directory = _split_base("http://a.lab:8080/d/e.html")
    for href in ("x.html", "/x/y.html?q=1", "//b.lab/p", "http://b.lab:8080/p", "sub/z.html#f"):
        assert _fast(href, origin, directory, False) is not None, href
    hrefs = [h for s in WEB.topology.normal_sites[:10] for i in range(min(WEB.pages(s), 10)) for h in WEB.links(s, i)]
    fast = sum(1 for h in hrefs if _fast(h, *_split_base("http://www.x.lab:8080/docs/p.html"), False) is not None)
    assert fast / len(hrefs) > 0.5, f"only {fast}/{len(hrefs)} hrefs take the fast path"


def test_href_cache_gives_the_same_links_cold_and_warm():
    # Every page three times, the first with an empty href cache: cached answers (shared between
    # pages of a directory) must be the ones canonicalize gives. The CPU per page of this run is
    # a benchmark figure, not a test: bench/link_extraction.py prints it beside its target.
    pages = []
    for s in WEB.topology.normal_sites[:10]:
        for i in range(min(WEB.pages(s), 10)):
            p = WEB.page_path(s, i)
            pages.append((canonicalize(s.base_url + p), WEB.respond(s.host, p).body, WEB.links(s, i)))
    _CACHE.clear()
    cold = [extract_links(body, url, "utf-8") for url, body, _ in pages]
    for (url, _, hrefs), res in zip(pages, cold):
        assert res.links == _truth_links(url, hrefs), url
    for _ in range(2):
        warm = [extract_links(body, url, "utf-8") for url, body, _ in pages]
        assert [(r.links, r.dropped_schemes, r.invalid, r.hrefs) for r in warm] == \
            [(r.links, r.dropped_schemes, r.invalid, r.hrefs) for r in cold]
