"""Geo and ASN databases for the address plan: city.mmdb, asn.mmdb, ipasn.dat and a hosts file."""

from __future__ import annotations

from pathlib import Path

from mmdb_writer import MMDBWriter, MmdbF64, MmdbU32
from netaddr import IPSet

from lab.topology import Topology

CITY_DB = "city.mmdb"
ASN_DB = "asn.mmdb"
IPASN_DAT = "ipasn.dat"
HOSTS = "hosts"


def city_record(topology: Topology, city: str) -> dict:
    c = topology.city(city)
    return {
        "city": {"geoname_id": MmdbU32(c.geoname_id), "names": {"en": c.name}},
        "continent": {"code": c.continent, "names": {"en": c.continent_name}},
        "country": {"iso_code": c.country, "names": {"en": c.country_name}},
        "location": {
            "latitude": MmdbF64(c.lat),
            "longitude": MmdbF64(c.lon),
            "accuracy_radius": MmdbU32(20),
            "time_zone": c.time_zone,
        },
        "registered_country": {"iso_code": c.country, "names": {"en": c.country_name}},
    }


def asn_record(topology: Topology, isp: str) -> dict:
    i = topology.isp(isp)
    return {"autonomous_system_number": MmdbU32(i.asn), "autonomous_system_organization": i.org or i.name}


def write_all(topology: Topology, out: str | Path) -> dict[str, Path]:
    """Write the four files into `out` (created if needed); returns their paths by name."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    desc = f"wancrawl lab, topology {topology.spec.name}"
    # A plain IPv4 tree: mmdb-writer has no reserved-network filter, so 127/8 is accepted as is.
    city = MMDBWriter(4, "GeoLite2-City", languages=["en"], description=desc)
    asn = MMDBWriter(4, "GeoLite2-ASN", languages=["en"], description=desc)
    lines = [f"; IP-ASN32-DAT file\n; wancrawl lab, topology {topology.spec.name}\n"]
    for b in topology.blocks:
        city.insert_network(IPSet([b.network]), city_record(topology, b.city))
        asn.insert_network(IPSet([b.network]), asn_record(topology, b.isp))
        lines.append(f"{b.network}\t{topology.isp(b.isp).asn}\n")
    paths = {name: d / name for name in (CITY_DB, ASN_DB, IPASN_DAT, HOSTS)}
    city.to_db_file(str(paths[CITY_DB]))
    asn.to_db_file(str(paths[ASN_DB]))
    paths[IPASN_DAT].write_text("".join(lines))
    paths[HOSTS].write_text(topology.hosts_file())
    return paths
