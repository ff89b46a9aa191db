"""The resolver's contract (issue 37), run over both backends against the lab's DNS server.

* "system": hostres.SystemLookup, getaddrinfo's model (blocking look-ups in the loop's thread
  pool, no TTLs), its getaddrinfo a blocking stub asking the lab server (lab/dns.py
  blocking_stub): the machine's own resolver asks the machine's servers, which no test may do.
* "cares": wancrawl/dns/cares.py, c-ares through aiodns, given the lab server explicitly.

Both: an A answer; a CNAME chain followed (whole in one answer, or one link per answer);
NXDOMAIN definitive; a name never answered a temporary failure; an answer, a definitive and a
temporary failure each asked again only once its kept time has passed on an injected clock
(never a sleep); one look-up for a name asked by many at once. The reference is the zone
(lab/dns.py Zone), which says what each name is, independently of any resolver.
Then the pure cache (wancrawl/dns/cache.py) on hand-computed cases, the c-ares backend's bound
per server, and the settings.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from lab import topology
from lab.dns import NXDOMAIN as Z_NXDOMAIN, RESOLVES, TIMEOUT, DnsThread, Zone, blocking_stub
from wancrawl import hostres
from wancrawl.dns.cache import DnsCache, Lookup
from wancrawl.errors import ConfigError
from wancrawl.hostres import DEFINITIVE, NXDOMAIN, TEMPORARY, HostResolver, ResolverSettings, SystemLookup, make_resolver

TTL, CNAME_TTL, NEG, TEMP = 30, 20, 60, 7
TIMEOUT_S = 0.4


def _topology() -> topology.Topology:
    base = topology.default_spec()
    return topology.load(dns=dataclasses.replace(base.dns, ttl=TTL, cname_ttl=CNAME_TTL, negative_ttl=NEG,
                                                 nxdomain_ratio=0.2, timeout_ratio=0.1, cname_ratio=0.3, cname_depth=3))


ZONE = Zone(_topology())


def _names(kind: str, chain: bool | None = None) -> list[str]:
    out = [s.host for s in ZONE.topology.normal_sites if ZONE.kind(s.host) == kind]
    return [h for h in out if chain is None or ZONE.has_chain(h) == chain]


@pytest.fixture(scope="module", params=[True, False], ids=["whole-chains", "one-link-per-answer"])
def dns(request):
    with DnsThread(ZONE, whole_chains=request.param) as d:
        yield d


@pytest.fixture(params=["system", "cares"])
def make(request, dns):
    """make(clock) -> a HostResolver of that backend asking the lab server, DNS on, nothing listed."""
    made: list[HostResolver] = []

    def build(clock=lambda: 0.0, **keys):
        s = ResolverSettings(**{"resolver": request.param, "timeout": TIMEOUT_S, "tries": 1, "cache_ttl": TTL, "min_ttl": 0,
                                "negative_ttl": NEG, "temporary_ttl": TEMP, **keys,
                                **({"nameservers": (dns.address,)} if request.param == "cares" else {})})
        r = make_resolver(s, {}, dns=True, clock=clock)
        if request.param == "system":
            r.backend = SystemLookup(s.timeout, s.max_concurrency, getaddrinfo=blocking_stub(dns.address, TIMEOUT_S))
        made.append(r)
        return r

    build.kind = request.param  # type: ignore[attr-defined]
    yield build


def test_the_zone_has_every_kind_of_name():
    assert _names(RESOLVES, False) and _names(RESOLVES, True) and _names(Z_NXDOMAIN) and _names(TIMEOUT)


def test_a_names_address_and_a_cname_chain_followed(make, run):
    r = make()
    plain, chained = _names(RESOLVES, False)[:3], _names(RESOLVES, True)[:3]

    async def go():
        got = await r.resolve_many(plain + chained)
        await r.close()
        return got

    got = run(go())
    assert got == {h: ZONE.topology.site(h).ip for h in plain + chained}
    assert all(r.failure(h) is None for h in plain + chained)


def test_nxdomain_is_definitive_and_no_answer_is_temporary(make, run):
    r = make()
    gone, mute = _names(Z_NXDOMAIN)[:3], _names(TIMEOUT)[:2]

    async def go():
        got = await r.resolve_many(gone + mute)
        await r.close()
        return got

    assert run(go()) == dict.fromkeys(gone + mute)
    assert {r.failure(h) for h in gone} == {NXDOMAIN} and NXDOMAIN in DEFINITIVE
    assert {r.failure(h) for h in mute} == {TEMPORARY} and TEMPORARY not in DEFINITIVE


def test_answers_and_failures_are_asked_again_only_when_their_time_is_up(make, run, dns):
    now = [1000.0]
    r = make(clock=lambda: now[0])
    plain, chained = _names(RESOLVES, False)[0], _names(RESOLVES, True)[0]
    gone, mute = _names(Z_NXDOMAIN)[0], _names(TIMEOUT)[0]
    names = (plain, chained, gone, mute)

    async def asked(at: float) -> set[str]:
        """The names the resolver asked the server for when resolving all four at `at`."""
        now[0] = at
        before = r.lookups
        seen = {h: r.cache.peek(h, at) is None for h in names}
        await r.resolve_many(names)
        assert r.lookups - before == sum(seen.values())
        return {h for h, miss in seen.items() if miss}

    async def go():
        steps = [await asked(t) for t in (1000.0, 1000.0 + TEMP - 1, 1000.0 + TEMP + 1, 1000.0 + CNAME_TTL + 1,
                                          1000.0 + TTL + 1, 1000.0 + NEG + 1)]
        await r.close()
        return steps

    steps = run(go())
    chain_keep = CNAME_TTL if make.kind == "cares" else TTL  # getaddrinfo says no TTL: cache_ttl for all
    assert steps[0] == set(names)
    assert steps[1] == set(), "everything cached before the shortest kept time"
    assert steps[2] == {mute}, "a temporary failure is asked again after temporary_ttl"
    assert steps[3] == {mute} | ({chained} if chain_keep == CNAME_TTL else set()), "a chain is kept its smallest TTL"
    # At TTL + 1 (31) the mute name was last asked at TEMP + 1 + ... : it is asked each time its 7 s pass.
    assert {plain} <= steps[4] and gone not in steps[4], "an answer goes at its TTL, NXDOMAIN stays its negative TTL"
    assert gone in steps[5]


def test_a_name_asked_by_many_at_once_is_looked_up_once(make, run, dns):
    r = make()
    host = _names(RESOLVES, True)[1]

    async def go():
        got = await asyncio.gather(*(r.resolve(host) for _ in range(20)))
        await r.close()
        return got

    assert run(go()) == [ZONE.topology.site(host).ip] * 20
    assert r.lookups == 1


def test_the_hosts_file_comes_first_and_dns_off_says_not_listed(make, run):
    r = make()
    host = _names(Z_NXDOMAIN)[0]
    r.hosts[host] = "127.9.9.9"
    assert run(r.resolve(host)) == "127.9.9.9" and r.lookups == 0
    off = make_resolver(ResolverSettings(), {}, dns=False)
    assert run(off.resolve("x.test")) is None and off.failure("x.test") == hostres.NOT_LISTED and off.lookups == 0


def test_a_backend_that_raises_is_a_temporary_failure_not_a_crash(run):
    class Broken:
        async def lookup(self, host):
            raise RuntimeError("no channel")

        async def close(self):
            pass

    r = HostResolver({}, backend=Broken(), temporary_ttl=5, clock=lambda: 0.0)
    assert run(r.resolve("x.test")) is None and r.failure("x.test") == TEMPORARY and r.failures == 1


# --- the c-ares backend's bound per server ----------------------------------------------------------


def test_cares_keeps_at_most_max_concurrency_queries_in_flight_per_server(run, dns, monkeypatch):
    from wancrawl.dns import cares

    peak = [0, 0]
    real = cares.CaresLookup._follow

    async def counted(self, ch, host):
        peak[0] += 1
        peak[1] = max(peak[1], peak[0])
        try:
            return await real(self, ch, host)
        finally:
            peak[0] -= 1

    monkeypatch.setattr(cares.CaresLookup, "_follow", counted)
    r = make_resolver(ResolverSettings(resolver="cares", nameservers=(dns.address,), timeout=TIMEOUT_S, tries=1,
                                       max_concurrency=3), {})
    names = _names(RESOLVES)[:12] + _names(TIMEOUT)[:4]

    async def go():
        got = await r.resolve_many(names)
        await r.close()
        return got

    got = run(go())
    assert peak[1] == 3, peak
    assert sum(ip is not None for ip in got.values()) == 12


# --- the pure cache -------------------------------------------------------------------------------


def test_the_cache_bounds_ttls_and_keeps_the_two_failures_apart():
    c = DnsCache(default_ttl=300, min_ttl=10, max_ttl=100, negative_ttl=60, temporary_ttl=5, max_entries=3,
                 definitive=DEFINITIVE)
    assert c.keep(Lookup("1.2.3.4", 1)) == 10 and c.keep(Lookup("1.2.3.4", 50)) == 50 and c.keep(Lookup("1.2.3.4", 1e6)) == 100
    assert c.keep(Lookup("1.2.3.4")) == 100, "no TTL: the default, bounded too"
    assert c.keep(Lookup(None, None, NXDOMAIN)) == 60 and c.keep(Lookup(None, None, TEMPORARY)) == 5
    c.put("a", Lookup("1.1.1.1", 50), 0.0)
    c.put("b", Lookup(None, None, NXDOMAIN), 0.0)
    c.put("c", Lookup(None, None, TEMPORARY), 0.0)
    assert c.get("c", 4.9) is not None and c.get("c", 5.0) is None and len(c) == 2, "expired: dropped when read"
    assert c.get("a", 49.9).ip == "1.1.1.1" and c.peek("b", 59.0).why == NXDOMAIN
    c.put("d", Lookup("2.2.2.2", 50), 1.0)
    c.put("e", Lookup("3.3.3.3", 50), 1.0)  # a fourth name: the oldest put ("a") goes
    assert c.peek("a", 2.0) is None and c.peek("b", 2.0) is not None and len(c) == 3
    with pytest.raises(ValueError):
        DnsCache(min_ttl=10, max_ttl=5)


# --- settings -------------------------------------------------------------------------------------


def test_the_settings_check_what_they_are_given():
    from wancrawl.config import build

    s = build(ResolverSettings, {"resolver": "cares", "nameservers": ["127.0.0.1:5353", "127.0.0.2"]})
    assert s.nameservers == ("127.0.0.1:5353", "127.0.0.2")
    assert build(ResolverSettings, s.toml_data()) == s
    for bad in ({"resolver": "bind"}, {"nameservers": ["127.0.0.1"]}, {"resolver": "cares", "nameservers": ["dns.example"]},
                {"min_ttl": 10, "max_ttl": 5}):
        with pytest.raises(ConfigError):
            build(ResolverSettings, bad)


# --- the consultant's placement through the same resolver -----------------------------------------


def test_the_consultant_places_by_asn_through_the_lab_dns_and_says_why_a_name_has_no_ip(run, dns, tmp_path):
    from consultant.service import ConsultantService
    from consultant_helpers import settings_for
    from lab import geodb

    topo = ZONE.topology
    paths = geodb.write_all(topo, tmp_path / "geo")
    s = settings_for(tmp_path, strategy="asn", databases__asn_db=str(paths[geodb.ASN_DB]),
                     asn__isps={i.slug: [i.asn] for i in topo.isps}, asn__fallback="hash",
                     dns__system_dns=True, dns__resolver="cares", dns__nameservers=[dns.address], dns__timeout=TIMEOUT_S)
    svc = ConsultantService(s)
    hosts = _names(RESOLVES)[:6] + _names(Z_NXDOMAIN)[:2] + _names(TIMEOUT)[:1]

    async def go():
        first = await svc.locator.sites(hosts, frozenset({"ip", "asn"}))
        asked = svc.resolver.lookups
        again = await svc.locator.sites(hosts, frozenset({"ip", "asn"}))
        notes = {h: (await svc.explain(h)).notes for h in (_names(Z_NXDOMAIN)[0], _names(TIMEOUT)[0])}
        await svc.stop()
        return first, again, asked, notes

    first, again, asked, notes = run(go())
    for h in _names(RESOLVES)[:6]:
        site = topo.site(h)
        assert (first[h].ip, first[h].asn) == (site.ip, topo.isp(site.isp).asn), h
    assert all(first[h].ip is None and not first[h].asn for h in hosts[6:])
    assert again == first and svc.resolver.lookups == asked == len(hosts), "the second batch comes from the cache"
    nx, mute = notes.values()
    assert any(NXDOMAIN in n for n in nx) and any(TEMPORARY in n for n in mute), notes
    assert any("fallback" in n for n in nx), "says what placement does with it"
