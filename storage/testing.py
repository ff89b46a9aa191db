"""Test and benchmark support: synthetic HTML pages, fetch results, a fake StorageClient, PostgreSQL discovery."""

from __future__ import annotations

import itertools

import random
from collections.abc import Iterator, Sequence

from wancrawl.v1 import storage_pb2
from wancrawl.warcrecords import FetchResult

from storage.client import Ack

_SYLLABLES = "ba be bi bo bu ca ce ci co da de di do fa fe fi ga ge go ha he hi ka ke ki la le li lo lu ma me mi mo na ne ni no pa pe pi po ra re ri ro sa se si so ta te ti to va ve vi wa we ya yo za".split()


def _vocabulary(rng: random.Random, n: int = 3000) -> list[str]:
    return ["".join(rng.choices(_SYLLABLES, k=rng.choice((1, 2, 2, 3, 3, 4)))) for _ in range(n)]


_VOCAB = _vocabulary(random.Random(12345))
# Zipf-like word frequencies, as in natural text: a few words are very common.
_WEIGHTS = [1.0 / (i + 1) for i in range(len(_VOCAB))]
_CUM = list(itertools.accumulate(_WEIGHTS))


def _words(rng: random.Random, k: int) -> str:
    return " ".join(rng.choices(_VOCAB, cum_weights=_CUM, k=k))


def synthetic_html(rng: random.Random, size: int, host: str = "site.example") -> bytes:
    """A realistic HTML page of about `size` bytes: head with inline CSS/JS, navigation, article
    cards with class-heavy markup, paragraphs of Zipf-distributed text, and a footer.

    The mix (about half markup, half text) follows typical news and shop pages; the benchmark's
    compression ratio depends on it, so docs/storage.md reports the ratio of the payload alone too.
    """
    # Sites use a small design system: a few colours and spacing steps, reused by every rule.
    palette = [f"#{rng.randrange(16**6):06x}" for _ in range(6)]
    css = "".join(f".c{i}{{margin:{rng.choice((0, 4, 8, 12, 16, 24))}px;padding:{rng.choice((0, 4, 8, 16))}px;color:{rng.choice(palette)};font-size:{rng.choice((12, 14, 16, 18, 24))}px}}\n" for i in range(rng.randint(20, 60)))
    js = "".join(f"window.cfg{i}={{id:{rng.randint(0, 10**6)},path:'/{_words(rng, 1)}/{rng.randint(0, 999)}',on:{str(rng.random() < .5).lower()}}};\n" for i in range(rng.randint(10, 40)))
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        f"<title>{_words(rng, 6).title()} | {host}</title>\n",
        f"<meta name=\"description\" content=\"{_words(rng, 20)}\">\n",
        f"<link rel=\"canonical\" href=\"http://{host}/\">\n<link rel=\"stylesheet\" href=\"/static/site.css?v={rng.randint(1, 99)}\">\n",
        f"<style>\n{css}</style>\n<script>\n{js}</script>\n</head>\n<body class=\"page\">\n",
        "<header class=\"site-header\"><nav class=\"main-nav\"><ul class=\"nav-list\">\n",
        *(f"  <li class=\"nav-item\"><a class=\"nav-link\" href=\"/{w}/\">{w.title()}</a></li>\n" for w in _words(rng, 12).split()),
        "</ul></nav></header>\n<main id=\"content\" class=\"container\">\n",
    ]
    total = sum(len(p) for p in parts)
    n = 0
    while total < size - 200:
        kind = rng.random()
        if kind < 0.40:
            p = f"<p class=\"text\">{_words(rng, rng.randint(15, 70)).capitalize()}.</p>\n"
        elif kind < 0.85:
            slug = "-".join(_words(rng, 4).split())
            href = f"http://{host}/{slug}-{rng.randint(0, 10**6)}.html" if rng.random() < 0.8 else f"http://other{rng.randint(0, 50)}.example/{slug}"
            p = (f"<article class=\"card card--{rng.choice(('news', 'shop', 'blog'))}\" data-id=\"{rng.randint(0, 10**7)}\">\n"
                 f"  <div class=\"card__media\"><img class=\"card__img\" src=\"/img/{rng.randint(0, 10**5)}.jpg\" alt=\"{_words(rng, 3)}\" loading=\"lazy\" width=\"320\" height=\"180\"></div>\n"
                 f"  <div class=\"card__body\"><h3 class=\"card__title\"><a href=\"{href}\">{_words(rng, 6).title()}</a></h3>\n"
                 f"  <p class=\"card__summary\">{_words(rng, rng.randint(8, 25))}</p>\n"
                 f"  <div class=\"card__meta\"><time datetime=\"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}\">{rng.randint(1, 28)} {rng.choice(('Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun'))}</time>"
                 f"<span class=\"card__author\">{_words(rng, 2).title()}</span></div></div>\n</article>\n")
        else:
            p = f"<h2 class=\"section-title\" id=\"s{n}\">{_words(rng, 5).title()}</h2>\n"
        parts.append(p)
        total += len(p)
        n += 1
    parts.append("</main>\n<footer class=\"site-footer\"><p>&copy; 2024 wancrawl lab</p></footer>\n</body>\n</html>\n")
    return "".join(parts).encode("utf-8")


def fetch_result(url: str, body: bytes, *, agent_id: str = "agent-1", at: float = 1_700_000_000.0,
                 status: int = 200, truncated: str | None = None, ip: str = "127.1.1.10",
                 content_type: str = "text/html; charset=utf-8") -> FetchResult:
    return FetchResult(
        url=url, status=status, reason="OK" if status == 200 else "", body=body, agent_id=agent_id,
        response_headers=[("Content-Type", content_type), ("Content-Length", str(len(body))), ("Server", "lab")],
        request_headers=[("User-Agent", "wancrawl/0.1"), ("Accept", "*/*"), ("Host", url.split("/")[2])],
        started_at=at, ended_at=at + 0.042, ip=ip, truncated=truncated,
    )


class FakeStorageClient:
    """An in-memory StorageClient for agent tests: idempotent by record id, can be told to fail.
    `group`: the fakes that stand for one storage service, which lookup() searches together
    (each keeps its own captures, so a test still sees which agent stored what)."""

    def __init__(self, group: list[FakeStorageClient] | None = None) -> None:
        self.captures: dict[str, storage_pb2.Capture] = {}
        self.group = group if group is not None else []
        self.group.append(self)
        self.fail_next = 0
        self.sent_batches = 0
        self.timeouts: list[float | None] = []  # each send's deadline

    async def send(self, batches, timeout: float | None = None) -> Ack:
        from wancrawl.errors import Unavailable

        self.timeouts.append(timeout)
        if isinstance(batches, (storage_pb2.PageBatch, bytes)):
            batches = [batches]
        # A serialized batch (a spool file as it is) is decoded as storage decodes it.
        batches = [storage_pb2.PageBatch.FromString(b) if isinstance(b, bytes) else b for b in batches]
        if self.fail_next:
            self.fail_next -= 1
            raise Unavailable("fake storage: told to fail")
        stored = dup = 0
        for b in batches:
            self.sent_batches += 1
            for c in b.captures:
                if c.record_id in self.captures:
                    dup += 1
                else:
                    self.captures[c.record_id] = c
                    stored += 1
        return Ack(len(batches), stored, 0, dup, 0)

    async def lookup(self, urls) -> dict[str, set[int]]:
        from wancrawl.urls import canonicalize

        held: dict[str, set[int]] = {}
        for fake in self.group:
            for c in fake.captures.values():
                held.setdefault(canonicalize(c.url), set()).add(c.status)
        return {u: held[canonicalize(u)] for u in urls if canonicalize(u) in held}

    async def close(self) -> None:
        pass


def pages(n: int, *, seed: int = 1, hosts: Sequence[str] = ("a.example", "b.example", "c.example"),
          min_size: int = 10_000, max_size: int = 60_000) -> Iterator[tuple[str, bytes]]:
    rng = random.Random(seed)
    for i in range(n):
        host = hosts[i % len(hosts)]
        yield f"http://{host}/page/{i}.html", synthetic_html(rng, rng.randint(min_size, max_size), host)
