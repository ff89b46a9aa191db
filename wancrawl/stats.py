"""One typed vocabulary for what a service counts (issue 34), as agent/routing/router.py's
Counters began it: a component declares its counters as a dataclass whose fields are its metric
names, counts into those fields (`self.stats.pages += 1`: an attribute of a slotted dataclass, no
string key to mistype), and the composition root registers it once under a namespace. `status`,
Prometheus and the chaos harness all read the one registry.

    @dataclass(slots=True)
    class FetchCounters(Counters):
        fetches: int = 0
        pages: int = 0

    registry = StatsRegistry()
    registry.register("dispatch.fetch", fetch_counters)
    registry.gauges("frontier", lambda: {"frontier": len(frontier)})
    registry.snapshot()        # {"fetches": 0, "pages": 0, "frontier": 12}: the flat public names
    registry.namespaced()      # {"dispatch.fetch.fetches": 0, ...}: who counted what

A flat name belongs to one namespace. Two components may count the same thing (the directory's
and membership's consultant RPCs) only when both list the name in their class's `SHARED`; their
values are then summed. Any other collision raises at registration: a copied or renamed field
shows when the node is built, never as a figure silently doubled or overwritten.

Pure bookkeeping: no clock, no I/O, no locks (every writer runs on one event loop).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import ClassVar


class Counters:
    """Base of every typed counters dataclass: each field an int or float, its metric name.
    `SHARED`: the names another component may count too (summed in the snapshot)."""

    __slots__ = ()
    SHARED: ClassVar[frozenset[str]] = frozenset()

    def items(self) -> Iterator[tuple[str, float]]:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            yield f.name, getattr(self, f.name)

    def as_dict(self) -> dict[str, float]:
        return dict(self.items())


class StatsError(ValueError):
    """A name registered twice without both owners declaring it shared, or a bad namespace."""


Gauges = Callable[[], Mapping[str, float]]


class StatsRegistry:
    """The counters and gauges of one process, by namespace. Invariant: every flat counter name
    maps to the namespaces that count it, and a name with two or more is in each one's SHARED."""

    def __init__(self) -> None:
        self._counters: dict[str, Counters] = {}
        self._gauges: dict[str, Gauges] = {}
        self._owners: dict[str, list[str]] = {}  # flat counter name -> namespaces counting it

    def register(self, namespace: str, counters: Counters | Mapping[str, Counters]) -> None:
        """One component's counters, or a composite's parts as {sub-namespace: counters}."""
        if isinstance(counters, Counters):
            self._add(namespace, counters)
        else:
            for sub, part in counters.items():
                self._add(f"{namespace}.{sub}", part)

    def _add(self, namespace: str, counters: Counters) -> None:
        if not namespace or namespace in self._counters or namespace in self._gauges:
            raise StatsError(f"stats namespace {namespace!r} is empty or registered already")
        if not dataclasses.is_dataclass(counters):
            raise StatsError(f"{type(counters).__name__} ({namespace}) is not a dataclass")
        for name, _ in counters.items():
            owners = self._owners.setdefault(name, [])
            if owners and not (name in counters.SHARED and all(name in self._counters[o].SHARED for o in owners)):
                raise StatsError(f"counter {name!r} of {namespace} is counted by {owners[0]} too; "
                                 f"declare it in both classes' SHARED to sum them")
            owners.append(namespace)
        self._counters[namespace] = counters

    def gauges(self, namespace: str, read: Gauges) -> None:
        """Levels read when the snapshot is taken (queue lengths, ratios, the epoch)."""
        if not namespace or namespace in self._counters or namespace in self._gauges:
            raise StatsError(f"stats namespace {namespace!r} is empty or registered already")
        self._gauges[namespace] = read

    def counter_names(self) -> frozenset[str]:
        return frozenset(self._owners)

    def snapshot(self) -> dict[str, float]:
        """Every counter by its flat name (shared ones summed), then every gauge."""
        out: dict[str, float] = {}
        for counters in self._counters.values():
            for name, value in counters.items():
                out[name] = out.get(name, 0) + value
        for read in self._gauges.values():
            out.update(read())
        return out

    def namespaced(self) -> dict[str, float]:
        """Every counter and gauge as namespace.name: which component counted what."""
        out = {f"{ns}.{name}": value for ns, c in self._counters.items() for name, value in c.items()}
        for ns, read in self._gauges.items():
            out.update({f"{ns}.{name}": value for name, value in read().items()})
        return out
