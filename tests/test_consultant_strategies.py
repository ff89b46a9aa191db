"""Strategies behind the consultant with real DBs: geo (GeoLite2 and lab-style), asn, weighted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from consultant.partition import parse_options
from consultant.server import create_server
from consultant.settings import ConsultantSettings, load_settings
from wancrawl.errors import ConfigError
from wancrawl.v1 import common_pb2

from consultant_helpers import loc, running, settings_for
from geodata import ISP_GROUPS, write_asn_db, write_city_db, write_hosts, write_pyasn

# Real addresses, only looked up in the shipped GeoLite2 DB (never contacted).
REAL = {"www.hit.example": "202.118.224.100", "www.bj.example": "61.135.169.121", "www.gz.example": "113.108.81.189"}


def with_options(s: ConsultantSettings, name: str, **table) -> ConsultantSettings:
    """`s` with strategy `name`'s options from a plain table, as its [name] table would give."""
    return replace(s, strategies={**s.strategies, name: parse_options(name, table)})


def test_geo_on_real_ips_with_the_shipped_geolite2_db(run, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"{ip} {h}\n" for h, ip in REAL.items()))

    async def go():
        async with running(settings_for(tmp_path, strategy="geo", dns__hosts_file=str(hosts))) as (server, c):
            await c.register("beijing", "127.0.0.2:7000", location=loc("Beijing", 39.9042, 116.4074))
            await c.register("harbin", "127.0.0.3:7000", location=loc("Harbin", 45.8038, 126.5350))
            await c.register("guangzhou", "127.0.0.4:7000", location=loc("Guangzhou", 23.1291, 113.2644))
            routes = await c.resolve(list(REAL))
            assert [r.owner[0] for r in routes] == ["harbin", "beijing", "guangzhou"]
            # Harbin's backup is the next nearest city: Beijing.
            assert routes[0].agents[1][0] == "beijing"
            e = await c.explain("www.hit.example")
            assert e.ip == "202.118.224.100" and e.site.city == "Harbin" and e.site.country == "CN"
            assert "km from the site" in e.candidates[0].detail and e.candidates[0].score > e.candidates[1].score
            # No IP for this host: the answer still comes, by hash, and Explain says so.
            [r] = await c.resolve(["unknown.example"])
            assert len(r.agents) == 3
            assert any("location unknown" in n for n in (await c.explain("unknown.example")).notes)

    run(go())


def test_geo_and_agent_locations_from_a_loopback_city_db(run, tmp_path):
    city = write_city_db(tmp_path / "city.mmdb")
    hosts = tmp_path / "hosts"
    mapping = write_hosts(hosts)

    async def go():
        s = settings_for(tmp_path, strategy="geo", databases__city_db=str(city), dns__hosts_file=str(hosts))
        async with running(s) as (server, c):
            # Locations are derived from the agents' source addresses through the City DB.
            for isp, city_i, name in [(1, 1, "bj"), (2, 2, "hrb"), (3, 3, "gz")]:
                r = await c.register(name, f"127.{isp}.{city_i}.2:7000", source_ip=f"127.{isp}.{city_i}.2")
                assert r.location.has_coordinates
            listed = {a.agent_id: a.location.city for a in (await c.list_agents()).agents}
            assert listed == {"bj": "Beijing", "hrb": "Harbin", "gz": "Guangzhou"}
            routes = await c.resolve(list(mapping))
            want = {"beijing": "bj", "harbin": "hrb", "guangzhou": "gz"}
            for r in routes:
                assert r.owner[0] == want[r.host.split(".")[1].split("-")[1]], r

    run(go())


@pytest.mark.parametrize("db", ["pyasn", "mmdb"])
def test_asn_puts_same_isp_agents_first_and_falls_back(run, tmp_path, db):
    hosts = tmp_path / "hosts"
    mapping = write_hosts(hosts)
    keys = {"databases__pyasn_file": str(write_pyasn(tmp_path / "ipasn.dat"))} if db == "pyasn" else {
        "databases__asn_db": str(write_asn_db(tmp_path / "asn.mmdb"))}
    s = settings_for(tmp_path, strategy="asn", dns__hosts_file=str(hosts), **keys)
    s = with_options(s, "asn", isps=ISP_GROUPS, fallback="hash")

    async def go():
        async with running(s) as (server, c):
            await c.register("telecom-a", "127.1.1.2:7000", location=loc("Beijing", asn=4134))
            await c.register("telecom-b", "127.1.2.2:7000", location=loc("Harbin", asn=4809))  # same ISP group
            await c.register("unicom-a", "127.2.1.2:7000", location=loc("Beijing", asn=4837))
            routes = {r.host: r for r in await c.resolve(list(mapping))}
            telecom_owners = set()
            for host, r in routes.items():
                isp = host.split(".")[1].split("-")[0]
                if isp == "telecom":
                    telecom_owners.add(r.owner[0])
                    assert {r.agents[0][0], r.agents[1][0]} == {"telecom-a", "telecom-b"}
                elif isp == "unicom":
                    assert r.owner[0] == "unicom-a"
                else:  # cernet: no agent in that ISP, the fallback (hash) decides
                    assert len(r.agents) == 3
            assert telecom_owners == {"telecom-a", "telecom-b"}, "an ISP's sites are shared by its agents"
            e = await c.explain("s10.cernet-harbin.test")
            assert e.site.asn == 4538 and e.site.isp == "cernet"
            assert "no agent in the site's ISP" in e.candidates[0].detail

    run(go())


def test_weighted_from_heartbeat_capacity_reweights_beyond_threshold(run, tmp_path):
    s = with_options(settings_for(tmp_path, strategy="weighted"), "weighted", source="heartbeat")
    hosts = [f"h{i}.example" for i in range(4000)]

    async def go():
        async with running(s) as (server, c):
            await c.register("small", "127.0.0.2:7000", capacity=1.0)
            await c.register("big", "127.0.0.3:7000", capacity=1.0)
            before = await c.resolve(hosts)
            share = sum(r.owner[0] == "big" for r in before) / len(hosts)
            assert 0.45 < share < 0.55
            # Noise below the threshold changes nothing.
            assert await c.heartbeat("big", common_pb2.LoadReport(capacity=1.1)) == before[0].epoch
            e = await c.heartbeat("big", common_pb2.LoadReport(capacity=3.0))
            assert e == before[0].epoch + 1
            after = await c.resolve(hosts)
            share = sum(r.owner[0] == "big" for r in after) / len(hosts)
            assert 0.70 < share < 0.80
            # Only hosts that went to the grown agent moved.
            assert all(a.owner == b.owner or a.owner[0] == "big" for a, b in zip(after, before))
            assert {a.agent_id: a.weight for a in (await c.list_agents()).agents} == {"big": 3.0, "small": 1.0}

    run(go())


def test_weighted_from_the_capacity_model_moves_hosts_toward_the_allocators_shares(run, tmp_path):
    """source = "model": each agent's weight is its share by the capacity model and our
    allocator (docs/balance.md), moved at most 2x a round and only past the threshold."""
    s = with_options(settings_for(tmp_path, strategy="weighted"), "weighted", source="model")
    hosts = [f"h{i}.example" for i in range(4000)]

    def report(peak: float) -> common_pb2.LoadReport:
        return common_pb2.LoadReport(queue_length=500, work_area=peak * 10, peak_pages_per_second=peak)

    async def go():
        async with running(s) as (server, c):
            await c.register("small", "127.0.0.2:7000")
            await c.register("big", "127.0.0.3:7000")
            before = await c.resolve(hosts)
            assert 0.45 < sum(r.owner[0] == "big" for r in before) / len(hosts) < 0.55
            # The same rate reported: shares 1 : 1, no change.
            assert await c.heartbeat("small", report(10.0)) == before[0].epoch
            assert await c.heartbeat("big", report(10.0)) == before[0].epoch
            # big reports 4x small's rate (no samples yet: the load report's rate); its share is
            # 1.6 of a mean 1, small's 0.4: small's weight halves at most (cap), big's grows to 1.6.
            server.service.capacity._shares_key = (frozenset(), float("-inf"))  # recompute now
            e = await c.heartbeat("big", report(40.0))
            assert e == before[0].epoch + 1
            e2 = await c.heartbeat("small", report(10.0))
            assert e2 == e + 1
            weights = {a.agent_id: a.weight for a in (await c.list_agents()).agents}
            assert abs(weights["big"] - 1.6) < 0.01 and weights["small"] == 0.5
            after = await c.resolve(hosts)
            share = sum(r.owner[0] == "big" for r in after) / len(hosts)
            assert 0.71 < share < 0.81   # 1.6 / 2.1
            assert all(a.owner == b.owner or a.owner[0] == "big" for a, b in zip(after, before))

    run(go())


def test_weighted_from_config(run, tmp_path):
    s = with_options(settings_for(tmp_path, strategy="weighted"), "weighted", weights={"heavy": 4.0})

    async def go():
        async with running(s) as (server, c):
            await c.register("heavy", "127.0.0.2:7000")
            await c.register("light", "127.0.0.3:7000")
            routes = await c.resolve([f"h{i}.example" for i in range(4000)])
            share = sum(r.owner[0] == "heavy" for r in routes) / len(routes)
            assert 0.75 < share < 0.85

    run(go())


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"strategy": "geo", "databases__city_db": "/nonexistent/city.mmdb"}, "databases.city_db: file /nonexistent/city.mmdb not found"),
        ({"strategy": "asn"}, "set databases.asn_db or databases.pyasn_file"),
        ({"strategy": "asn", "databases__pyasn_file": "/nope.dat"}, "databases.pyasn_file: file /nope.dat not found"),
        ({"strategy": "nonsense"}, "unknown strategy 'nonsense'"),
    ],
)
def test_a_strategy_without_what_it_needs_fails_at_once(tmp_path, keys, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        create_server(settings_for(tmp_path, **keys))


def test_corrupt_or_wrong_kind_of_db_is_named(tmp_path):
    bad = tmp_path / "bad.mmdb"
    bad.write_bytes(b"not a maxmind db" * 100)
    with pytest.raises(ConfigError, match="not a readable MaxMind DB"):
        create_server(settings_for(tmp_path, strategy="geo", databases__city_db=str(bad)))
    asn = write_asn_db(tmp_path / "asn.mmdb")
    with pytest.raises(ConfigError, match="City database is needed"):
        create_server(settings_for(tmp_path, strategy="geo", databases__city_db=str(asn)))
    garbage = tmp_path / "ipasn.dat"
    garbage.write_text("this is not\n an ipasn file\n")
    with pytest.raises(ConfigError, match="not a pyasn ipasn file"):
        create_server(settings_for(tmp_path, strategy="asn", databases__pyasn_file=str(garbage)))


def test_config_file_errors_name_the_key(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('strategy = "hash"\nlisten = "127.0.0.1:0"\n[xor]\nvirtual_idz = 3\n')
    with pytest.raises(ConfigError, match=r"unknown key 'xor\.virtual_idz'"):
        load_settings(cfg)
    cfg.write_text('preference_length = "three"\n')
    with pytest.raises(ConfigError, match="'preference_length' must be an integer"):
        load_settings(cfg)
    cfg.write_text('[weighted]\nsource = "psychic"\n')
    with pytest.raises(ConfigError, match="weighted.source must be"):
        load_settings(cfg)
    cfg.write_text("strategy = \n")
    with pytest.raises(ConfigError, match="c.toml"):
        load_settings(cfg)
    cfg.write_text('[asn]\nfallback = "nearest"\n')
    with pytest.raises(ConfigError, match=r"c\.toml: .*asn\.fallback: unknown strategy 'nearest'"):
        load_settings(cfg)


def test_strategy_tables_are_held_by_name_and_flags_beat_them(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('strategy = "asn"\n[asn]\nfallback = "xor"\n[asn.isps]\nt = [1, 2]\n[xor]\nvirtual_ids = 8\n')
    s = load_settings(cfg, {"xor.virtual_ids": 16, "geo.tie_km": None})
    assert s.strategies["xor"].virtual_ids == 16 and s.strategies["asn"].fallback == "xor"
    assert s.isps == {"t": [1, 2]} and s.strategies["geo"] == parse_options("geo")
    with pytest.raises(ConfigError, match=r"command line: unknown key 'xor\.virtual_idz'"):
        load_settings(cfg, {"xor.virtual_idz": 3})
