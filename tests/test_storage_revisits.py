"""Storage's side of revisits (issue 26): a 304 becomes a server-not-modified revisit of the URL's
latest capture with the digest the agent names; an unchanged 200 an identical-payload-digest
revisit of its own URL whatever its size; the index answers a URL's latest capture and history."""

from __future__ import annotations

import dataclasses

import pytest
from warcio.archiveiterator import ArchiveIterator

from storage.client import make_batch
from storage.config import IndexSettings, IngestSettings, StorageSettings, WarcSettings
from storage.store import Store
from storage.testing import fetch_result, pages
from wancrawl.warcrecords import NOT_MODIFIED_PROFILE, REVISIT_PROFILE, build_capture


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def settings(request, tmp_path):
    if request.param == "sqlite":
        index = IndexSettings()
    else:
        url, schema = request.getfixturevalue("pg_schema")
        index = IndexSettings(url=url, schema=schema)
    return StorageSettings(data_dir=str(tmp_path / "data"), index=index, warc=WarcSettings(), ingest=IngestSettings(fsync="os"))


def not_modified(url: str, previous_digest: str, at: float, agent_id: str = "agent-1"):
    """The revisit helper's contract: a normal capture of the 304, payload_digest = the sending
    agent's last capture's digest of that URL."""
    cap = build_capture(fetch_result(url, b"", status=304, at=at, agent_id=agent_id))
    return dataclasses.replace(cap, payload_digest=previous_digest)


def record_at(store: Store, record_id: str):
    row = store.index.get(record_id)
    data = store.read_range(row.warc_file, row.warc_offset, row.warc_length)
    import io
    rec = next(iter(ArchiveIterator(io.BytesIO(data))))
    return rec, rec.content_stream().read()


def test_304_is_a_server_not_modified_revisit_of_the_latest_capture_with_that_digest(settings):
    store = Store(settings)
    (url, body1), (_, body2) = list(pages(2, seed=7, min_size=3_000, max_size=4_000))
    first = build_capture(fetch_result(url, body1, at=1000.0))
    changed = build_capture(fetch_result(url, body2, at=2000.0))
    again = build_capture(fetch_result(url, body1, at=3000.0))  # back to the first payload
    store.ingest([make_batch([first, changed, again])])
    # `again` is an identical-payload revisit of `first` (the URL's latest capture was `changed`,
    # so no same-URL revisit; body1 is a stored payload: the cross-URL dedup applies).
    nm = not_modified(url, changed.payload_digest, 4000.0)
    nm2 = not_modified(url, first.payload_digest, 5000.0)
    res = store.ingest([make_batch([nm, nm2])])[0]
    assert res.stored == 2 and res.revisits == 2
    for cap, orig in ((nm, changed), (nm2, first)):
        row = store.index.get(cap.record_id)
        assert (row.record_type, row.status, row.refers_to, row.payload_digest) == ("revisit", 304, orig.record_id, orig.payload_digest)
        rec, block = record_at(store, cap.record_id)
        h = rec.rec_headers
        assert rec.rec_type == "revisit" and h.get_header("WARC-Profile") == NOT_MODIFIED_PROFILE
        assert rec.rec_headers.protocol == "WARC/1.1"
        assert h.get_header("WARC-Refers-To") == f"<{orig.record_id}>"
        assert h.get_header("WARC-Refers-To-Target-URI") == url and h.get_header("WARC-Refers-To-Date") == orig.warc_date
        assert rec.http_headers.get_statuscode() == "304" and block == b""
    # Reading one gives the payload it stands for.
    assert store.get(url, at=4000.0)[2] == body2 and store.get(url)[2] == body1
    assert store.verify()["ok"]
    store.close()


def test_304_without_an_indexed_capture_is_stored_as_a_response(settings):
    store = Store(settings)
    url = "http://a.example/never-seen.html"
    nm = not_modified(url, "sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 100.0)
    res = store.ingest([make_batch([nm])])[0]
    row = store.index.get(nm.record_id)
    assert res.revisits == 0 and row.record_type == "response" and row.status == 304
    rec, _ = record_at(store, nm.record_id)
    assert rec.rec_type == "response" and rec.rec_headers.get_header("WARC-Payload-Digest") == row.payload_digest
    assert store.verify()["ok"]  # the index holds the record's own digest, not the one the agent named
    store.close()


def refetch(url: str, body: bytes, at: float):
    """A capture the agent flags a refetch: its revisit schedule holds a previous capture of the URL."""
    return dataclasses.replace(build_capture(fetch_result(url, body, at=at)), refetch=True)


def test_unchanged_200_is_a_revisit_of_its_url_whatever_its_size(settings):
    store = Store(dataclasses.replace(settings, ingest=IngestSettings(fsync="os", dedup_min_bytes=1_000_000)))
    url, body = "http://a.example/small.html", b"<html><body>tiny page</body></html>"
    a = build_capture(fetch_result(url, body, at=1.0))
    b = refetch(url, body, at=2.0)
    other = build_capture(fetch_result("http://a.example/other.html", body, at=3.0))
    store.ingest([make_batch([a])])
    res = store.ingest([make_batch([b, other])])[0]
    assert res.revisits == 1  # the same URL; another URL under dedup_min_bytes is not
    rb = store.index.get(b.record_id)
    assert rb.record_type == "revisit" and rb.refers_to == a.record_id
    rec, _ = record_at(store, b.record_id)
    assert rec.rec_headers.get_header("WARC-Profile") == REVISIT_PROFILE
    assert store.index.get(other.record_id).record_type == "response"
    # A third unchanged fetch refers to the response holding the payload, not to the revisit.
    c = refetch(url, body, at=4.0)
    store.ingest([make_batch([c])])
    assert store.index.get(c.record_id).refers_to == a.record_id
    store.close()


def test_only_flagged_refetches_ask_the_index_for_the_latest_capture(settings, monkeypatch):
    """A first-time crawl pays for no same-URL lookup: the index's `latest` is asked only for the
    200s the agent flagged a refetch (in one call per ingest group). The choice for an unflagged
    capture: taken for a first one, so an unchanged refetch an agent did not flag (an older agent,
    or a page fetched again after a kill before its "done" reached the backup) is a revisit only
    through the digest index, above dedup_min_bytes; under it, a second response."""
    store = Store(dataclasses.replace(settings, ingest=IngestSettings(fsync="os", dedup_min_bytes=1_000_000)))
    asked: list[list[str]] = []
    real = store.index.latest

    def spy(urls):
        urls = list(urls)
        asked.append(urls)
        return real(urls)

    monkeypatch.setattr(store.index, "latest", spy)
    first = [build_capture(fetch_result(f"http://a.example/{i}.html", b"<p>page %d</p>" % i, at=1.0)) for i in range(5)]
    res = store.ingest([make_batch(first[:3]), make_batch(first[3:])])
    assert [r.stored for r in res] == [3, 2] and asked == []  # a first-time crawl: no lookup
    # Unflagged and unchanged, under dedup_min_bytes: a second response, still no lookup.
    again = build_capture(fetch_result(first[0].url, b"<p>page 0</p>", at=2.0))
    store.ingest([make_batch([again])])
    assert asked == [] and store.index.get(again.record_id).record_type == "response"
    # Flagged: one lookup for the group, of the flagged URLs only, and the unchanged one is a revisit.
    r1, r2 = refetch(first[1].url, b"<p>page 1</p>", 3.0), refetch(first[2].url, b"<p>page 2 changed</p>", 3.0)
    new = build_capture(fetch_result("http://a.example/new.html", b"<p>new</p>", at=3.0))
    res = store.ingest([make_batch([r1, new]), make_batch([r2])])
    assert len(asked) == 1 and sorted(asked[0]) == sorted([first[1].url, first[2].url])
    assert store.index.get(r1.record_id).record_type == "revisit" and store.index.get(r1.record_id).refers_to == first[1].record_id
    assert store.index.get(r2.record_id).record_type == "response"
    assert store.index.get(new.record_id).record_type == "response"
    store.close()


def test_history_and_latest_and_idempotent_ingest(settings):
    store = Store(settings)
    url, body = next(pages(1, seed=3))
    a = build_capture(fetch_result(url, body, at=10.0))
    b = not_modified(url, a.payload_digest, 20.0)
    c = build_capture(fetch_result(url, body + b"<!-- changed -->", at=30.0))
    for _ in range(2):  # resent batches are duplicates, stored once
        res = store.ingest([make_batch([a]), make_batch([b, c])])
    assert [r.duplicates for r in res] == [1, 2]
    hist = store.history(url)
    assert [(r.record_id, r.status, r.record_type) for r in hist] == [
        (a.record_id, 200, "response"), (b.record_id, 304, "revisit"), (c.record_id, 200, "response")]
    assert [r.record_id for r in store.history(url, limit=2)] == [b.record_id, c.record_id]
    assert store.find(url).record_id == c.record_id  # the latest capture
    assert store.history("http://nowhere.example/") == []
    store.close()


def test_cdxj_replays_a_304_revisit_as_the_capture_it_refers_to(settings):
    import io
    import json

    store = Store(settings)
    url, body = next(pages(1, seed=4))
    a = build_capture(fetch_result(url, body, at=1_700_000_000.0))
    b = not_modified(url, a.payload_digest, 1_700_000_600.0)
    store.ingest([make_batch([a]), make_batch([b])])
    out = io.StringIO()
    store.export_cdxj(out)
    lines = [json.loads(line.split(" ", 2)[2]) | {"ts": line.split(" ")[1]} for line in out.getvalue().splitlines()]
    assert [x["ts"] for x in lines] == ["20231114221320", "20231114222320"]
    assert lines[1]["status"] == "200" and lines[1]["offset"] == lines[0]["offset"] and lines[1]["digest"] == lines[0]["digest"]
    store.close()


def test_pywb_replays_a_304_revisit_as_the_earlier_capture(tmp_path):
    """pywb's own replay server (as tests/test_storage_replay.py runs it, here over the local sink):
    at the 304's time it answers with the earlier capture's status and body, not an empty 304;
    warcio reads every record of the files (verify)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("pywb", reason="pywb (the dev extra) is not installed")
    from storage.store import timestamp14
    from manager.procs import free_port

    from test_storage_replay import _get_when_up

    settings = StorageSettings(data_dir=str(tmp_path / "data"), index=IndexSettings(), warc=WarcSettings(),
                               ingest=IngestSettings(fsync="os"))
    store = Store(settings)
    (url, body1), (_, body2) = list(pages(2, seed=9, min_size=3_000, max_size=5_000))
    t1, t2, t3 = 1_700_000_000.0, 1_700_003_600.0, 1_700_007_200.0
    a = build_capture(fetch_result(url, body1, at=t1))
    nm = not_modified(url, a.payload_digest, t2)
    c = build_capture(fetch_result(url, body2, at=t3))
    store.ingest([make_batch([a]), make_batch([nm]), make_batch([c])])
    assert store.index.get(nm.record_id).record_type == "revisit" and store.verify()["ok"]
    index = tmp_path / "index.cdxj"
    with open(index, "w") as out:
        store.export_cdxj(out)
    warcs = store.warc_dir
    store.close()
    (tmp_path / "config.yaml").write_text(
        f"collections:\n  local:\n    index_paths: {index}\n    archive_paths: ['{warcs}/']\n"
        "framed_replay: false\nenable_memento: true\n")
    port = free_port()
    log = open(tmp_path / "pywb.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", "from pywb.apps.cli import wayback; wayback()", "--port", str(port),
                             "--bind", "127.0.0.1"], cwd=tmp_path, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
    try:
        for at, want in ((t2, body1), (t1, body1), (t3, body2)):
            got = _get_when_up(f"http://127.0.0.1:{port}/local/{timestamp14(at)}id_/{url}", proc)
            assert got == want, (timestamp14(at), got[:300])
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
