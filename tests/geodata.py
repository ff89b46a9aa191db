"""Small City/ASN databases for tests, written with mmdb-writer and in pyasn's text format."""

from __future__ import annotations

from pathlib import Path

from mmdb_writer import MMDBWriter
from netaddr import IPSet

# Seed 002's world on loopback: 127.<isp>.<city>.0/24.
CITIES = {
    1: ("Beijing", 39.9042, 116.4074),
    2: ("Harbin", 45.8038, 126.5350),
    3: ("Guangzhou", 23.1291, 113.2644),
}
ISPS = {1: ("telecom", 4134, "CHINANET-BACKBONE"), 2: ("unicom", 4837, "CHINA169-BACKBONE"), 3: ("cernet", 4538, "CERNET")}
ISP_GROUPS = {"telecom": [4134, 4809], "unicom": [4837], "cernet": [4538]}


def write_city_db(path: Path) -> Path:
    w = MMDBWriter(4, "GeoLite2-City", languages=["en"], description="wancrawl test City DB")
    for isp in ISPS:
        for c, (name, lat, lon) in CITIES.items():
            w.insert_network(IPSet([f"127.{isp}.{c}.0/24"]), {
                "city": {"names": {"en": name}},
                "country": {"iso_code": "CN", "names": {"en": "China"}},
                "location": {"latitude": lat, "longitude": lon},
            })
    w.to_db_file(str(path))
    return path


def write_asn_db(path: Path) -> Path:
    w = MMDBWriter(4, "GeoLite2-ASN", description="wancrawl test ASN DB")
    for isp, (_name, asn, org) in ISPS.items():
        w.insert_network(IPSet([f"127.{isp}.0.0/16"]), {"autonomous_system_number": asn, "autonomous_system_organization": org})
    w.to_db_file(str(path))
    return path


def write_pyasn(path: Path) -> Path:
    lines = ["; IP-ASN32-DAT test file"]
    lines += [f"127.{isp}.0.0/16\t{asn}" for isp, (_n, asn, _o) in ISPS.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def site_ip(isp: int, city: int, n: int) -> str:
    return f"127.{isp}.{city}.{n}"


def write_hosts(path: Path, per_block: int = 5) -> dict[str, str]:
    """Hosts s<n>.<isp>-<city>.test for every block; returns the mapping."""
    mapping = {}
    for isp, (iname, _a, _o) in ISPS.items():
        for c, (cname, _la, _lo) in CITIES.items():
            for n in range(10, 10 + per_block):
                mapping[f"s{n}.{iname}-{cname.lower()}.test"] = site_ip(isp, c, n)
    path.write_text("".join(f"{ip} {h}\n" for h, ip in mapping.items()))
    return mapping
