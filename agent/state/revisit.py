"""Revisit policies (issue 26): when a fetched page is due again. Pure: no I/O, no clock.

A page's schedule is an `Entry` (kept per URL by the frontier, agent/state/frontier/schedule.py); what a
fetch told is a `Visit`; a `Planner` built from `[revisit]` turns (entry, visit) into the next
entry. Three policies (docs/continuous.md):

* fixed: the same interval for every page (the default when revisits are on).
* adaptive: Nutch's AdaptiveFetchSchedule: the interval shrinks by `dec_rate` when the payload
  digest changed and grows by `inc_rate` when not, within [min_interval, max_interval].
* optimal: Cho and Garcia-Molina. The change rate of a page (a Poisson process) is estimated
  from n visits of which X detected a change (`estimate_rate`, their TOIT 2003 estimator
  r = -log((n - X + 0.5) / (n + 0.5)) per mean interval); the revisit frequencies of one host
  maximise its pages' summed freshness under a budget of revisits per host per day
  (`optimal_frequencies`, the Lagrange condition of their TODS 2003 paper, solved by bisection).
  `estimate_rate_irregular` is their estimator for irregular visit intervals (built and tested,
  not used by the planner: a schedule row keeps only the sums, docs/continuous.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not at run time: agent.settings pulls in the fetchers (seconds of imports)
    from agent.settings import RevisitSettings

DAY = 86400.0
NEVER = 100 * 365 * DAY  # "never" (archived pages): a change rate of once a century
# sitemaps.org changefreq values as seconds. "always" changes at every access: as often as the
# bounds allow (1 s, clamped to min_interval).
CHANGEFREQ = {"always": 1.0, "hourly": 3600.0, "daily": DAY, "weekly": 7 * DAY, "monthly": 30 * DAY,
              "yearly": 365 * DAY, "never": NEVER}


def changefreq_seconds(value: str | float | None) -> float:
    """A sitemap changefreq (name, or seconds) as seconds; 0.0 = no hint (or "always")."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, (int, float)):
        return min(NEVER, max(0.0, float(value))) if math.isfinite(value) else NEVER
    return CHANGEFREQ.get(value.strip().lower(), 0.0)


@dataclass(slots=True)
class Entry:
    """One URL's revisit schedule. `last` is the time of this agent's last capture of it; its
    digest, ETag and Last-Modified are what the next request is made conditional on (and what
    a 304 confirms). `visits` counts revisits that gave an answer, `changes` those that found
    the payload changed, `span` the seconds those revisits covered (for the change-rate
    estimator). `lastmod` and `changefreq` are sitemap hints (0 = none). due = inf: a hint for
    a URL not fetched yet (not a revisit)."""

    url: str
    host: str
    due: float
    interval: float
    last: float = 0.0
    digest: str = ""
    etag: str = ""
    modified: str = ""
    length: int = 0          # payload bytes of the last capture (what a 304 saves)
    visits: int = 0
    changes: int = 0
    span: float = 0.0
    depth: int = 0
    lastmod: float = 0.0
    changefreq: float = 0.0

    def row(self) -> tuple:
        return (self.host, self.url, self.due, self.interval, self.last, self.digest, self.etag, self.modified, self.length,
                self.visits, self.changes, self.span, self.depth, self.lastmod, self.changefreq)


FIELDS = ("host", "url", "due", "interval", "last", "digest", "etag", "modified", "length", "visits", "changes", "span",
          "depth", "lastmod", "changefreq")


def entry_of(row: Sequence) -> Entry:
    """An Entry from a row in FIELDS order."""
    host, url, *rest = row
    return Entry(url, host, *rest)


@dataclass(frozen=True, slots=True)
class Visit:
    """What one fetch of a URL told: its status (0: no answer), payload digest, validators."""

    at: float
    status: int
    digest: str = ""
    etag: str = ""
    modified: str = ""
    length: int = 0


def validators(headers: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """(ETag, Last-Modified) of a response's headers ("" when absent)."""
    etag = modified = ""
    for k, v in headers:
        kl = k.lower()
        if kl == "etag":
            etag = v.strip()
        elif kl == "last-modified":
            modified = v.strip()
    return etag, modified


def conditional_headers(e: Entry) -> dict[str, str]:
    """If-None-Match / If-Modified-Since for a revisit of e (RFC 9110 13.1)."""
    out = {}
    if e.etag:
        out["If-None-Match"] = e.etag
    if e.modified:
        out["If-Modified-Since"] = e.modified
    return out


# -- Cho and Garcia-Molina ---------------------------------------------------------------------------
def estimate_rate(visits: int, changes: int, span: float, prior: float = 0.0) -> float:
    """Changes per second of a Poisson page from `visits` revisits over `span` seconds of which
    `changes` found it changed: r = -log((n - X + 0.5) / (n + 0.5)) changes per mean interval
    (Cho and Garcia-Molina, "Estimating frequency of change", their bias-reduced estimator; the
    naive X/n underestimates since a visit sees at most one of several changes). No visits yet:
    the prior (a sitemap changefreq, or the policy's guess)."""
    if visits <= 0 or span <= 0:
        return prior
    x = min(changes, visits)
    r = -math.log((visits - x + 0.5) / (visits + 0.5))
    return r / (span / visits)


def estimate_rate_irregular(intervals: Sequence[tuple[float, bool]]) -> float:
    """Changes per second of a Poisson page visited at irregular intervals: `intervals` holds
    (seconds since the previous visit, whether this visit found the page changed). Cho and
    Garcia-Molina's maximum-likelihood estimator for irregular access (TODS 2003, "Estimating
    frequency of change", section 5): the rate r solving

        sum over changed intervals t of  t / (exp(r t) - 1)  =  sum over unchanged intervals of t

    (the left side falls from +inf to 0 as r grows, so the root is unique; found by bisection on
    log r). No change seen: 0. Every interval changed: no finite root (the likelihood grows with
    r); then the bias-reduced estimator over the mean interval (`estimate_rate`, n = X) bounds it.
    `estimate_rate` is this estimator's special case for equal intervals, bias-corrected."""
    changed = [t for t, c in intervals if c and t > 0]
    unchanged = sum(t for t, c in intervals if not c and t > 0)
    if not changed:
        return 0.0
    if unchanged <= 0:
        n = len(changed)
        return estimate_rate(n, n, sum(changed))

    def excess(r: float) -> float:  # left side minus right side: decreasing in r
        return sum(t / math.expm1(min(r * t, 700.0)) for t in changed) - unchanged

    lo, hi = 1e-12, 1.0 / min(changed)
    while excess(hi) > 0:
        hi *= 2.0
    while excess(lo) < 0 and lo > 1e-300:
        lo /= 1e3
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return math.sqrt(lo * hi)


def freshness(rate: float, freq: float) -> float:
    """Expected freshness of a Poisson page (rate changes/s) revisited at fixed frequency freq
    (/s): (f / lambda)(1 - exp(-lambda / f)) (Cho and Garcia-Molina 2003, eq. for F(lambda, f))."""
    if freq <= 0:
        return 0.0 if rate > 0 else 1.0
    if rate <= 0:
        return 1.0
    x = rate / freq
    return (1.0 - math.exp(-x)) / x


def age(rate: float, freq: float) -> float:
    """Expected age (seconds) of the same page: 1/f * (1/2 - 1/x + (1 - e^-x)/x^2), x = lambda/f."""
    if rate <= 0:
        return 0.0
    if freq <= 0:
        return math.inf
    x = rate / freq
    if x < 1e-6:
        return x / (6 * freq)  # the series' first term
    return (0.5 - 1.0 / x + (1.0 - math.exp(-x)) / (x * x)) / freq


def _g(x: float) -> float:
    # d/dx of the freshness gain: 1 - (1 + x) e^-x, rising from 0 to 1.
    return 1.0 - (1.0 + x) * math.exp(-x)


def _ginv(y: float) -> float:
    # x with _g(x) = y, 0 < y < 1 (bisection; _g is increasing).
    lo, hi = 0.0, 1.0
    while _g(hi) < y:
        hi *= 2.0
        if hi > 1e6:
            return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if _g(mid) < y:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def freq_for(rate: float, mu: float) -> float:
    """The frequency at which the marginal freshness of a page of this rate equals mu: the
    Lagrange condition dF/df = g(lambda/f)/lambda = mu. 0 when even f -> 0 gains less than mu
    per visit (a page changing too often to keep fresh: Cho and Garcia-Molina's result that
    the optimum gives such pages nothing)."""
    if rate <= 0 or mu <= 0:
        return 0.0 if rate <= 0 else math.inf
    y = mu * rate
    if y >= 1.0:
        return 0.0
    return rate / _ginv(y)


def optimal_frequencies(rates: Sequence[float], budget: float) -> tuple[list[float], float]:
    """Revisit frequencies (/s) of pages with these change rates that maximise the sum of their
    freshness with sum(freqs) == budget (/s); returns (freqs, mu). Pages of rate 0 get 0 (they
    stay fresh); the caller bounds intervals (a page given 0 is still revisited at max_interval)."""
    if budget <= 0 or not any(r > 0 for r in rates):
        return [0.0] * len(rates), 0.0
    lo, hi = 0.0, max(1.0 / r for r in rates if r > 0)  # at mu >= 1/min rate... every freq is 0

    def total(mu: float) -> float:
        return sum(freq_for(r, mu) for r in rates)

    if total(hi * 1e-12) < budget:  # more budget than any page can use well: the smallest mu
        lo = hi = hi * 1e-12
    for _ in range(100):
        mid = (lo + hi) / 2
        if total(mid) > budget:
            lo = mid
        else:
            hi = mid
    mu = hi
    return [freq_for(r, mu) for r in rates], mu


# -- the policies ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Policy:
    """The knobs of `[revisit]` the planner needs (agent/settings.py RevisitSettings has them all)."""

    policy: str = "fixed"
    interval: float = DAY
    min_interval: float = 60.0
    max_interval: float = 30 * DAY
    inc_rate: float = 0.4           # Nutch db.fetch.schedule.adaptive.inc_rate
    dec_rate: float = 0.2           # Nutch db.fetch.schedule.adaptive.dec_rate
    pages_per_host_day: float = 1000.0  # the optimal policy's revisit budget per host

    @classmethod
    def of(cls, s: RevisitSettings) -> Policy:
        return cls(s.policy, s.interval, s.min_interval, s.max_interval, s.inc_rate, s.dec_rate, s.pages_per_host_day)

    def clamp(self, interval: float) -> float:
        return min(self.max_interval, max(self.min_interval, interval))


def changed(e: Entry, v: Visit) -> bool | None:
    """Did this visit find the page changed since e's capture? None: it cannot tell (no
    answer, an error status, or no earlier digest)."""
    if v.status == 304:
        return False
    if not 200 <= v.status < 300 or not e.digest or not v.digest:
        return None
    return v.digest != e.digest


def adaptive_next(interval: float, was_changed: bool | None, p: Policy) -> float:
    """Nutch's AdaptiveFetchSchedule step: changed -> interval * (1 - dec_rate), unchanged ->
    interval * (1 + inc_rate), unknown -> as it was; always within [min, max]."""
    if was_changed is True:
        interval *= 1.0 - p.dec_rate
    elif was_changed is False:
        interval *= 1.0 + p.inc_rate
    return p.clamp(interval)


class Planner:
    """Turns visits into schedule entries by one Policy. `mu` of each host (the optimal policy's
    Lagrange multiplier) is set by `plan_host` from the host's estimated rates; until a host
    has one, its pages get the fixed interval."""

    def __init__(self, policy: Policy):
        self.p = policy
        self.mu: dict[str, float] = {}

    def first(self, url: str, host: str, depth: int, v: Visit, hint: Entry | None = None) -> Entry:
        """The entry of a URL after its first capture (hint: a sitemap's lastmod/changefreq)."""
        lastmod, cf = (hint.lastmod, hint.changefreq) if hint is not None else (0.0, 0.0)
        interval = self.p.clamp(cf or self.p.interval)
        return Entry(url, host, v.at + interval, interval, v.at, v.digest, v.etag, v.modified, v.length, 0, 0, 0.0, depth,
                     lastmod, cf)

    def rate(self, e: Entry) -> float:
        """The estimated change rate (/s) of e's page: the estimator over its revisits, blended
        with the prior (a sitemap changefreq, else 1 / interval) as one pseudo-visit, so that a
        page seen unchanged a few times is not taken for one that never changes (its rate decays
        as prior / (n + 1), and it is still revisited now and then)."""
        prior = 1.0 / (e.changefreq or self.p.interval)
        if e.visits <= 0 or e.span <= 0:
            return prior
        return (estimate_rate(e.visits, e.changes, e.span) * e.visits + prior) / (e.visits + 1)

    def next(self, e: Entry, v: Visit | None, now: float) -> Entry:
        """e after a revisit that told v (None: no answer, refused, given up)."""
        if v is None or v.status == 0:
            return replace(e, due=now + e.interval)
        c = changed(e, v)
        out = replace(e)
        if c is not None:
            out.visits += 1
            out.changes += int(c)
            out.span += max(0.0, v.at - e.last)
        if v.status == 304 or 200 <= v.status < 300:
            out.last = v.at
        if v.status == 304:  # the same payload: validators refreshed when the 304 sends them
            out.etag, out.modified = v.etag or e.etag, v.modified or e.modified
        elif 200 <= v.status < 300:
            out.digest, out.length, out.etag, out.modified = v.digest, v.length, v.etag, v.modified
        pol = self.p.policy
        if pol == "adaptive":
            out.interval = adaptive_next(e.interval, c, self.p)
        elif pol == "optimal":
            out.interval = self.interval_of(out)
        else:
            out.interval = self.p.clamp(self.p.interval)
        out.due = now + out.interval
        return out

    def interval_of(self, e: Entry) -> float:
        """The optimal policy's interval for e: 1 / freq_for(its rate, its host's mu)."""
        mu = self.mu.get(e.host)
        if mu is None:
            return self.p.clamp(self.p.interval)
        f = freq_for(self.rate(e), mu)
        return self.p.max_interval if f <= 0 else self.p.clamp(1.0 / f)

    def plan_host(self, host: str, entries: Sequence[Entry]) -> float:
        """Set the host's mu from its pages' estimated rates and the per-host budget; returns it."""
        rates = [self.rate(e) for e in entries]
        _, mu = optimal_frequencies(rates, self.p.pages_per_host_day / DAY)
        self.mu[host] = mu
        return mu

    def hinted(self, e: Entry, lastmod: float, changefreq: float, now: float) -> Entry:
        """e after a sitemap hint: a lastmod after our capture makes it due now; a changefreq
        becomes the page's prior rate (and its interval while it has no visits)."""
        out = replace(e)
        if changefreq:
            out.changefreq = changefreq
            if not e.visits and math.isfinite(e.due):
                out.interval = self.p.clamp(changefreq)
                out.due = min(e.due, e.last + out.interval)
        if lastmod:
            out.lastmod = lastmod
            if e.last and lastmod > e.last and math.isfinite(e.due):
                out.due = min(out.due, now)
        return out
