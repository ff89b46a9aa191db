"""Admission (agent/crawl/admission.py), pure: the verdicts on a host the scheduler picked and on
the URL its queue gave, against cases computed by hand from the settings and the robots.txt
history below (no dispatcher, no loop, no clock)."""

from __future__ import annotations

import pytest

from agent.crawl.admission import Act, Admission, Verdict
from agent.crawl.robots import RobotsCache
from agent.crawl.scope import Scope
from agent.settings import ScopeSettings

GIVE_UP_AFTER = 3600.0
RETRY_BASE = 5.0  # an unreachable robots.txt is asked again 5 s after its first failure, then 10 s, ...
T0 = 1000.0


def _admission(robots: RobotsCache | None = None, *, enabled: bool = True, dns: dict[str, str] | None = None,
               max_host: int | None = 10, max_domain: int | None = 12) -> Admission:
    scope = Scope(ScopeSettings(max_pages_per_host=max_host, max_pages_per_domain=max_domain))
    return Admission(scope, robots or RobotsCache("wancrawl/1.0", retry_base=RETRY_BASE), robots_enabled=enabled,
                     robots_give_up_after=GIVE_UP_AFTER, dns_failure=(dns or {}).get,
                     domain_of=lambda host: host.split(".", 1)[1])


# (pages of the host, pages of its domain, why it was given up before, the resolver's failure now) -> verdict
HOST_CASES = [
    (0, 0, None, None, None),
    (9, 11, None, None, None),                                               # one page short of each budget
    (10, 0, None, None, Verdict(Act.GIVE_UP_HOST, "page budget (10 pages)", "host_page_budget")),
    (11, 12, None, None, Verdict(Act.GIVE_UP_HOST, "page budget (11 pages)", "host_page_budget")),  # the host's budget first
    (3, 12, None, None, Verdict(Act.GIVE_UP_HOST, "domain page budget (12 pages on b.example)", "domain_page_budget")),
    (0, 0, "DNS: NXDOMAIN", "NXDOMAIN", Verdict(Act.GIVE_UP_HOST, "DNS: NXDOMAIN", "dns_failure")),  # still no address
    (0, 0, "DNS: NXDOMAIN", None, None),                                     # it resolves again: its new URLs go on
    (0, 0, "forbidden address (fetch.allow_networks)", "NXDOMAIN", None),     # not a DNS give-up
]


@pytest.mark.parametrize("pages,domain_pages,given_up,failure,expected", HOST_CASES)
def test_the_host_verdict(pages, domain_pages, given_up, failure, expected):
    host = "a.b.example"
    adm = _admission(dns={host: failure} if failure else {})
    assert adm.host(host, pages, domain_pages, given_up) == expected


def test_no_budget_never_gives_a_host_up():
    assert _admission(max_host=None, max_domain=None).host("a.b.example", 10**9, 10**9, None) is None


ORIGIN = "http://a.example"


def _robots(*history: tuple[int, bytes, float]) -> RobotsCache:
    """A robots cache that saw these answers for ORIGIN: (status, body, time); status 0 = no answer."""
    rc = RobotsCache("wancrawl/1.0", retry_base=RETRY_BASE)
    for status, body, t in history:
        rc.update(ORIGIN, status, body, t)
    return rc


RULES = b"User-agent: *\nDisallow: /private\n"
# (robots.txt history, URL path, now) -> the act
URL_CASES = [
    ((), "/", T0, Act.FETCH_ROBOTS),                                         # never fetched: robots.txt first
    (((200, RULES, T0),), "/public", T0 + 1, Act.FETCH),
    (((200, RULES, T0),), "/private/x", T0 + 1, Act.DENY),
    (((200, RULES, T0),), "/public", T0 + 86400, Act.FETCH_ROBOTS),          # the day's TTL ran out
    (((503, b"", T0),), "/", T0 + 1, Act.DEFER),                             # unreachable, retry due at T0 + 5
    (((503, b"", T0),), "/", T0 + 5, Act.FETCH_ROBOTS),                      # the retry: a 503 answered, so the slot is taken
    (((0, b"", T0),), "/", T0 + 5, Act.PROBE_ROBOTS),                        # no answer at all: a probe
    (((503, b"", T0), (503, b"", T0 + 5)), "/", T0 + 10, Act.DEFER),         # second failure: retry at T0 + 15
    (((503, b"", T0),), "/", T0 + GIVE_UP_AFTER - 1, Act.FETCH_ROBOTS),
    (((503, b"", T0),), "/", T0 + GIVE_UP_AFTER, Act.GIVE_UP_ORIGIN),        # unreachable for give_up_after
    (((404, b"", T0),), "/private/x", T0 + 1, Act.FETCH),                    # unavailable: no restrictions
]


@pytest.mark.parametrize("history,path,now,act", URL_CASES)
def test_the_url_verdict(history, path, now, act):
    adm = _admission(_robots(*history))
    assert adm.url(ORIGIN + path, ORIGIN, False, now).act is act


def test_a_given_up_origin_finishes_its_urls_and_robots_off_fetches_them():
    adm = _admission(_robots((503, b"", T0)))
    assert adm.url(ORIGIN + "/", ORIGIN, True, T0 + 1).act is Act.FINISH, "given up: done unfetched, robots.txt not asked"
    off = _admission(_robots((200, RULES, T0)), enabled=False)
    assert off.url(ORIGIN + "/private/x", ORIGIN, False, T0 + 1).act is Act.FETCH, "robots.txt off: every URL is fetched"
    assert off.url(ORIGIN + "/", ORIGIN, True, T0 + 1).act is Act.FINISH


def test_the_origin_give_up_says_how_long_and_the_last_status():
    adm = _admission(_robots((503, b"", T0), (429, b"", T0 + 5)))
    assert adm.url(ORIGIN + "/", ORIGIN, False, T0 + 3700.4) == Verdict(
        Act.GIVE_UP_ORIGIN, "robots.txt unreachable for 3700s (status 429)")


def test_asking_changes_nothing():
    """A verdict is a reading: asked twice, the same answer, and the cache is as it was."""
    rc = _robots((503, b"", T0))
    adm = _admission(rc)
    before = rc.export(ORIGIN)
    assert adm.url(ORIGIN + "/", ORIGIN, False, T0 + 5) == adm.url(ORIGIN + "/", ORIGIN, False, T0 + 5)
    assert rc.export(ORIGIN) == before
