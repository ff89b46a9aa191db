"""Scope: reasons for out-of-scope URLs, trap guards, settings validation through wancrawl.config."""

import pytest
from hypothesis import given, settings, strategies as st

from agent.crawl.scope import REASONS, Scope, _repeats, query_shape
from agent.settings import ScopeSettings
from wancrawl import config
from wancrawl.errors import ConfigError


def test_domains_patterns_depth():
    sc = Scope(ScopeSettings(allowed_domains=["lab", "Example.COM."], denied_domains=["bad.lab"],
                             allow_patterns=[r"^https?://[^/]+/(news|$)"], deny_patterns=[r"\.pdf$"], max_depth=3))
    assert sc.check("http://www.s1.lab/news/a", "www.s1.lab", 3) is None
    assert sc.check("http://example.com/", "example.com", 0) is None
    assert sc.check("http://www.s1.lab/news/a", "www.s1.lab", 4) == "depth"
    assert sc.check("http://notexample.com/", "notexample.com", 0) == "domain"
    assert sc.check("http://x.bad.lab/news/", "x.bad.lab", 0) == "denied_domain"
    assert sc.check("http://www.s1.lab/news/a.pdf", "www.s1.lab", 0) == "denied_pattern"
    assert sc.check("http://www.s1.lab/blog/a", "www.s1.lab", 0) == "pattern"
    assert Scope().check("http://any.where/x", "any.where", 20) is None
    assert Scope().check("http://any.where/x", "any.where", 21) == "depth", "Heritrix's 20 hops by default"
    assert Scope(ScopeSettings(max_depth=-1)).check("http://any.where/x", "any.where", 10**6) is None, "-1: no limit"


def test_trap_guards():
    sc = Scope(ScopeSettings(max_url_length=100, max_path_depth=6, max_query_params=3))
    h = "h.lab"
    assert sc.check("http://h.lab/" + "a" * 100, h, 0) == "url_length"
    assert sc.check("http://h.lab/1/2/3/4/5/6/7", h, 0) == "path_depth"
    assert sc.check("http://h.lab/1/2/3/4/5/6", h, 0) is None
    assert sc.check("http://h.lab/a/b/a/b/a/b", h, 0) == "repeated_segments"
    assert sc.check("http://h.lab/x/x/x", h, 0) == "repeated_segments"
    # A block of three segments repeated: within the path depth, so only the trap guard sees it.
    deep = Scope(ScopeSettings(max_path_depth=32))
    assert deep.check("http://h.lab/a/b/c/a/b/c/a/b/c", h, 0) == "repeated_segments"
    assert deep.check("http://h.lab/a/b/c/d/e/f/g/h/i", h, 0) is None
    assert sc.check("http://h.lab/a/b/a/b/c", h, 0) is None  # twice is fine
    assert sc.check("http://h.lab/cal/2020/01/2020/01", h, 0) is None
    assert sc.check("http://h.lab/s?a=1&b=2&c=3", h, 0) is None
    assert sc.check("http://h.lab/s?a=1&b=2&c=3&d=4", h, 0) == "query_params"
    assert Scope(ScopeSettings(max_segment_repeats=3)).check("http://h.lab/a/b/a/b/a/b", h, 0) is None


def test_a_repeated_block_of_any_width_is_a_trap():
    # Issue 25: a/b/c/d/a/b/c/d/... grew to 2,682 pages when only blocks of 1-3 were looked at.
    deep = Scope(ScopeSettings(max_path_depth=32))
    assert deep.check("http://h.lab/a/b/c/d/a/b/c/d/a/b/c/d", "h.lab", 0) == "repeated_segments"
    assert deep.check("http://h.lab/x/a/b/c/d/e/a/b/c/d/e/a/b/c/d/e/y", "h.lab", 0) == "repeated_segments"
    assert deep.check("http://h.lab/a/b/c/d/a/b/c/d/a/b/c", "h.lab", 0) is None  # twice and a bit


def test_alternating_blocks_are_a_bounded_trap():
    """Issue 37: a cycle that mixes two blocks (a/ and x1/x2/x3/x4/), never one three times in a
    row, escaped the back-to-back rule: 209 pages in 11 minutes and growing. Every path a trap page
    can link to (one more block) is enumerated: with one segment at most max_segment_count times
    in a path the set is small; without it, it grows with max_path_depth (exponentially with more
    blocks to mix)."""
    blocks = (("a",), ("x1", "x2", "x3", "x4"))

    def reachable(scope: Scope, cap: int = 200_000) -> int:
        seen, todo = 0, [()]
        while todo and seen < cap:
            path = todo.pop()
            for b in blocks:
                nxt = path + b
                if scope.check("http://h.lab/" + "/".join(nxt) + "/", "h.lab", 0) is None:
                    seen += 1
                    todo.append(nxt)
        return seen

    bounded, before = reachable(Scope(ScopeSettings())), reachable(Scope(ScopeSettings(max_segment_count=32)))
    assert bounded < 200 and before > 1000, (bounded, before)  # the back-to-back rule alone: 1,055 paths of two blocks
    h = "h.lab"
    x = "x1/x2/x3/x4"
    four = "/".join(["a", x, "a", "a", x, x, "a", x])  # A X A A X X A X: each block 4 times, never 3 in a row
    assert Scope().check(f"http://h.lab/{four}", h, 0) is None
    assert Scope().check(f"http://h.lab/{four}/a", h, 0) == "repeated_segments"  # a fifth a/
    assert Scope().check("http://h.lab/page/1/item/1/comment/1/reply/1", h, 0) is None, "a few repeats are fine"


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from("abc"), max_size=24), st.integers(1, 4))
def test_repeats_matches_a_brute_force_reference(segs, limit):
    def reference(segs, limit):
        n = len(segs)
        return any(segs[s : s + w * (limit + 1)] == segs[s : s + w] * (limit + 1)
                   for w in range(1, n + 1) for s in range(n - w * (limit + 1) + 1))
    assert _repeats(segs, limit) == reference(segs, limit)


def test_host_budget_and_reason_names():
    sc = Scope(ScopeSettings(max_pages_per_host=2))
    assert not sc.host_full(1) and sc.host_full(2)
    assert Scope().host_full(100_000) and not Scope().host_full(99_999), "a page budget by default"
    assert not Scope(ScopeSettings(max_pages_per_host=None)).host_full(10**9)
    assert Scope().queue_room(49_990) == 10 and Scope(ScopeSettings(max_queued_per_host=None)).queue_room(10**9) is None


def test_query_shape_blanks_values_only():
    assert query_shape("http://h/a?sid=1&x=2") == query_shape("http://h/a?sid=99&x=") == "http://h/a?sid&x"
    assert query_shape("http://h/a?x=1&sid=1") != query_shape("http://h/a?sid=1&x=1")
    assert query_shape("http://h/a") is None
    assert {"domain", "pattern", "depth", "url_length", "repeated_segments"} <= set(REASONS)


def test_settings_via_config():
    s = config.build(ScopeSettings, {"allowed_domains": ["LAB"], "max_depth": 5}, source="agent.toml")
    assert s.allowed_domains == ["lab"] and s.max_depth == 5
    assert config.build(ScopeSettings, {"max_depth": -1, "max_pages_per_host": -1}, source="a.toml").max_depth is None
    for bad, key in [({"deny_patterns": ["("]}, "deny_patterns"), ({"allowed_domains": ["a b"]}, "allowed_domains"),
                     ({"max_depth": -2}, "max_depth"), ({"max_url_length": 0}, "max_url_length"), ({"max_dpth": 1}, "max_dpth")]:
        with pytest.raises(ConfigError, match=key):
            config.build(ScopeSettings, bad, source="agent.toml")


def test_scheme_and_port_rules():
    sc = Scope(ScopeSettings(schemes=["http"], ports=[80, 8181]))
    assert sc.check("http://h.lab/", "h.lab", 0) is None and sc.check("http://h.lab:8181/x", "h.lab", 0) is None
    assert sc.check("https://h.lab/", "h.lab", 0) == "scheme"
    assert sc.check("http://h.lab:8080/", "h.lab", 0) == "port"
    assert Scope().check("https://h.lab:8443/", "h.lab", 0) is None
    assert Scope(ScopeSettings(ports=[443])).check("https://[::1]/", "::1", 0) is None


def _traps_reference(s: ScopeSettings, url: str) -> str | None:
    """check_traps as it was written before it found the path by index (session 10): the split,
    partition and list of segments, kept here as the independent reference."""
    rest = url.split("://", 1)[-1]
    # The authority ends at the first "/" or "?" (urlsplit's reading; a canonical URL has its "/"
    # first, but "h.lab/://?&" split at its "://" leaves "?&": a query on an empty path).
    ends = [i for i in (rest.find("/"), rest.find("?")) if i >= 0]
    target = rest[min(ends):] if ends else "/"
    path, _, query = target.partition("?")
    segs = [x for x in path.split("/") if x]
    if len(segs) > s.max_path_depth:
        return "path_depth"
    if len(segs) > s.max_segment_repeats and _repeats(segs, s.max_segment_repeats):
        return "repeated_segments"
    if query and query.count("&") + 1 > s.max_query_params:
        return "query_params"
    return None


_URL_PART = st.text(alphabet="ab/?&=:.", max_size=30)


@settings(max_examples=3000, deadline=None)
@given(scheme=st.sampled_from(["http://", "https://", "", "x:y", "http://a://"]), host=st.sampled_from(["h.lab", "", "h.lab:8080"]),
       rest=_URL_PART, depth=st.integers(1, 5), repeats=st.integers(1, 4), params=st.integers(1, 4))
def test_check_traps_matches_the_reference(scheme, host, rest, depth, repeats, params):
    """check_traps's fast path (few slashes: no split) and split_target's index arithmetic give
    the reference's answer for URLs with an authority and a path, as canonical URLs always have
    (the path at least "/"), and odd ones: no "://", a second "://", "//" and trailing slashes,
    "?" in the path and the query, queries with and without "&", a "?" right after the authority
    (a query to both, as to urlsplit: tests/test_shared.py holds split_target to urlsplit)."""
    s = ScopeSettings(max_path_depth=depth, max_segment_repeats=repeats, max_query_params=params)
    url = scheme + host + "/" + rest
    assert Scope(s).check_traps(url) == _traps_reference(s, url)
