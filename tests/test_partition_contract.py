"""One contract, every partitioner: deterministic, balanced, minimal movement, backups take over."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from consultant.partition import PARTITIONERS, AgentView, Site, create_from_config
from wancrawl.errors import ConfigError

from conftest import REPO
from geodata import CITIES, ISP_GROUPS, ISPS

ALL = sorted(PARTITIONERS)
# Strategies whose ownership is spread uniformly over agents, whatever their location.
UNIFORM = ["hash", "xor", "weighted"]

# Config tables as TOML gives them; a strategy without one gets its defaults.
TABLES = {"asn": {"isps": ISP_GROUPS, "fallback": "geo"}}


def make(name: str):
    return create_from_config(name, tables=TABLES)


def block_of(text: str) -> tuple[int, int]:
    h = hashlib.sha256(text.encode()).digest()
    return 1 + h[0] % len(ISPS), 1 + h[1] % len(CITIES)


def agent(i: int, prefix: str = "agent", colocated: bool = False) -> AgentView:
    isp, city = (1, 1) if colocated else block_of(f"{prefix}-{i}")
    name, lat, lon = CITIES[city]
    iname, asn, _ = ISPS[isp]
    return AgentView(f"{prefix}-{i}", f"127.{isp}.{city}.{2 + i % 8}:7000", name, lat, lon, asn, iname, 1.0)


def site(i: int) -> Site:
    host = f"www.site{i}.example"
    isp, city = block_of(host)
    name, lat, lon = CITIES[city]
    iname, asn, _ = ISPS[isp]
    return Site(host, f"127.{isp}.{city}.{10 + i % 200}", name, "CN", lat, lon, asn, iname)


SITES_20K = [site(i) for i in range(20_000)]


def owners(placement, agents, sites):
    return [agents[placement.rank(s, 1)[0]].agent_id for s in sites]


@pytest.mark.parametrize("name", ALL)
def test_deterministic_across_instances_and_agent_order(name):
    agents = [agent(i) for i in range(12)]
    shuffled = agents[:]
    random.Random(7).shuffle(shuffled)
    a = make(name).bind(agents)
    b = make(name).bind(shuffled)
    for s in SITES_20K[:3000]:
        ra = [agents[i].agent_id for i in a.rank(s, 4)]
        rb = [shuffled[i].agent_id for i in b.rank(s, 4)]
        assert ra == rb


@pytest.mark.parametrize("name", ALL)
def test_preference_list_is_k_distinct_agents(name):
    agents = [agent(i) for i in range(7)]
    p = make(name).bind(agents)
    for s in SITES_20K[:2000]:
        r = p.rank(s, 3)
        assert len(r) == 3 and len(set(r)) == 3
        assert len(p.rank(s, 50)) == 7
        full = p.explain(s)
        assert [x.index for x in full][:3] == r


@pytest.mark.parametrize("name", ALL)
def test_leave_moves_only_the_leavers_hosts_to_their_first_backup(name):
    agents = [agent(i) for i in range(10)]
    p = make(name).bind(agents)
    before = [[agents[i].agent_id for i in p.rank(s, 3)] for s in SITES_20K]
    leaver = agents[3].agent_id
    rest = [a for a in agents if a.agent_id != leaver]
    q = make(name).bind(rest)
    after = owners(q, rest, SITES_20K)
    for b, a in zip(before, after):
        if b[0] == leaver:
            assert a == b[1], "the first backup must own the host once the owner leaves"
        else:
            assert a == b[0], "a host of a staying agent moved"


@pytest.mark.parametrize("name", ALL)
def test_join_moves_hosts_only_to_the_joiner(name):
    agents = [agent(i) for i in range(9)]
    before = owners(make(name).bind(agents), agents, SITES_20K)
    joined = agents + [agent(9)]
    after = owners(make(name).bind(joined), joined, SITES_20K)
    moved = [(b, a) for b, a in zip(before, after) if b != a]
    assert all(a == "agent-9" for _, a in moved)


@pytest.mark.parametrize("name", UNIFORM)
def test_join_moves_about_one_in_n_plus_one(name):
    n = 9
    agents = [agent(i) for i in range(n)]
    before = owners(make(name).bind(agents), agents, SITES_20K)
    joined = agents + [agent(n)]
    after = owners(make(name).bind(joined), joined, SITES_20K)
    moved = sum(b != a for b, a in zip(before, after)) / len(SITES_20K)
    assert moved <= 1.3 / (n + 1), f"{moved:.3f} of hosts moved; ideal {1 / (n + 1):.3f}"
    assert moved >= 0.7 / (n + 1)


def _max_over_mean(placement, agents, n_hosts):
    counts = collections.Counter(placement.rank(Site(f"h{i}.example.org"), 1)[0] for i in range(n_hosts))
    assert len(counts) == len(agents)
    return max(counts.values()) / (n_hosts / len(agents))


@pytest.mark.parametrize("name", UNIFORM)
def test_balanced_over_100k_hosts_and_10_agents(name):
    agents = [agent(i) for i in range(10)]
    ratio = _max_over_mean(make(name).bind(agents), agents, 100_000)
    assert ratio <= 1.15, f"busiest agent owns {ratio:.3f}x the mean"


@pytest.mark.parametrize("name", ["geo", "asn"])
def test_colocated_agents_share_their_region_evenly(name):
    # Locality strategies split a region's sites among that region's agents by hash.
    agents = [agent(i, colocated=True) for i in range(10)]
    p = make(name).bind(agents)
    beijing_telecom = [Site(f"h{i}.example.org", "127.1.1.10", "Beijing", "CN", *CITIES[1][1:], 4134, "telecom") for i in range(100_000)]
    counts = collections.Counter(p.rank(s, 1)[0] for s in beijing_telecom)
    assert max(counts.values()) / 10_000 <= 1.15


@pytest.mark.parametrize("source", ["heartbeat", "model"])
def test_weighted_shares_follow_weights(source):
    agents = [AgentView(f"w{i}", weight=float(i + 1)) for i in range(4)]
    p = create_from_config("weighted", {"source": source}).bind(agents)
    n = 100_000
    counts = collections.Counter(p.rank(Site(f"h{i}.example.org"), 1)[0] for i in range(n))
    total = sum(a.weight for a in agents)
    for i, a in enumerate(agents):
        want = a.weight / total
        assert abs(counts[i] / n - want) / want < 0.05, (a.agent_id, counts[i] / n, want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(ALL),
    ids=st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12), min_size=2, max_size=12, unique=True),
    hosts=st.lists(st.from_regex(r"[a-z0-9]{1,20}\.[a-z]{2,6}", fullmatch=True), min_size=1, max_size=30),
)
def test_removing_any_agent_promotes_exactly_its_backups(name, ids, hosts):
    agents = [AgentView(i, "", *(CITIES[1 + j % 3][0:1]), CITIES[1 + j % 3][1], CITIES[1 + j % 3][2], ISPS[1 + j % 3][1], ISPS[1 + j % 3][0]) for j, i in enumerate(ids)]
    p = make(name).bind(agents)
    for h in hosts:
        s = Site(h, "127.1.1.10", "Beijing", "CN", 39.9, 116.4, 4134, "telecom")
        full = [agents[i].agent_id for i in p.rank(s, len(agents))]
        for gone in (full[0], full[-1]):
            rest = [a for a in agents if a.agent_id != gone]
            q = make(name).bind(rest)
            assert [rest[i].agent_id for i in q.rank(s, len(rest))] == [x for x in full if x != gone]


@pytest.mark.parametrize("name", ALL)
def test_every_partitioner_builds_from_a_plain_mapping(name):
    cls = PARTITIONERS[name]
    table = dataclasses.asdict(cls.Options())  # every key of its options, as a TOML table
    p = create_from_config(name, table)
    assert type(p) is cls and p.name == name and p.options == cls.Options()
    agents = [agent(i) for i in range(5)]
    r = p.bind(agents).rank(SITES_20K[0], 3)
    assert len(set(r)) == 3
    assert p.fingerprint()["options"] == table


def test_options_from_the_table_and_asn_builds_its_fallback_from_its_own_table():
    assert create_from_config("xor", {"virtual_ids": 64}).options.virtual_ids == 64
    tables = {"weighted": {"weights": {"agent-1": 3.0}}, "geo": {"tie_km": 9.0}}
    p = create_from_config("asn", {"isps": ISP_GROUPS, "fallback": "weighted"}, tables=tables)
    assert p.fallback.name == "weighted" and p.fallback.options.weights == {"agent-1": 3.0}
    assert p.needs == {"ip", "asn"} and p.weight_of(AgentView("agent-1")) == 3.0
    assert p.fingerprint()["fallback"]["weights"] == {"agent-1": 3.0}
    geo = create_from_config("asn", {"fallback": "geo"}, tables=tables)
    assert geo.needs == {"ip", "asn", "geo"} and geo.fallback.options.tie_km == 9.0


@pytest.mark.parametrize(
    "name, table, message",
    [
        ("xor", {"virtual_idz": 3}, r"unknown key 'xor\.virtual_idz' \(known keys here: virtual_ids\)"),
        ("weighted", {"weights": {"a": 1.0}, "colour": "red"}, r"unknown key 'weighted\.colour'"),
        ("xor", {"virtual_ids": "many"}, r"'xor\.virtual_ids' must be an integer"),
        ("xor", {"virtual_ids": 0}, r"xor\.virtual_ids must be between 1 and 4096"),
        ("asn", {"fallback": "nearest"}, r"asn\.fallback: unknown strategy 'nearest'"),
        ("nope", {}, r"unknown strategy 'nope'"),
    ],
)
def test_a_bad_option_is_refused_with_its_name(name, table, message):
    with pytest.raises(ConfigError, match=message):
        create_from_config(name, table, source="agent.toml")


def test_building_one_needs_neither_the_consultant_service_nor_its_settings():
    code = (
        "import sys; from consultant import partition\n"
        "p = partition.create_from_config('xor', {'virtual_ids': 64})\n"
        "print(p.name, sorted(m for m in sys.modules if m.startswith('consultant.') and 'partition' not in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["xor", "[]"]
