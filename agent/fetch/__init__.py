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
# Chosen by bench/parts/agent_fetch.py (figures in docs/agent-fetching.md).
DEFAULT_FETCHER = "aiohttp"


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
