"""Issue 25's memory budget and operator view as pure pieces: the parse pieces (_spans), the byte
budget on parses in flight, the hostile-web incidents with their rate-limited log and host tally."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from hypothesis import given, settings, strategies as st

from agent.crawl.bytebudget import ByteBudget
from agent.crawl.incidents import HostTally, Incidents
from agent.crawl.links import PIECE_TAGS, _spans, extract_links


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"<p>", b"<a href=/x>", b"</a>", b"text ", b"a<b", b"<!-- c -->", b"\xe6\x97\xa5"]),
                max_size=3000), st.integers(4096, 20000))
def test_pieces_cover_the_body_within_both_limits_and_cut_before_a_tag(parts, piece):
    data = b"".join(parts)
    spans = list(_spans(data, piece))
    assert [s for s, _ in spans] == [0, *[e for _, e in spans[:-1]]][: len(spans)]
    assert (spans[-1][1] if spans else 0) == len(data), "the pieces cover the body, in order"
    for s, e in spans:
        assert e - s <= piece and data.count(b"<", s, e) <= PIECE_TAGS
    for (s0, _), (s, _) in zip(spans, spans[1:]):
        # Just before a tag, unless no tag starts in the piece before it (a hard cut).
        assert data[s : s + 1] == b"<" and data[s + 1 : s + 2] in (b"a", b"p", b"/", b"!") or \
            re.search(rb"<[A-Za-z/!]", data[s0 + 1 : s]) is None


def test_a_big_body_is_parsed_in_pieces_with_the_same_links_as_whole():
    body = b"<html><head><base href='/d/'></head><body>" + b"".join(
        b"<p>" * 300 + b'<a href="x%d">x</a>' % i for i in range(400)) + b"</body></html>"
    whole = extract_links(body, "http://a.lab/", "utf-8", piece_bytes=None)
    cut = extract_links(body, "http://a.lab/", "utf-8", piece_bytes=16384)
    assert cut.pieces > 10 and whole.pieces == 1
    assert cut.links == whole.links and len(cut.links) == 400 and cut.links[0] == "http://a.lab/d/x0"
    text_only = b"<html><body>" + b"words " * 200_000 + b'<a href="/end">e</a></body></html>'
    res = extract_links(text_only, "http://a.lab/", None)
    assert res.links == ["http://a.lab/end"] and res.pieces_skipped > 0 and res.pieces == 1


def test_the_byte_budget_holds_bytes_not_count_and_lets_one_oversized_hold_run_alone(run):
    async def go():
        b = ByteBudget(100)
        order: list[str] = []
        gate = asyncio.Event()

        async def job(name: str, n: int) -> None:
            async with b.hold(n):
                order.append(f"+{name}")
                assert b.used <= 100 or b.used == n
                await gate.wait()
                order.append(f"-{name}")

        tasks = [asyncio.create_task(job(x, n)) for x, n in (("a", 60), ("big", 500), ("c", 30), ("d", 10))]
        for _ in range(5):
            await asyncio.sleep(0)
        started = list(order)
        gate.set()
        await asyncio.gather(*tasks)
        return started, order, b

    started, order, b = run(go())
    assert started == ["+a"], "FIFO: the big hold waits for a, and c and d wait behind it"
    assert order.index("+big") > order.index("-a") and order.index("+c") > order.index("-big")
    assert b.used == 0 and b.peak == 500 and b.waits == 3


def test_incidents_count_every_one_and_log_a_line_per_reason_at_most_every_interval(caplog):
    now = [0.0]
    inc = Incidents(lambda: now[0], log_every=10.0)
    with caplog.at_level(logging.WARNING, logger="agent"):
        for t in range(25):
            now[0] = float(t)
            inc.note("bomb", "b.lab", "x")
            inc.note("domain_hosts", "n1.flood.lab", "y", n=3)
    lines = [r.getMessage() for r in caplog.records]
    assert inc.counts["bomb"] == 25 and inc.counts["domain_hosts"] == 75
    assert sum("bomb" in m for m in lines) == 3 and sum("domain_hosts" in m for m in lines) == 3
    assert any("and 9 more since the last such line" in m for m in lines)
    with pytest.raises(ValueError):
        inc.note("no-such-reason", "h")


def test_the_host_tally_keeps_the_top_hosts_of_each_measure_in_bounded_memory():
    t = HostTally(keep=4)
    t.add("pages.lab", pages=1000)
    t.add("bytes.lab", nbytes=10**9)
    t.add("giveups.lab", give_ups=50)
    for i in range(1000):
        t.add(f"small{i}.lab", pages=1, nbytes=10)
    assert len(t._rows) <= 16
    top = {c.host: c for c in t.top(1)}
    assert set(top) == {"pages.lab", "bytes.lab", "giveups.lab"} and top["pages.lab"].pages == 1000
