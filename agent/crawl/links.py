"""Link extraction with selectolax's Lexbor parser: absolute canonical URLs from an HTML body."""

from __future__ import annotations

import codecs
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from selectolax.lexbor import LexborAttributes, LexborHTMLParser

from wancrawl.urls import BaseUrl, InvalidUrl, UnsupportedScheme, canonicalize, query_codec

# Elements whose URL the crawler follows. <link rel=...> is opt-in (extract_links(link_rels=...)):
# stylesheets and icons are not pages, while next/prev/alternate sometimes are.
# One CSS walk finds links and the <meta> elements (robots, refresh) in document order.
_SELECTOR = "a[href], area[href], meta[content]:not([href])"
MAX_LINKS = 6000  # links kept per page, as Heritrix does
_WORK_PER_LINK = 4  # elements examined per link of the cap: bounds pages of repeated hrefs too
ROBOTS_META_NAMES = frozenset({"robots", "wancrawl"})  # <meta name=...> read for nofollow/noindex
PIECE_BYTES = 256 * 1024  # the default of memory.parse_piece_bytes (agent/settings.py)
# Bodies above this are parsed in a thread (a page's links, a sitemap): Lexbor and expat work
# without the GIL there, and the loop (other fetches, RPCs, heartbeats) does not stall for the
# ~15 ms per MiB a parse takes (docs/agent-fetching.md).
THREAD_PARSE_BYTES = 256 * 1024
PIECE_TAGS = 1024  # "<"s one parse sees at most (lexbor's deep-nesting cost: see _spans)
# The pieces of one page stop after this many "<"s per element of its work budget (10 x 24,000
# by default, a page with 6,000 links and plenty of markup): a page of nested <div>s with a link
# now and then would otherwise be parsed piece after piece for its few links (~5 ms a piece).
_TAGS_PER_ELEMENT = 10
_NTH_TAG = re.compile(rb"(?:[^<]*<){%d}[^<]*<" % PIECE_TAGS)  # through the (PIECE_TAGS + 1)-th "<"
_LINK_TAG_B = re.compile(rb"<(?:a|area|link|meta|base)[\s/>]", re.IGNORECASE)  # a piece without one is not parsed

# WHATWG encoding labels that Python spells differently or decodes more narrowly.
_CHARSET_ALIASES = {
    "gbk": "gb18030", "gb2312": "gb18030", "x-gbk": "gb18030", "gb_2312-80": "gb18030", "chinese": "gb18030",
    "iso-8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252", "l1": "cp1252", "ascii": "cp1252",
    "us-ascii": "cp1252", "windows-1252": "cp1252", "utf8": "utf-8", "unicode-1-1-utf-8": "utf-8",
    # WHATWG Shift_JIS, EUC-KR and Big5 are Windows' supersets (NEC/IBM rows, UHC, HKSCS).
    "shift_jis": "cp932", "shift-jis": "cp932", "sjis": "cp932", "x-sjis": "cp932", "ms_kanji": "cp932",
    "csshiftjis": "cp932", "windows-31j": "cp932", "ms932": "cp932",
    "euc-kr": "cp949", "ks_c_5601-1987": "cp949", "korean": "cp949", "windows-949": "cp949",
    "big5": "big5hkscs", "big5-hkscs": "big5hkscs", "x-x-big5": "big5hkscs", "cn-big5": "big5hkscs",
}
_META_CHARSET = re.compile(rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
SNIFF_BYTES = 4096

@dataclass
class ExtractResult:
    links: list[str] = field(default_factory=list)  # canonical absolute, unique, in document order
    base_used: str = ""  # the URL relative links were resolved against
    dropped_schemes: Counter = field(default_factory=Counter)  # "mailto": 2, "javascript": 3 ...
    invalid: int = 0  # hrefs that are not URLs at all (no host, bad port, control characters...)
    hrefs: int = 0  # link elements examined
    charset: str = "utf-8"  # the codec the body was decoded with
    nofollow: bool = False  # <meta name="robots" content="nofollow"> (or "none"): no page links returned
    noindex: bool = False  # <meta name="robots" content="noindex"> (or "none"): the caller decides
    nofollow_skipped: int = 0  # link elements not followed: rel="nofollow" (if asked), or all under nofollow
    refresh: str | None = None  # canonical target of <meta http-equiv="refresh" content="N; url=...">
    over_cap: int = 0  # elements (a, area, link, meta) left unexamined because a cap was reached
    pieces: int = 0  # parses the body took (a big body is parsed in pieces: extract_links)
    pieces_skipped: int = 0  # pieces not parsed: no link tag in them
    examined: int = 0  # elements the walk looked at


def choose_charset(body: bytes, header_charset: str | None) -> str:
    """BOM, then the Content-Type charset, then <meta charset> in the first bytes, then UTF-8."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name
    # The <meta> is sniffed only when the header names no codec we know (a regex over the first
    # 4 KiB: ~5 us a page the lab's pages, labelled in their Content-Type, never needed).
    return _codec(header_charset) or _codec(_sniff_meta(body)) or "utf-8"


@lru_cache(maxsize=256)
def _codec(label: str | None) -> str | None:
    """Python's name of the codec a charset label stands for (WHATWG's aliases first), or None."""
    if not label:
        return None
    name = _CHARSET_ALIASES.get(label.strip().lower(), label.strip().lower())
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _sniff_meta(body: bytes) -> str | None:
    m = _META_CHARSET.search(body, 0, SNIFF_BYTES)
    return m.group(1).decode("ascii") if m else None


def decode_html(body: bytes, header_charset: str | None, cs: str | None = None) -> tuple[str, str]:
    """(text, codec): undecodable bytes become U+FFFD, so a mislabelled page still parses.
    `cs`: what choose_charset(body, header_charset) gave, when the caller has it already."""
    cs = cs or choose_charset(body, header_charset)
    if cs.startswith("utf-16"):
        # A UTF-16 "HTML" body without a BOM is rare, but with one the BOM must go.
        body = body[2:] if body[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) else body
    elif cs == "utf-8" and body.startswith(codecs.BOM_UTF8):
        body = body[3:]
    return body.decode(cs, "replace"), cs


def extract_links(body: bytes, url: str, charset: str | None = None, *, sort_query: bool = False,
                  link_rels: frozenset[str] | set[str] = frozenset(), max_links: int | None = MAX_LINKS,
                  follow_rel_nofollow: bool = True,
                  robots_names: frozenset[str] | set[str] = ROBOTS_META_NAMES,
                  piece_bytes: int | None = PIECE_BYTES) -> ExtractResult:
    """Links of an HTML page as canonical absolute URLs.

    `url` is the page's (canonical) URL; `<base href>` overrides it when it is a valid http(s)
    URL. a[href] and area[href] always count; <link href> only if its rel is in `link_rels`
    (e.g. {"next", "prev", "alternate"}); a <meta http-equiv="refresh"> target too. Queries are
    percent-encoded in the page's encoding, as browsers do. `<meta name=robots>` (any name in
    `robots_names`) sets `nofollow` (then only the refresh target is returned) and `noindex`.
    `follow_rel_nofollow=False` skips rel="nofollow" links. At most `max_links` links (None:
    no cap); the walk also stops after `4 * max_links` elements, the rest counted in `over_cap`.

    Memory and time stay bounded on any input (issue 25): a body over `piece_bytes` bytes or
    PIECE_TAGS tags is parsed in pieces (see _spans), each alone, and a piece without a link tag
    is not parsed at all. None: the whole body in one parse, whatever it costs.
    Never raises for bad HTML or bad hrefs.
    """
    cs = choose_charset(body, charset)
    budget = None if max_links is None else max_links * _WORK_PER_LINK
    if piece_bytes is None or (len(body) <= piece_bytes and body.count(b"<") <= PIECE_TAGS):
        res = _extract(decode_html(body, charset, cs)[0], cs, url, max_links, budget, sort_query=sort_query,
                       link_rels=link_rels, follow_rel_nofollow=follow_rel_nofollow, robots_names=robots_names)
        res.pieces = 1
        return res
    return _extract_pieces(body, charset, cs, url, max_links, budget, piece_bytes, sort_query=sort_query,
                           link_rels=link_rels, follow_rel_nofollow=follow_rel_nofollow, robots_names=robots_names)


def _extract_pieces(body: bytes, charset: str | None, cs: str, url: str, max_links: int | None, budget: int | None,
                    piece_bytes: int, *, sort_query: bool, link_rels: frozenset[str] | set[str], follow_rel_nofollow: bool,
                    robots_names: frozenset[str] | set[str]) -> ExtractResult:
    """extract_links of a body over piece_bytes or PIECE_TAGS: each piece parsed alone (_spans),
    the links merged in order, the caps counted across pieces."""
    # ASCII-compatible codecs are cut as they are (a "<" byte is always "<" there); the others
    # (UTF-16/32, the stateful ISO-2022 family) are decoded whole first and cut as UTF-8.
    safe = _ascii_safe(cs)
    data = body if safe else decode_html(body, charset, cs)[0].encode("utf-8")
    piece_codec = cs if safe else "utf-8"
    if piece_codec == "utf-8" and data.startswith(codecs.BOM_UTF8):
        data = data[3:]
    res = ExtractResult(base_used=url, charset=cs)
    seen: set[str] = set()
    work = 0
    tags = 0  # "<"s handed to the parser so far
    for start, end in _spans(data, piece_bytes):
        left = None if max_links is None else max_links - len(res.links)
        if left == 0 or (budget is not None and (work >= budget or tags >= _TAGS_PER_ELEMENT * budget)):
            # Caps reached: what is left is counted by its "href"s, unparsed (an estimate).
            res.over_cap += max(1, data.count(b"href", start) + data.count(b"HREF", start))
            break
        if _LINK_TAG_B.search(data, start, end) is None:
            res.pieces_skipped += 1  # no element of the walk in it: nothing to parse
            continue
        tags += data.count(b"<", start, end)
        text = data[start:end].decode(piece_codec, "replace")
        r = _extract(text, cs, res.base_used, left, None if budget is None else budget - work, sort_query=sort_query,
                     link_rels=link_rels, follow_rel_nofollow=follow_rel_nofollow, robots_names=robots_names)
        del text
        work += r.examined
        if _merge(res, r, seen):
            break  # nothing further is followed (a refresh after it is ignored)
    if max_links is not None and len(res.links) > max_links:
        res.over_cap += len(res.links) - max_links
        del res.links[max_links:]
    if res.nofollow:
        _refresh_only(res)
    return res


def _merge(res: ExtractResult, r: ExtractResult, seen: set[str]) -> bool:
    """One piece's result into the page's; True when the piece said nofollow."""
    res.pieces += 1
    if res.pieces == 1:
        res.base_used = r.base_used  # a <base> is only ever in the first piece with a link tag
    for u in r.links:
        if u not in seen:
            seen.add(u)
            res.links.append(u)
    res.dropped_schemes.update(r.dropped_schemes)
    res.invalid += r.invalid
    res.hrefs += r.hrefs
    res.nofollow_skipped += r.nofollow_skipped
    res.over_cap += r.over_cap
    res.noindex |= r.noindex
    res.refresh = res.refresh or r.refresh
    if r.nofollow:
        res.nofollow = True
    return r.nofollow


def _refresh_only(res: ExtractResult) -> None:
    """Under a nofollow: only the refresh target is kept (a redirect, not a link)."""
    res.nofollow_skipped = res.hrefs
    res.links = [res.refresh] if res.refresh else []
    res.dropped_schemes.clear()
    res.invalid = 0


def _ascii_safe(cs: str) -> bool:
    return not any(x in cs for x in ("utf-16", "utf_16", "utf-32", "utf_32", "2022", "utf-7", "utf_7", "hz"))


def _spans(data: bytes, piece_bytes: int) -> Iterator[tuple[int, int]]:
    """Pieces of at most `piece_bytes` units and PIECE_TAGS "<"s, cut just before a "<" that opens
    a tag (a letter, "/" or "!" after it), or hard at the limit if no tag starts in the piece.

    Why both limits: the parse tree costs ~60 bytes of memory per byte of input at worst (a page of
    bare <p> tags), and lexbor's time grows with the square of the open elements (2,048 nested
    <div>s take ~25 ms, 10,000 ~0.3 s, 50,000 about 40 s): a piece of 256 KiB and 1,024 "<"s costs
    at most ~15 MB and ~5 ms. A cut can fall inside a <script> or a comment: the next piece reads
    the rest as markup (a few stray links at worst, on pages this big)."""
    n = len(data)
    pos = 0
    while pos < n:
        limit = min(n, pos + piece_bytes)
        m = _NTH_TAG.match(data, pos, limit)
        if m is not None:
            limit = m.end() - 1  # just before the (PIECE_TAGS + 1)-th "<"
        if limit >= n:
            yield pos, n
            return
        cut = data.rfind(b"<", pos + 1, limit + 1)
        while cut > pos:
            nxt = data[cut + 1 : cut + 2]
            if nxt and (nxt.isalpha() or nxt in (b"/", b"!")):
                break
            cut = data.rfind(b"<", pos + 1, cut)
        end = cut if cut > pos else max(limit, pos + 1)
        yield pos, end
        pos = end


def _extract(text: str, cs: str, url: str, max_links: int | None, budget: int | None, *, sort_query: bool,
             link_rels: frozenset[str] | set[str], follow_rel_nofollow: bool,
             robots_names: frozenset[str] | set[str]) -> ExtractResult:
    """extract_links of one decoded document (or piece): at most `max_links` links, and at most
    `budget` elements examined (None: no cap)."""
    res = ExtractResult(base_used=url, charset=cs)
    if budget is not None and len(text) > _MIN_CHARS_PER_ELEMENT * budget:
        text = _cut(text, budget, res)
    try:
        tree = LexborHTMLParser(text)
    except Exception:  # noqa: BLE001 - lexbor refusing a document must not stop the crawl
        return res
    qenc = query_codec(cs)
    base = res.base_used = _base(tree, text, url, sort_query, qenc)
    # css() walks the tree once for a, area and meta (as cheap as tags("a") plus a regex for
    # <area>); <link rel> first (they live in <head>), then the rest in document order.
    nodes = []
    if link_rels:
        nodes += [n for n in tree.tags("link")
                  if n.attrs.get("href") is not None and any(r in link_rels for r in (n.attrs.get("rel") or "").lower().split())]
    nodes += tree.css(_SELECTOR)
    if budget is not None and len(nodes) > budget:
        res.over_cap += len(nodes) - budget
        del nodes[budget:]
    res.examined = len(nodes)
    _walk(nodes, res, base, max_links, sort_query, qenc, not follow_rel_nofollow, robots_names)
    if res.nofollow:
        _refresh_only(res)  # a nofollow met after some links
    return res


def _base(tree: LexborHTMLParser, text: str, url: str, sort_query: bool, qenc: str) -> str:
    """The page's base: its usable <base href>, else its URL."""
    # A <base> element comes only from a "<base" start tag (any case): most pages have none, and
    # this scan costs a quarter of the tree walk css_first() would take to find that out.
    base_node = tree.css_first("base[href]") if _BASE_TAG.search(text) else None
    if base_node is not None:
        href = base_node.attrs.get("href")
        if href and href.strip():
            try:
                return canonicalize(href, url, sort_query=sort_query, query_encoding=qenc)
            except InvalidUrl:
                pass  # an unusable <base> is ignored, as browsers do
    return url


def _walk(nodes: list, res: ExtractResult, base: str, max_links: int | None, sort_query: bool, qenc: str,
          skip_rel: bool, robots_names: frozenset[str] | set[str]) -> None:
    """The nodes' links into res.links (deduplicated, at most max_links) with the counts; a <meta> read for
    robots directives and the first refresh. `skip_rel`: rel="nofollow" skipped. Templates repeat the same
    hrefs on every page of a directory, so results are cached by what they depend on: the base's directory
    (which fixes its origin and scheme) for paths and absolute URLs, the whole base for the rest ("",
    "?query", "#fragment", a leading space, and "http:?q" or "http:" which WHATWG resolves like "?q" and
    ""). One dict per context and query mode (sort_query, and the codec unless UTF-8), found once per page:
    a cached href costs one lookup by the href string. A directory's dict holds only hrefs for which the
    directory is enough (a property of the href alone), so a hit there needs no check."""
    page = BaseUrl(base)  # split once for all the page's links
    directory = page.directory
    mode: bool | tuple[bool, str] = sort_query if qenc == "utf-8" else (sort_query, qenc)
    by_base = _context(base, mode, False)
    by_dir = _context(directory, mode, True) if directory else by_base
    refresh_seen = page_nofollow = False
    # Without a cap in reach (fewer elements than max_links), links are deduplicated at the end.
    capped = max_links is not None and len(nodes) >= max_links
    found: list[str] = []
    seen: set[str] = set()
    hrefs = 0
    u: str | tuple[str, str]
    for i, node in enumerate(nodes):
        attrs = node.attrs
        href = attrs.get("href")
        if href is None:  # a <meta content>: the selector gives a and area only with href
            target = _meta(attrs, res, robots_names, refresh_seen)
            page_nofollow = res.nofollow
            if target is None:
                continue
            refresh_seen = True  # the first well-formed refresh wins, as in browsers
            if not target:
                continue  # a refresh of the page itself
            u = _resolve(target, page, by_base, by_dir, sort_query, qenc)
            if isinstance(u, tuple):
                _failed(u, res)
                continue
            res.refresh = u
        else:
            hrefs += 1
            if page_nofollow or skip_rel and _rel_nofollow(attrs.get("rel")):
                res.nofollow_skipped += 1
                continue
            hit = by_dir.get(href)
            # A miss in the directory's dict is not looked up there again (`looked`).
            u = _resolve(href, page, by_base, by_dir, sort_query, qenc, True) if hit is None else hit
            if isinstance(u, tuple):
                _failed(u, res)
                continue
        if not capped:
            found.append(u)
        elif u not in seen:
            seen.add(u)
            found.append(u)
            if len(found) >= max_links:  # type: ignore[operator]
                res.over_cap += len(nodes) - i - 1
                break
    res.hrefs = hrefs
    res.links = found if capped else list(dict.fromkeys(found))


def _cut(text: str, budget: int, res: ExtractResult) -> str:
    """A huge body with more link tags than the walk will examine is parsed only up to the first
    tag past `budget`: lexbor's parse and the node list (built holding the GIL, ~0.5 us a node)
    stay bounded too. Two str.count scans decide; the regex only runs on pages that need it."""
    hrefs = text.count("href") + text.count("HREF")
    if hrefs <= budget:
        return text
    for k, m in enumerate(_LINK_TAG.finditer(text)):
        if k == budget:
            cut = m.start()
            # What is left unparsed is counted by its "href"s: an estimate (scripts, text).
            res.over_cap = max(1, hrefs - text.count("href", 0, cut) - text.count("HREF", 0, cut))
            return text[:cut]
    return text


# Start tags that may become nodes of _SELECTOR or <link>; an upper bound (an <a> without href).
_LINK_TAG = re.compile(r"<(?:a|area|link|meta)[\s/>]", re.IGNORECASE)
_MIN_CHARS_PER_ELEMENT = 8  # '<a href>': a shorter body cannot hold more elements than the budget


def _directory_is_enough(href: str) -> bool:
    c = href[:1]
    if not c or c <= " " or c == "?" or c == "#":
        return False
    # "http:x" / "https:x" without "//" is relative to the whole base (WHATWG).
    return not (c in "hH" and (href[4:5] == ":" or href[5:6] == ":") and "//" not in href[5:8])


def _context(ctx: str, mode: bool | tuple[bool, str], directory: bool) -> dict[str, str | tuple[str, str]]:
    """The href cache's dict for one context, a base URL or a directory (kept apart: a base URL
    may be spelt like a directory, and its dict holds every kind of href), and query mode."""
    global _CACHED
    key = (ctx, mode, directory)
    d = _CACHE.get(key)
    if d is None:
        if _CACHED >= _CACHE_SIZE:
            _CACHE.clear()
            _CACHED = 0
        d = _CACHE[key] = {}
    return d


def _resolve(href: str, page: BaseUrl, by_base: dict, by_dir: dict, sort_query: bool, qenc: str,
             looked: bool = False) -> str | tuple[str, str]:
    """The canonical URL of `href` on `page` (or ("scheme", name) / ("invalid", "")), through the
    href cache: the directory's dict when the directory is enough, else the base's. `looked`:
    the caller found `href` missing from `by_dir` already."""
    global _CACHED
    cache = by_dir if by_dir is not by_base and _directory_is_enough(href) else by_base
    u = None if looked and cache is by_dir else cache.get(href)
    if u is None:
        try:
            u = canonicalize(href, page, sort_query=sort_query, query_encoding=qenc)
        except UnsupportedScheme as exc:
            u = ("scheme", exc.scheme)
        except InvalidUrl:
            u = ("invalid", "")
        cache[href] = u
        _CACHED += 1
    return u


def _failed(u: tuple[str, str], res: ExtractResult) -> None:
    if u[0] == "scheme":
        res.dropped_schemes[u[1]] += 1
    else:
        res.invalid += 1


def _rel_nofollow(rel: str | None) -> bool:
    return rel is not None and "nofollow" in rel.lower().split()


def _meta(attrs: LexborAttributes, res: ExtractResult, robots_names: frozenset[str] | set[str],
          refresh_seen: bool) -> str | None:
    """Reads a <meta>: robots directives into `res`; a refresh's URL ("" for none) or None."""
    content = attrs.get("content") or ""
    name = attrs.get("name")
    if name is not None and name.strip().lower() in robots_names:
        for d in _DIRECTIVE_SPLIT.split(content.lower()):
            if d == "nofollow" or d == "none":
                res.nofollow = True
            if d == "noindex" or d == "none":
                res.noindex = True
        return None
    if refresh_seen:
        return None
    equiv = attrs.get("http-equiv")
    if equiv is None or equiv.strip().lower() != "refresh":
        return None
    parsed = parse_refresh(content)
    return None if parsed is None else parsed[1]


_DIRECTIVE_SPLIT = re.compile(r"[\s,]+")


def parse_refresh(content: str) -> tuple[int, str] | None:
    """(delay, URL or "") of a <meta http-equiv="refresh"> content, None if browsers ignore it.

    The HTML standard's "shared declarative refresh steps": "5", "0;URL=/x", "0; url='/x'",
    "1,/x" and "3 /x" are all understood; the URL part is the raw string, unresolved.
    """
    n = len(content)
    i = 0
    while i < n and content[i] in _WS:
        i += 1
    j = i
    while j < n and content[j].isascii() and content[j].isdigit():
        j += 1
    if j == i and (j >= n or content[j] != "."):
        return None
    delay = int(content[i:j]) if j > i else 0
    while j < n and (content[j] == "." or content[j].isascii() and content[j].isdigit()):
        j += 1
    i = j
    if i < n:
        if content[i] not in _WS and content[i] not in ";,":
            return None
        while i < n and content[i] in _WS:
            i += 1
        if i < n and content[i] in ";,":
            i += 1
        while i < n and content[i] in _WS:
            i += 1
    if i >= n:
        return delay, ""
    url = content[i:]
    k = i
    if content[k] in "Uu":
        k += 1
        if k < n and content[k] in "Rr":
            k += 1
            if k < n and content[k] in "Ll":
                k += 1
                while k < n and content[k] in _WS:
                    k += 1
                if k < n and content[k] == "=":
                    k += 1
                    while k < n and content[k] in _WS:
                        k += 1
                    url = _unquote_refresh(content[k:])
    else:
        url = _unquote_refresh(url)
    url = url.strip(_WS_C0)
    return delay, url


def _unquote_refresh(s: str) -> str:
    if s[:1] in ("'", '"'):
        q, s = s[0], s[1:]
        end = s.find(q)
        if end >= 0:
            s = s[:end]
    return s


_WS = " \t\n\f\r"
_WS_C0 = "".join(chr(c) for c in range(0x21))  # the URL parser strips C0 controls and spaces


# (context, sort_query or (sort_query, query codec), context is a directory) -> {href: canonical URL, or ("scheme", name) / ("invalid", "")}.
_CACHE: dict[tuple[str, bool | tuple[bool, str], bool], dict[str, str | tuple[str, str]]] = {}
_CACHE_SIZE = 100_000  # hrefs cached in all (then all are forgotten)
_CACHED = 0  # hrefs cached since the last clear (an over-count after an outside _CACHE.clear(): harmless)
_BASE_TAG = re.compile(r"<base", re.IGNORECASE)
