"""Storage core (storage.store) against SQLite and PostgreSQL: WARC output, idempotency, dedup, restart, recovery."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from storage.client import make_batch
from storage.config import IndexSettings, IngestSettings, StorageSettings, WarcSettings
from storage.store import Store, surt
from storage.testing import fetch_result, pages
from wancrawl.errors import NotFound
from wancrawl.warcrecords import build_capture


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def settings(request, tmp_path):
    def make(**ingest):
        return StorageSettings(
            data_dir=str(tmp_path / "data"),
            index=index,
            warc=WarcSettings(max_file_bytes=64_000),
            ingest=IngestSettings(**ingest),
        )

    if request.param == "sqlite":
        index = IndexSettings()
    else:
        url, schema = request.getfixturevalue("pg_schema")  # skips, saying why, without PostgreSQL
        index = IndexSettings(url=url, schema=schema)
    yield make


def captures(n, seed=1, at=1_700_000_000.0, **kw):
    return [build_capture(fetch_result(url, body, at=at + i, **kw)) for i, (url, body) in enumerate(pages(n, seed=seed, min_size=2_000, max_size=12_000))]


def warc_records(warc_dir: Path):
    """(file, offset, type, record id, target URI) of every record, as warcio reads them."""
    out = []
    for path in sorted(warc_dir.glob("*.warc.gz")):
        with open(path, "rb") as fh:
            it = ArchiveIterator(fh, check_digests="raise")
            for rec in it:
                rec.content_stream().read()
                rid = (rec.rec_headers.get_header("WARC-Record-ID") or "").strip("<>")
                out.append((path.name, it.get_record_offset(), rec.rec_type, rid, rec.rec_headers.get_header("WARC-Target-URI")))
    return out


def assert_files_match_index(store: Store):
    rows = list(store.index.iter_rows())
    recs = warc_records(store.warc_dir)
    by_pos = {(f, o): (t, rid, uri) for f, o, t, rid, uri in recs}
    # Every indexed capture is at its offset, as the right type and id.
    for r in rows:
        assert by_pos[(r.warc_file, r.warc_offset)] == (r.record_type, r.record_id, r.url)
    # And the files hold nothing else: a warcinfo per file plus request+metadata per capture.
    files = {f for f, *_ in recs}
    assert len(recs) == len(files) + 3 * len(rows)
    assert sorted(t for _, _, t, _, _ in recs if t in ("response", "revisit")) == sorted(r.record_type for r in rows)
    assert all(o == 0 for f, o, t, *_ in recs if t == "warcinfo")


def test_ingest_writes_standard_warc_that_matches_the_index(settings):
    store = Store(settings())
    caps = captures(30)
    res = store.ingest([make_batch(caps[:15], "b1"), make_batch(caps[15:], "b2")])
    assert [(r.stored, r.duplicates, r.rejected) for r in res] == [(15, 0, []), (15, 0, [])]
    assert len(list(store.warc_dir.glob("*.warc.gz"))) > 1, "small max_file_bytes must rotate"
    assert_files_match_index(store)
    for p in store.warc_dir.glob("*.warc.gz"):
        assert p.stat().st_size < 64_000 + 15_000  # rotation keeps files near the limit
    # The response carries the fetch facts.
    row, head, body = store.get(caps[3].url)
    assert body == dict(pages(30, min_size=2_000, max_size=12_000))[caps[3].url]
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert row.host == "a.example" and row.agent_id == "agent-1" and row.status == 200
    assert row.content_type.startswith("text/html") and row.ip == "127.1.1.10"
    store.close()


def test_duplicate_batch_is_stored_once(settings):
    store = Store(settings())
    batch = make_batch(captures(5), "b1")
    first = store.ingest([batch])[0]
    again = store.ingest([batch, batch])
    assert first.stored == 5
    assert [(r.stored, r.duplicates) for r in again] == [(0, 5), (0, 5)]
    assert store.stats()["pages"] == 5
    assert_files_match_index(store)
    store.close()


def test_identical_payload_becomes_revisit(settings):
    store = Store(settings())
    url, body = next(pages(1, min_size=5_000, max_size=5_000))
    a = build_capture(fetch_result(url, body, at=1_700_000_000.0))
    b = build_capture(fetch_result(url, body, at=1_700_000_100.0, agent_id="agent-2"))
    c = build_capture(fetch_result(url.replace("a.example", "mirror.example"), body, at=1_700_000_200.0))
    res = store.ingest([make_batch([a]), make_batch([b, c])])
    assert [r.revisits for r in res] == [0, 2]
    ra, rb = store.index.get(a.record_id), store.index.get(b.record_id)
    assert ra.record_type == "response" and rb.record_type == "revisit" and rb.refers_to == a.record_id
    assert rb.warc_length < ra.warc_length / 3
    # Reading a revisit returns the payload it refers to, with its own headers.
    row, head, got = store.get(url)
    assert row.record_id == b.record_id and got == body and head.startswith(b"HTTP/1.1 200")
    assert store.get(c.url)[2] == body
    with open(store.warc_dir / rb.warc_file, "rb") as fh:
        fh.seek(rb.warc_offset)
        rec = next(iter(ArchiveIterator(fh)))
        assert rec.rec_headers.get_header("WARC-Refers-To-Target-URI") == url
        assert rec.rec_headers.get_header("WARC-Profile").endswith("/revisit/identical-payload-digest")
    assert_files_match_index(store)
    assert store.verify()["ok"]
    store.close()


def test_truncated_and_small_payloads_are_not_deduplicated(settings):
    store = Store(settings())
    url, body = next(pages(1, min_size=5_000, max_size=5_000))
    cut = build_capture(fetch_result(url, body[:3000], truncated="length"))
    cut2 = build_capture(fetch_result(url, body[:3000], truncated="length", at=1_700_000_050.0))
    tiny = [build_capture(fetch_result(f"http://t.example/{i}", b"", status=301)) for i in range(2)]
    res = store.ingest([make_batch([cut, cut2, *tiny])])[0]
    assert res.stored == 4 and res.revisits == 0
    with open(store.warc_dir / store.index.get(cut.record_id).warc_file, "rb") as fh:
        fh.seek(store.index.get(cut.record_id).warc_offset)
        assert next(iter(ArchiveIterator(fh))).rec_headers.get_header("WARC-Truncated") == "length"
    store.close()


def test_index_survives_restart_and_get_nearest_time(settings):
    s = settings()
    store = Store(s)
    url, body1 = next(pages(1, seed=1))
    _, body2 = next(pages(1, seed=2))
    store.ingest([make_batch([build_capture(fetch_result(url, body1, at=1000.0))])])
    store.close()
    store = Store(s)  # a restart
    store.ingest([make_batch([build_capture(fetch_result(url, body2, at=2000.0))])])
    assert store.get(url)[2] == body2  # latest
    assert store.get(url, at=1200.0)[2] == body1
    assert store.get(url, at=1800.0)[2] == body2
    assert store.get(url.replace("a.example", "A.Example:80"), at=0)[2] == body1  # canonical lookup
    with pytest.raises(NotFound):
        store.get("http://nowhere.example/")
    assert store.stats()["pages"] == 2
    assert_files_match_index(store)
    store.close()


def test_bad_captures_are_rejected_and_the_rest_stored(settings):
    store = Store(settings())
    good = captures(3)
    batch = make_batch(good, "mixed")
    bad = batch.captures.add()
    bad.CopyFrom(batch.captures[0])
    bad.record_id = "urn:uuid:bad-1"
    bad.url = "mailto:someone@example.com"
    bad2 = batch.captures.add()
    bad2.CopyFrom(batch.captures[1])
    bad2.record_id = "urn:uuid:bad-2"
    bad2.response = b"not gzip at all"
    res = store.ingest([batch])[0]
    assert res.stored == 3
    assert [(i, rid) for i, rid, _ in res.rejected] == [(3, "urn:uuid:bad-1"), (4, "urn:uuid:bad-2")]
    assert "mixed" in res.rejected[0][2] and "mailto" in res.rejected[0][2]
    assert "gzip" in res.rejected[1][2]
    assert_files_match_index(store)
    store.close()


def test_recovery_cuts_unacknowledged_tail(settings):
    s = settings()
    store = Store(s)
    store.ingest([make_batch(captures(3))])
    store.close()
    # A writer that died after appending but before its index commit leaves a tail and maybe a new file.
    last = sorted(store.warc_dir.glob("*.warc.gz"))[-1]
    size = last.stat().st_size
    with open(last, "ab") as fh:
        fh.write(build_capture(fetch_result("http://x.example/", b"lost" * 100)).response)
    stray = store.warc_dir / "wancrawl-29990101000000-99999-1.warc.gz"
    stray.write_bytes(b"partial")
    store = Store(s)
    assert last.stat().st_size == size
    assert not stray.exists() and stray.with_name(stray.name + ".orphan").exists()
    assert any("truncated" in a for a in store.recovery)
    assert_files_match_index(store)
    assert store.verify()["ok"]
    store.close()


def test_verify_finds_corruption(settings):
    store = Store(settings())
    caps = captures(4)
    store.ingest([make_batch(caps)])
    r = store.verify()
    # Four captures of three records each, plus one warcinfo record per file.
    assert r["ok"] and r["problems"] == [] and r["captures_checked"] == 4
    assert r["files"] >= 1 and r["records"] == 4 * 3 + r["files"]
    row = store.index.get(caps[2].record_id)
    store.close()
    # Replace the record with another valid gzip member of the same size whose payload differs.
    path = store.warc_dir / row.warc_file
    data = bytearray(path.read_bytes())
    other = build_capture(fetch_result(caps[2].url, b"x" * 10, at=1.0)).response
    data[row.warc_offset:row.warc_offset + row.warc_length] = other
    path.write_bytes(bytes(data))
    store = Store(settings())
    report = store.verify()
    assert not report["ok"] and any(caps[2].record_id in p or "not found" in p or "not named" in p for p in report["problems"])
    store.close()


def test_stats_and_cdxj(settings):
    store = Store(settings())
    caps = captures(9)
    store.ingest([make_batch(caps)])
    s = store.stats(top=2)
    assert s["pages"] == 9 and s["hosts"] == 3 and s["agents"] == 1
    assert [(h, n) for h, n, _ in s["per_host"]] == [("a.example", 3), ("b.example", 3)]
    assert all(stored > 0 for _, _, stored in s["per_host"])
    assert s["raw_bytes"] > s["stored_bytes"] > 0 and s["compression_ratio"] > 2
    out = io.StringIO()
    assert store.export_cdxj(out) == 9
    lines = out.getvalue().splitlines()
    assert lines == sorted(lines)
    key, ts, js = lines[0].split(" ", 2)
    fields = json.loads(js)
    assert key == "example,a)/page/0.html" and ts == "20231114221320"
    assert set(fields) == {"url", "mime", "status", "digest", "length", "offset", "filename"}
    assert fields["mime"] == "text/html" and fields["status"] == "200" and fields["digest"].startswith("sha1:")
    # offset/length name a record warcio can read on its own (what pywb does).
    with open(store.warc_dir / fields["filename"], "rb") as fh:
        fh.seek(int(fields["offset"]))
        rec = next(iter(ArchiveIterator(io.BytesIO(fh.read(int(fields["length"]))))))
        assert rec.rec_headers.get_header("WARC-Target-URI") == fields["url"]
    store.close()



def test_cdxj_export_equals_pywbs_indexer(settings, tmp_path):
    """`storage export --cdxj` against an independent reference: cdxj-indexer, the indexer pywb
    runs (`wb-manager add`), over the same WARC files. Responses and revisits, line for line."""
    indexer = Path(sys.executable).parent / "cdxj-indexer"
    if not indexer.exists():
        pytest.skip("cdxj-indexer is in the dev extra: bash scripts/venv.sh installs it")
    store = Store(settings())
    store.ingest([make_batch(captures(9))])
    store.ingest([make_batch(captures(3, at=1_700_100_000.0))])  # the same bodies again: revisits
    out = io.StringIO()
    assert store.export_cdxj(out) == 12
    files = sorted(str(p) for p in store.warc_dir.glob("*.warc.gz"))
    ref = subprocess.run([str(indexer), "--sort", *files], capture_output=True, text=True, timeout=120, check=True).stdout

    def parsed(text):
        rows = []
        for line in text.splitlines():
            key, ts, js = line.split(" ", 2)
            fields = json.loads(js)
            fields["filename"] = Path(fields["filename"]).name  # the indexer writes the path it was given
            rows.append((key, ts, fields))
        return sorted(rows, key=lambda r: (r[0], r[1]))

    ours, theirs = parsed(out.getvalue()), parsed(ref)
    assert len(theirs) == 12 and sum(f["mime"] == "warc/revisit" for _, _, f in theirs) == 3
    assert ours == theirs
    assert all(f["digest"].startswith("sha1:") for _, _, f in ours)
    store.close()

def test_surt():
    assert surt("http://www.Example.com/A/b?z=1&a=2") == "com,example)/a/b?a=2&z=1"
    assert surt("https://sub.example.org:8443/") == "org,example,sub:8443)/"
    assert surt("http://127.0.0.1/x") == "127.0.0.1)/x"
