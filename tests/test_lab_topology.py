"""The address plan: blocks, agent addresses, sites, locate, TOML topologies."""

import ipaddress
from pathlib import Path

import pytest

from lab import topology
from wancrawl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_default_world_is_seed_002():
    t = topology.load()
    assert [(i.slug, i.asn) for i in t.isps] == [("telecom", 4134), ("unicom", 4837), ("cernet", 4538)]
    assert [c.name for c in t.cities] == ["Beijing", "Harbin", "Guangzhou"]
    assert t.block("unicom", "harbin").network == "127.2.2.0/24"
    assert len(t.blocks) == 9
    # Beijing-Guangzhou is about 1890 km great-circle.
    assert 1850 < t.distance_km("beijing", "guangzhou") < 1930


def test_agent_addresses_and_locate():
    t = topology.load()
    assert t.agent_address("telecom", "beijing") == "127.1.1.2"
    assert t.agent_address("CERNET", "Guangzhou", 7) == "127.3.3.9"
    assert t.agent_address(2, 3, 1) == "127.2.3.3"
    with pytest.raises(ValueError):
        t.agent_address("telecom", "beijing", 8)
    with pytest.raises(KeyError):
        t.agent_address("mobile", "beijing")
    assert t.locate("127.2.3.3") == ("unicom", "guangzhou")
    assert t.locate("127.0.0.1") is None
    assert t.locate("127.4.1.1") is None
    assert t.locate("10.1.1.1") is None
    assert t.locate("not an ip") is None


def test_sites_live_in_their_block_with_readable_names():
    t = topology.load()
    assert len(t.normal_sites) == 72
    assert set(t.hostile_sites) == set(topology.HOSTILE_KINDS)
    hosts = [s.host for s in t.sites]
    assert len(set(hosts)) == len(hosts)
    for s in t.sites:
        assert t.locate(s.ip) == (s.isp, s.city)
        last = int(s.ip.rsplit(".", 1)[1])
        assert last >= topology.SITE_FIRST  # agents' .2-.9 are never site addresses
        assert s.host.endswith(f"{s.isp}-{s.city}.lab")
        assert t.site(s.host.upper() + ":8080") == s
        assert all(t.site(name) == s and name.endswith("." + t.site_domain(s)) for name in t.subdomains(s))
    assert t.sites[42].host == "www.s0042.unicom-guangzhou.lab"  # 8 per block, 6th block


def test_more_sites_than_addresses_share_ips_as_virtual_hosts():
    spec = topology.default_spec()
    spec.sites.blocks = {"telecom-beijing": 300}
    t = topology.Topology(spec)
    tb = [s for s in t.normal_sites if s.isp == "telecom" and s.city == "beijing"]
    assert len(tb) == 300
    ips = {s.ip for s in tb}
    assert len(ips) == topology.SITE_LAST - topology.SITE_FIRST + 1
    assert all(ipaddress.IPv4Address(ip) in ipaddress.IPv4Network("127.1.1.0/24") for ip in ips)
    assert len(t.sites_on("127.1.1.10")) == 2


def test_topology_files_load_and_match_default():
    assert topology.load(ROOT / "configs/lab/seed002.toml").spec == topology.default_spec()
    w = topology.load(ROOT / "configs/lab/world.toml")
    assert len(w.isps) == 4 and len(w.cities) == 5
    assert w.city("saopaulo").country == "BR"
    assert w.locate(w.agent_address("dtag", "tokyo")) == ("dtag", "tokyo")
    assert w.spec.link.interconnect["level3-telecom"] == 2000.0


def test_unknown_keys_and_bad_values_are_named(tmp_path):
    p = tmp_path / "t.toml"
    p.write_text("[link]\nhop_msec = 3\n")
    with pytest.raises(ConfigError, match="link.hop_msec"):
        topology.load(p)
    p.write_text('[[cities]]\nname = "X"\nslug = "x"\nlat = 95.0\nlon = 0.0\n')
    with pytest.raises(ConfigError, match="out of range"):
        topology.load(p)
    p.write_text("[sites.blocks]\nmobile-beijing = 3\n")
    with pytest.raises(ConfigError, match="mobile-beijing"):
        topology.load(p)


def test_hosts_file_maps_every_site(tmp_path):
    from wancrawl.hostres import parse_hosts_file

    t = topology.load()
    (tmp_path / "hosts").write_text(t.hosts_file())
    # Read back by the reader the consultant and agents use (it also checks every name).
    mapping = parse_hosts_file(tmp_path / "hosts")
    names = [s.host for s in t.sites] + [n for s in t.sites for n in t.subdomains(s)]
    assert len(mapping) == len(names) == len(set(names)) == len(t.sites) + sum(topology.SUBDOMAIN_KINDS.values())
    assert all(mapping[s.host] == s.ip and t.locate(s.ip) == (s.isp, s.city) for s in t.sites)
