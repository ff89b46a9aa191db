"""The shared package: URL and host canonicalisation, strict typed config, host resolution."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from wancrawl.config import build, override
from wancrawl.errors import ConfigError, InvalidArgument
from wancrawl.hostres import HostResolver, parse_hosts_file
from wancrawl.urls import InvalidUrl, UnsupportedScheme, canonical_host, canonicalize, host_of


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
    for bad in ("", "a..b", "-a.com", "a b", "x" * 254, "a:b", "exa$mple.com", "a" * 64 + ".com"):
        with pytest.raises(InvalidArgument):
            canonical_host(bad)


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
