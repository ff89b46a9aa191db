"""wancrawl/stats.py: the registry sums only what both owners declare shared, and refuses the rest."""

from dataclasses import dataclass
from typing import ClassVar

import pytest

from wancrawl.stats import Counters, StatsError, StatsRegistry


@dataclass(slots=True)
class A(Counters):
    SHARED: ClassVar[frozenset[str]] = frozenset({"rpcs"})
    pages: int = 0
    rpcs: int = 0


@dataclass(slots=True)
class B(Counters):
    SHARED: ClassVar[frozenset[str]] = frozenset({"rpcs"})
    rpcs: int = 0
    bytes: float = 0.0


@dataclass(slots=True)
class C(Counters):
    pages: int = 0


def test_snapshot_sums_shared_names_and_reads_gauges():
    reg = StatsRegistry()
    a, b = A(), B()
    reg.register("fetch", a)
    reg.register("dir", {"one": b})
    reg.gauges("queue", lambda: {"frontier": 3})
    a.pages += 2
    a.rpcs += 1
    b.rpcs += 4
    b.bytes += 1.5
    assert reg.snapshot() == {"pages": 2, "rpcs": 5, "bytes": 1.5, "frontier": 3}
    assert reg.namespaced() == {"fetch.pages": 2, "fetch.rpcs": 1, "dir.one.rpcs": 4, "dir.one.bytes": 1.5,
                                "queue.frontier": 3}
    assert reg.counter_names() == {"pages", "rpcs", "bytes"}


def test_a_name_not_declared_shared_by_both_owners_is_refused():
    reg = StatsRegistry()
    reg.register("fetch", A())
    with pytest.raises(StatsError, match="'pages'"):
        reg.register("other", C())
    with pytest.raises(StatsError, match="registered already"):
        reg.register("fetch", B())


def test_slotted_counters_refuse_a_mistyped_name():
    a = A()
    with pytest.raises(AttributeError):
        a.pgaes = 1  # type: ignore[attr-defined]
