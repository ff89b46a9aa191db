"""robots.txt per host as a pure cache (RFC 9309 semantics through protego); the agent does the I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass

from protego import Protego

# How long a host whose robots.txt keeps failing stays fully disallowed before the RFC lets
# a crawler treat it as having none (RFC 9309 2.4: "unreachable for more than 30 days").
UNREACHABLE_ALLOW_AFTER = 30 * 86400.0


# protego drops a Crawl-delay it cannot take as a finite number, so `Crawl-delay: inf` read as no
# delay at all while 1e9 was capped (politeness.max_crawl_delay): an infinite delay is the
# largest one, capped the same way.
_INFINITE_DELAY = re.compile(r"(?im)^([ \t]*crawl-delay[ \t]*:[ \t]*)\+?inf(?:inity)?[ \t]*(#.*)?$")


def parse_rules(text: str) -> Protego:
    """A robots.txt body as protego's rules, an infinite Crawl-delay taken as a huge one."""
    return Protego.parse(_INFINITE_DELAY.sub(r"\g<1>1e18", text))


@dataclass
class _Entry:
    rules: Protego | None  # None with allow_all False: everything disallowed
    allow_all: bool
    expires: float
    fetched_ok: float | None  # when rules last came from a real answer (2xx/4xx)
    failing_since: float | None  # first of the current run of 5xx / network errors
    status: int
    text: str = ""  # the file the rules came from: a host handed over carries it
    failures: int = 0  # consecutive unreachable answers (the retry backs off exponentially)
    why: str = ""  # the last failure without a response, named (e.g. "connect: connection refused")


@dataclass(frozen=True)
class RobotsState:
    """A host's entry as plain data (for a handover): what `update` saw, not the parsed rules."""

    status: int
    text: str
    expires: float
    fetched_ok: float | None
    failing_since: float | None

    def expiring_by(self, latest: float) -> RobotsState:
        """The entry expiring no later than `latest` (a handed entry lives at most this agent's
        own TTL: one that said 1e11 kept a host's rules, a Disallow included, for ever)."""
        return self if self.expires <= latest else RobotsState(self.status, self.text, latest, self.fetched_ok,
                                                               self.failing_since)


class RobotsCache:
    """Rules per host with a TTL.

    The agent asks `needs_fetch(host, now)`, fetches /robots.txt through its Fetcher (following
    up to 5 redirects itself, RFC 9309 2.3.1.2) and calls `update(host, status, body, now)`
    with status 0 for a network error. Until the first update a host is disallowed, so a
    caller that forgets to fetch cannot crawl against the rules.
    """

    def __init__(self, user_agent: str, ttl: float = 86400.0, error_ttl: float = 600.0, max_bytes: int = 500_000,
                 unreachable_allow_after: float = UNREACHABLE_ALLOW_AFTER, retry_base: float = 5.0):
        if ttl <= 0 or error_ttl <= 0 or max_bytes < 1:
            raise ValueError("ttl, error_ttl and max_bytes must be positive")
        # Groups match on the product token ("wancrawl" of "wancrawl/0.1 (+url)").
        self.token = user_agent.split("/", 1)[0].split()[0] if user_agent.strip() else "*"
        self.ttl = ttl
        self.error_ttl = error_ttl
        self.max_bytes = max_bytes
        self.unreachable_allow_after = unreachable_allow_after
        # An unreachable robots.txt is asked again after retry_base, then twice as long each
        # time, up to error_ttl: a site back after a short outage is crawled soon.
        self.retry_base = min(retry_base, error_ttl)
        self._hosts: dict[str, _Entry] = {}

    def needs_fetch(self, host: str, now: float) -> bool:
        e = self._hosts.get(host)
        return e is None or now >= e.expires

    def update(self, host: str, status: int, body: bytes | str | None, now: float, why: str = "") -> None:
        """Record the outcome of fetching http(s)://host/robots.txt (status 0: no response, `why`
        names the failure)."""
        prev = self._hosts.get(host)
        if 200 <= status < 300:
            text = body if isinstance(body, str) else (body or b"")[: self.max_bytes].decode("utf-8", "replace")
            if isinstance(body, str):
                text = text[: self.max_bytes]
            try:
                rules = parse_rules(text)
            except Exception:  # noqa: BLE001 - an unparseable file is treated as empty (RFC 9309 2.2)
                rules = None
            self._hosts[host] = _Entry(rules, rules is None, now + self.ttl, now, None, status, text)
        elif 300 <= status < 400 or (400 <= status < 500 and status != 429):
            # "Unavailable" (4xx, or redirects the caller gave up on): no restrictions.
            # 3xx is retried sooner: it usually means the caller could not follow.
            ttl = self.error_ttl if status < 400 else self.ttl
            self._hosts[host] = _Entry(None, True, now + ttl, now, None, status)
        else:
            # "Unreachable" (5xx, 429, network error): assume complete disallow for a while,
            # but keep rules from a recent good answer (RFC 9309 2.4 allows the cached copy).
            failing = prev is not None and prev.failing_since is not None
            since = prev.failing_since if prev is not None and prev.failing_since is not None else now
            n = (prev.failures if prev is not None and failing else 0) + 1
            until = now + min(self.error_ttl, self.retry_base * 2.0 ** min(n - 1, 30))
            why = why if status == 0 else ""
            if now - since >= self.unreachable_allow_after:
                self._hosts[host] = _Entry(None, True, until, None, since, status, "", n, why)
            elif prev is not None and prev.fetched_ok is not None and now - prev.fetched_ok < self.unreachable_allow_after:
                self._hosts[host] = _Entry(prev.rules, prev.allow_all, until, prev.fetched_ok, since, status, prev.text, n, why)
            else:
                self._hosts[host] = _Entry(None, False, until, None, since, status, "", n, why)

    def unreachable(self, host: str) -> tuple[float, float, int] | None:
        """(failing since, retry at, last status) while the host's robots.txt is unreachable and
        no rules stand in (RFC 9309 2.4: disallow for now): its URLs wait, they are not refused."""
        e = self._hosts.get(host)
        if e is None or e.failing_since is None or e.allow_all or e.rules is not None:
            return None
        return e.failing_since, e.expires, e.status

    def failure(self, host: str) -> str:
        """The last robots.txt failure of the host, for people: "status 503", or the failure
        without a response by name ("connect: connection refused"), never "status 0"."""
        e = self._hosts.get(host)
        if e is None:
            return ""
        return e.why or (f"status {e.status}" if e.status else "no response")

    def allowed(self, url: str, host: str) -> bool:
        """Whether the rules let us fetch url; /robots.txt itself is always allowed."""
        e = self._hosts.get(host)
        if url.endswith("/robots.txt") and url.count("/") == 3:
            return True
        if e is None:
            return False
        if e.allow_all:
            return True
        if e.rules is None:
            return False
        return e.rules.can_fetch(url, self.token)

    def crawl_delay(self, host: str) -> float | None:
        """Seconds between requests asked by Crawl-delay, or derived from Request-rate."""
        e = self._hosts.get(host)
        if e is None or e.rules is None:
            return None
        d = e.rules.crawl_delay(self.token)
        if d is None:
            rr = e.rules.request_rate(self.token)
            if rr is not None and rr.requests:
                d = rr.seconds / rr.requests
        return None if d is None else float(d)

    def sitemaps(self, host: str) -> list[str]:
        e = self._hosts.get(host)
        if e is None or e.rules is None:
            return []
        return list(e.rules.sitemaps)

    def forget(self, host: str) -> None:
        self._hosts.pop(host, None)

    def export(self, host: str) -> RobotsState | None:
        e = self._hosts.get(host)
        if e is None:
            return None
        return RobotsState(e.status, e.text, e.expires, e.fetched_ok, e.failing_since)

    def import_(self, host: str, st: RobotsState) -> None:
        """Take over a handed host's entry, unless this cache holds a fresher one."""
        mine = self._hosts.get(host)
        if mine is not None and mine.expires >= st.expires:
            return
        rules = None
        if 200 <= st.status < 300 or (st.text and st.fetched_ok is not None):
            # A 2xx file, or a failing host's rules kept from its last good answer.
            try:
                rules = parse_rules(st.text)
            except Exception:  # noqa: BLE001 - as in update(): unparseable = empty
                rules = None
            allow_all = rules is None
        else:
            # Same reading as update(): "unavailable" allows all; "unreachable" allows all only
            # after a long failure, else everything is disallowed until refetched.
            allow_all = (300 <= st.status < 500 and st.status != 429) or (
                st.failing_since is not None and st.expires - st.failing_since >= self.unreachable_allow_after)
        self._hosts[host] = _Entry(rules, allow_all, st.expires, st.fetched_ok, st.failing_since, st.status, st.text)

    def purge(self, now: float, grace: float = 0.0) -> int:
        """Drop entries expired for longer than grace; returns how many went. A failing entry
        (robots.txt unreachable) is the history of its failures: it stays until an error_ttl
        past its retry time, or its backoff, park and give-up clocks would start over."""
        dead = [h for h, e in self._hosts.items()
                if now >= e.expires + grace + (self.error_ttl if e.failing_since is not None else 0.0)]
        for h in dead:
            del self._hosts[h]
        return len(dead)

    def __len__(self) -> int:
        return len(self._hosts)
