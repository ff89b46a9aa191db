"""What to do with a fetched page: retry, give up, follow a redirect, parse, record (pure).

Decided from the response, how often the URL was tried and the policy; the dispatcher carries
the decision out. No I/O, no clock: unit-tested like agent/routing/router.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.fetch import ERRORS, FetchResponse

HTML_TYPES = ("text/html", "application/xhtml+xml")
REDIRECTS = (301, 302, 303, 307, 308)
RETRY_STATUSES = (429, 500, 502, 503, 504)
RETRY_ERRORS = ("connect", "timeout", "read", "dns", "internal")  # transient: worth another try
MAX_REDIRECT_HOPS = 20  # as browsers and Scrapy
# The kinds of the dispatcher's `fetch_errors` (the metric wancrawl_agent_fetch_errors_total{kind}):
# a request's transport failure (agent.fetch ERRORS, robots.txt requests included), a page
# answered with an HTTP error status (http_class), a URL robots.txt disallows.
ERROR_KINDS = (*ERRORS, "http_4xx", "http_5xx", "robots_denied")


def http_class(status: int) -> str | None:
    """The error kind of a page's HTTP status: http_4xx, http_5xx, or None (no error)."""
    return "http_5xx" if status >= 500 else "http_4xx" if status >= 400 else None


@dataclass(frozen=True)
class Policy:
    max_retries: int = 3            # 429/5xx/network errors before a URL is given up
    max_retry_after: float = 3600.0  # a Retry-After longer than this is cut to it


@dataclass(frozen=True)
class Outcome:
    """One decision. `retry`: put the URL back, not before `wait` seconds (`attempt` is its new
    try count, None when the try does not count: the agent is stopping). Otherwise the URL is
    done: `page` (a response arrived), `record` (store it), `follow` (a redirect target to
    route), `parse` (extract links), `given_up` (retries exhausted)."""

    retry: bool = False
    wait: float = 0.0
    attempt: int | None = None
    record: bool = False
    page: bool = False
    parse: bool = False
    follow: str | None = None
    given_up: bool = False
    not_html: bool = False


def decide(resp: FetchResponse, attempts: int, policy: Policy, *, stopping: bool = False) -> Outcome:
    """`attempts`: failed tries of this URL so far. A transient failure (network error, 429,
    5xx) is retried up to policy.max_retries times; while stopping it is put back uncounted,
    so the next run tries it again rather than losing it."""
    transient = resp.error in RETRY_ERRORS or resp.status in RETRY_STATUSES
    given_up = False
    if transient:
        n = attempts + 1
        if stopping or n <= policy.max_retries:
            # 429/503: Retry-After (the politeness backoff holds the host meanwhile).
            wait = min(resp.retry_after or 0.0, policy.max_retry_after)
            return Outcome(retry=True, wait=wait, attempt=None if stopping else n, record=bool(resp.status))
        given_up = True
    if resp.error and not resp.status:
        return Outcome(given_up=given_up)
    if resp.status in REDIRECTS and resp.location:
        return Outcome(page=True, record=True, follow=resp.location, given_up=given_up)
    # A truncated body is a prefix of the page (every kind of agent.fetch TRUNCATIONS): its links
    # are parsed all the same.
    if resp.status == 200 and resp.content_type in HTML_TYPES:
        return Outcome(page=True, record=True, parse=True, given_up=given_up)
    return Outcome(page=True, record=True, given_up=given_up, not_html=resp.status == 200 and resp.content_type not in HTML_TYPES)
