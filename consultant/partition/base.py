"""The partitioner interface: agents and a site in, a ranked preference list out. No I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from wancrawl.errors import ConfigError

MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class AgentView:
    """What a partitioner may know of an agent. Immutable; one per live agent."""

    agent_id: str
    address: str = ""
    city: str = ""
    lat: float | None = None
    lon: float | None = None
    asn: int = 0
    isp: str = ""
    weight: float = 1.0


@dataclass(frozen=True)
class Site:
    """What the consultant learnt about a host: its IP and what the DBs say of that IP."""

    host: str
    ip: str | None = None
    city: str = ""
    country: str = ""
    lat: float | None = None
    lon: float | None = None
    asn: int = 0
    isp: str = ""


@dataclass(frozen=True)
class Scored:
    """One agent's place in a host's ranking, for Explain."""

    index: int        # into the agents the placement was bound to
    score: float      # higher is better, strategy-specific
    detail: str


class Placement(Protocol):
    """A partitioner bound to one set of agents (one epoch). Pure and deterministic."""

    def rank(self, site: Site, k: int) -> list[int]:
        """Indices of the k best agents for the site, best first (k distinct agents)."""

    def explain(self, site: Site) -> list[Scored]:
        """Every agent, ranked best first, with its score and a human-readable reason."""


class Partitioner(Protocol):
    """A strategy: built from its options, bound to the live agents of an epoch."""

    name: ClassVar[str]
    # What the consultant must look up about a host before ranking: "ip", "geo", "asn".
    needs: ClassVar[frozenset[str]]

    def bind(self, agents: Sequence[AgentView]) -> Placement: ...


PARTITIONERS: dict[str, Callable[..., Partitioner]] = {}


def register(name: str):
    """Class decorator: make a partitioner selectable as `strategy = "<name>"`."""

    def deco(cls):
        cls.name = name
        PARTITIONERS[name] = cls
        return cls

    return deco


def create(name: str, options: Any = None, **context: Any) -> Partitioner:
    """The partitioner called `name`, or a ConfigError that lists the known ones."""
    try:
        cls = PARTITIONERS[name]
    except KeyError:
        known = ", ".join(sorted(PARTITIONERS))
        raise ConfigError(f"unknown strategy {name!r} (key 'strategy'; known: {known})") from None
    return cls(options, **context)


def key64(text: str, salt: str = "") -> int:
    """A stable 64-bit key of a string (same on every machine and Python run)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, person=b"wancrawl", salt=salt.encode()[:16]).digest(), "big")


def mix64(x: int) -> int:
    """splitmix64's finaliser: a bijective, well-avalanched 64-bit mix."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def hrw_scores(host_key: int, agent_keys: Sequence[int]) -> list[int]:
    """Rendezvous weights of one host for every agent: a 64-bit score per agent."""
    return [mix64(host_key ^ a) for a in agent_keys]
