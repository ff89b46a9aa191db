"""What the consultant knows of a host: its IP (hosts file or DNS) and that IP's city and ASN."""

from __future__ import annotations

from collections.abc import Iterable

from consultant.partition import Site
from consultant.partition.asn import isp_of
from consultant.sitedb import AsnDB, CityDB
from wancrawl.hostres import HostResolver


class SiteLocator:
    """Builds `Site`s for the partitioners, asking only for what the strategy needs."""

    def __init__(
        self,
        resolver: HostResolver,
        city_db: CityDB | None,
        asn_db: AsnDB | None,
        isps: dict[str, list[int]] | None = None,
    ):
        self.resolver = resolver
        self.city_db = city_db
        self.asn_db = asn_db
        self.isps = isps or {}

    def site(self, host: str, ip: str | None, needs: frozenset[str]) -> Site:
        if ip is None:
            return Site(host)
        city = country = ""
        lat = lon = None
        asn = 0
        if self.city_db is not None and ("geo" in needs or "all" in needs):
            g = self.city_db.lookup(ip)
            if g is not None:
                city, country, lat, lon = g.city, g.country, g.lat, g.lon
        if self.asn_db is not None and ("asn" in needs or "all" in needs):
            asn = self.asn_db.lookup(ip)
        return Site(host, ip, city, country, lat, lon, asn, isp_of(asn, self.isps))

    async def sites(self, hosts: Iterable[str], needs: frozenset[str]) -> dict[str, Site]:
        hosts = list(hosts)
        if "ip" not in needs and "all" not in needs:
            return {h: Site(h) for h in hosts}
        ips = await self.resolver.resolve_many(hosts)
        return {h: self.site(h, ips.get(h), needs) for h in hosts}
