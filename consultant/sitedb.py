"""Site and agent location from IP: a MaxMind City DB (geoip2) and an ASN DB (mmdb or pyasn)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from wancrawl.errors import ConfigError


@dataclass(frozen=True)
class GeoInfo:
    city: str
    country: str
    lat: float | None
    lon: float | None


def shipped_city_db() -> str:
    """The GeoLite2 City DB that the maxminddb-geolite2 package ships (a real 2018 DB)."""
    try:
        from _maxminddb_geolite2 import geolite2_database
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise ConfigError("databases.city_db is empty and maxminddb-geolite2 is not installed") from exc
    return geolite2_database()


def _open_reader(path: str, key: str, want: str):
    import geoip2.database
    import maxminddb.errors

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{key}: file {path} not found")
    try:
        reader = geoip2.database.Reader(str(p))
    except (maxminddb.errors.InvalidDatabaseError, ValueError, OSError) as exc:
        raise ConfigError(f"{key}: {path} is not a readable MaxMind DB ({exc})") from None
    kind = reader.metadata().database_type
    if want not in kind:
        reader.close()
        raise ConfigError(f"{key}: {path} is a {kind!r} database; a {want} database is needed")
    return reader


class CityDB:
    """IP -> city, country, coordinates through geoip2's Reader.city()."""

    def __init__(self, path: str, key: str = "databases.city_db"):
        self.path = path
        self.reader = _open_reader(path, key, "City")
        self.lookup = functools.lru_cache(maxsize=262_144)(self._lookup)

    def _lookup(self, ip: str) -> GeoInfo | None:
        import geoip2.errors

        try:
            r = self.reader.city(ip)
        except (geoip2.errors.AddressNotFoundError, ValueError):
            return None
        lat, lon = r.location.latitude, r.location.longitude
        return GeoInfo(r.city.name or "", r.country.iso_code or "", lat, lon)

    def close(self) -> None:
        self.reader.close()


class AsnDB:
    """IP -> ASN through a MaxMind ASN DB (Reader.asn()) or a pyasn ipasn file."""

    def __init__(self, asn_db: str = "", pyasn_file: str = ""):
        self.kind = ""
        if asn_db:
            self.reader = _open_reader(asn_db, "databases.asn_db", "ASN")
            self.kind = "mmdb"
            self.path = asn_db
        elif pyasn_file:
            import pyasn

            if not Path(pyasn_file).is_file():
                raise ConfigError(f"databases.pyasn_file: file {pyasn_file} not found")
            try:
                self.pyasn = pyasn.pyasn(pyasn_file)
            except Exception as exc:  # noqa: BLE001 - pyasn raises bare errors on bad files
                raise ConfigError(f"databases.pyasn_file: {pyasn_file} is not a pyasn ipasn file ({exc})") from None
            self.kind = "pyasn"
            self.path = pyasn_file
        else:
            raise ConfigError("no ASN database: set databases.asn_db or databases.pyasn_file")
        self.lookup = functools.lru_cache(maxsize=262_144)(self._lookup)

    def _lookup(self, ip: str) -> int:
        if self.kind == "mmdb":
            import geoip2.errors

            try:
                return int(self.reader.asn(ip).autonomous_system_number or 0)
            except (geoip2.errors.AddressNotFoundError, ValueError):
                return 0
        try:
            asn, _prefix = self.pyasn.lookup(ip)
        except (ValueError, TypeError):
            return 0
        return int(asn or 0)

    def close(self) -> None:
        if self.kind == "mmdb":
            self.reader.close()
