"""Link extraction: lexbor finds what truth expects; base, schemes, charsets, malformed HTML, href cache;
meta refresh, meta robots, rel=nofollow, queries in the page's encoding, the link cap."""

from collections import Counter

import pytest

from agent.crawl.links import _CACHE, MAX_LINKS, choose_charset, extract_links, parse_refresh
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
    # "http://" and "http://:80/no-host" have no host: no URL for a browser (WHATWG) either.
    assert res.invalid == 2 and res.hrefs == 11
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
    assert choose_charset(b'<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">', None) == "cp932"
    assert choose_charset(b"", "no-such-charset") == "utf-8"
    for junk in (b"", b"\x00\xff" * 1000, b"<a href='" + b"x" * 10000, b"<<<>>><a href=http://[::1:80/>", bytes(range(256))):
        extract_links(junk, "http://a.lab/", "utf-8")


def test_href_cache_keeps_base_relative_hrefs_apart():
    # "http:?q" and "http:" are "?q" and "" on an http page (WHATWG): they depend on the page, not
    # only on its directory, as do hrefs with a leading space. Two pages of one directory, in turn.
    _CACHE.clear()
    html = b'<a href="http:?q=1">a</a><a href=" ?r=2">b</a><a href="http:">c</a><a href="https:x">d</a>'
    # A base spelt like its own directory ("http://a.lab/d/") first: its answers are not its
    # directory's (the cache keeps the two kinds of context apart).
    for page in ("http://a.lab/d/", "http://a.lab/d/p1?x", "http://a.lab/d/p2", "http://a.lab/d/p1?x"):
        path = page.split("?")[0]
        assert extract_links(html, page, "utf-8").links == [f"{path}?q=1", f"{path}?r=2", page, "https://x/"]


def test_href_cache_gives_the_same_links_cold_and_warm():
    # Every page three times, the first with an empty href cache: cached answers (shared between
    # pages of a directory) must be the ones canonicalize gives. The CPU per page of this run is
    # a benchmark figure, not a test: bench/parts/link_extraction.py prints it beside its target.
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


# -- meta refresh ----------------------------------------------------------------------------------

@pytest.mark.parametrize("content, expected", [
    ("5; url=/next", (5, "/next")),
    ("0;URL=/a", (0, "/a")),
    ("0; url='/q?x=1'", (0, "/q?x=1")),
    ('0; URL = "/d" tail', (0, "/d")),  # quotes end the URL
    ("  3 /x  ", (3, "/x")),  # no "url=": the rest is the URL
    ("1,/y", (1, "/y")),
    ("0; uRl=/v", (0, "/v")),
    ("0; urlx", (0, "urlx")),  # "url" not followed by "=": a relative URL, as browsers read it
    (".5; url=/w", (0, "/w")),
    ("5", (5, "")),  # a refresh of the page itself
    (" 5 ; ", (5, "")),
    ("0;url=", (0, "")),
    ("url=/z", None),  # no delay: browsers ignore it
    ("-1; url=/n", None),
    ("0x; url=/bad", None),
    ("", None),
])
def test_parse_refresh(content, expected):
    assert parse_refresh(content) == expected


def test_meta_refresh_is_followed_as_a_link():
    html = b"""<html><head><base href="/d/"><META HTTP-EQUIV="Refresh" CONTENT="0; URL='next?p=2'">
    <meta http-equiv="refresh" content="0; url=/second-is-ignored"></head><body><a href="/a">a</a></body></html>"""
    res = extract_links(html, "http://a.lab/page", None)
    assert res.links == ["http://a.lab/d/next?p=2", "http://a.lab/a"]
    assert res.refresh == "http://a.lab/d/next?p=2" and res.hrefs == 1
    # A refresh without a URL reloads the page: not a link (and it still is the first refresh).
    res = extract_links(b'<meta http-equiv="refresh" content="30"><meta http-equiv="refresh" content="0;url=/x">'
                        b'<a href="/a">', "http://a.lab/", None)
    assert res.links == ["http://a.lab/a"] and res.refresh is None
    # Malformed ones are skipped, the first good one wins; schemes count as for hrefs.
    res = extract_links(b'<meta http-equiv="refresh" content="soon; url=/bad"><meta http-equiv="refresh" content="2, /ok">',
                        "http://a.lab/", None)
    assert res.links == ["http://a.lab/ok"] and res.refresh == "http://a.lab/ok"
    res = extract_links(b'<meta http-equiv="refresh" content="0; url=javascript:go()">', "http://a.lab/", None)
    assert res.links == [] and res.dropped_schemes == Counter({"javascript": 1}) and res.refresh is None
    # Only http-equiv=refresh: a <meta name="refresh"> is nothing.
    assert extract_links(b'<meta name="refresh" content="0; url=/x">', "http://a.lab/", None).links == []


# -- meta robots, rel=nofollow -------------------------------------------------------------------------

PAGE = b"""<html><head>%s</head><body><a href="/a">a</a><a href="/b" rel="external NoFollow">b</a>
<map><area href="/c" rel="nofollow"></map><a href="/a">again</a></body></html>"""


@pytest.mark.parametrize("meta, nofollow, noindex", [
    (b'<meta name="robots" content="nofollow">', True, False),
    (b'<meta name="robots" content="noindex">', False, True),
    (b'<meta name="ROBOTS" content="NoIndex, NOFOLLOW">', True, True),
    (b'<meta name="robots" content="none">', True, True),
    (b'<meta name="robots" content="index,follow">', False, False),
    (b'<meta name="robots" content="max-snippet:20 , noarchive,nofollow">', True, False),
    (b'<meta name="wancrawl" content="noindex">', False, True),  # our product token
    (b'<meta name="googlebot" content="none">', False, False),  # another crawler's
    (b'<meta name="description" content="nofollow noindex">', False, False),
    (b'<meta name="robots" content="noindex"><meta name="wancrawl" content="nofollow">', True, True),
])
def test_meta_robots(meta, nofollow, noindex):
    res = extract_links(PAGE % meta, "http://a.lab/", None)
    assert (res.nofollow, res.noindex) == (nofollow, noindex)
    if nofollow:  # page-level nofollow: no links at all, every link element counted
        assert res.links == [] and res.nofollow_skipped == 4 and res.hrefs == 4
    else:
        assert res.links == ["http://a.lab/a", "http://a.lab/b", "http://a.lab/c"] and res.nofollow_skipped == 0


def test_meta_robots_names_and_late_nofollow_and_refresh():
    res = extract_links(PAGE % b'<meta name="mybot" content="nofollow">', "http://a.lab/", None,
                        robots_names={"robots", "mybot"})
    assert res.nofollow and res.links == []
    # A nofollow in <body> after links (a template writing metas late) still drops them.
    res = extract_links(b'<a href="/a">a</a><a href="mailto:x@y">m</a><meta name="robots" content="nofollow"><a href="/b">',
                        "http://a.lab/", None)
    assert res.nofollow and res.links == [] and res.nofollow_skipped == 3 and res.dropped_schemes == Counter()
    # The refresh is the page's redirect, not one of its links: kept under nofollow.
    res = extract_links(PAGE % b'<meta name="robots" content="none"><meta http-equiv="refresh" content="0;url=/moved">',
                        "http://a.lab/", None)
    assert res.links == ["http://a.lab/moved"] and res.nofollow_skipped == 4


def test_rel_nofollow_is_skipped_on_request():
    res = extract_links(PAGE % b"", "http://a.lab/", None, follow_rel_nofollow=False)
    assert res.links == ["http://a.lab/a"] and res.nofollow_skipped == 2 and res.hrefs == 4 and not res.nofollow
    res = extract_links(PAGE % b"", "http://a.lab/", None)  # the default follows them
    assert res.links == ["http://a.lab/a", "http://a.lab/b", "http://a.lab/c"] and res.nofollow_skipped == 0
    # "nofollowing" is not "nofollow"; <link rel="next nofollow"> is skipped too.
    html = b'<link rel="next nofollow" href="/n"><link rel="next" href="/m"><a rel="nofollowing" href="/x">'
    res = extract_links(html, "http://a.lab/", None, follow_rel_nofollow=False, link_rels={"next"})
    assert res.links == ["http://a.lab/m", "http://a.lab/x"] and res.nofollow_skipped == 1


# -- queries in the page's encoding ----------------------------------------------------------------

def test_canonicalize_query_encoding():
    # Path always UTF-8, query in the given encoding (bytes written out by hand from the code tables).
    assert canonicalize("/日本?q=日本", "http://a.lab/", query_encoding="shift_jis") == \
        "http://a.lab/%E6%97%A5%E6%9C%AC?q=%93%FA%96%7B"
    assert canonicalize("/s?q=日本", "http://a.lab/", query_encoding="euc_jp") == "http://a.lab/s?q=%C6%FC%CB%DC"
    assert canonicalize("/s?q=中文", "http://a.lab/", query_encoding="gb2312") == "http://a.lab/s?q=%D6%D0%CE%C4"
    assert canonicalize("/s?q=Привет", "http://a.lab/", query_encoding="cp1251") == "http://a.lab/s?q=%CF%F0%E8%E2%E5%F2"
    # Trail bytes in ASCII: unreserved ones stay ("ア" is 83 41), the rest are escaped ("表" is 95 5C);
    # a character the encoding lacks is sent as &#N; (WHATWG); escapes and spaces as before.
    out = canonicalize("/s?a=ア&b=表&c=☺ x&d=%41%e3", "http://a.lab/", query_encoding="cp932")
    assert out == "http://a.lab/s?a=%83A&b=%95%5C&c=%26%239786%3B%20x&d=A%E3"
    assert canonicalize(out) == out  # stable when canonicalised again (pushed to a peer)
    # UTF-8 (default), UTF-16 pages (WHATWG: UTF-8 for URLs) and unknown labels: UTF-8.
    for enc in ("utf-8", "utf-16-le", "no-such-codec"):
        assert canonicalize("/s?q=日本", "http://a.lab/", query_encoding=enc) == "http://a.lab/s?q=%E6%97%A5%E6%9C%AC"


def test_query_is_encoded_in_the_page_encoding():
    sjis = '<html><body><a href="/search?q=日本">検索</a><a href="/日本">p</a></body></html>'.encode("shift_jis")
    res = extract_links(sjis, "http://a.lab/", "Shift_JIS")  # charset from the Content-Type header
    assert res.charset == "cp932"
    assert res.links == ["http://a.lab/search?q=%93%FA%96%7B", "http://a.lab/%E6%97%A5%E6%9C%AC"]
    sniffed = b'<meta http-equiv="Content-Type" content="text/html; charset=shift_jis">' + sjis
    assert extract_links(sniffed, "http://a.lab/", None).links[0] == "http://a.lab/search?q=%93%FA%96%7B"
    # NEC row 13 ("①" is 87 40): WHATWG Shift_JIS is Windows-31J, not JIS X 0208 alone.
    assert extract_links('<a href="/s?q=①">'.encode("cp932"), "http://a.lab/", "shift_jis").links == ["http://a.lab/s?q=%87%40"]
    euc = '<meta charset="euc-jp"><a href="?q=日本">x</a>'.encode("euc_jp")
    assert extract_links(euc, "http://a.lab/p?z=1", None).links == ["http://a.lab/p?q=%C6%FC%CB%DC"]
    gb = '<a href="http://b.lab/s?wd=中文">x</a>'.encode("gb2312")
    assert extract_links(gb, "http://a.lab/", "gb2312").links == ["http://b.lab/s?wd=%D6%D0%CE%C4"]
    cyr = '<a href="/s?q=Привет">x</a>'.encode("cp1251")
    assert extract_links(cyr, "http://a.lab/", "windows-1251").links == ["http://a.lab/s?q=%CF%F0%E8%E2%E5%F2"]
    # <base> and refresh queries too.
    html = '<base href="/b/?q=日本"><meta http-equiv="refresh" content="0;url=?r=本">'.encode("shift_jis")
    res = extract_links(html, "http://a.lab/", "shift_jis")
    assert res.base_used == "http://a.lab/b/?q=%93%FA%96%7B" and res.links == ["http://a.lab/b/?r=%96%7B"]
    # The href cache keeps pages of different encodings apart: same href, same directory.
    utf8 = '<a href="/search?q=日本">x</a>'.encode()
    _CACHE.clear()
    assert extract_links(utf8, "http://a.lab/", "utf-8").links == ["http://a.lab/search?q=%E6%97%A5%E6%9C%AC"]
    assert extract_links(sjis, "http://a.lab/", "shift_jis").links[0] == "http://a.lab/search?q=%93%FA%96%7B"
    assert extract_links(utf8, "http://a.lab/", "utf-8").links == ["http://a.lab/search?q=%E6%97%A5%E6%9C%AC"]


# -- the cap ------------------------------------------------------------------------------------------

def test_max_links_caps_output_and_work():
    many = b"".join(b'<a href="/p/%d">x</a>' % i for i in range(100))
    res = extract_links(many, "http://a.lab/", None, max_links=10)
    assert res.links == [f"http://a.lab/p/{i}" for i in range(10)] and res.over_cap == 90 and res.hrefs == 10
    res = extract_links(many, "http://a.lab/", None, max_links=None)
    assert len(res.links) == 100 and res.over_cap == 0
    # Repeated hrefs never fill the cap: the walk stops after 4 elements per link of the cap.
    same = b'<a href="/x">x</a>' * 100 + b'<a href="/late">'
    res = extract_links(same, "http://a.lab/", None, max_links=5)
    assert res.links == ["http://a.lab/x"] and res.hrefs == 20 and res.over_cap == 81
    # A huge body is not even parsed past the budget's last link tag: a <base> after it is unseen.
    late_base = b'<a href="x">' * 100 + b'<base href="http://other.lab/">'
    assert extract_links(late_base, "http://a.lab/d/", None, max_links=5).base_used == "http://a.lab/d/"
    assert extract_links(late_base, "http://a.lab/d/", None, max_links=None).base_used == "http://other.lab/"
    # The default cap is Heritrix's 6,000.
    assert MAX_LINKS == 6000
    big = b"".join(b'<a href="/%d">' % i for i in range(MAX_LINKS + 500))
    res = extract_links(big, "http://a.lab/", None)
    assert len(res.links) == 6000 and res.links[-1] == "http://a.lab/5999" and res.over_cap == 500
