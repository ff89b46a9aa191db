"""Admission: may the host the scheduler picked be fetched, and may the URL its queue gave (pure).

Two decisions, in the order the dispatcher asks them, each a typed `Verdict` with its reason:
`host`: the host's page budget, its registered domain's page budget, a DNS give-up whose name
still has no address. `url`: the URL's origin given up, its robots.txt unreachable for
`robots.give_up_after`, robots.txt to fetch first (a probe when it never answered), the URL
waiting for robots.txt's retry, the URL disallowed. Between the two the dispatcher asks the gate
(agent/placement/gate.py: asking records a refusal, which the gate reopens later, so it is asked
only of a host that passed) and pops the URL.

Reads the robots cache, the resolver's failures and the host's registered domain; writes nothing,
no I/O, no clock (`now` is an argument): the dispatcher carries the verdict out (give up, finish,
put back, fetch). Unit-tested against hand-computed cases (tests/test_agent_admission.py).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from agent.crawl.robots import RobotsCache
from agent.crawl.scope import Scope


class Act(enum.Enum):
    FETCH = "fetch"                    # the URL goes to the fetcher
    GIVE_UP_HOST = "give up host"      # the host's queue is dropped (reason, incident kind)
    FINISH = "finish"                  # its origin was given up: the URL is done unfetched
    GIVE_UP_ORIGIN = "give up origin"  # robots.txt unreachable too long: the origin is given up, the URL done
    FETCH_ROBOTS = "fetch robots.txt"  # robots.txt first; the URL goes back to its queue
    PROBE_ROBOTS = "probe robots.txt"  # the same, after no answer at all: the host's slot is not taken
    DEFER = "defer"                    # robots.txt unreachable for now (RFC 9309 2.4): the URL waits
    DENY = "deny"                      # robots.txt disallows it: done unfetched


@dataclass(frozen=True, slots=True)
class Verdict:
    act: Act
    reason: str = ""  # why, for the incident and the operator ("" for the common verdicts)
    kind: str = ""    # the incident kind of a host give-up


# The verdicts without a reason are made once: the per-URL path allocates nothing.
FETCH = Verdict(Act.FETCH)
FINISH = Verdict(Act.FINISH)
FETCH_ROBOTS = Verdict(Act.FETCH_ROBOTS)
PROBE_ROBOTS = Verdict(Act.PROBE_ROBOTS)
DEFER = Verdict(Act.DEFER)
DENY = Verdict(Act.DENY)


class Admission:
    """`dns_failure(host)`: why the host has no address now (None: it has one, or was not
    asked); `domain_of(host)`: its registered domain (for a give-up's reason). Invariant: a
    verdict depends only on the arguments and what those reads return; asking twice changes
    nothing."""

    def __init__(self, scope: Scope, robots: RobotsCache, *, robots_enabled: bool, robots_give_up_after: float,
                 dns_failure: Callable[[str], str | None], domain_of: Callable[[str], str]):
        self.scope = scope
        self.robots = robots
        self.robots_enabled = robots_enabled
        self.give_up_after = robots_give_up_after
        self.dns_failure = dns_failure
        self.domain_of = domain_of

    def host(self, host: str, pages: int, domain_pages: int, given_up: str | None) -> Verdict | None:
        """A GIVE_UP_HOST verdict, or None (the host may go on to the gate). `pages`: fetched
        from the host so far; `domain_pages`: from its registered domain; `given_up`: why it
        was given up before (None: it was not)."""
        if self.scope.host_full(pages):
            # At its page budget: its whole queue goes in one range delete, not item by item.
            return Verdict(Act.GIVE_UP_HOST, f"page budget ({pages} pages)", "host_page_budget")
        if self.scope.domain_full(domain_pages):
            # Its registered domain is at its page budget: each of its hosts goes as it comes up.
            return Verdict(Act.GIVE_UP_HOST, f"domain page budget ({domain_pages} pages on {self.domain_of(host)})",
                           "domain_page_budget")
        if given_up is not None and given_up.startswith("DNS") and self.dns_failure(host) is not None:
            # Given up on DNS and the name still has no address: URLs found since go too.
            return Verdict(Act.GIVE_UP_HOST, given_up, "dns_failure")
        return None

    def url(self, url: str, origin: str, origin_given_up: bool, now: float) -> Verdict:
        """The verdict on a URL popped from the host's queue (`origin`: its origin)."""
        if origin_given_up:
            # robots.txt unreachable or no answer too long: its URLs are finished as they come up.
            return FINISH
        if not self.robots_enabled:
            return FETCH
        failing = self.robots.unreachable(origin)
        if failing is not None and now - failing[0] >= self.give_up_after:
            return Verdict(Act.GIVE_UP_ORIGIN, f"robots.txt unreachable for {now - failing[0]:.0f}s ({self.robots.failure(origin)})")
        if self.robots.needs_fetch(origin, now):
            # A retry after no answer at all (refused, timed out) is a probe: it takes neither
            # the host's slot nor its delay, or each retry of a dead origin would hold back the
            # live ones for up to a connect timeout.
            return PROBE_ROBOTS if failing is not None and failing[2] == 0 else FETCH_ROBOTS
        if failing is not None:
            # RFC 9309 2.4: disallowed for now, not refused: the URL waits for the retry.
            # (origin_wait keeps such URLs from being popped; this is a safety net.)
            return DEFER
        return FETCH if self.robots.allowed(url, origin) else DENY
