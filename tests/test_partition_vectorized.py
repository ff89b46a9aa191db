"""The NumPy placements rank exactly as the pure-Python ones did (tests/partition_reference.py):
the same owner and backups for every host, so consultants of two versions agree (issue 24)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import partition_reference as ref
from consultant.partition import AgentView, Site, create_from_config
from consultant.partition.base import hrw_array, hrw_scores, key64, mix64
from geodata import CITIES, ISP_GROUPS, ISPS

EDGES = [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB]


def test_hrw_array_is_hrw_scores_bit_for_bit():
    rnd = random.Random(7)
    keys = EDGES + [rnd.getrandbits(64) for _ in range(5000)]
    arr = np.array(keys, dtype=np.uint64)
    for host in EDGES + [rnd.getrandbits(64) for _ in range(200)]:
        assert hrw_array(host, arr).tolist() == hrw_scores(host, keys) == ref.hrw_scores(host, keys)
    assert [mix64(x) for x in keys] == [ref.mix64(x) for x in keys]
    assert hrw_array(5, arr).dtype == np.uint64 and arr.tolist() == keys  # the keys are left alone


def random_agents(rnd: random.Random, n: int, *, duplicates: bool = False) -> list[AgentView]:
    out = []
    for i in range(n):
        name = f"agent-{rnd.randrange(n // 2 + 1)}" if duplicates else f"a{rnd.getrandbits(40):x}-{i}"
        isp = rnd.randrange(1, len(ISPS) + 1)
        iname, asn, _ = ISPS[isp]
        if rnd.random() < 0.1:
            lat = lon = None
            city = ""
        else:
            city, lat, lon = CITIES[rnd.randrange(1, len(CITIES) + 1)]
            if rnd.random() < 0.3:  # not all of a city's agents at one point
                lat, lon = lat + rnd.uniform(-0.5, 0.5), lon + rnd.uniform(-0.5, 0.5)
        w = rnd.choice([1.0, 1.0, 0.5, 2.0, rnd.uniform(0.01, 10)])
        out.append(AgentView(name, f"127.0.0.{i % 250}:7000", city, lat, lon, asn, iname if rnd.random() < 0.9 else "", w))
    return out


def random_site(rnd: random.Random, i: int) -> Site:
    host = f"www.{rnd.getrandbits(32):x}-{i}.example"
    iname, asn, _ = ISPS[rnd.randrange(1, len(ISPS) + 1)]
    if rnd.random() < 0.15:
        return Site(host, None, "", "", None, None, asn if rnd.random() < 0.5 else 0, iname if rnd.random() < 0.5 else "")
    city, lat, lon = CITIES[rnd.randrange(1, len(CITIES) + 1)]
    if rnd.random() < 0.3:
        lat, lon = lat + rnd.uniform(-1, 1), lon + rnd.uniform(-1, 1)
    return Site(host, "127.0.0.1", city, "CN", lat, lon, asn, iname if rnd.random() < 0.8 else f"other-{i % 3}")


def pair(name: str, agents: list[AgentView], tie_km: float, fallback: str):
    """(new placement, reference placement) for the same agents and options."""
    weights = [a.weight for a in agents]
    if name == "hash":
        return create_from_config("hash").bind(agents), ref.HashRef(agents, "")
    if name == "weighted":
        p = create_from_config("weighted", {"source": "heartbeat"}).bind(agents)
        return p, ref.WeightedRef(agents, "", weights)
    if name == "geo":
        return create_from_config("geo", {"tie_km": tie_km}).bind(agents), ref.GeoRef(agents, tie_km)
    tables = {"geo": {"tie_km": tie_km}, "weighted": {"source": "heartbeat"}}
    p = create_from_config("asn", {"isps": ISP_GROUPS, "fallback": fallback}, tables=tables).bind(agents)
    fb = {"hash": lambda: ref.HashRef(agents, ""), "geo": lambda: ref.GeoRef(agents, tie_km),
          "weighted": lambda: ref.WeightedRef(agents, "", weights)}[fallback]()
    return p, ref.AsnRef(agents, fb)


CASES = [("hash", 0, "-"), ("weighted", 0, "-"), ("geo", 1.0, "-"), ("geo", 0.0, "-"), ("geo", 250.0, "-"),
         ("asn", 1.0, "geo"), ("asn", 0.0, "hash"), ("asn", 1.0, "weighted")]


@pytest.mark.parametrize("name,tie_km,fallback", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_the_ranking_is_the_pure_implementations(name, tie_km, fallback, seed):
    rnd = random.Random(f"{name}-{tie_km}-{fallback}-{seed}")
    for n in (1, 2, 3, rnd.randrange(4, 40), rnd.randrange(40, 400), 1000 + rnd.randrange(500)):
        agents = random_agents(rnd, n, duplicates=seed == 3)  # equal ids: equal scores, ties broken alike
        new, old = pair(name, agents, tie_km, fallback)
        for i in range(60 if n < 1000 else 25):
            s = random_site(rnd, i)
            for k in (1, 2, 3, 5, n, n + 2):
                assert new.rank(s, k) == old.rank(s, k), (name, n, s, k)
            assert [x.index for x in new.explain(s)] == old.rank(s, n)


def test_weighted_scores_near_the_kth_are_rescored_exactly():
    # Two agents whose NumPy weighted scores could round differently from math.log's: equal
    # scores but for the last bits. The id tiebreak must decide as the pure ranking does.
    rnd = random.Random(3)
    agents = random_agents(rnd, 300)
    for _ in range(200):
        s = random_site(rnd, rnd.randrange(10**6))
        h = ref.hrw_scores(key64(s.host), [key64(a.agent_id) for a in agents])
        # Give the top two the weights that make their exact scores nearly equal.
        top = sorted(range(len(h)), key=h.__getitem__, reverse=True)[:2]
        lg = [np.log((h[i] + 0.5) / 2.0**64) for i in top]
        ws = [a.weight for a in agents]
        ws[top[0]], ws[top[1]] = 1.0, float(lg[1] / lg[0]) * (1 + rnd.choice([0, 1e-16, -1e-16, 2e-16]))
        agents2 = [AgentView(a.agent_id, a.address, a.city, a.lat, a.lon, a.asn, a.isp, w) for a, w in zip(agents, ws)]
        new = create_from_config("weighted", {"source": "heartbeat"}).bind(agents2)
        old = ref.WeightedRef(agents2, "", ws)
        for k in (1, 2, 3):
            assert new.rank(s, k) == old.rank(s, k)


@pytest.mark.parametrize("name,tie_km,fallback", [("hash", 0, "-"), ("weighted", 0, "-"), ("geo", 1.0, "-"), ("asn", 1.0, "geo")])
def test_equal_scores_of_distinct_agents_are_ordered_alike(name, tie_km, fallback):
    # 64-bit ties never happen by chance: give distinct agents keys from a pool of eight, so
    # many share a score, and the tiebreaks (agent id for hash and weighted, index for geo)
    # must decide as the pure ranking's do.
    rnd = random.Random(name)
    for n in (5, 50, 700):
        agents = random_agents(rnd, n)
        new, old = pair(name, agents, tie_km, fallback)
        pool = [rnd.getrandbits(64) for _ in range(8)]
        keys = [rnd.choice(pool) for _ in agents]
        for p in (new, old):
            inner = getattr(p, "fallback", p)
            inner = getattr(inner, "hash", inner)
            inner.keys = list(keys)
            if hasattr(inner, "key_array"):
                inner.key_array = np.array(keys, dtype=np.uint64)
        for i in range(40):
            s = random_site(rnd, i)
            for k in (1, 2, 3, 7, n):
                assert new.rank(s, k) == old.rank(s, k), (name, n, k)
