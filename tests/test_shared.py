"""The shared package: URL and host canonicalisation, strict typed config, host resolution."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import ada_url
import can_ada
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wancrawl.config import build, override
from wancrawl.errors import ConfigError, InvalidArgument
from wancrawl.hostres import HostResolver, parse_hosts_file
from wancrawl.urls import (
    BaseUrl, InvalidUrl, UnsupportedScheme, canonical_host, canonicalize, host_of, host_of_canonical, split_target,
)


@pytest.mark.parametrize(
    "raw, want",
    [
        ("HTTP://Example.COM:80/a/./b/../c?x=1#frag", "http://example.com/a/c?x=1"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/", "https://example.com:8443/"),
        ("http://example.com/%7euser/%2fx", "http://example.com/~user/%2Fx"),
        ("http://bücher.de/", "http://xn--bcher-kva.de/"),
        ("http://user:pw@example.com./p", "http://example.com/p"),
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
    ],
)
def test_canonicalize(raw, want):
    assert canonicalize(raw) == want


def test_canonicalize_relative_sorted_and_rejected():
    assert canonicalize("../d?b=2&a=1", base="http://h.cn/a/b/c", sort_query=True) == "http://h.cn/a/d?a=1&b=2"
    for bad in ("mailto:x@y.cn", "javascript:void(0)", "data:text/html,hi", "ftp://h/"):
        with pytest.raises(UnsupportedScheme):
            canonicalize(bad)
    for bad in ("", "/relative", "http://", "http://exa mple.com/", "http://h:99999/"):
        with pytest.raises(InvalidUrl):
            canonicalize(bad)
    assert host_of("http://WWW.Example.com:81/x") == "www.example.com"


def test_canonical_host_rules():
    assert canonical_host("Example.COM.") == "example.com"
    assert canonical_host("127.1.2.3") == "127.1.2.3"
    assert canonical_host("[2001:DB8::1]") == "2001:db8::1"
    for bad in ("", "a..b", "-a.com", "a b", "x" * 254, "a:b", "exa$mple.com", "a" * 64 + ".com",
                "a/b", "a@b", "1.2.3.256", "a.b.0x"):
        with pytest.raises(InvalidArgument):
            canonical_host(bad)


# Issue 25: hosts as WHATWG URL parsing (browsers) reads them. Each row is the spec's host
# parser worked by hand: IPv4 numbers in hex, octal, decimal and short forms, IDNA by UTS #46
# (non-transitional: "ß" stays, unlike Python's IDNA 2003 codec), escapes decoded, full stops.
WHATWG_HOSTS = [
    ("0x7f000001", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("0x7F.1", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),
    ("Bücher.DE.", "xn--bcher-kva.de"),
    ("straße.de", "xn--strae-oqa.de"),
    ("ex%41mple.com", "example.com"),
    ("a\u3002b.lab", "a.b.lab"),
    ("ＥＸＡＭＰＬＥ.com", "example.com"),
]


@pytest.mark.parametrize("host, want", WHATWG_HOSTS)
def test_hosts_are_normalised_as_whatwg_does(host, want):
    assert canonical_host(host) == want
    assert canonicalize(f"http://{host}:8080/x") == f"http://{want}:8080/x"
    assert canonicalize(f"//{host}/", base="https://a.lab/") == f"https://{want}/"
    assert host_of(f"http://{host}/") == want


def test_whatwg_resolution_and_escapes():
    # Where WHATWG (Ada) and the urllib-based form that came before differ, wancrawl follows the
    # browsers; docs/urls.md lists these.
    base = "http://a.lab/d/p.html?q=1"
    cases = {
        "\\x\\y": "http://a.lab/x/y",  # backslashes are slashes in http(s) URLs
        "\\\\b.lab\\z": "http://b.lab/z",  # and two of them start an authority
        "/a/%2e%2E/b/%2e/c": "http://a.lab/b/c",  # "%2e" segments are dot segments
        'x"y<z>{w}`v^u|t': "http://a.lab/d/x%22y%3Cz%3E%7Bw%7D%60v%5Eu|t",
        "?a='b'&c=\"d\"": "http://a.lab/d/p.html?a=%27b%27&c=%22d%22",
        "http:e.html": "http://a.lab/d/e.html",  # the page's own scheme without "//": relative
        "http:?z": "http://a.lab/d/p.html?z",
        "https:b.lab": "https://b.lab/",  # another scheme: absolute
        "http:///no-host": "http://no-host/",
        "\x01 /k \x1f": "http://a.lab/k",  # C0 controls and spaces stripped at both ends
        "%7euser/%2fx%e3/sp ce": "http://a.lab/d/~user/%2Fx%E3/sp%20ce",
        "HTTP://U:P@B.LAB:0080/#top": "http://b.lab/",
    }
    for ref, want in cases.items():
        assert canonicalize(ref, base) == want, ref
        assert canonicalize(want) == want, want
    for bad in ("http://", "http://b.lab:65536/", "http://[::1/", "http://a.b.0x/", "x\ty"):
        with pytest.raises(InvalidUrl):
            canonicalize(bad, base)


# '^' aside: Ada (ada-url) escapes it in paths, can_ada's older Ada does not (canonicalize does).
_REF_ALPHABET = "abAB09-_.~/\\?#%:@ =&;\"<>{}|`'ü日!$+,xX2eE7\x01"
C0_SPACE = "".join(chr(c) for c in range(0x21))


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=_REF_ALPHABET, max_size=30),
       st.sampled_from(["http://a.lab/", "http://a.lab:8080/d/e.html?q=1", "https://x.y.lab/a/b/", "http://a.lab/d/?q#f"]),
       st.sampled_from(["", "http:", "https:", "//", "/", "\\\\", "HTTP://b.lab", "?", "#", "..", "./", "%2e%2e/"]))
def test_base_url_joins_as_ada_does(ref, base, prefix):
    # BaseUrl spells a reference out as an absolute URL for can_ada (which takes no base);
    # Ada's own join (ada-url: parse with a base, in C++) is the reference. Fragments aside.
    ref = (prefix + ref).strip(C0_SPACE)  # as canonicalize hands it over
    try:
        mine: str | None = can_ada.parse(BaseUrl(base).absolute(ref)).href
    except UnsupportedScheme:
        return
    except ValueError:
        mine = None
    try:
        ada: str | None = ada_url.join_url(base, ref)
    except ValueError:
        ada = None
    cut = (lambda u: u and u.split("#", 1)[0])
    assert cut(mine) == cut(ada), ref


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=_REF_ALPHABET, max_size=30),
       st.sampled_from(["http://a.lab/", "http://a.lab:8080/d/e.html?q=1", "https://x.y.lab/a/b/", "http://a.lab/d/?q#f"]),
       st.sampled_from(["", "http:", "//", "/", "HTTP://b:c@b.lab", "?", "#", "./", "x#", "/@"]))
def test_fragment_and_user_info_go_as_ada_drops_them(ref, base, prefix):
    # canonicalize cuts the fragment before parsing and asks about user info only when an "@" is
    # there (session 11); the reference: Ada's own join (ada-url), its fragment and user info
    # cleared by Ada's setters, canonicalised again (nothing left for either shortcut to cut).
    ref = (prefix + ref).strip(C0_SPACE)
    if not ref or "\t" in ref or "\n" in ref or "\r" in ref or "\x00" in ref:
        return  # canonicalize refuses these outright (an empty href is no link)
    try:
        mine: str | None = canonicalize(ref, base)
    except UnsupportedScheme:
        return
    except InvalidUrl:
        mine = None
    try:
        joined = ada_url.join_url(base, ref)
        u = ada_url.URL(joined)
        rebuilt = "#" in joined or u.username or u.password
        u.hash = u.username = u.password = ""
        if rebuilt and not u.search:
            u.search = ""  # canonicalize's rebuild has always dropped an empty query ("/p?#f": "/p")
        ref_href = u.href
    except ValueError:
        ref_href = None
    if ref_href is None or not ref_href.startswith(("http:", "https:")):
        assert mine is None, ref
        return
    try:
        want: str | None = canonicalize(ref_href)
    except InvalidUrl:
        want = None
    assert mine == want, ref


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=_REF_ALPHABET, max_size=30), st.booleans())
def test_canonical_form_is_a_fixed_point(ref, sort_query):
    # A canonical URL canonicalised again (a peer's push, storage's index) is itself.
    try:
        once = canonicalize(ref, "http://a.lab:8080/d/e.html?q=1", sort_query=sort_query)
    except InvalidUrl:
        return
    assert canonicalize(once, sort_query=sort_query) == once
    assert host_of(once) == host_of_canonical(once).strip("[]")


@dataclass(frozen=True)
class Inner:
    n: int = 1
    names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Outer:
    rate: float = 1.0
    on: bool = False
    inner: Inner = field(default_factory=Inner)
    weights: dict[str, float] = field(default_factory=dict)


@settings(max_examples=5000, deadline=None)
@given(st.sampled_from(["http://", "https://"]), st.text(alphabet="ab/?#:@.&=%~", max_size=30))
def test_split_target_is_what_urlsplit_gives(scheme, rest):
    # urlsplit is the independent reference for absolute http(s) URLs it keeps as written (no
    # brackets, spaces or controls: it validates, strips or drops those): authority = netloc,
    # path or "/", query; None for no "?" at all, which urlsplit does not tell from a bare "?".
    from urllib.parse import urlsplit

    url = scheme + rest
    parts = urlsplit(url)
    query = parts.query if "?" in url.partition("#")[0] else None
    assert split_target(url) == (parts.netloc, parts.path or "/", query)


def test_split_target_of_canonical_urls():
    for ref in ("http://h/", "http://h:8080/a/b?x=1&y=2", "https://[::1]/p?", "http://h/a?b/c?d", "http://h?q"):
        once = canonicalize(ref)
        authority, path, query = split_target(once)
        assert once == f"{once[:once.index(':')]}://{authority}{path}" + ("" if query is None else "?" + query)
    assert split_target("http://h?q") == ("h", "/", "q")
    assert split_target("http://h/p?#f") == ("h", "/p", "")
    assert split_target("h.lab/a?b") == ("h.lab", "/a", "b")  # no "://": the authority from the start


def test_config_build_types_and_unknown_keys():
    o = build(Outer, {"rate": 2, "on": True, "inner": {"n": 3, "names": ["a"]}, "weights": {"x": 1}}, source="f.toml")
    assert o == Outer(2.0, True, Inner(3, ["a"]), {"x": 1.0})
    with pytest.raises(ConfigError, match=r"f\.toml: unknown key 'inner\.m'"):
        build(Outer, {"inner": {"m": 1}}, source="f.toml")
    with pytest.raises(ConfigError, match="'inner.n' must be an integer"):
        build(Outer, {"inner": {"n": "x"}}, source="f.toml")
    with pytest.raises(ConfigError, match=r"'inner.names\[0\]' must be a string"):
        build(Outer, {"inner": {"names": [[1]]}}, source="f.toml")
    assert override(o, "inner.n", "7").inner.n == 7
    assert override(o, "on", "false").on is False
    with pytest.raises(ConfigError, match="unknown key 'inner.zz'"):
        override(o, "inner.zz", 1)


def test_hosts_file_and_resolver_cache_failures(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# comment\n127.1.1.10 www.A.test a.test\n\n127.1.1.11 b.test # trailing\n")
    mapping = parse_hosts_file(hosts)
    assert mapping == {"www.a.test": "127.1.1.10", "a.test": "127.1.1.10", "b.test": "127.1.1.11"}
    hosts.write_text("127.1.1.10 ok.test\nnot-an-ip host\n")
    with pytest.raises(ConfigError, match="line 2"):
        parse_hosts_file(hosts)

    now = [0.0]
    calls = []

    async def go():
        r = HostResolver(mapping, system_dns=True, timeout=0.2, negative_ttl=10, ttl=100, clock=lambda: now[0])
        loop = asyncio.get_running_loop()

        async def fake_getaddrinfo(host, port, **kw):
            calls.append(host)
            if host == "slow.test":
                await asyncio.sleep(5)
            if host == "good.test":
                return [(2, 1, 6, "", ("127.9.9.9", 0))]
            raise OSError("NXDOMAIN")

        loop.getaddrinfo = fake_getaddrinfo  # the network is injected: no real DNS in tests
        got = await r.resolve_many(["a.test", "good.test", "dead.test", "slow.test", "127.0.0.7"])
        assert got == {"a.test": "127.1.1.10", "good.test": "127.9.9.9", "dead.test": None, "slow.test": None, "127.0.0.7": "127.0.0.7"}
        await r.resolve_many(["good.test", "dead.test"])
        assert sorted(calls) == ["dead.test", "good.test", "slow.test"], "answers and failures are cached"
        now[0] = 11  # the failure expires first
        await r.resolve_many(["good.test", "dead.test"])
        assert sorted(calls) == ["dead.test", "dead.test", "good.test", "slow.test"]

    asyncio.run(go())
