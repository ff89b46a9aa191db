"""One request through the fetcher, counted (pages, robots.txt and its redirect hops alike), and
the answers that condemn a whole host rather than one URL or origin."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from agent.crawl.hosts import unresolved
from agent.fetch import Fetcher, FetchRequest, FetchResponse
from wancrawl.stats import Counters

log = logging.getLogger("agent")


@dataclass(slots=True)
class FetchCounters(Counters):
    fetches: int = 0  # requests sent
    bytes: int = 0    # bytes read from the wire
    request_errors: int = 0  # requests without a response (refused, reset, TLS, timeout...), robots.txt's included


class Requests:
    """`fetch_errors`: failed requests and refused URLs by kind (outcome.ERROR_KINDS), the
    dispatcher's labelled family; this counts the transport failures into it."""

    def __init__(self, fetcher: Fetcher, clock: Callable[[], float], fetch_errors: dict[str, float]):
        self.fetcher = fetcher
        self.clock = clock
        self.fetch_errors = fetch_errors
        self.stats = FetchCounters()

    async def fetch(self, url: str, host: str, ip: str | None, headers: dict[str, str] | None = None) -> FetchResponse:
        try:
            resp = await self.fetcher.fetch(FetchRequest(url, host, None if unresolved(ip) else ip, headers or None))
        except Exception as exc:
            log.exception("fetcher raised on %s", url)
            resp = FetchResponse(url, error="internal", error_detail=str(exc), started_at=self.clock(), ended_at=self.clock())
        self.stats.fetches += 1
        self.stats.bytes += resp.raw_length
        if resp.error:
            self.stats.request_errors += 1
            self.fetch_errors[resp.error] = self.fetch_errors.get(resp.error, 0.0) + 1
        return resp


def host_failure(resp: FetchResponse) -> tuple[str, str] | None:
    """(reason, incident kind) when the answer is a failure of the whole host, whatever the
    origin: its address is forbidden (the SSRF guard) or its name does not resolve (NXDOMAIN, no
    address: not worth an hour of robots.txt retries). The host is then given up."""
    if resp.error == "forbidden_address":
        return f"{resp.error_detail or 'forbidden address'} (fetch.allow_networks)", "forbidden_address"
    if resp.error == "dns":
        return f"DNS: {resp.error_detail or 'the name does not resolve'}", "dns_failure"
    return None
