"""The partitioner interface: agents and a site in, a ranked preference list out. No I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from wancrawl.config import build
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


class Partitioner:
    """A strategy: built from its options, bound to the live agents of an epoch.

    Each subclass names its options dataclass (`Options`, the `[<name>]` table of a config),
    so any process can build one from plain config data: `create_from_config` below.
    """

    name: ClassVar[str]
    Options: ClassVar[type[Any]]
    # What must be looked up about a host before ranking: "ip", "geo" (City DB), "asn" (ASN DB).
    needs: frozenset[str] = frozenset()

    def __init__(self, options: Any = None):
        self.options = self.Options() if options is None else options

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Partitioner:
        """Built from its own entry of `options` (strategy name -> options; none: defaults)."""
        return cls(options.get(cls.name))

    def bind(self, agents: Sequence[AgentView]) -> Placement:
        raise NotImplementedError

    def weight_of(self, agent: AgentView) -> float:
        """The agent's weight in this strategy's ranking (1.0: all agents are equal)."""
        return 1.0

    @property
    def reweight_threshold(self) -> float | None:
        """How far an agent's reported capacity must move to become its weight (an epoch
        bump); None when this strategy ranks without the reported capacity."""
        return None

    @property
    def weights_from_model(self) -> bool:
        """True when the agents' weights are the capacity model's allocation (weighted with
        source = "model"): the consultant computes them and hands them in as each agent's
        weight, through the same threshold as a reported capacity."""
        return False

    def fingerprint(self) -> dict[str, Any]:
        """Everything besides the agents and the site DBs that decides this strategy's answers."""
        return {"strategy": self.name, "options": asdict(self.options)}


PARTITIONERS: dict[str, type[Partitioner]] = {}
P = TypeVar("P", bound=type[Partitioner])


def register(name: str) -> Callable[[P], P]:
    """Class decorator: make a partitioner selectable as `strategy = "<name>"`."""

    def deco(cls: P) -> P:
        cls.name = name
        PARTITIONERS[name] = cls
        return cls

    return deco


def partitioner_class(name: str, where: str = "key 'strategy'") -> type[Partitioner]:
    """The partitioner called `name`, or a ConfigError saying `where` and the known ones."""
    try:
        return PARTITIONERS[name]
    except KeyError:
        known = ", ".join(sorted(PARTITIONERS))
        raise ConfigError(f"unknown strategy {name!r} ({where}; known: {known})") from None


def parse_options(name: str, table: Mapping[str, Any] | None = None, *, source: str = "config") -> Any:
    """Strategy `name`'s options from its config table as TOML gives it (None: defaults).
    A wrong key or value is a ConfigError naming `source` and the key, e.g. 'xor.virtual_ids'."""
    cls = partitioner_class(name, f"{source}: table [{name}]")
    return build(cls.Options, dict(table or {}), where=f"{name}.", source=source)


def create(name: str, options: Mapping[str, Any] | None = None) -> Partitioner:
    """The partitioner called `name` from parsed options by strategy name (a missing entry
    gets the defaults); a strategy built on another (asn's fallback) finds that one's here."""
    return partitioner_class(name).from_options(options or {})


def create_from_config(
    name: str,
    table: Mapping[str, Any] | None = None,
    *,
    tables: Mapping[str, Mapping[str, Any]] | None = None,
    source: str = "config",
) -> Partitioner:
    """The partitioner called `name` from plain config data, e.g.
    `create_from_config("xor", {"virtual_ids": 64})`. `table` is its own options table;
    `tables` holds other strategies' tables by name, for one built on another (asn's fallback
    takes its options from there). Every table given is checked; errors name `source`."""
    raw = {**(tables or {}), **({name: table} if table is not None else {})}
    return create(name, {n: parse_options(n, t, source=source) for n, t in raw.items()})


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


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def hrw_array(host_key: int, agent_keys: np.ndarray) -> np.ndarray:
    """`hrw_scores` over a uint64 array of agent keys, in NumPy: the same scores, bit for bit
    (uint64 products wrap modulo 2**64, which is splitmix64's `& MASK64`)."""
    x = agent_keys ^ np.uint64(host_key)
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def top_candidates(values: np.ndarray, k: int, margin: float = 0.0) -> np.ndarray:
    """Positions of every value that can be among the k largest: those at least the k-th
    largest (all of its ties included), less `margin` times its size when the values are
    floats that may be off by a few ulps. Ascending positions; all of them when k >= len."""
    n = len(values)
    if k >= n:
        return np.arange(n)
    kth = np.partition(values, n - k)[n - k]
    if margin:
        kth = kth - abs(kth) * margin
    return np.flatnonzero(values >= kth)
