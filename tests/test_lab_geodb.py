"""The generated databases answer as the address plan says, through geoip2 and pyasn."""

import subprocess
import sys

import geoip2.database
import geoip2.errors
import pyasn
import pytest

from lab import geodb, topology


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    t = topology.load()
    return t, geodb.write_all(t, tmp_path_factory.mktemp("geo"))


def test_city_db_answers_for_every_block(dbs):
    t, paths = dbs
    with geoip2.database.Reader(str(paths["city.mmdb"])) as r:
        assert "City" in r.metadata().database_type
        for b in t.blocks:
            c = t.city(b.city)
            for ip in (t.agent_address(b.isp, b.city, 0), b.network.replace("0/24", "123")):
                rec = r.city(ip)
                assert rec.city.name == c.name
                assert rec.country.iso_code == "CN" and rec.country.name == "China"
                assert rec.location.latitude == pytest.approx(c.lat)
                assert rec.location.longitude == pytest.approx(c.lon)
        with pytest.raises(geoip2.errors.AddressNotFoundError):
            r.city("127.0.0.1")


def test_asn_db_and_pyasn_agree_with_the_plan(dbs):
    t, paths = dbs
    asndb = pyasn.pyasn(str(paths["ipasn.dat"]))
    with geoip2.database.Reader(str(paths["asn.mmdb"])) as r:
        assert r.metadata().database_type == "GeoLite2-ASN"
        for s in t.sites:
            want = t.isp(s.isp).asn
            rec = r.asn(s.ip)
            assert rec.autonomous_system_number == want
            assert rec.autonomous_system_organization == t.isp(s.isp).org
            assert asndb.lookup(s.ip)[0] == want
    assert asndb.lookup("127.0.0.1")[0] is None


def test_hosts_file_written(dbs):
    from wancrawl.hostres import parse_hosts_file

    t, paths = dbs
    assert parse_hosts_file(paths["hosts"]) == {n: s.ip for s in t.sites for n in [s.host, *t.subdomains(s)]}


def test_cli_writes_a_world_topology(tmp_path):
    root = topology.__file__.rsplit("/lab/", 1)[0]
    out = tmp_path / "db"
    subprocess.run([sys.executable, "-m", "lab.cli", "geodb", "--out", str(out), "--topology", f"{root}/configs/lab/world.toml"], check=True, cwd=root)
    assert sorted(p.name for p in out.iterdir()) == ["asn.mmdb", "city.mmdb", "hosts", "ipasn.dat"]
    w = topology.load(f"{root}/configs/lab/world.toml")
    with geoip2.database.Reader(str(out / "city.mmdb")) as r:
        rec = r.city(w.agent_address("ntt", "saopaulo"))
        assert rec.city.name == "São Paulo" and rec.country.iso_code == "BR"
    assert pyasn.pyasn(str(out / "ipasn.dat")).lookup(w.agent_address("dtag", "tokyo"))[0] == 3320
