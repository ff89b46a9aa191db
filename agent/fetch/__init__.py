"""fetch: HTTP fetching behind the Fetcher port: the contract and its settings (base.py), the
address guard, the backends by name (aiohttp, httpx, lean; tests/test_agent_fetch.py runs one
contract over all three) and create_fetcher for the agent's config. The bottom room. Imports only wancrawl."""

from __future__ import annotations

from agent.fetch.aiohttp_fetcher import AiohttpFetcher
from agent.fetch.base import (
    ERRORS,
    TRUNCATIONS,
    Fetcher,
    FetchRequest,
    FetchResponse,
    FetchSettings,
    Resolver,
)
from agent.fetch.guard import AddressGuard
from agent.fetch.httpx_fetcher import HttpxFetcher
from agent.fetch.lean_fetcher import LeanFetcher
from wancrawl.errors import ConfigError

FETCHERS: dict[str, type] = {"aiohttp": AiohttpFetcher, "httpx": HttpxFetcher, "lean": LeanFetcher}
# lean: 2.3-2.7x less client CPU per request than aiohttp in bench/parts/agent_fetch.py, and the
# agent's CPU per page lower in the bench beside it (figures in docs/agent-fetching.md, issue 24);
# aiohttp and httpx stay selectable (`fetcher = "aiohttp"`).
DEFAULT_FETCHER = "lean"


def create_fetcher(name: str = DEFAULT_FETCHER, settings: FetchSettings | None = None, resolver: Resolver | None = None) -> Fetcher:
    """A fetcher backend by its config name; an unknown name is a ConfigError naming `fetcher`."""
    cls = FETCHERS.get(name)
    if cls is None:
        raise ConfigError(f"unknown fetcher {name!r} for key 'fetcher' (known: {', '.join(sorted(FETCHERS))})")
    return cls(settings or FetchSettings(), resolver)


__all__ = [
    "DEFAULT_FETCHER",
    "ERRORS",
    "FETCHERS",
    "TRUNCATIONS",
    "AddressGuard",
    "FetchRequest",
    "FetchResponse",
    "FetchSettings",
    "Fetcher",
    "create_fetcher",
]
