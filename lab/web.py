"""The synthetic web: every response is a pure function of (seed, topology, site, path, time scale)."""

from __future__ import annotations

import gzip
import hashlib
import html
from bisect import bisect_right
from email.utils import formatdate, parsedate_to_datetime
import itertools
import math
import random
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

from lab.topology import BOMB_LABELS, Site, Topology

WORDS = (
    "the of and to in is for on with as by at from that this are be or an it was which will "
    "can has have not more new all about their other its also one two first time year people "
    "city network data service system research market report local world government public "
    "school university student health energy water travel history science music sport film "
    "book company business product price order support help news weather river mountain "
    "garden bridge station library museum festival harbor winter summer spring autumn north "
    "south east west central national regional international online digital mobile open "
    "free best great small large early late simple quick careful modern ancient bright "
    "quiet busy green red blue golden silver paper stone glass iron cotton silk tea rice "
    "noodle dumpling market street road avenue square tower hall center park lake island "
    "coast valley plain forest field farm factory office shop store hotel restaurant "
    "kitchen recipe method result analysis model theory practice project team member "
    "leader partner customer visitor reader writer editor teacher doctor engineer artist "
    "farmer driver pilot captain guide review update release version feature issue guide"
).split()

# Common characters for the GBK pages (all encodable in GBK).
HANZI = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"


@dataclass
class Response:
    """What the server sends; it adds Content-Length, Connection and Server itself."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    mode: str = "normal"  # "drip": send the body slowly; "never": send nothing, ever
    # A Content-Length that lies (the length-lie site): the server declares this instead of
    # len(body), sends the whole body anyway and closes the connection after it.
    declared_length: int | None = None


@dataclass(frozen=True)
class Page:
    """A resolved request without its body: what truth needs (status, links, redirect)."""

    site: Site | None
    target: str
    status: int
    kind: str  # "page", "robots", "sitemap", "not-found", "unknown-host", or "<hostile kind>:<case>"
    page_id: int = -1
    links: tuple[str, ...] = ()  # every a[href] exactly as written in the HTML (unescaped)
    location: str | None = None
    html: bool = True  # a crawler would parse the body as HTML for links
    # What a correct crawler follows, when that is not every link: rel="nofollow" links and the
    # links of a <meta name="robots" content="nofollow"> page left out, session-id and 404 floods
    # left out, links past a lying Content-Length left out. None: every link in `links`.
    follow: tuple[str, ...] | None = None
    refresh: str | None = None  # <meta http-equiv="refresh"> target: followed like a redirect
    noindex: bool = False  # <meta name="robots" content="noindex">: fetch, follow, do not index
    encoding: str = "utf-8"  # the document's encoding: the query of its links is encoded in it

    @property
    def followed(self) -> tuple[str, ...]:
        """The hrefs a correct crawler follows from this page (the refresh target included)."""
        out = self.links if self.follow is None else self.follow
        return out + (self.refresh,) if self.refresh else out


@dataclass
class SiteInfo:
    pages: int
    sections: list[str]
    title: str
    disallow: list[str] = field(default_factory=list)
    crawl_delay: float | None = None
    sitemap: bool = False


SECTIONS = ("news", "blog", "docs", "products", "forum", "about", "help", "events")
_PAGE_RE = re.compile(r"^/([a-z]+)/(?:[a-z]+-(\d+)\.html|item\?id=(\d+))$")
REASONS = {
    200: "OK", 301: "Moved Permanently", 302: "Found", 303: "See Other", 307: "Temporary Redirect",
    308: "Permanent Redirect", 404: "Not Found", 414: "URI Too Long", 429: "Too Many Requests",
    400: "Bad Request", 421: "Misdirected Request", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
}
HTML_UTF8 = "text/html; charset=utf-8"
CHAIN_LENGTH = 20  # redirects from the redirect-chain site's "/" to "/final"
LONG_URL_START = 1000
LONG_URL_MAX = 16384  # targets longer than this get 414
MALFORMED_PAGES = 10
TWO_ORIGIN_PAGES = 12  # pages of the two-origins site on its live origin ("/" and /o/1..11)
DEAD_NAMES = 20  # names the dead-names site links to, none of which resolves
GBK_PAGES = 5
LAB_EPOCH = 1230768000.0  # 2009-01-01T00:00:00Z: model time 0 on the changing web's Last-Modified


class Web:
    """The generator. Construct once per (topology, seed, time_scale); methods are pure."""

    def __init__(self, topology: Topology, seed: int = 0, *, time_scale: float = 1.0, cache_pages: int = 8192):
        self.topology = topology
        self.seed = seed
        self.time_scale = time_scale
        self.spec = topology.spec.web
        rng = random.Random(f"{seed}/paragraphs")
        self._paras = [_paragraph(rng) for _ in range(256)]
        self._groups: dict[tuple[str, str], list[Site]] = {}
        for s in topology.normal_sites:
            self._groups.setdefault((s.isp, s.city), []).append(s)
        self._hostile = list(topology.hostile_sites.values())
        self.site_info = lru_cache(maxsize=None)(self._site_info)
        self._cache_pages = cache_pages
        self.render_page = lru_cache(maxsize=cache_pages)(self._render_page)
        # Every request of a page needs its links (the Page object): as cached as its body.
        self.links = lru_cache(maxsize=cache_pages)(self._links)
        self._bomb: bytes | None = None
        self._sitemap_bomb: bytes | None = None
        self._huge: bytes | None = None
        self._many: tuple[str, ...] | None = None
        self._many_body: bytes | None = None
        self._bombs: dict[str, bytes] = {}
        # Changing pages (spec.change_ratio > 0): per page, its change times so far and the
        # generator that draws the next ones (a pure function of the seed, extended lazily).
        self._changes: dict[tuple[int, int], tuple[list[float], random.Random, float]] = {}
        self.render_version = lru_cache(maxsize=cache_pages)(self._render_version)

    def with_port(self, port: int) -> "Web":
        """The same web served on another port (absolute links and redirects follow it)."""
        topo = self.topology.with_port(port)
        if topo is self.topology:
            return self
        return Web(topo, self.seed, time_scale=self.time_scale, cache_pages=self._cache_pages)

    # --- site-level facts -------------------------------------------------------------------
    def _site_info(self, site: Site) -> SiteInfo:
        w = self.spec
        rng = random.Random(f"{self.seed}/{site.index}/site")
        u = rng.random()
        pages = int(w.pages_min * (1.0 - u) ** (-1.0 / w.pareto_alpha))
        pages = max(w.pages_min, min(w.pages_max, pages))
        sections = rng.sample(SECTIONS, rng.randint(2, 4))
        title = " ".join(rng.choice(WORDS).capitalize() for _ in range(rng.randint(2, 3)))
        info = SiteInfo(pages, sections, title)
        if rng.random() < w.robots_disallow_ratio:
            info.disallow = [f"/{sections[-1]}/", "/search"]
        if rng.random() < w.crawl_delay_ratio and w.crawl_delays:
            info.crawl_delay = rng.choice(w.crawl_delays)
        info.sitemap = rng.random() < w.sitemap_ratio
        return info

    def pages(self, site: Site) -> int:
        return 0 if site.hostile else self.site_info(site).pages

    def page_path(self, site: Site, i: int) -> str:
        if i == 0:
            return "/"
        secs = self.site_info(site).sections
        sec = secs[(i - 1) % len(secs)]
        if i % 5 == 4:
            return f"/{sec}/item?id={i}"
        word = WORDS[(i * 2654435761 + site.index * 97 + self.seed) % len(WORDS)]
        return f"/{sec}/{word}-{i}.html"

    def page_id(self, site: Site, target: str) -> int | None:
        if target == "/":
            return 0
        m = _PAGE_RE.match(target)
        if not m:
            return None
        i = int(m.group(2) or m.group(3))
        if 1 <= i < self.pages(site) and self.page_path(site, i) == target:
            return i
        return None

    def url(self, site: Site, path: str) -> str:
        return site.base_url + path

    def all_page_urls(self) -> list[str]:
        """Every normal page's URL (in canonical form already)."""
        return [self.url(s, self.page_path(s, i)) for s in self.topology.normal_sites for i in range(self.pages(s))]

    def scaled(self, seconds: float) -> float:
        return seconds / self.time_scale

    def robots_txt(self, site: Site) -> str:
        """The site's robots.txt (for robots-503: the one served once the 503 window is over)."""
        if site.kind == "robots-503":
            return "User-agent: *\nDisallow: /private/\n"
        if site.kind == "sitemaps":
            return f"User-agent: *\nDisallow: /private/\nSitemap: {site.base_url}/sitemap-index.xml\n"
        if site.kind == "sitemap-hostile":
            return "User-agent: *\nAllow: /\n" + "".join(f"Sitemap: {site.base_url}{p}\n" for p in HOSTILE_SITEMAPS)
        if site.hostile:
            return "User-agent: *\nAllow: /\n"
        info = self.site_info(site)
        lines = ["User-agent: *"]
        lines += [f"Disallow: {d}" for d in info.disallow] or ["Disallow:"]
        if info.crawl_delay is not None:
            lines.append(f"Crawl-delay: {_num(self.scaled(info.crawl_delay))}")
        if info.sitemap:
            lines.append(f"Sitemap: {site.base_url}/sitemap.xml")
        lines += ["", "User-agent: BadBot", "Disallow: /", ""]
        return "\n".join(lines)

    def crawl_delay(self, site: Site) -> float | None:
        """The site's robots.txt Crawl-delay in wall seconds (already time-scaled), if any."""
        d = None if site.hostile else self.site_info(site).crawl_delay
        return None if d is None else self.scaled(d)

    # --- the link graph ---------------------------------------------------------------------
    def _links(self, site: Site, i: int) -> tuple[str, ...]:
        """Every href of normal page i, spelled as in the HTML, in document order."""
        return self._page_plan(site, i)[0]

    def _page_plan(self, site: Site, i: int) -> tuple[tuple[str, ...], random.Random]:
        w = self.spec
        info = self.site_info(site)
        n = info.pages
        rng = random.Random(f"{self.seed}/{site.index}/{i}")
        here = self.page_path(site, i)
        hrefs: list[str] = []
        # Navigation: home and the first page of each section, as root-relative paths.
        hrefs.append("/")
        for k in range(1, min(n, len(info.sections) + 1)):
            hrefs.append(self.page_path(site, k))
        # A binary tree over page ids makes every page reachable from "/".
        targets = [c for c in (2 * i + 1, 2 * i + 2) if c < n]
        m = rng.randint(w.links_min, w.links_max)
        cross: list[tuple[Site, int]] = []
        for _ in range(m):
            if rng.random() < w.cross_site_ratio and len(self.topology.normal_sites) > 1:
                t = self._pick_site(site, rng)
                tp = 0 if rng.random() < 0.5 else rng.randrange(self.pages(t))
                cross.append((t, tp))
            else:
                targets.append(int(n * rng.random() ** 2))  # popular (low) ids more often
        for j in targets:
            hrefs.append(self._spell_local(site, here, self.page_path(site, j), rng))
        for t, tp in cross:
            hrefs.append(self._spell_remote(t, self.page_path(t, tp), rng))
        if self._hostile and rng.random() < w.hostile_link_ratio:
            hrefs.append(self._hostile[rng.randrange(len(self._hostile))].base_url + "/")
        if i == 0 and w.hostile_home_links:
            # Normal sites come first in the topology, so site.index is the site's position.
            n_normal = len(self.topology.normal_sites)
            hrefs += [self._hostile[k].base_url + "/" for k in range(site.index, len(self._hostile), n_normal)]
        hrefs.append(f"mailto:webmaster@{site.host}")
        hrefs.append("javascript:void(0)")
        return tuple(hrefs), rng

    def _pick_site(self, site: Site, rng: random.Random) -> Site:
        w = self.spec
        keys = list(self._groups)
        weights = [
            len(self._groups[k]) * (1.0 + w.same_city_bias * (k[1] == site.city) + w.same_isp_bias * (k[0] == site.isp))
            for k in keys
        ]
        g = self._groups[rng.choices(keys, weights)[0]]
        t = g[rng.randrange(len(g))]
        if t.index == site.index:
            t = g[(g.index(t) + 1) % len(g)]
        return t

    def _spell_local(self, site: Site, here: str, path: str, rng: random.Random) -> str:
        """One of the many ways to write the same link; they canonicalize to one URL."""
        form = rng.randrange(8)
        if form == 0:
            href = site.base_url + path
        elif form == 1:
            href = _relative(here, path)
        elif form == 2:
            rel = _relative(here, path)
            href = rel if rel.startswith(".") else "./" + rel
        elif form == 3:
            host = site.host.upper() if rng.random() < 0.5 else site.host.title()
            href = f"HTTP://{host}" + ("" if site.port == 80 else f":{site.port}") + path
        elif form == 4 and path != "/":
            other = rng.choice(SECTIONS)
            href = f"/{other}/..{path}" if rng.random() < 0.5 else path.replace("/", "/./", 1)
        elif form == 5:
            # Spell the default port out: only "default" when the lab runs on port 80.
            href = f"http://{site.host}:80{path}" if site.port == 80 else f"//{site.host}:{site.port}{path}"
        else:
            href = path
        if rng.random() < 0.15:
            href += f"#part-{rng.randrange(1, 6)}"
        return href

    def _spell_remote(self, site: Site, path: str, rng: random.Random) -> str:
        form = rng.randrange(4)
        port = "" if site.port == 80 else f":{site.port}"
        if form == 0:
            href = f"http://{site.host.upper()}{port}{path}"
        elif form == 1:
            href = f"//{site.host}{port}{path}"
        else:
            href = f"http://{site.host}{port}{path}"
        if rng.random() < 0.1:
            href += "#top"
        return href

    # --- a web that changes (issue 26) -----------------------------------------------------
    @property
    def changing(self) -> bool:
        return self.spec.change_ratio > 0

    def change_rate(self, site: Site, i: int) -> float:
        """Changes per model second of normal page i (a Poisson process); 0: it never changes."""
        w = self.spec
        if w.change_ratio <= 0 or site.hostile:
            return 0.0
        rng = random.Random(f"{self.seed}/{site.index}/{i}/changes")
        if rng.random() >= w.change_ratio or not w.change_means:
            return 0.0
        return 1.0 / (rng.choice(w.change_means) * math.exp(rng.uniform(math.log(0.5), math.log(2.0))))

    def _times(self, site: Site, i: int, until: float) -> list[float]:
        key = (site.index, i)
        got = self._changes.get(key)
        if got is None:
            rate = self.change_rate(site, i)
            got = self._changes[key] = ([], random.Random(f"{self.seed}/{site.index}/{i}/times"), rate)
        times, rng, rate = got
        if rate > 0:
            while not times or times[-1] <= until:
                times.append((times[-1] if times else 0.0) + rng.expovariate(rate))
        return times

    def version_at(self, site: Site, i: int, t: float) -> int:
        """Truth: the version of normal page i current at model time t (0 until its first change;
        each change makes the next). Pure: the same seed gives the same history."""
        return bisect_right(self._times(site, i, t), t)

    def changed_at(self, site: Site, i: int, version: int) -> float:
        """Model time at which `version` of page i began (0.0 for version 0)."""
        times = self._times(site, i, 0.0)
        if version <= 0 or not times:
            return 0.0
        while len(times) < version:
            self._times(site, i, times[-1])
        return times[version - 1]

    def page_of_url(self, url: str) -> tuple[Site, int] | None:
        """The normal page a canonical URL names, or None."""
        rest = url.split("://", 1)[-1]
        host, _, path = rest.partition("/")
        site = self.topology.site(host)
        if site is None or site.hostile:
            return None
        i = self.page_id(site, "/" + path)
        return None if i is None else (site, i)

    def version_of_url(self, url: str, t: float) -> int | None:
        """Truth for a URL: its page's version at model time t (None: not a normal page)."""
        p = self.page_of_url(url)
        return None if p is None else self.version_at(p[0], p[1], t)

    def validators(self, site: Site, i: int, version: int) -> tuple[str, str]:
        """(ETag, Last-Modified) of one version of a page."""
        etag = f'"{site.index:x}-{i:x}-{version}"'
        return etag, formatdate(LAB_EPOCH + math.floor(self.changed_at(site, i, version)), usegmt=True)

    def _render_version(self, site: Site, i: int, version: int) -> bytes:
        """Version `version` of page i: the page with a revision paragraph; links unchanged."""
        base = self.render_page(site, i)
        if version <= 0:
            return base
        rng = random.Random(f"{self.seed}/{site.index}/{i}/v{version}")
        note = " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 40)))
        para = f'<p class="content__revision">Revision {version}: {note}.</p>\n'.encode()
        k = base.find(b"</h1>\n")
        return base[: k + 6] + para + base[k + 6 :] if k >= 0 else base + para

    def _respond_changing(self, page: Page, now: float | None, inm: str | None, ims: str | None) -> Response:
        site = page.site
        assert site is not None
        v = self.version_at(site, page.page_id, now) if now is not None else 0
        etag, modified = self.validators(site, page.page_id, v)
        headers = [("ETag", etag), ("Last-Modified", modified)]
        if _not_modified(etag, LAB_EPOCH + math.floor(self.changed_at(site, page.page_id, v)), inm, ims):
            return Response(304, headers)
        return Response(200, [("Content-Type", HTML_UTF8), *headers], self.render_version(site, page.page_id, v))

    # --- requests ---------------------------------------------------------------------------
    def resolve(self, host: str | None, target: str, *, site: Site | None = None, now: float | None = None) -> Page:
        """Map (Host header, request target) to a Page; no body is built.

        `now` is the lab's model time (seconds since the server started); only the robots-503
        site depends on it. None: long after the start (what truth and checks assume).
        """
        if site is None:
            site = self.topology.site(host or "")
        if site is None:
            return Page(None, target, 404, "unknown-host", html=False)
        if "/." in target or "%" in target or "#" in target:
            target = _normalise_target(target)
        if site.kind == "never":
            return Page(site, target, 0, "never:hang", html=False)
        if target == "/robots.txt":
            if site.kind == "robots-503" and now is not None and now < self.spec.robots_unavailable_s:
                return Page(site, target, 503, "robots-503:robots-unavailable", html=False)
            return Page(site, target, 200, "robots", html=False)
        if site.hostile:
            if site.kind in ("subdomain-flood", "bombs"):
                return self._named_page(site, (host or site.host).lower().rsplit(":", 1)[0].rstrip("."), target)
            return self._hostile_page(site, target)
        if target == "/sitemap.xml" and self.site_info(site).sitemap:
            return Page(site, target, 200, "sitemap", html=False)
        i = self.page_id(site, target)
        if i is None:
            return Page(site, target, 404, "not-found", links=("/",))
        return Page(site, target, 200, "page", i, self.links(site, i))

    def respond(self, host: str | None, target: str, *, site: Site | None = None, now: float | None = None,
                if_none_match: str | None = None, if_modified_since: str | None = None) -> Response:
        """The response at model time `now`. On a changing web a page is served as its version
        current at `now`, with ETag and Last-Modified, and a conditional request it satisfies
        (If-None-Match, else If-Modified-Since; RFC 9110 13.2.2) is answered 304."""
        page = self.resolve(host, target, site=site, now=now)
        if page.kind == "page" and self.changing:
            return self._respond_changing(page, now, if_none_match, if_modified_since)
        return self.render(page)

    def render(self, page: Page) -> Response:
        kind = page.kind
        site = page.site
        if kind == "page":
            assert site is not None
            return Response(200, [("Content-Type", HTML_UTF8)], self.render_page(site, page.page_id))
        if kind == "robots":
            assert site is not None
            return Response(200, [("Content-Type", "text/plain")], self.robots_txt(site).encode())
        if kind == "sitemap":
            assert site is not None
            return Response(200, [("Content-Type", "application/xml")], self._sitemap(site))
        if kind in ("not-found", "unknown-host"):
            body = _small_html("Not found", f"<p>No page at {html.escape(page.target[:200])}.</p>", page.links)
            return Response(404, [("Content-Type", HTML_UTF8)], body)
        return self._render_hostile(page)

    def _render_page(self, site: Site, i: int) -> bytes:
        w = self.spec
        hrefs, rng = self._page_plan(site, i)
        info = self.site_info(site)
        # Log-normal around 18 KB; the last paragraph overshoots by up to ~2 KB, hence the margin.
        kb = min(w.page_kb_max - 2.5, max(w.page_kb_min, math.exp(rng.gauss(math.log(18), 0.6))))
        target = int(1024 * max(kb, w.page_kb_min))
        title = f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS)} {rng.choice(WORDS)} - {info.title}"
        nav_n = 1 + min(info.pages - 1, len(info.sections))
        parts = [
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
            f"<title>{title}</title>\n",
            f'<meta name="description" content="{info.title}: {" ".join(rng.choice(WORDS) for _ in range(8))}">\n',
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
            _STYLE.format(hue=site.index * 37 % 360),
            '</head>\n<body class="page">\n<header class="site-header"><div class="site-header__inner">'
            f'<a class="site-header__logo" href="{html.escape(hrefs[0])}">{info.title}</a>\n<nav class="site-nav"><ul class="site-nav__list">\n',
        ]
        nav = []
        for k, h in enumerate(hrefs[:nav_n]):
            label = "Home" if k == 0 else self.page_path(site, k).split("/")[1].capitalize()
            nav.append((h, label))
            parts.append(f'  <li class="site-nav__item"><a class="site-nav__link nav" href="{html.escape(h)}">{label}</a></li>\n')
        parts.append(f'</ul></nav></div></header>\n<div class="layout">\n<main class="content" role="main">\n<h1 class="content__title">{title}</h1>\n')
        body_links = hrefs[nav_n:-2]
        size = sum(map(len, parts))
        k = 0
        n_par = max(1, (target - size) // 700)
        per = max(1, math.ceil(len(body_links) / n_par))
        while size < target or k < len(body_links):
            p = self._paras[rng.randrange(len(self._paras))]
            links = body_links[k : k + per]
            k += len(links)
            extra = "".join(f' See <a href="{html.escape(h)}">{rng.choice(WORDS)} {rng.choice(WORDS)}</a>.' for h in links)
            # Real pages are mostly markup around the text (cards, meta lines, classes): that
            # markup is what makes HTML compress 4-5x, so the lab's pages carry it too.
            chunk = (
                f'<article class="post-card post-card--{info.sections[k % len(info.sections)]}">'
                f'<div class="post-card__body"><p class="post-card__text">{p}{extra}</p></div>\n'
                f'<div class="post-card__meta"><span class="post-card__date">2009-{1 + k % 12:02d}-{1 + k % 28:02d}</span> '
                f'<span class="post-card__tag">{info.sections[k % len(info.sections)]}</span> '
                f'<span class="post-card__comments">{k % 17} comments</span></div>\n'
                '<div class="post-card__actions"><button class="btn btn--like" type="button" aria-label="Like">Like</button> '
                '<button class="btn btn--share" type="button" data-network="weibo" aria-label="Share on Weibo">Weibo</button> '
                '<button class="btn btn--share" type="button" data-network="wechat" aria-label="Share on WeChat">WeChat</button></div></article>\n'
            )
            if rng.random() < 0.08:
                chunk = f'<h2 class="content__section">{rng.choice(WORDS).capitalize()} {rng.choice(WORDS)}</h2>\n' + chunk
            parts.append(chunk)
            size += len(chunk)
        parts.append('</main>\n<aside class="sidebar"><section class="widget"><h3 class="widget__title">Sections</h3><ul class="widget-list">\n')
        parts.extend(
            f'<li class="widget-list__item"><a class="widget-list__link" href="{html.escape(h)}">{label}</a></li>\n'
            for h, label in nav
        )
        parts.append('</ul></section></aside>\n</div>\n')
        parts.append(
            f'<footer class="site-footer"><p class="site-footer__text">&copy; 2009 {info.title}. <a href="{html.escape(hrefs[-2])}">Contact</a> '
            f'<a href="{html.escape(hrefs[-1])}">Back</a></p></footer>\n</body>\n</html>\n'
        )
        return "".join(parts).encode()

    def _sitemap(self, site: Site) -> bytes:
        urls = "".join(f"  <url><loc>{html.escape(self.url(site, self.page_path(site, i)))}</loc></url>\n" for i in range(self.pages(site)))
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{urls}</urlset>\n').encode()

    # --- hostile sites ----------------------------------------------------------------------
    def _hostile_page(self, site: Site, target: str) -> Page:
        kind = site.kind
        nf = Page(site, target, 404, "not-found", links=("/",))
        if kind == "redirect-loop":
            loc = {"/": "/loop/a", "/loop/a": "/loop/b", "/loop/b": site.base_url + "/loop/a"}.get(target)
            return Page(site, target, 302, "redirect-loop:redirect", location=loc, html=False) if loc else nf
        if kind == "redirect-chain":
            if target == "/":
                return Page(site, target, 302, "redirect-chain:redirect", location="/hop/1", html=False)
            m = re.fullmatch(r"/hop/(\d+)", target)
            if m and 1 <= int(m.group(1)) < CHAIN_LENGTH:
                k = int(m.group(1))
                loc = f"/hop/{k + 1}" if k + 1 < CHAIN_LENGTH else "/final"
                status = (301, 302, 303, 307, 308)[k % 5]
                return Page(site, target, status, "redirect-chain:redirect", location=loc, html=False)
            if target == "/final":
                return Page(site, target, 200, "redirect-chain:final", links=("/",))
            return nf
        if kind == "calendar":
            if target == "/":
                return Page(site, target, 200, "calendar:index", links=(f"/cal/{self.spec.calendar_start.replace('-', '/')}",))
            m = re.fullmatch(r"/cal/(\d{4})/(\d{2})(?:/(\d{2}))?", target)
            if not m:
                return nf
            y, mo = int(m.group(1)), int(m.group(2))
            if not (1 <= y <= 9999 and 1 <= mo <= 12):
                return nf
            prev = (y, mo - 1) if mo > 1 else (y - 1, 12)
            nxt = (y, mo + 1) if mo < 12 else (y + 1, 1)
            links = [f"/cal/{prev[0]:04d}/{prev[1]:02d}", f"/cal/{nxt[0]:04d}/{nxt[1]:02d}"]
            links = [x for x in links if "/0000/" not in x and "/10000/" not in x]
            if m.group(3) is None:
                links += [f"/cal/{y:04d}/{mo:02d}/{d:02d}" for d in (1, 8, 15, 22)]
            else:
                links.append(f"/cal/{y:04d}/{mo:02d}")
            return Page(site, target, 200, "calendar:month", links=tuple(links))
        if kind == "slow-drip":
            return Page(site, target, 200, "slow-drip:drip", html=False)
        if kind == "huge":
            return Page(site, target, 200, "huge:body", html=False) if target == "/" else nf
        if kind == "gzip-bomb":
            return Page(site, target, 200, "gzip-bomb:bomb", html=False) if target == "/" else nf
        if kind == "wrong-type":
            cases = {"/": ("index", True), "/binary.html": ("binary", False), "/document": ("octet-html", False), "/no-type": ("no-type", False)}
            if target not in cases:
                return nf
            case, is_html = cases[target]
            links = ("/binary.html", "/document", "/no-type") if case == "index" else ()
            return Page(site, target, 200, f"wrong-type:{case}", links=links, html=is_html)
        if kind in _STATUS_SITES:
            # An index at "/" linking to paths that answer with fixed statuses.
            cases = _STATUS_SITES[kind]
            if target != "/" and target not in cases:
                return nf
            links = tuple(cases) if target == "/" else ()
            status = 200 if target == "/" else cases[target]
            return Page(site, target, status, f"{kind}:{target.strip('/') or 'index'}", links=links, html=target == "/")
        if kind == "malformed":
            m = re.fullmatch(r"/m/(\d+)", target)
            k = 0 if target == "/" else (int(m.group(1)) if m and int(m.group(1)) < MALFORMED_PAGES else -1)
            if k < 0:
                return nf
            links = (f"/m/{(k + 1) % MALFORMED_PAGES}", f"/m/{(k * 3 + 2) % MALFORMED_PAGES}", "/")
            return Page(site, target, 200, "malformed:page", k, links=links)
        if kind == "bad-schemes":
            if target == "/":
                links = (
                    "javascript:alert('hi')", "JavaScript:void(0)", "mailto:someone@example.lab",
                    "data:text/html;base64,PGEgaHJlZj0iL3gxIj54PC9hPg==", "tel:+86-10-0000-0000",
                    "ftp://files.example.lab/pub/", "about:blank", "http://", "http://:80/no-host",
                    "  /ok/1  ", "/ok/2",
                )
                return Page(site, target, 200, "bad-schemes:index", links=links)
            if target in ("/ok/1", "/ok/2"):
                return Page(site, target, 200, "bad-schemes:ok", links=("/",))
            return nf
        if kind == "long-urls":
            if len(target) > LONG_URL_MAX:
                return Page(site, target, 414, "long-urls:too-long", html=False)
            if target == "/":
                return Page(site, target, 200, "long-urls:page", links=("/l/" + "a" * LONG_URL_START,))
            m = re.fullmatch(r"/l/([a-z]+)", target)
            if not m:
                return nf
            s = m.group(1)
            return Page(site, target, 200, "long-urls:page", links=(f"/l/{s}{s}", f"/l/{s}?q={'z' * len(s)}"))
        if kind == "gbk":
            if target == "/" or re.fullmatch(r"/gb/[1-4]\.html", target):
                k = 0 if target == "/" else int(target[4])
                links = ("/", f"/gb/{k % 4 + 1}.html", "/latin1.html", "/mislabel.html")
                return Page(site, target, 200, "gbk:gbk", k, links=links)
            if target == "/latin1.html":
                return Page(site, target, 200, "gbk:latin1", links=("/",))
            if target == "/mislabel.html":
                return Page(site, target, 200, "gbk:mislabel", links=("/",))
            return nf
        if kind == "session-trap":
            path, _, query = target.partition("?")
            if path not in SESSION_PAGES or not (query == "" or _SID_RE.fullmatch(query)):
                return nf
            return Page(site, target, 200, "session-trap:page", links=SESSION_PAGES + self.session_links(target), follow=SESSION_PAGES)
        if kind == "robots-503":
            rk = 0 if target == "/" else _int_in(r"/p/(\d+)\.html", target, 1, ROBOTS_503_PAGES)
            if rk is not None:
                # Home, a binary tree over the 20 pages, the next page; "/" also links /private/.
                kids = tuple(f"/p/{c}.html" for c in (2 * rk + 1, 2 * rk + 2, rk + 1) if 1 <= c < ROBOTS_503_PAGES)
                extra = ("/private/1.html",) if rk == 0 else ()
                return Page(site, target, 200, "robots-503:page", rk, links=("/",) + tuple(dict.fromkeys(kids)) + extra)
            if target == "/private/1.html":
                return Page(site, target, 200, "robots-503:private", links=("/",))
            return nf
        if kind == "retry-forever":
            if target == "/":
                return Page(site, target, 200, "retry-forever:index", links=("/wait",) + RETRY_PAGES)
            if target == "/wait":
                return Page(site, target, 429, "retry-forever:wait", html=False)
            if target in RETRY_PAGES:
                return Page(site, target, 200, "retry-forever:page", links=("/", "/wait") + RETRY_PAGES)
            return nf
        if kind == "length-lie":
            if target == "/":
                return Page(site, target, 200, "length-lie:index", links=("/liar.html",))
            if target == "/liar.html":
                kept = ("/kept.html",) if self.spec.length_lie_bytes >= len(_LIAR_HEAD) else ()
                return Page(site, target, 200, "length-lie:liar", links=("/kept.html",) + LIAR_BEYOND, follow=kept)
            if target == "/kept.html" or target in LIAR_BEYOND:
                return Page(site, target, 200, "length-lie:page", links=("/",))
            return nf
        if kind == "many-links":
            if target == "/":
                return Page(site, target, 200, "many-links:index", links=self.many_links(), follow=MANY_REAL)
            if target in MANY_REAL:
                return Page(site, target, 200, "many-links:page", links=("/",) + MANY_REAL)
            return nf
        if kind == "meta-robots":
            meta = META_PAGES.get(target)
            if meta is None:
                return nf
            return Page(site, target, 200, f"meta-robots:{meta[0]}", links=meta[1], follow=meta[2],
                        refresh="/refreshed" if meta[0] == "refresh" else None, noindex=meta[0] == "noindex")
        if kind == "shift-jis":
            if target == "/":
                return Page(site, target, 200, "shift-jis:index", links=SJIS_LINKS, encoding="shift_jis")
            if target in (SJIS_QUERY_TARGET, SJIS_QUERY_RAW, SJIS_PATH_TARGET):
                return Page(site, target, 200, "shift-jis:page", links=("/",), encoding="shift_jis")
            return nf
        if kind == "two-origins":
            # The real-docs finding (issue 25): absolute links to the live origin (the site's
            # http port) and to https://host/ (port 443: nothing listens). The closed origin's
            # robots.txt never answers; the live pages must all be crawled all the same.
            k = 0 if target == "/" else _int_in(r"/o/(\d+)\.html", target, 1, TWO_ORIGIN_PAGES)
            if k is None:
                return nf
            kids = [c for c in (2 * k + 1, 2 * k + 2) if c < TWO_ORIGIN_PAGES]
            links = tuple(x for c in kids for x in (f"{site.base_url}/o/{c}.html", f"https://{site.host}/o/{c}.html"))
            return Page(site, target, 200, "two-origins:page", k, links=links)
        if kind == "sitemaps":
            return self._sitemaps_page(site, target, nf)
        if kind == "sitemap-hostile":
            return self._sitemap_hostile_page(site, target, nf)
        if kind == "dead-names":
            # Links to names that exist in no hosts file and no DNS: given up at once (DNS), not
            # retried as "robots.txt unreachable" for an hour.
            if target != "/":
                return nf
            return Page(site, target, 200, "dead-names:index", links=("/",) + self.dead_names(site))
        if kind == "repeat-block":
            # A relative link one level deeper on every page, its segments cycling a/b/c/d:
            # /a/b/c/d/a/b/c/d/... (each directory also has a leaf page).
            segs = [x for x in target.split("/") if x]
            leaf = bool(segs) and segs[-1] == "leaf.html"
            dirs = segs[:-1] if leaf else segs
            if len(dirs) > REPEAT_MAX_DEPTH or any(x != REPEAT_CYCLE[i % 4] for i, x in enumerate(dirs)) or (target != "/" and not target.endswith("/") and not leaf):
                return nf
            if leaf:
                return Page(site, target, 200, "repeat-block:leaf", links=("./",))
            nxt = REPEAT_CYCLE[len(dirs) % 4]
            return Page(site, target, 200, "repeat-block:dir", links=(f"{nxt}/", "leaf.html"))
        raise AssertionError(f"unhandled hostile kind {kind}")  # pragma: no cover

    # The sitemaps site: pages reachable only from its sitemaps (robots.txt -> an index -> a
    # gzip'd sitemap with lastmod and changefreq, a plain one, one in a subdirectory).
    def _sitemaps_page(self, site: Site, target: str, nf: Page) -> Page:
        if target == "/":
            return Page(site, target, 200, "sitemaps:page", links=("/linked.html",))
        if target in ("/linked.html", "/other/b.html", "/private/p.html", "/docs/a.html") or target in SITEMAP_ONLY:
            return Page(site, target, 200, "sitemaps:page", links=("/",))
        if target in ("/sitemap-index.xml", "/sitemap-pages.xml.gz", "/sitemap-more.xml", "/docs/sitemap.xml"):
            return Page(site, target, 200, "sitemaps:" + target, html=False)
        return nf

    def sitemap_file(self, site: Site, target: str) -> tuple[str, bytes]:
        """(Content-Type, body) of one of the sitemaps site's sitemap files."""
        b = site.base_url
        if target == "/sitemap-index.xml":
            return "application/xml", _sitemap_xml("sitemapindex", "sitemap", [
                (f"{b}/sitemap-pages.xml.gz", "2024-03-01T12:00:00+00:00", None),
                (f"{b}/sitemap-more.xml", "2024-02-01", None),
                (f"{b}/docs/sitemap.xml", None, None),
                ("http://www.example.invalid/sitemap.xml", None, None),  # another site: refused
            ])
        if target == "/sitemap-pages.xml.gz":
            rows = [(f"{b}{p}", SITEMAP_LASTMOD[k % len(SITEMAP_LASTMOD)], CHANGEFREQS_LAB[k % len(CHANGEFREQS_LAB)])
                    for k, p in enumerate(SITEMAP_ONLY[:10])]
            rows.append((f"{b}/private/p.html", None, None))  # robots.txt disallows it: never fetched
            rows.append(("http://www.example.invalid/x.html", None, None))  # another host: the location rule
            return "application/x-gzip", gzip.compress(_sitemap_xml("urlset", "url", rows), mtime=0)
        if target == "/sitemap-more.xml":
            return "text/xml", _sitemap_xml("urlset", "url", [(f"{b}{p}", None, None) for p in SITEMAP_ONLY[10:]])
        # /docs/sitemap.xml: the location rule keeps /docs/a.html, refuses /other/b.html.
        return "application/xml", _sitemap_xml("urlset", "url", [(f"{b}/docs/a.html", None, "never"), (f"{b}/other/b.html", None, None)])

    def sitemaps_truth(self, site: Site) -> dict[str, int]:
        """What a crawl of the sitemaps site's "/" reaches with sitemaps followed: path -> depth."""
        out = {"/": 0, "/linked.html": 1, "/sitemap-index.xml": 0, "/sitemap-pages.xml.gz": 1, "/sitemap-more.xml": 1,
               "/docs/sitemap.xml": 1, "/docs/a.html": 2}
        out.update(dict.fromkeys(SITEMAP_ONLY, 2))
        return out

    # The sitemap-hostile site: robots.txt lists a gzip bomb, an index loop, an index of 50,000
    # sitemaps of 50,000 URLs each, a malformed sitemap and, last, a good one.
    def _sitemap_hostile_page(self, site: Site, target: str, nf: Page) -> Page:
        if target in ("/", "/good.html", "/bomb/first.html", "/mal/1.html", "/mal/2.html", "/loop/page.html"):
            return Page(site, target, 200, "sitemap-hostile:page", links=("/",) if target != "/" else ())
        if target in HOSTILE_SITEMAPS or target == "/loop-b.xml":
            return Page(site, target, 200, "sitemap-hostile:" + target, html=False)
        i = _int_in(r"/n/(\d+)\.xml", target, 0, NESTED_FANOUT - 1)
        if i is not None:
            return Page(site, target, 200, "sitemap-hostile:nested-child", i, html=False)
        if _NESTED_PAGE.fullmatch(target):
            return Page(site, target, 200, "sitemap-hostile:page", links=("/",))
        return nf

    def sitemap_hostile_file(self, site: Site, page: Page) -> tuple[str, bytes]:
        b, t = site.base_url, page.target
        if t == "/bomb.xml.gz":
            return "application/x-gzip", self.sitemap_bomb(b)
        if t == "/loop-a.xml":
            return "application/xml", _sitemap_xml("sitemapindex", "sitemap", [(f"{b}/loop-b.xml", None, None)])
        if t == "/loop-b.xml":
            return "application/xml", _sitemap_xml("sitemapindex", "sitemap", [(f"{b}/loop-a.xml", None, None),
                                                                               (f"{b}/loop/page.html", None, None)])
        if t == "/nested.xml":
            return "application/xml", _sitemap_xml("sitemapindex", "sitemap", [(f"{b}/n/{i}.xml", None, None) for i in range(NESTED_FANOUT)])
        if t == "/malformed.xml":
            body = _sitemap_xml("urlset", "url", [(f"{b}/mal/1.html", None, None), (f"{b}/mal/2.html", None, None)])
            return "application/xml", body.replace(b"</urlset>", b"<url><loc>" + b.encode() + b"/mal/3.html</oops>")
        if t == "/good.xml":
            return "application/xml", _sitemap_xml("urlset", "url", [(f"{b}/good.html", None, "daily")])
        i = page.page_id  # /n/<i>.xml: a urlset of 50,000 URLs
        return "application/xml", _sitemap_xml("urlset", "url", [(f"{b}/n/{i}/{j}.html", None, None) for j in range(NESTED_FANOUT)])

    def sitemap_bomb(self, base: str) -> bytes:
        """A gzip'd sitemap of one entry (/bomb/first.html) then `gzip_bomb_mb` MiB of spaces."""
        if self._sitemap_bomb is None:
            head = _sitemap_xml("urlset", "url", [(f"{base}/bomb/first.html", None, None)]).replace(b"</urlset>", b"")
            self._sitemap_bomb = _gzip_repeat(head, b" " * (1 << 20), int(self.spec.gzip_bomb_mb), b"</urlset>\n")
        return self._sitemap_bomb

    def dead_names(self, site: Site) -> tuple[str, ...]:
        """The dead-names site's links: DEAD_NAMES hosts under a name no resolver knows."""
        return tuple(f"http://dead{k}.{site.host}.invalid/" for k in range(DEAD_NAMES))

    def _named_page(self, site: Site, host: str, target: str) -> Page:
        """A page of a site that answers on many names (topology.SUBDOMAIN_KINDS)."""
        nf = Page(site, target, 404, "not-found", links=("/",))
        names = self.topology.subdomains(site)
        if site.kind == "bombs":
            if host == site.host:
                return Page(site, target, 200, "bombs:index", links=tuple(self._name_url(site, n) + "/" for n in names)) if target == "/" else nf
            label = host.partition(".")[0]
            return Page(site, target, 200, f"bombs:{label}", html=False) if target == "/" and label in BOMB_LABELS else nf
        # subdomain-flood: every name's "/" links ten other names (the next one, so all are
        # reachable, and nine drawn from the seed) and its own /about.html.
        if host == site.host:
            return Page(site, target, 200, "subdomain-flood:index", links=tuple(self._name_url(site, n) + "/" for n in names[:10])) if target == "/" else nf
        label = host.partition(".")[0]
        if not re.fullmatch(r"n\d{4}", label) or int(label[1:]) >= len(names):
            return nf
        if target == "/about.html":
            return Page(site, target, 200, "subdomain-flood:about", links=("/",))
        if target != "/":
            return nf
        k = int(label[1:])
        rng = random.Random(f"{self.seed}/flood/{k}")
        picks = [(k + 1) % len(names)] + [rng.randrange(len(names)) for _ in range(9)]
        return Page(site, target, 200, "subdomain-flood:page", links=("/about.html",) + tuple(self._name_url(site, names[j]) + "/" for j in picks))

    @staticmethod
    def _name_url(site: Site, name: str) -> str:
        return "http://" + name + site.base_url.removeprefix("http://" + site.host)

    def bomb(self, label: str) -> tuple[bytes, str]:
        """(body, Content-Encoding) of one of the bombs site's names (topology.BOMB_LABELS): decoded,
        each is far over the fetcher's caps, and each is built to cost an HTML parser the most of a
        kind: bare <p> elements, text without a tag, an astral character (4 bytes a character once
        decoded to a Python str), deep nesting, links, one huge attribute."""
        if label not in self._bombs:
            mib = 1 << 20
            head = b"<!DOCTYPE html><html><head><title>Bomb</title></head><body>"
            para = (" ".join(self._paras[:8]) + " ").encode()
            blocks = {
                # A link every ~1,000 bytes: a parser that skips what holds no link must parse these.
                "p": (b"<p>" * 330 + b'<a href="/p">p</a>') * (mib // 1008), "text": (para * (mib // len(para) + 1))[:mib],
                "astral": ("\U0001F4A3" + (para.decode() * (mib // len(para) + 1))[: mib - 8]).encode(),
                "nested": (b"<div>" * 200 + b'<a href="/d">d</a>') * (mib // 1018), "attr": b"x" * mib,
            }
            n = max(1, int(self.spec.gzip_bomb_mb) // 16)  # 64 MiB decoded by default: past any cap
            kind, _, enc = label.partition("-")
            if kind == "links":
                links = "".join(f'<a href="/l/{i}">{i}</a>' for i in range(int(self.spec.huge_mb * mib) // 24))
                self._bombs[label] = (gzip.compress(head + links.encode(), 6, mtime=0), "gzip")
            elif enc == "plain":
                self._bombs[label] = ((head + blocks[kind] * (int(self.spec.huge_mb) + 1))[: int(self.spec.huge_mb * mib)], "")
            else:
                first = head + (b'<a href="/x" title="' if kind == "attr" else b"")
                self._bombs[label] = (_repeat_stream(first, blocks[kind], n, enc), enc)
        return self._bombs[label]

    def session_links(self, target: str) -> tuple[str, ...]:
        """The session-trap page's fresh links: its own path, `sid` derived from (seed, target, k)."""
        path = target.partition("?")[0]
        base = int.from_bytes(hashlib.blake2b(f"{self.seed}/{target}".encode(), digest_size=8).digest(), "big")
        # An odd multiplier is a bijection mod 2**64: the sids of one page are all distinct.
        return tuple(f"{path}?sid={(base + k * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF:016x}" for k in range(self.spec.session_trap_links))

    def many_links(self) -> tuple[str, ...]:
        """The many-links page's hrefs: the real pages first, then `many_links` paths that 404."""
        if self._many is None:
            self._many = MANY_REAL + tuple(f"/gone/{k}.html" for k in range(self.spec.many_links))
        return self._many

    def _render_hostile(self, page: Page) -> Response:
        site = page.site
        assert site is not None
        kind, _, case = page.kind.partition(":")
        if kind == "never":
            return Response(0, [], mode="never")
        if case == "redirect":
            body = _small_html("Moved", f'<p>Moved to <a href="{html.escape(page.location or "")}">here</a>.</p>', ())
            return Response(page.status, [("Location", page.location or "/"), ("Content-Type", HTML_UTF8)], body)
        if kind == "slow-drip":
            filler = (" ".join(self._paras[:40])).encode()
            body = b"<!DOCTYPE html><html><head><title>Slow</title></head><body><p>" + filler
            tail = b"</p></body></html>\n"
            keep = max(0, self.spec.drip_total_bytes - len(tail))
            body = body[:keep].ljust(keep, b" ") + tail
            return Response(200, [("Content-Type", HTML_UTF8)], body, mode="drip")
        if kind == "huge":
            return Response(200, [("Content-Type", HTML_UTF8)], self.huge_body())
        if kind == "gzip-bomb":
            return Response(200, [("Content-Type", HTML_UTF8), ("Content-Encoding", "gzip")], self.gzip_bomb())
        if kind == "wrong-type":
            if case == "binary":
                rng = random.Random(f"{self.seed}/binary")
                return Response(200, [("Content-Type", HTML_UTF8)], b"\x89PNG\r\n\x1a\n" + rng.randbytes(20000))
            body = _small_html("Wrong type", f"<p>{self._paras[1]}</p>", page.links)
            if case == "octet-html":
                return Response(200, [("Content-Type", "application/octet-stream")], body)
            if case == "no-type":
                return Response(200, [], body)
            return Response(200, [("Content-Type", HTML_UTF8)], body)
        if kind == "throttle":
            headers = [("Content-Type", HTML_UTF8)]
            if case == "busy":
                headers.append(("Retry-After", str(max(1, math.ceil(self.scaled(10))))))
            elif case == "unavailable":
                headers.append(("Retry-After", str(max(1, math.ceil(self.scaled(120))))))
            elif case == "maintenance":
                headers.append(("Retry-After", "Wed, 21 Oct 2099 07:28:00 GMT"))
            return Response(page.status, headers, _small_html(REASONS.get(page.status, "Throttle"), "<p>Slow down.</p>", page.links))
        if kind == "server-error":
            if case == "empty-500":
                return Response(500, [("Content-Type", HTML_UTF8)], b"")
            return Response(page.status, [("Content-Type", HTML_UTF8)], _small_html("Error", "<p>Something broke.</p>", page.links))
        if kind == "malformed":
            return Response(200, [("Content-Type", "text/html")], self._malformed(page))
        if kind == "gbk":
            return self._gbk(page)
        if kind == "session-trap":
            return self._session_trap(page)
        if kind == "robots-503":
            if case == "robots-unavailable":
                return Response(503, [("Content-Type", "text/plain")], b"robots.txt is not available yet\n")
            return self._plain(page, "Flaky robots")
        if kind == "retry-forever":
            if case == "wait":
                ra = str(max(1, math.ceil(self.scaled(self.spec.retry_forever_s))))
                body = _small_html("Too Many Requests", "<p>Come back much later.</p>", ())
                return Response(429, [("Content-Type", HTML_UTF8), ("Retry-After", ra)], body)
            return self._plain(page, "Retry forever")
        if kind == "length-lie":
            if case == "liar":
                return self._liar(page)
            return self._plain(page, "Length lie")
        if kind == "many-links":
            if case == "index":
                return Response(200, [("Content-Type", HTML_UTF8)], self.many_links_body())
            return self._plain(page, "Many links")
        if kind == "meta-robots":
            return self._meta_robots(page)
        if kind == "bombs":
            if case == "index":
                return self._plain(page, "Bombs")
            body, enc = self.bomb(case)
            return Response(200, [("Content-Type", HTML_UTF8)] + ([("Content-Encoding", enc)] if enc else []), body)
        if kind in ("subdomain-flood", "repeat-block"):
            return self._plain(page, kind.capitalize())
        if kind == "shift-jis":
            return self._shift_jis(page)
        if kind in ("two-origins", "dead-names"):
            return self._plain(page, kind.capitalize())
        if kind in ("sitemaps", "sitemap-hostile") and not page.html:
            ctype, body = self.sitemap_file(site, page.target) if kind == "sitemaps" else self.sitemap_hostile_file(site, page)
            return Response(200, [("Content-Type", ctype)], body)
        if kind in ("sitemaps", "sitemap-hostile") and page.status == 200:
            return self._plain(page, "Sitemaps")
        if kind in ("redirect-chain", "calendar", "bad-schemes", "long-urls") or page.status == 404:
            if page.status == 414:
                return Response(414, [("Content-Type", HTML_UTF8)], _small_html("Too long", "<p>URI too long.</p>", ()))
            head = f"<p>{self._paras[len(page.target) % len(self._paras)]}</p>"
            return Response(page.status, [("Content-Type", HTML_UTF8)], _small_html(kind.capitalize(), head, page.links))
        raise AssertionError(f"unhandled hostile page {page.kind}")  # pragma: no cover

    def huge_body(self) -> bytes:
        if self._huge is None:
            size = int(self.spec.huge_mb * 1024 * 1024)
            unit = ("<p>" + " ".join(self._paras[:8]) + "</p>\n").encode()
            head = b"<!DOCTYPE html><html><head><title>Huge</title></head><body>\n"
            body = head + unit * (size // len(unit) + 1)
            self._huge = body[: size - 15] + b"</body></html>\n"
        return self._huge

    def gzip_bomb(self) -> bytes:
        """A gzip stream of `gzip_bomb_mb` MiB (mostly zeros after a small HTML head)."""
        if self._bomb is None:
            head = b"<!DOCTYPE html><html><head><title>Bomb</title></head><body><p>"
            self._bomb = _gzip_repeat(head, b"\0" * (1 << 20), int(self.spec.gzip_bomb_mb))
        return self._bomb

    def _plain(self, page: Page, title: str) -> Response:
        """A small ordinary page of a hostile site: a paragraph and its links."""
        p = self._paras[(len(page.target) + max(page.page_id, 0)) % len(self._paras)]
        return Response(page.status, [("Content-Type", HTML_UTF8)], _small_html(title, f"<p>{p}</p>", page.links))

    def _session_trap(self, page: Page) -> Response:
        # The real pages first, then the fresh session links, in the order of page.links.
        real = "".join(f'<li><a href="{h}">{h}</a></li>' for h in page.links[: len(SESSION_PAGES)])
        fresh = "".join(f'<a href="{h}">s{k}</a>\n' for k, h in enumerate(page.links[len(SESSION_PAGES) :]))
        body = (
            '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Shop</title></head>'
            f'<body><h1>Shop</h1><ul>{real}</ul><p>{self._paras[3]}</p><div class="sessions">\n{fresh}</div></body></html>\n'
        )
        return Response(200, [("Content-Type", HTML_UTF8)], body.encode())

    def _liar(self, page: Page) -> Response:
        beyond = page.links[1:]
        paras = "".join(f"<p>{self._paras[k]}</p>\n" for k in range(40))
        rest = "".join(f'<p><a href="{h}">beyond {n}</a></p>\n' for n, h in enumerate(beyond, 1))
        body = f"{_LIAR_HEAD}kept</a></p>\n{paras}{rest}</body></html>\n".encode()
        return Response(200, [("Content-Type", HTML_UTF8)], body, declared_length=self.spec.length_lie_bytes)

    def many_links_body(self) -> bytes:
        if self._many_body is None:
            links = self.many_links()
            real = "".join(f'<li><a href="{h}">real {n}</a></li>\n' for n, h in enumerate(links[: len(MANY_REAL)], 1))
            gone = "".join(f'<a href="{h}">{n}</a>\n' for n, h in enumerate(links[len(MANY_REAL) :]))
            self._many_body = (
                '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Many links</title></head>'
                f"<body><h1>Many links</h1><ul>\n{real}</ul>\n<div>\n{gone}</div></body></html>\n"
            ).encode()
        return self._many_body

    def _meta_robots(self, page: Page) -> Response:
        case = page.kind.partition(":")[2]
        meta = _META_TAGS.get(case, "")
        anchors = "".join(
            f'<li><a href="{h}"{_rel_attr(h) if case == "rel" else ""}>{h}</a></li>' for h in page.links
        )
        body = (
            f'<!DOCTYPE html><html><head><meta charset="utf-8">{meta}<title>Meta robots: {case}</title></head>'
            f"<body><h1>{case}</h1><p>{self._paras[len(page.target) % len(self._paras)]}</p><ul>{anchors}</ul></body></html>\n"
        )
        return Response(200, [("Content-Type", HTML_UTF8)], body.encode())

    def _shift_jis(self, page: Page) -> Response:
        rng = random.Random(f"{self.seed}/shift-jis/{page.target}")
        text = "".join(rng.choice(_KANA_SENTENCES) for _ in range(40))
        if page.kind == "shift-jis:index":
            title = "日本語のページ"
            anchors = '<li><a href="/search?q=日本">日本を検索</a></li><li><a href="/日本.html">日本について</a></li>'
        else:
            title = "検索結果：日本" if page.target.startswith("/search") else "日本について"
            anchors = '<li><a href="/">ホーム</a></li>'
        body = (
            f'<!DOCTYPE html><html><head><meta charset="Shift_JIS"><title>{title}</title></head>'
            f"<body><h1>{title}</h1><p>{text}</p><ul>{anchors}</ul></body></html>\n"
        )
        return Response(200, [("Content-Type", "text/html; charset=Shift_JIS")], body.encode("shift_jis"))

    def _malformed(self, page: Page) -> bytes:
        a, b, home = page.links
        p = self._paras[page.page_id % len(self._paras)]
        # Unclosed tags, stray '<', mis-nesting, an unterminated comment at the end; the three
        # links stay well-formed enough that every HTML5 parser finds the same hrefs.
        return (
            f"<html><HEAD><title>Malformed {page.page_id}</title></HEAD><body><div><p>{p}<b><i>bold italic</b></i>"
            f"<table><tr><td>cell<td>cell2<p>3 < 4 && 5 > 2</table>"
            f"<A HREF={a}>next page</A> <p><a href='{b}' class=x class=y>other</a>"
            f"<ul><li>one<li>two <a href=\"{home}\">home</a></ul></div></div></span>"
            f"<script>document.write('<a href=\"/not-a-link\">')</script>"
            f"<!-- unterminated comment <a href=\"/commented-out\">x</a>"
        ).encode()

    def _gbk(self, page: Page) -> Response:
        case = page.kind.partition(":")[2]
        links = "".join(f'<a href="{html.escape(h)}">链接 {n}</a> ' for n, h in enumerate(page.links))
        if case == "latin1":
            # Link text that latin-1 can encode (the Chinese "链接" cannot).
            links = "".join(f'<a href="{html.escape(h)}">lien {n}</a> ' for n, h in enumerate(page.links))
            body = f'<html><head><meta charset="iso-8859-1"><title>Caf\u00e9</title></head><body><p>Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e na\u00efve.</p>{links}</body></html>'
            return Response(200, [("Content-Type", "text/html")], body.encode("iso-8859-1"))
        rng = random.Random(f"{self.seed}/gbk/{page.page_id}/{case}")
        text = "".join(rng.choice(HANZI) for _ in range(3000))
        charset = "gbk" if case == "gbk" else "utf-8"
        body = f'<html><head><meta charset="{charset}"><title>中文网页 {page.page_id}</title></head><body><p>{text}</p><p>{links}</p></body></html>'
        return Response(200, [("Content-Type", f"text/html; charset={charset}")], body.encode("gbk"))


REPEAT_CYCLE = ("a", "b", "c", "d")
REPEAT_MAX_DEPTH = 64  # the repeat-block site's deepest directory
SESSION_PAGES = ("/", "/shop/1.html", "/shop/2.html", "/shop/3.html", "/shop/4.html")
_SID_RE = re.compile(r"sid=[0-9A-Za-z]+")
ROBOTS_503_PAGES = 20  # "/" and /p/1.html .. /p/19.html
RETRY_PAGES = ("/a.html", "/b.html", "/c.html")
# The first bytes of /liar.html, up to the end of the one link a crawler honouring the declared
# Content-Length can see; everything after it (links to LIAR_BEYOND) lies past that length.
_LIAR_HEAD = '<!DOCTYPE html><html><head><title>Liar</title></head><body><p><a href="/kept.html">'
LIAR_BEYOND = tuple(f"/beyond/{k}.html" for k in range(1, 6))
MANY_REAL = tuple(f"/real/{k}.html" for k in range(1, 6))
# meta-robots: path -> (case, links in document order, what a correct crawler follows or None: all)
META_PAGES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...] | None]] = {
    "/": ("index", ("/refresh", "/nofollow.html", "/noindex.html", "/rel.html"), None),
    "/refresh": ("refresh", (), None),
    "/refreshed": ("page", ("/",), None),
    "/nofollow.html": ("nofollow", ("/hidden/1.html", "/hidden/2.html"), ()),
    "/hidden/1.html": ("hidden", ("/",), None),
    "/hidden/2.html": ("hidden", ("/",), None),
    "/noindex.html": ("noindex", ("/", "/noindex/next.html"), None),
    "/noindex/next.html": ("page", ("/",), None),
    "/rel.html": ("rel", ("/rel/followed.html", "/rel/skipped.html", "/rel/skipped-too.html", "/rel/both.html"), ("/rel/followed.html",)),
    "/rel/followed.html": ("page", ("/", "/rel/both.html"), None),
    "/rel/skipped.html": ("hidden", ("/",), None),
    "/rel/skipped-too.html": ("hidden", ("/",), None),
    "/rel/both.html": ("page", ("/",), None),
}
_META_RELS = {"/rel/skipped.html": "nofollow", "/rel/skipped-too.html": "noopener NoFollow", "/rel/both.html": "nofollow"}
_META_TAGS = {
    "refresh": '<meta http-equiv="refresh" content="0; url=/refreshed">',
    "nofollow": '<meta name="robots" content="nofollow">',
    "noindex": '<meta name="robots" content="noindex">',
}
# shift-jis: a link whose query is Japanese (served only Shift_JIS-encoded, as a browser sends
# it from a Shift_JIS page) and one whose path is (paths are always UTF-8 encoded).
SJIS_LINKS = ("/search?q=日本", "/日本.html")
SJIS_QUERY_TARGET = "/search?q=%93%FA%96%7B"
SJIS_QUERY_RAW = "/search?q=%93%FA%96{"  # the same, with the ASCII second byte 0x7B left as "{"
SJIS_QUERY_UTF8 = "/search?q=%E6%97%A5%E6%9C%AC"  # the UTF-8 form: 404
SJIS_PATH_TARGET = "/%E6%97%A5%E6%9C%AC.html"
_KANA_SENTENCES = (
    "これは日本語のページです。", "東京と大阪は大きな都市です。", "今日は天気がいいですね。",
    "図書館で本を読みました。", "新しい駅が来年できます。", "お茶とご飯をください。",
    "山と川の写真を見ました。", "研究の結果を報告します。",
)


def _rel_attr(href: str) -> str:
    rel = _META_RELS.get(href)
    return f' rel="{rel}"' if rel else ""


def _int_in(pattern: str, target: str, lo: int, hi: int) -> int | None:
    m = re.fullmatch(pattern, target)
    return int(m.group(1)) if m and lo <= int(m.group(1)) < hi else None


_STATUS_SITES = {
    "throttle": {"/busy": 429, "/unavailable": 503, "/maintenance": 503},
    "server-error": {"/error": 500, "/empty-500": 500, "/bad-gateway": 502},
}

_STYLE = """<style>
body.page{{margin:0;font-family:Helvetica,Arial,sans-serif;color:#222;background:#fafafa}}
.site-header{{background:hsl({hue},45%,30%);color:#fff}}.site-header__inner{{max-width:960px;margin:0 auto;padding:12px}}
.site-header__logo{{color:#fff;font-weight:bold;text-decoration:none}}.site-nav__list{{list-style:none;margin:0;padding:0}}
.site-nav__item{{display:inline-block;margin-right:12px}}.site-nav__link{{color:#fff;text-decoration:none}}
.layout{{max-width:960px;margin:0 auto;display:flex}}.content{{flex:3;padding:12px}}.sidebar{{flex:1;padding:12px}}
.post-card{{border-bottom:1px solid #ddd;padding:8px 0}}.post-card__meta{{font-size:12px;color:#777}}
.widget-list{{list-style:none;padding:0}}.site-footer{{text-align:center;font-size:12px;color:#777}}
</style>
"""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3f}".rstrip("0")


# Word frequencies in real text follow Zipf's law (the list above is roughly in frequency
# order); uniform choice would make the lab's prose less compressible than any real page's.
_ZIPF_CUM = list(itertools.accumulate(1.0 / (r + 1) for r in range(len(WORDS))))


def _paragraph(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(3, 8)):
        words = rng.choices(WORDS, cum_weights=_ZIPF_CUM, k=rng.randint(6, 18))
        sentences.append(" ".join(words).capitalize() + rng.choice(".....?!"))
    return " ".join(sentences)


def _relative(here: str, path: str) -> str:
    """A relative reference from page `here` to `path`; lab paths are at most one directory deep."""
    d = here.rsplit("/", 1)[0] + "/"
    if d == "/":
        return path[1:] or "./"
    if path.startswith(d):
        return path[len(d) :] or "./"
    return "../" + path[1:]


def _normalise_target(target: str) -> str:
    from wancrawl.urls import InvalidUrl, canonicalize

    try:
        u = canonicalize("http://x" + (target if target.startswith("/") else "/" + target))
    except InvalidUrl:
        return target
    return u[len("http://x") :]


def _repeat_stream(head: bytes, block: bytes, n: int, enc: str) -> bytes:
    """A gzip or zlib ("deflate") stream of head + n * block, built by compressing the block once:
    after a full flush the compressor forgets its window, so each copy compresses the same."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    comp = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.flush(zlib.Z_FINISH)
    if enc == "gzip":
        crc = zlib.crc32(head)
        for _ in range(n):
            crc = zlib.crc32(block, crc)
        size = (len(head) + n * len(block)) & 0xFFFFFFFF
        return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + first + comp * n + tail + crc.to_bytes(4, "little") + size.to_bytes(4, "little")
    adler = zlib.adler32(head)
    for _ in range(n):
        adler = zlib.adler32(block, adler)
    return b"\x78\xda" + first + comp * n + tail + adler.to_bytes(4, "big")


def _gzip_repeat(head: bytes, block: bytes, n: int, tail: bytes = b"") -> bytes:
    """gzip(head + block * n + tail), built without compressing n blocks: after a full flush the
    compressor forgets its window, so every further block compresses to the very same bytes."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    one = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    last = c.compress(tail) + c.flush(zlib.Z_FINISH)
    crc = zlib.crc32(head)
    for _ in range(n):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    size = (len(head) + n * len(block) + len(tail)) & 0xFFFFFFFF
    gz_head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return gz_head + first + one * n + last + crc.to_bytes(4, "little") + size.to_bytes(4, "little")


SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
SITEMAP_ONLY = tuple(f"/only/{k}.html" for k in range(1, 16))  # linked from no page: sitemaps only
SITEMAP_LASTMOD = ("2024-03-01", "2024-02-29T23:59:59Z", "2023-12-31T08:00:00+08:00")
CHANGEFREQS_LAB = ("hourly", "daily", "weekly", "monthly", "never")
HOSTILE_SITEMAPS = ("/bomb.xml.gz", "/loop-a.xml", "/nested.xml", "/malformed.xml", "/good.xml")
NESTED_FANOUT = 50_000
_NESTED_PAGE = re.compile(r"/n/\d+/\d+\.html")


def _sitemap_xml(root: str, item: str, rows: list[tuple[str, str | None, str | None]]) -> bytes:
    """A sitemap (root urlset, item url) or an index (sitemapindex, sitemap): (loc, lastmod, changefreq) rows."""
    parts = [f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{SITEMAP_NS}">\n']
    for loc, lastmod, freq in rows:
        extra = (f"<lastmod>{lastmod}</lastmod>" if lastmod else "") + (f"<changefreq>{freq}</changefreq>" if freq else "")
        parts.append(f"  <{item}><loc>{html.escape(loc)}</loc>{extra}</{item}>\n")
    parts.append(f"</{root}>\n")
    return "".join(parts).encode()


def _small_html(title: str, inner: str, links: tuple[str, ...]) -> bytes:
    a = "".join(f'<li><a href="{html.escape(h)}">{html.escape(h[:60])}</a></li>' for h in links)
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><h1>{title}</h1>{inner}<ul>{a}</ul></body></html>\n"
    ).encode()


def _not_modified(etag: str, modified: float, inm: str | None, ims: str | None) -> bool:
    """RFC 9110 13.1.2 and 13.1.3 for a GET: If-None-Match (weak comparison) decides when sent;
    otherwise If-Modified-Since, a date at or after the last modification. A bad date is ignored."""
    if inm is not None:
        tags = [t.strip().removeprefix("W/") for t in inm.split(",")]
        return "*" in tags or etag.removeprefix("W/") in tags
    if ims is not None:
        try:
            return parsedate_to_datetime(ims).timestamp() >= modified
        except (TypeError, ValueError, IndexError):
            return False
    return False
