"""Link extraction with selectolax's Lexbor parser: absolute canonical URLs from an HTML body."""

from __future__ import annotations

import codecs
import re
from collections import Counter
from dataclasses import dataclass, field

from selectolax.lexbor import LexborHTMLParser

from wancrawl.urls import InvalidUrl, UnsupportedScheme, canonicalize

# Elements whose URL the crawler follows. <link rel=...> is opt-in (extract_links(link_rels=...)):
# stylesheets and icons are not pages, while next/prev/alternate sometimes are.

# WHATWG encoding labels that Python spells differently or decodes more narrowly.
_CHARSET_ALIASES = {
    "gbk": "gb18030", "gb2312": "gb18030", "x-gbk": "gb18030", "gb_2312-80": "gb18030", "chinese": "gb18030",
    "iso-8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252", "l1": "cp1252", "ascii": "cp1252",
    "us-ascii": "cp1252", "windows-1252": "cp1252", "x-sjis": "shift_jis", "utf8": "utf-8", "unicode-1-1-utf-8": "utf-8",
}
_META_CHARSET = re.compile(rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
SNIFF_BYTES = 4096

# The fast path covers hrefs made only of characters canonicalize leaves alone (no escapes,
# no spaces, no dot segments, no user info, no IP hosts): for those it builds the very string
# canonicalize would, about 5x cheaper. Everything else goes through canonicalize itself.
_FAST_ABS = re.compile(r"(?i)(https?:)?//([a-z0-9-]+(?:\.[a-z0-9-]+)*)(?::([0-9]{1,5}))?([/?].*)?\Z", re.DOTALL)
_FAST_REST = re.compile(r"[A-Za-z0-9\-_~/.]*(\?[A-Za-z0-9\-_~/.=&+,;:]*)?\Z")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)\Z")
_DOTSEG = re.compile(r"(?:^|/)\.\.?(?:/|\?|\Z)")
_DEFAULT_PORT = {"http": 80, "https": 443}


@dataclass
class ExtractResult:
    links: list[str] = field(default_factory=list)  # canonical absolute, unique, in document order
    base_used: str = ""  # the URL relative links were resolved against
    dropped_schemes: Counter = field(default_factory=Counter)  # "mailto": 2, "javascript": 3 ...
    invalid: int = 0  # hrefs that are not URLs at all (no host, bad port, control characters...)
    hrefs: int = 0  # link elements seen
    charset: str = "utf-8"  # the codec the body was decoded with


def choose_charset(body: bytes, header_charset: str | None) -> str:
    """BOM, then the Content-Type charset, then <meta charset> in the first bytes, then UTF-8."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name
    for label in (header_charset, _sniff_meta(body)):
        if label:
            name = _CHARSET_ALIASES.get(label.strip().lower(), label.strip().lower())
            try:
                return codecs.lookup(name).name
            except LookupError:
                continue
    return "utf-8"


def _sniff_meta(body: bytes) -> str | None:
    m = _META_CHARSET.search(body, 0, SNIFF_BYTES)
    return m.group(1).decode("ascii") if m else None


def decode_html(body: bytes, header_charset: str | None) -> tuple[str, str]:
    """(text, codec): undecodable bytes become U+FFFD, so a mislabelled page still parses."""
    cs = choose_charset(body, header_charset)
    if cs.startswith("utf-16"):
        # A UTF-16 "HTML" body without a BOM is rare, but with one the BOM must go.
        body = body[2:] if body[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) else body
    elif cs == "utf-8" and body.startswith(codecs.BOM_UTF8):
        body = body[3:]
    return body.decode(cs, "replace"), cs


def extract_links(body: bytes, url: str, charset: str | None = None, *, sort_query: bool = False,
                  link_rels: frozenset[str] | set[str] = frozenset(), max_links: int | None = None) -> ExtractResult:
    """Links of an HTML page as canonical absolute URLs.

    `url` is the page's (canonical) URL; `<base href>` overrides it when it is a valid http(s)
    URL. a[href] and area[href] always count; <link href> only if its rel is in `link_rels`
    (e.g. {"next", "prev", "alternate"}). Never raises for bad HTML or bad hrefs.
    """
    text, cs = decode_html(body, charset)
    res = ExtractResult(base_used=url, charset=cs)
    try:
        tree = LexborHTMLParser(text)
    except Exception:  # noqa: BLE001 - lexbor refusing a document must not stop the crawl
        return res
    base = url
    base_node = tree.css_first("base[href]")
    if base_node is not None:
        href = base_node.attrs.get("href")
        if href and href.strip():
            try:
                base = canonicalize(href, url, sort_query=sort_query)
            except InvalidUrl:
                pass  # an unusable <base> is ignored, as browsers do
    res.base_used = base
    seen: set[str] = set()
    links = res.links
    dropped = res.dropped_schemes
    origin, directory = _split_base(base)
    # tags() walks the tree without the CSS engine: a third of the cost of css("a[href], ...").
    # Order: <link rel> (they live in <head>), then <a> in document order, then <area> (rare).
    nodes = []
    if link_rels:
        nodes += [n for n in tree.tags("link") if any(r in link_rels for r in (n.attrs.get("rel") or "").lower().split())]
    nodes += tree.tags("a")
    if _AREA.search(text):
        nodes += tree.tags("area")
    cache = _CACHE
    for node in nodes:
        href = node.attrs.get("href")
        if href is None:
            continue
        res.hrefs += 1
        # Templates repeat the same hrefs on every page of a directory, so results are cached
        # by what they depend on: the base's directory (which fixes its origin and scheme) for
        # paths and absolute URLs, the whole base for "", "?query" and "#fragment".
        key = (directory if directory and href and href[0] not in "?#" else base, href, sort_query)
        u = cache.get(key)
        if u is None:
            u = _fast(href, origin, directory, sort_query) if origin else None
            if u is None:
                try:
                    u = canonicalize(href, base, sort_query=sort_query)
                except UnsupportedScheme as exc:
                    u = ("scheme", exc.scheme)
                except InvalidUrl:
                    u = ("invalid", "")
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[key] = u
        if isinstance(u, tuple):
            if u[0] == "scheme":
                dropped[u[1]] += 1
            else:
                res.invalid += 1
            continue
        if u not in seen:
            seen.add(u)
            links.append(u)
            if max_links is not None and len(links) >= max_links:
                break
    return res


_AREA = re.compile(r"<area\b", re.IGNORECASE)
# (context, href, sort_query) -> canonical URL, or ("scheme", name) / ("invalid", "").
_CACHE: dict[tuple[str, str, bool], str | tuple[str, str]] = {}
_CACHE_SIZE = 100_000


def _split_base(base: str) -> tuple[str, str]:
    """(scheme://netloc, scheme://netloc/dir/) of a canonical base; ("", "") if not one."""
    scheme, sep, rest = base.partition("://")
    if not sep or scheme not in _DEFAULT_PORT:
        return "", ""
    slash = rest.find("/")
    if slash < 0:
        return "", ""
    origin = base[: len(scheme) + 3 + slash]
    path = rest[slash:].split("?", 1)[0]
    return origin, origin + path[: path.rfind("/") + 1]


def _fast(href: str, origin: str, directory: str, sort_query: bool) -> str | None:
    """canonicalize(href, base) for the plain hrefs most pages are made of; None: not plain."""
    h, _, frag = href.partition("#")
    if not h or "\t" in frag or "\n" in frag or "\r" in frag or "\x00" in frag:
        return None
    c = h[0]
    colon = h.find(":")
    if h.startswith("//") or (colon > 0 and "/" not in h[:colon] and "?" not in h[:colon]):
        m = _FAST_ABS.match(h)
        if m is None:
            return None
        scheme = (m.group(1) or origin.split(":", 1)[0] + ":")[:-1].lower()
        host = m.group(2).lower()
        if len(host) > 253 or host.replace(".", "").isdigit() or not all(_LABEL.match(x) for x in host.split(".")):
            return None
        netloc = host
        if m.group(3) is not None:
            port = int(m.group(3))
            if not 0 < port <= 65535:
                return None
            if port != _DEFAULT_PORT[scheme]:
                netloc = f"{host}:{port}"
        rest = m.group(4) or "/"
        if rest[0] == "?":
            rest = "/" + rest
        prefix = f"{scheme}://{netloc}"
    elif c == "/":
        rest, prefix = h, origin
    elif c == "?" or c == ".":
        return None  # query-only and dot-relative references: leave them to urljoin
    else:
        rest, prefix = directory[len(origin):] + h, origin
    path_part = rest.split("?", 1)[0]
    # urljoin drops empty segments of relative paths: "//" inside a path is left to it.
    if _FAST_REST.match(rest) is None or "//" in path_part or _DOTSEG.search(path_part) is not None:
        return None
    path, q, query = rest.partition("?")
    if not query:
        return prefix + path
    if sort_query:
        query = "&".join(sorted(query.split("&")))
    return f"{prefix}{path}?{query}"
