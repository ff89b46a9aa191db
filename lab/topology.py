"""The lab's address plan: ISPs, cities, 127.ISP.CITY.0/24 blocks, agent addresses and sites."""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from wancrawl.geo import great_circle_km
from wancrawl.config import build, read_toml
from wancrawl.errors import ConfigError

AGENT_FIRST = 2  # .2-.9 are agent source addresses
AGENT_SLOTS = 8
SITE_FIRST = 10  # normal sites from .10 up to .239, then shared as virtual hosts
SITE_LAST = 239
HOSTILE_FIRST = 240  # hostile sites from .240 to .254
HOSTILE_LAST = 254

HOSTILE_KINDS = (
    "redirect-loop",
    "redirect-chain",
    "calendar",
    "slow-drip",
    "never",
    "huge",
    "gzip-bomb",
    "wrong-type",
    "throttle",
    "server-error",
    "malformed",
    "bad-schemes",
    "long-urls",
    "gbk",
    "session-trap",
    "robots-503",
    "retry-forever",
    "length-lie",
    "many-links",
    "meta-robots",
    "shift-jis",
    "two-origins",
    "dead-names",
    "sitemaps",
    "sitemap-hostile",
    # Issue 25: a path repeating a block of four segments, a domain of 2,000 subdomains on one
    # IP, and decompression/parser bombs of several kinds on several hosts (so they arrive at once).
    "repeat-block",
    "subdomain-flood",
    "bombs",
)
# Hostile kinds whose site answers on many names under its own domain, kind -> how many: the
# site is www.KIND-BLOCK.DOMAIN and the names LABEL.KIND-BLOCK.DOMAIN (its own registered
# domain under the public suffix list's default rule), all on the site's one address.
SUBDOMAIN_KINDS = {"subdomain-flood": 2000, "bombs": 8}
BOMB_LABELS = ("p-gzip", "p-deflate", "p-plain", "text-gzip", "astral-gzip", "nested-gzip", "links-gzip", "attr-gzip")


@dataclass
class IspSpec:
    name: str
    slug: str
    asn: int
    org: str = ""


@dataclass
class CitySpec:
    name: str
    slug: str
    lat: float
    lon: float
    country: str = "CN"
    country_name: str = "China"
    continent: str = "AS"
    continent_name: str = "Asia"
    time_zone: str = "Asia/Shanghai"
    geoname_id: int = 0


@dataclass
class LinkSpec:
    """Link model parameters; times in milliseconds, rates in kilobits per second (0 = unlimited)."""

    hop_ms: float = 2.0  # RTT added per hop: 1 hop in a block, +1 across cities, +1 across ISPs
    ms_per_100km: float = 1.0  # RTT per 100 km of great-circle distance
    inter_isp_penalty_ms: float = 30.0  # RTT added when client ISP != site ISP
    first_request_rtts: float = 2.0  # a new connection pays the TCP handshake too
    flow_kbps: float = 8000.0  # per connection (one flow) body pacing
    access_kbps: float = 0.0  # an access link, shared by the flows of every client behind it
    # "address": one access link per client address; "block": one per ISP/city block, shared by
    # all agents in it (seed 002's sites: one 10 Mbit/s line per network access point).
    access_scope: str = "address"
    # Per client address (scope "address") or block ("isp-city", scope "block"): its own access
    # line's kbit/s instead of access_kbps; agents of unequal bandwidth (bench/seeds/seed003_capacity.py).
    access: dict[str, float] = field(default_factory=dict)
    interconnect_kbps: float = 4000.0  # per ISP pair, shared by every flow crossing it
    interconnect_burst_kb: float = 32.0
    interconnect: dict[str, float] = field(default_factory=dict)  # "telecom-unicom" = kbps override
    chunk_bytes: int = 16384  # pacing granularity


@dataclass
class SitesSpec:
    per_block: int = 8
    blocks: dict[str, int] = field(default_factory=dict)  # "telecom-beijing" = 20 overrides per_block
    hostile: bool = True
    hostile_kinds: list[str] = field(default_factory=list)  # [] = every kind of HOSTILE_KINDS
    port: int = 8080
    domain: str = "lab"


@dataclass
class WebSpec:
    pages_min: int = 5
    pages_max: int = 3000
    pareto_alpha: float = 1.1
    links_min: int = 10
    links_max: int = 40
    cross_site_ratio: float = 0.12  # share of a page's links that leave the site
    same_city_bias: float = 4.0  # extra weight of a target site in the same city
    same_isp_bias: float = 4.0  # extra weight of a target site in the same ISP
    page_kb_min: float = 5.0
    page_kb_max: float = 60.0
    robots_disallow_ratio: float = 0.3
    crawl_delay_ratio: float = 0.2
    crawl_delays: list[float] = field(default_factory=lambda: [1.0, 2.0, 5.0])
    sitemap_ratio: float = 0.1
    hostile_link_ratio: float = 0.01  # share of normal pages with one link to a hostile site
    # Every hostile site is also linked from the home page of one normal site (hostile site k
    # from normal site k mod the number of normal sites), so a crawl of the normal sites meets all.
    hostile_home_links: bool = True
    huge_mb: float = 10.0
    gzip_bomb_mb: float = 1024.0  # decoded size of the gzip bomb
    drip_bytes: int = 64  # slow-drip: this many bytes ...
    drip_interval_s: float = 1.0  # ... every this many (model) seconds
    drip_total_bytes: int = 8192
    calendar_start: str = "2009-01"
    session_trap_links: int = 10_000  # session-trap: fresh ?sid= links on every page
    robots_unavailable_s: float = 20.0  # robots-503: robots.txt answers 503 this long (model s) after start
    retry_forever_s: float = 3600.0  # retry-forever: /wait's Retry-After (model s, time-scaled)
    length_lie_bytes: int = 100  # length-lie: the Content-Length /liar.html declares
    many_links: int = 100_000  # many-links: links on "/" to pages that 404
    # Changing pages (issue 26; docs/lab.md "A web that changes"): this share of the normal pages
    # changes as a Poisson process, its mean interval (model seconds) one of change_means times
    # U(0.5, 2), all drawn from the seed; the rest never change. 0 (the default): a static web,
    # no ETag / Last-Modified served, every response as before. A change alters a page's text,
    # never its links: the link graph (and truth's reachable set) is the same at every time.
    change_ratio: float = 0.0
    change_means: list[float] = field(default_factory=lambda: [3600.0, 86400.0, 7 * 86400.0])


@dataclass
class DnsSpec:
    """The lab's authoritative DNS (lab/dns.py; issue 37). Which names misbehave is drawn from
    each normal site's host name and `seed` (a hash: the same names in every process); hostile
    sites and the names of SUBDOMAIN_KINDS sites always resolve plainly."""

    ttl: int = 300             # seconds, every A record
    cname_ttl: int = 600       # seconds, every CNAME record
    negative_ttl: int = 60     # the SOA's minimum: how long a resolver may keep an NXDOMAIN
    nxdomain_ratio: float = 0.0  # share of normal sites whose name does not exist
    timeout_ratio: float = 0.0   # share whose queries are never answered (the resolver times out)
    cname_ratio: float = 0.0     # share answered through a CNAME chain ...
    cname_depth: int = 2         # ... of this many CNAMEs before the A record
    seed: int = 0


@dataclass
class TopologySpec:
    name: str = "seed-002"
    isps: list[IspSpec] = field(default_factory=list)
    cities: list[CitySpec] = field(default_factory=list)
    link: LinkSpec = field(default_factory=LinkSpec)
    sites: SitesSpec = field(default_factory=SitesSpec)
    web: WebSpec = field(default_factory=WebSpec)
    dns: DnsSpec = field(default_factory=DnsSpec)


def default_spec() -> TopologySpec:
    """Seed paper 002's world: Beijing, Harbin, Guangzhou; China Telecom, China Unicom, CERNET."""
    return TopologySpec(
        name="seed-002",
        isps=[
            IspSpec("China Telecom", "telecom", 4134, "CHINANET-BACKBONE No.31,Jin-rong Street"),
            IspSpec("China Unicom", "unicom", 4837, "CHINA UNICOM China169 Backbone"),
            IspSpec("CERNET", "cernet", 4538, "China Education and Research Network Center"),
        ],
        cities=[
            CitySpec("Beijing", "beijing", 39.9042, 116.4074, geoname_id=1816670),
            CitySpec("Harbin", "harbin", 45.8038, 126.5350, time_zone="Asia/Harbin", geoname_id=2037013),
            CitySpec("Guangzhou", "guangzhou", 23.1291, 113.2644, geoname_id=1809858),
        ],
    )


@dataclass(frozen=True)
class Block:
    isp: str  # ISP slug
    city: str  # city slug
    isp_index: int  # 1-based
    city_index: int  # 1-based
    network: str  # "127.I.C.0/24"

    @property
    def name(self) -> str:
        return f"{self.isp}-{self.city}"


@dataclass(frozen=True)
class Site:
    index: int  # global, stable for a topology: the generator's site key
    host: str
    ip: str
    port: int
    isp: str
    city: str
    kind: str = "normal"  # or one of HOSTILE_KINDS

    @property
    def base_url(self) -> str:
        return f"http://{self.host}" + ("" if self.port == 80 else f":{self.port}")

    @property
    def hostile(self) -> bool:
        return self.kind != "normal"


class Topology:
    """An address plan built from a TopologySpec; pure and cheap to query."""

    def __init__(self, spec: TopologySpec, *, source: str = "default"):
        self.spec = spec
        self.source = source
        _validate(spec, source)

    # --- ISPs, cities, blocks -------------------------------------------------------------
    def with_port(self, port: int) -> "Topology":
        """The same world with its sites on another port."""
        if port == self.spec.sites.port:
            return self
        return Topology(dataclasses.replace(self.spec, sites=dataclasses.replace(self.spec.sites, port=port)), source=self.source)

    @property
    def isps(self) -> list[IspSpec]:
        return list(self.spec.isps)

    @property
    def cities(self) -> list[CitySpec]:
        return list(self.spec.cities)

    def isp(self, key: str | int) -> IspSpec:
        """An ISP by slug, name, 1-based index or ASN."""
        return self.spec.isps[self._isp_pos(key) - 1]

    def city(self, key: str | int) -> CitySpec:
        """A city by slug, name or 1-based index."""
        return self.spec.cities[self._city_pos(key) - 1]

    def _isp_pos(self, key: str | int) -> int:
        return _position(self.spec.isps, key, "ISP", self.source, by_asn=True)

    def _city_pos(self, key: str | int) -> int:
        return _position(self.spec.cities, key, "city", self.source, by_asn=False)

    @cached_property
    def blocks(self) -> list[Block]:
        return [
            Block(i.slug, c.slug, ni, nc, f"127.{ni}.{nc}.0/24")
            for ni, i in enumerate(self.spec.isps, 1)
            for nc, c in enumerate(self.spec.cities, 1)
        ]

    def block(self, isp: str | int, city: str | int) -> Block:
        ni, nc = self._isp_pos(isp), self._city_pos(city)
        return self.blocks[(ni - 1) * len(self.spec.cities) + (nc - 1)]

    def agent_address(self, isp: str | int, city: str | int, n: int = 0) -> str:
        """The n-th (0-based) agent source address of a block: 127.I.C.(2+n)."""
        if not 0 <= n < AGENT_SLOTS:
            raise ValueError(f"agent slot {n} out of range 0..{AGENT_SLOTS - 1}")
        return f"127.{self._isp_pos(isp)}.{self._city_pos(city)}.{AGENT_FIRST + n}"

    def locate(self, ip: str) -> tuple[str, str] | None:
        """(isp slug, city slug) of an address in the plan, else None."""
        try:
            a = ipaddress.IPv4Address(ip)
        except ValueError:
            return None
        o = a.packed
        if o[0] != 127 or not (1 <= o[1] <= len(self.spec.isps)) or not (1 <= o[2] <= len(self.spec.cities)):
            return None
        return self.spec.isps[o[1] - 1].slug, self.spec.cities[o[2] - 1].slug

    def distance_km(self, city_a: str, city_b: str) -> float:
        a, b = self.city(city_a), self.city(city_b)
        return great_circle_km(a.lat, a.lon, b.lat, b.lon)

    # --- sites ----------------------------------------------------------------------------
    def sites_in_block(self, block: Block) -> int:
        return self.spec.sites.blocks.get(block.name, self.spec.sites.per_block)

    @cached_property
    def sites(self) -> list[Site]:
        """Normal sites block by block, then one hostile site per kind (round robin over blocks)."""
        dom, port = self.spec.sites.domain, self.spec.sites.port
        total = sum(self.sites_in_block(b) for b in self.blocks)
        width = max(4, len(str(total - 1)))
        out: list[Site] = []
        span = SITE_LAST - SITE_FIRST + 1
        for b in self.blocks:
            for k in range(self.sites_in_block(b)):
                idx = len(out)
                ip = f"127.{b.isp_index}.{b.city_index}.{SITE_FIRST + k % span}"
                out.append(Site(idx, f"www.s{idx:0{width}d}.{b.name}.{dom}", ip, port, b.isp, b.city))
        if self.spec.sites.hostile:
            per_block: dict[str, int] = {}
            chosen = self.spec.sites.hostile_kinds or HOSTILE_KINDS
            for n, kind in enumerate(k for k in HOSTILE_KINDS if k in chosen):
                b = self.blocks[n % len(self.blocks)]
                k = per_block.get(b.name, 0)
                per_block[b.name] = k + 1
                ip = f"127.{b.isp_index}.{b.city_index}.{HOSTILE_FIRST + k % (HOSTILE_LAST - HOSTILE_FIRST + 1)}"
                host = f"www.{kind}-{b.name}.{dom}" if kind in SUBDOMAIN_KINDS else f"www.{kind}.{b.name}.{dom}"
                out.append(Site(len(out), host, ip, port, b.isp, b.city, kind))
        return out

    @cached_property
    def normal_sites(self) -> list[Site]:
        return [s for s in self.sites if not s.hostile]

    @cached_property
    def hostile_sites(self) -> dict[str, Site]:
        return {s.kind: s for s in self.sites if s.hostile}

    def subdomains(self, site: Site) -> list[str]:
        """The other names a SUBDOMAIN_KINDS site answers on (none for other sites)."""
        n = SUBDOMAIN_KINDS.get(site.kind, 0)
        if not n:
            return []
        parent = site.host.removeprefix("www.")
        labels = BOMB_LABELS[:n] if site.kind == "bombs" else [f"n{i:04d}" for i in range(n)]
        return [f"{label}.{parent}" for label in labels]

    def site_domain(self, site: Site) -> str:
        """The name a scope allows to take in the site and every name it answers on."""
        return site.host.removeprefix("www.") if site.kind in SUBDOMAIN_KINDS else site.host

    @cached_property
    def _by_host(self) -> dict[str, Site]:
        by = {s.host: s for s in self.sites}
        for s in self.sites:
            by.update(dict.fromkeys(self.subdomains(s), s))
        return by

    def site(self, host: str) -> Site | None:
        """The site of a host name (case-insensitive, port and trailing dot ignored)."""
        h = host.lower().rstrip(".")
        if ":" in h:
            h = h.rsplit(":", 1)[0]
        return self._by_host.get(h)

    @cached_property
    def site_ips(self) -> list[str]:
        """Every distinct address the web server must bind, in plan order."""
        return list(dict.fromkeys(s.ip for s in self.sites))

    def sites_on(self, ip: str) -> list[Site]:
        return [s for s in self.sites if s.ip == ip]

    def hosts_file(self, ip: str | None = None) -> str:
        """/etc/hosts-format lines mapping every site's host name to its address, or every one to
        `ip` (a `lab web --listen` server's, e.g. a container's on a compose network)."""
        lines = [f"# wancrawl lab hosts for topology {self.spec.name} ({self.source})"]
        lines += [f"{ip or s.ip}\t{s.host}" for s in self.sites]
        lines += [f"{ip or s.ip}\t{name}" for s in self.sites for name in self.subdomains(s)]
        return "\n".join(lines) + "\n"


def _position(items: list, key: str | int, what: str, source: str, *, by_asn: bool) -> int:
    """1-based position of an ISP or city by slug, name, 1-based index (or, for ISPs, ASN)."""
    if isinstance(key, int):
        if 1 <= key <= len(items):
            return key
        for n, x in enumerate(items, 1):
            if by_asn and x.asn == key:
                return n
    else:
        k = key.lower()
        for n, x in enumerate(items, 1):
            if k in (x.slug, x.name.lower()):
                return n
    known = ", ".join(x.slug for x in items)
    raise KeyError(f"no {what} {key!r} in topology {source} (known: {known})")


def _validate(spec: TopologySpec, source: str) -> None:
    if not spec.isps or not spec.cities:
        raise ConfigError(f"{source}: a topology needs at least one [[isps]] and one [[cities]]")
    if len(spec.isps) > 255 or len(spec.cities) > 255:
        raise ConfigError(f"{source}: at most 255 ISPs and 255 cities fit in 127.ISP.CITY.0/24")
    for what, items in (("isps", spec.isps), ("cities", spec.cities)):
        slugs = [x.slug for x in items]
        dup = {s for s in slugs if slugs.count(s) > 1}
        if dup:
            raise ConfigError(f"{source}: duplicate {what} slug(s): {', '.join(sorted(dup))}")
        for x in items:
            if not x.slug or not all(ch.isalnum() or ch == "-" for ch in x.slug) or x.slug != x.slug.lower():
                raise ConfigError(f"{source}: {what} slug {x.slug!r} must be lower-case letters, digits and '-'")
    for c in spec.cities:
        if not (-90 <= c.lat <= 90 and -180 <= c.lon <= 180):
            raise ConfigError(f"{source}: city {c.slug}: latitude/longitude out of range")
    names = {f"{i.slug}-{c.slug}" for i in spec.isps for c in spec.cities}
    for key in spec.sites.blocks:
        if key not in names:
            raise ConfigError(f"{source}: sites.blocks: unknown block {key!r} (blocks are isp-city)")
    slugs = {i.slug for i in spec.isps}
    if spec.link.access_scope not in ("address", "block"):
        raise ConfigError(f"{source}: link.access_scope must be 'address' or 'block', not {spec.link.access_scope!r}")
    for key in spec.link.interconnect:
        a, _, b = key.partition("-")
        if a not in slugs or b not in slugs:
            raise ConfigError(f"{source}: link.interconnect: {key!r} is not 'isp-isp' of known ISP slugs")
    if not 1 <= spec.sites.port <= 65535:
        raise ConfigError(f"{source}: sites.port out of range")
    w = spec.web
    if w.pages_min < 1 or w.pages_max < w.pages_min:
        raise ConfigError(f"{source}: web.pages_min/pages_max must satisfy 1 <= min <= max")
    if w.page_kb_min <= 0 or w.page_kb_max < w.page_kb_min:
        raise ConfigError(f"{source}: web.page_kb_min/page_kb_max must satisfy 0 < min <= max")
    bad = [k for k in spec.sites.hostile_kinds if k not in HOSTILE_KINDS]
    if bad:
        raise ConfigError(f"{source}: sites.hostile_kinds: unknown kind(s) {', '.join(bad)} (known: {', '.join(HOSTILE_KINDS)})")
    d = spec.dns
    if min(d.ttl, d.cname_ttl, d.negative_ttl) < 0 or not 0 <= d.cname_depth <= 8:
        raise ConfigError(f"{source}: dns: TTLs must be >= 0 and cname_depth 0..8")
    if min(d.nxdomain_ratio, d.timeout_ratio, d.cname_ratio) < 0 or d.nxdomain_ratio + d.timeout_ratio + d.cname_ratio > 1:
        raise ConfigError(f"{source}: dns: nxdomain_ratio, timeout_ratio and cname_ratio must be >= 0 and sum to at most 1")
    for key in ("session_trap_links", "robots_unavailable_s", "retry_forever_s", "length_lie_bytes", "many_links"):
        if getattr(w, key) < 0:
            raise ConfigError(f"{source}: web.{key} must be >= 0")


def load(path: str | Path | None = None, **overrides: Any) -> Topology:
    """The default world (path None) or a TOML topology file.

    A file that omits [[isps]] or [[cities]] inherits seed 002's. Keyword overrides replace
    sections or top-level fields (e.g. sites=SitesSpec(per_block=2)) — handy in tests.
    """
    if path is None:
        spec, source = default_spec(), "default"
    else:
        source = str(path)
        data = read_toml(path)
        spec = build(TopologySpec, data, source=source)
        base = default_spec()
        if not spec.isps:
            spec.isps = base.isps
        if not spec.cities:
            spec.cities = base.cities
    if overrides:
        spec = dataclasses.replace(spec, **overrides)
    return Topology(spec, source=source)
