"""Where the consultant places an agent (issue 21, attack 5; docs/security.md, "Where an agent is").

Under mutual TLS an agent is located by what the consultant can verify, in this order: the
operator's [agents.<id>] table, the source address bound in the agent's certificate, the
connection's address. A `source_ip` or location in the Register request is only checked against
that: an agent that claims another's address, or a location it is not at, is refused with
PERMISSION_DENIED naming the field, and the hosts stay with the agent that is really there. In
plaintext (tests, `[tls] insecure`) nothing is verified and the claims are taken as before.

The reference for who owns what is geography, not the consultant's code: with the geo strategy a
Beijing site belongs to the only agent standing in Beijing.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from consultant.client import ConsultantClient
from consultant.server import create_server
from consultant.settings import AgentLocation, load_settings
from consultant.whereabouts import Evidence, Place, connection_ip, normal_ip, settle
from wancrawl import errors, pki
from wancrawl.grpcutil import TlsSettings

from consultant_helpers import loc, running, settings_for
from geodata import CITIES, write_asn_db, write_city_db, write_hosts

BEIJING, HARBIN, GUANGZHOU = (CITIES[1], CITIES[2], CITIES[3])  # (name, lat, lon)
BJ_IP, HRB_IP, GZ_IP = "127.1.1.2", "127.2.2.2", "127.3.3.2"  # telecom-beijing, unicom-harbin, cernet-guangzhou
PORTS = {"bj": 7001, "hrb": 7002, "mallory": 7003, "eve": 7004, "nat": 7005}  # the addresses agents advertise


def tls_of(d: Path, role: str, name: str) -> TlsSettings:
    return TlsSettings(str(d / "ca.crt"), str(d / f"{role}-{name}.crt"), str(d / f"{role}-{name}.key"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A CA and certificates: bj, hrb and mallory bound to their block addresses (mallory stands
    in Guangzhou), eve and nat bound to none; the loopback City/ASN DBs and a hosts file."""
    d = tmp_path_factory.mktemp("pki")
    pki.init(d)
    pki.issue(d, "service", "consultant")
    pki.issue(d, "operator", "op")
    for name, ip in [("bj", BJ_IP), ("hrb", HRB_IP), ("mallory", GZ_IP), ("eve", ""), ("nat", "")]:
        pki.issue(d, "agent", name, source_ip=ip)
    geo = tmp_path_factory.mktemp("geo")
    hosts = geo / "hosts"
    return {"pki": d, "city": write_city_db(geo / "city.mmdb"), "asn": write_asn_db(geo / "asn.mmdb"),
            "hosts": hosts, "mapping": write_hosts(hosts)}


def consultant_settings(tmp: Path, world, tls: bool, **keys):
    d = world["pki"]
    t = tls_of(d, "service", "consultant") if tls else TlsSettings(insecure=True)
    s = settings_for(tmp, strategy="geo", databases__city_db=str(world["city"]), databases__asn_db=str(world["asn"]),
                     dns__hosts_file=str(world["hosts"]), tls__ca=t.ca, tls__cert=t.cert, tls__key=t.key,
                     tls__insecure=t.insecure, **keys)
    return s


async def register_as(address: str, world, name: str, **kw):
    async with ConsultantClient(address, tls=tls_of(world["pki"], "agent", name)) as c:
        return await c.register(name, f"127.0.0.1:{PORTS[name]}", **kw)


async def owners(address: str, world) -> dict[str, str]:
    """Block ("beijing", ...) -> the set of agents owning its sites, by Resolve as the operator."""
    async with ConsultantClient(address, tls=tls_of(world["pki"], "operator", "op")) as c:
        routes = await c.resolve(list(world["mapping"]))
    by_city: dict[str, set[str]] = {}
    for r in routes:
        by_city.setdefault(r.host.split(".")[1].split("-")[1], set()).add(r.owner[0])
    return by_city


async def located(address: str, world) -> dict[str, tuple[str, bool]]:
    async with ConsultantClient(address, tls=tls_of(world["pki"], "operator", "op")) as c:
        return {a.agent_id: (a.location.city, a.location.has_coordinates) for a in (await c.list_agents()).agents}


def test_an_agent_claiming_another_agents_address_or_place_is_refused_under_tls(world, tmp_path):
    """Attack 5: mallory (its certificate binds a Guangzhou address) registers with bj's
    source_ip, then with Beijing's coordinates; both are refused naming the field, and every
    Beijing site stays with bj. Registering without lies, mallory is placed where its
    certificate says."""

    async def main():
        server, _ = create_server(consultant_settings(tmp_path, world, tls=True))
        await server.start()
        a = server.address
        try:
            r = await register_as(a, world, "bj", source_ip=BJ_IP)  # its own address: agrees with the certificate
            assert r.location.city == "Beijing" and r.location.asn == 4134
            r = await register_as(a, world, "hrb")  # nothing claimed: placed by its certificate
            assert (r.location.city, r.location.asn) == ("Harbin", 4837)
            before = await owners(a, world)
            assert before["beijing"] == {"bj"} and before["harbin"] == {"hrb"}

            with pytest.raises(errors.Unavailable, match=r"PERMISSION_DENIED: source_ip '127\.1\.1\.2' is not agent mallory's "
                                                         r"verified address \(127\.3\.3\.2, from its certificate\)"):
                await register_as(a, world, "mallory", source_ip=BJ_IP)
            with pytest.raises(errors.Unavailable, match=r"PERMISSION_DENIED: location\.lat/lon .* disagrees"):
                await register_as(a, world, "mallory", location=loc("", BEIJING[1], BEIJING[2]))
            with pytest.raises(errors.Unavailable, match=r"PERMISSION_DENIED: location\.city 'Beijing' disagrees"):
                await register_as(a, world, "mallory", location=loc("Beijing", asn=4134))
            with pytest.raises(errors.Unavailable, match=r"PERMISSION_DENIED: location\.asn 4134 disagrees"):
                await register_as(a, world, "mallory", location=loc(asn=4134))
            assert "mallory" not in await located(a, world)
            assert await owners(a, world) == before  # nothing moved

            # Honest: placed by its certificate, in Guangzhou; a claim that agrees is accepted.
            r = await register_as(a, world, "mallory", source_ip=GZ_IP, location=loc("guangzhou", GUANGZHOU[1], GUANGZHOU[2]))
            assert (r.location.city, r.location.asn) == ("Guangzhou", 4538)
            after = await owners(a, world)
            assert after == {"beijing": {"bj"}, "harbin": {"hrb"}, "guangzhou": {"mallory"}}

            # A certificate that binds no address: the connection's (127.0.0.1 here) is the
            # verified one; another's is refused, the connection's own accepted.
            with pytest.raises(errors.Unavailable, match=r"PERMISSION_DENIED: source_ip '127\.1\.1\.2' .*127\.0\.0\.1, from the connection"):
                await register_as(a, world, "eve", source_ip=BJ_IP)
            r = await register_as(a, world, "eve", source_ip="127.0.0.1")
            assert not r.location.city and not r.location.has_coordinates  # the DBs know nothing of 127.0.0.1
            assert (await owners(a, world))["beijing"] == {"bj"}
            assert server.service.metrics()["registrations"] == 4
        finally:
            await server.stop(0)

    asyncio.run(main())


def test_an_agent_behind_nat_gets_the_location_the_operator_states(world, tmp_path):
    """nat's certificate binds nothing and its connection says nothing (127.0.0.1); the
    consultant's [agents.nat] table places it in Guangzhou whatever source_ip it sends (a
    private address behind NAT); a location it claims must agree with the table."""
    table = tmp_path / "consultant.toml"
    table.write_text(f'[agents.nat]\ncity = "Guangzhou"\nlat = {GUANGZHOU[1]}\nlon = {GUANGZHOU[2]}\n'
                     f'[agents.hrb]\nip = "{HRB_IP}"   # the DBs fill in the rest\n')
    d = world["pki"]
    s = load_settings(table, {"listen": "127.0.0.1:0", "state_url": f"sqlite:///{tmp_path / 'state.db'}", "strategy": "geo",
                              "databases.city_db": str(world["city"]), "databases.asn_db": str(world["asn"]),
                              "dns.hosts_file": str(world["hosts"]), "dns.system_dns": False,
                              "tls.ca": str(d / "ca.crt"), "tls.cert": str(d / "service-consultant.crt"),
                              "tls.key": str(d / "service-consultant.key")})

    async def main():
        server, _ = create_server(s)
        await server.start()
        a = server.address
        try:
            r = await register_as(a, world, "nat", source_ip="10.1.2.3")
            assert (r.location.city, r.location.has_coordinates, r.location.asn) == ("Guangzhou", True, 0)
            assert (r.location.lat, r.location.lon) == (GUANGZHOU[1], GUANGZHOU[2])
            r = await register_as(a, world, "nat", location=loc("Guangzhou", GUANGZHOU[1] + 0.001, GUANGZHOU[2]))
            assert r.location.city == "Guangzhou"
            with pytest.raises(errors.Unavailable, match=r"PERMISSION_DENIED: location\.city 'Harbin' disagrees .*"
                                                         r"\[agents\.nat\] table"):
                await register_as(a, world, "nat", location=loc("Harbin"))
            # The table beats the certificate: hrb's entry names an address the DBs place in Harbin.
            r = await register_as(a, world, "hrb")
            assert (r.location.city, r.location.asn) == ("Harbin", 4837)
            assert await owners(a, world) == {"guangzhou": {"nat"}, "harbin": {"hrb"}, "beijing": {"hrb"}}
        finally:
            await server.stop(0)

    asyncio.run(main())


def test_plaintext_keeps_taking_the_agents_word(world, tmp_path, run):
    """Without TLS nothing is verified (anyone may call anything): the claimed source_ip and
    location are used as before; only an operator's table entry is applied there too."""

    async def go():
        s = replace(consultant_settings(tmp_path, world, tls=False), agents={"nat": AgentLocation(city="Harbin")})
        async with running(s) as (_server, c):
            r = await c.register("mallory", "127.0.0.1:7001", source_ip=BJ_IP)
            assert (r.location.city, r.location.asn) == ("Beijing", 4134)
            r = await c.register("claims", "127.0.0.1:7002", location=loc("Harbin", HARBIN[1], HARBIN[2], asn=4837))
            assert (r.location.city, r.location.asn) == ("Harbin", 4837)
            r = await c.register("nat", "127.0.0.1:7003", source_ip="10.1.2.3")
            assert r.location.city == "Harbin"

    run(go())


# --- the decisions, without servers ---------------------------------------------------------------

def lookup(ip: str) -> Place:
    return {BJ_IP: Place("Beijing", "CN", BEIJING[1], BEIJING[2], 4134)}.get(ip, Place())


def test_settle_order_and_checks():
    bound = Evidence(True, frozenset({BJ_IP}), "127.0.0.1")
    assert settle("bj", "", Place(), bound, None, lookup).place.city == "Beijing"
    # The connection only when the certificate binds nothing.
    assert settle("x", "", Place(), Evidence(True, frozenset(), BJ_IP), None, lookup).origin == "the connection"
    # IPv4-mapped IPv6 and IPv4 are one address.
    assert settle("bj", f"::ffff:{BJ_IP}", Place(), bound, None, lookup).ip == BJ_IP
    with pytest.raises(errors.PermissionDenied, match="binds several source addresses"):
        settle("x", "", Place(), Evidence(True, frozenset({BJ_IP, HRB_IP})), None, lookup)
    with pytest.raises(errors.PermissionDenied, match=r"source_ip '127\.0\.0\.9' is not .*\(none, from the connection\)"):
        settle("x", "127.0.0.9", Place(), Evidence(True), None, lookup)
    # A claimed field the verified place lacks cannot be agreed with.
    with pytest.raises(errors.PermissionDenied, match=r"location\.country 'CN' disagrees .*\(''"):
        settle("x", "", Place(country="CN"), Evidence(True, connection_ip="127.0.0.1"), None, lookup)
    # The operator's fields over the DBs' answer for its ip.
    s = settle("x", "10.0.0.1", Place(), Evidence(True), AgentLocation(city="Peking", ip=BJ_IP), lookup)
    assert (s.place.city, s.place.asn, s.place.lat, s.ip) == ("Peking", 4134, BEIJING[1], BJ_IP)


def test_connection_addresses():
    assert connection_ip("ipv4:203.0.113.7:51234") == "203.0.113.7"
    assert connection_ip("ipv6:[2001:db8::1]:51234") == "2001:db8::1"
    assert connection_ip("ipv6:[::ffff:203.0.113.7]:1") == "203.0.113.7"
    assert connection_ip("unix:/tmp/sock") == "" and connection_ip("") == ""
    assert normal_ip("fe80::1%eth0") == "fe80::1" and normal_ip("nope") == ""


# --- certificates and config ----------------------------------------------------------------------

def test_pki_binds_an_agents_source_address(tmp_path, capsys):
    from cryptography import x509

    d = tmp_path / "ca"
    pki.init(d)
    assert pki.main(["issue", str(d), "agent", "a1", "--source-ip", "203.0.113.7"]) == 0
    pem = (d / "agent-a1.crt").read_bytes()
    san = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.UniformResourceIdentifier)) == {"wancrawl://agent/a1", "wancrawl://source-ip/203.0.113.7"}
    # Not a serving name: the IP SANs stay what peers dial.
    assert {str(i) for i in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1"}
    assert pki.identity_of_pem(pem) == pki.Identity("agent", "a1") and pki.source_ips_of_pem(pem) == {"203.0.113.7"}
    capsys.readouterr()
    assert pki.main(["show", str(d / "agent-a1.crt")]) == 0
    assert capsys.readouterr().out.strip() == "agent/a1 (source ip 203.0.113.7)"
    assert pki.main(["issue", str(d), "operator", "op", "--source-ip", "203.0.113.7"]) == 2
    assert pki.main(["issue", str(d), "agent", "a2", "--source-ip", "not-an-ip"]) == 2
    pki.issue(d, "agent", "a3")
    assert pki.source_ips_of_pem((d / "agent-a3.crt").read_bytes()) == set()
    pki.issue(d, "agent", "a6", source_ip="2001:DB8::1")  # one spelling, as the consultant compares them
    assert pki.source_ips_of_pem((d / "agent-a6.crt").read_bytes()) == {"2001:db8::1"}
    # setup binds an agent config's source_ip.
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "b.toml").write_text('agent_id = "b"\nsource_ip = "127.2.1.2"\n')
    (agents / "c.toml").write_text('agent_id = "c"\n[fetch]\nsource_ip = "127.3.1.2"\n')
    pki.setup(d, agents_dir=agents)
    assert pki.source_ips_of_pem((d / "agent-b.crt").read_bytes()) == {"127.2.1.2"}
    assert pki.source_ips_of_pem((d / "agent-c.crt").read_bytes()) == {"127.3.1.2"}


def test_agent_locations_in_the_config_and_in_a_file(tmp_path):
    cfg = tmp_path / "consultant.toml"
    cfg.write_text('agent_locations = "more.toml"\n[agents.a]\ncity = "Beijing"\nasn = 4134\n')
    (tmp_path / "more.toml").write_text('[b]\nlat = 23.1\nlon = 113.2\n[c]\nip = "203.0.113.7"\n')
    s = load_settings(cfg)
    assert s.agents == {"a": AgentLocation(city="Beijing", asn=4134), "b": AgentLocation(lat=23.1, lon=113.2),
                        "c": AgentLocation(ip="203.0.113.7")}
    bad = {
        '[agents.a]\nlat = 1.0\n': "lat and lon go together",
        '[agents.a]\nip = "x"\n': "not an IP address",
        '[agents.a]\n': "at least one of",
        '[agents.a]\ncity = "B"\ntown = "C"\n': "unknown key 'agents.a.town'",
        '[agents.a]\nlat = 91.0\nlon = 0.0\n': "out of range",
    }
    for text, why in bad.items():
        cfg.write_text(text)
        with pytest.raises(errors.ConfigError, match=why):
            load_settings(cfg)
    cfg.write_text('agent_locations = "more.toml"\n[agents.b]\ncity = "X"\n')
    with pytest.raises(errors.ConfigError, match="b also in the config"):
        load_settings(cfg)
    (tmp_path / "more.toml").write_text('[b]\ncolour = "red"\n')
    cfg.write_text('agent_locations = "more.toml"\n')
    with pytest.raises(errors.ConfigError, match="unknown key 'b.colour'"):
        load_settings(cfg)
