"""Several storage writers over one PostgreSQL index and one bucket (SeaweedFS): each writer owns
its objects, a record is stored once whichever writer gets it (the index's primary key, not a
process, decides), and get, export --cdxj and verify read every writer's records from the bucket."""

from __future__ import annotations

import io
import json

import pytest
from warcio.archiveiterator import ArchiveIterator

from storage import cli
from storage.client import make_batch
from storage.config import IndexSettings, IngestSettings, ObjectStoreSettings, StorageSettings, WarcSettings
from storage.store import Store
from storage.testing import fetch_result, pages
from wancrawl.errors import Unavailable
from wancrawl.warcrecords import build_capture

pytestmark = pytest.mark.postgres


@pytest.fixture
def writers(pg_schema, bucket, tmp_path):
    url, schema = pg_schema
    server, name = bucket

    def settings(writer_id: str) -> StorageSettings:
        return StorageSettings(
            data_dir=str(tmp_path / writer_id), index=IndexSettings(url=url, schema=schema),
            warc=WarcSettings(sink="s3", max_file_bytes=200_000), ingest=IngestSettings(fsync="os"),
            object_store=ObjectStoreSettings(endpoint=server.endpoint, bucket=name, access_key_id="k", secret_access_key="s",
                                             writer_id=writer_id, create_bucket=True))

    def toml(writer_id: str) -> str:
        path = tmp_path / f"{writer_id}.toml"
        path.write_text(f'data_dir = "{tmp_path / writer_id}"\n[index]\nurl = "{url}"\nschema = "{schema}"\n'
                        f'{server.toml(name, writer_id)}')
        return str(path)

    return settings, toml


def corpus(n: int):
    pairs = list(pages(n, seed=7, min_size=2_000, max_size=10_000))
    return [build_capture(fetch_result(u, b, at=1_700_000_000.0 + i)) for i, (u, b) in enumerate(pairs)], dict(pairs)


def test_two_writers_store_each_record_once_and_read_each_other(writers):
    settings, _ = writers
    caps, bodies = corpus(40)
    w1, w2 = Store(settings("w1")), Store(settings("w2"))
    # Overlapping halves, as when an agent fails over and resends to the other writer.
    (a,) = w1.ingest([make_batch(caps[:25], batch_id="a")])
    (b,) = w2.ingest([make_batch(caps[15:], batch_id="b")])
    assert (a.stored, b.stored, b.duplicates) == (25, 15, 10)
    w1.close()
    w2.close()
    reader = Store(settings("w1"), readonly=True)
    files = {r.warc_file for r in reader.index.iter_rows()}
    assert {f.split("/")[0] for f in files} == {"w1", "w2"}, "each writer owns its objects, named by its id"
    for c in caps:  # any writer's record, read from the bucket
        row, _head, body = reader.get(record_id=c.record_id)
        assert body == bodies[row.url]
    assert reader.stats()["pages"] == 40
    report = reader.verify()
    assert report["ok"] and report["captures_checked"] == 40, report["problems"]
    reader.close()


def test_a_race_between_writers_is_settled_by_the_primary_key(writers, monkeypatch):
    """Both writers see the record as new; the second commit fails on the index's unique
    constraint, nothing of it is kept, and its retry counts the record as a duplicate."""
    settings, _ = writers
    caps, _ = corpus(6)
    w1, w2 = Store(settings("w1")), Store(settings("w2"))
    monkeypatch.setattr(w2.index, "existing_ids", lambda ids: set())  # w2 checked before w1 committed
    w1.ingest([make_batch(caps, batch_id="x")])
    with pytest.raises(Unavailable):
        w2.ingest([make_batch(caps, batch_id="x")])
    monkeypatch.undo()
    (res,) = w2.ingest([make_batch(caps, batch_id="x")])
    assert (res.stored, res.duplicates) == (0, 6)
    w1.close()
    w2.close()
    w2 = Store(settings("w2"))  # its recovery: the rolled-back part is in no object
    assert w2.stats()["pages"] == 6
    assert w2.verify()["ok"], w2.verify()["problems"]
    w2.close()


def test_cli_reads_every_writers_records(writers, capsysbinary):
    settings, toml = writers
    caps, bodies = corpus(10)
    w1, w2 = Store(settings("w1")), Store(settings("w2"))
    w1.ingest([make_batch(caps[:5])])
    w2.ingest([make_batch(caps[5:])])
    w1.close()
    w2.close()
    cfg = toml("w1")
    assert cli.main(["export", "--cdxj", "--config", cfg]) == 0
    lines = capsysbinary.readouterr().out.decode().splitlines()
    names = [json.loads(line.split(" ", 2)[2])["filename"] for line in lines]
    assert len(lines) == 10 and {n.split("/")[3] for n in names} == {"w1", "w2"}
    assert all(n.startswith("s3://") for n in names)
    assert cli.main(["verify", "--config", cfg]) == 0
    url = caps[7].url  # written by w2, read with w1's config
    capsysbinary.readouterr()
    assert cli.main(["get", url, "--config", cfg]) == 0
    assert capsysbinary.readouterr().out == bodies[url]


def test_writer_killed_mid_upload_recovers_only_its_own(writers):
    """w1 dies with an open multipart upload whose parts the index names; w2 keeps writing.
    w1's restart completes its upload; it never touches w2's objects or uploads."""
    settings, _ = writers
    caps, bodies = corpus(20)
    big = settings("w1")
    w1 = Store(big)
    w1.sink._complete_waiting = lambda: None  # type: ignore[method-assign]  # dies before publishing
    w1.ingest([make_batch(caps[:10])])
    w1.index.close()
    w2 = Store(settings("w2"))
    complete = w2.sink._complete_waiting
    w2.sink._complete_waiting = lambda: None  # type: ignore[method-assign]  # w2's upload stays open too
    w2.ingest([make_batch(caps[10:])])
    w1 = Store(big)  # recovery of w1 only
    assert any("completed w1/" in a for a in w1.recovery)
    assert not any("w2/" in a for a in w1.recovery)
    for c in caps[:10]:
        assert w1.get(record_id=c.record_id)[2] == bodies[c.url]
    # w2's object is still an open upload: its records are indexed, readable once it completes.
    uploads = w2.sink._list_uploads()
    assert len(uploads) == 1 and uploads[0][0].startswith("w2/")
    w2.sink._complete_waiting = complete  # type: ignore[method-assign]
    w2.close()
    data = w1.read_range(*_loc(w1, caps[15].record_id))
    assert next(iter(ArchiveIterator(io.BytesIO(data)))).content_stream().read() == bodies[caps[15].url]
    w1.close()


def _loc(store: Store, record_id: str) -> tuple[str, int, int]:
    row = store.index.get(record_id)
    assert row is not None
    return row.warc_file, row.warc_offset, row.warc_length


def test_manager_status_shows_each_writers_ingest_rate_and_lag(writers, run):
    """Two real writers over one index: `manager status --storage a,b` asks each for its own
    status. Pages and bytes per writer agree with the index (which writer's objects hold which
    records), rates come from two readings, lag is the age of the oldest batch not yet durable
    (a writer whose commit is held), and a stopped writer shows down while the totals still come."""
    import asyncio
    import dataclasses
    import threading

    from rich.console import Console

    from manager.status import Snapshot, WriterRates, render_writers, storage_status
    from storage.client import GrpcStorageClient
    from storage.server import create_server
    from manager.procs import free_port

    settings, _ = writers
    caps, _ = corpus(40)

    def writer(wid: str):
        s = settings(wid)
        return create_server(dataclasses.replace(s, listen=f"127.0.0.1:{free_port()}",
                                                 object_store=dataclasses.replace(s.object_store, linger=0.0)))[0]

    async def go():
        w1, w2 = writer("w1"), writer("w2")
        await w1.start()
        await w2.start()
        both = f"{w1.address},{w2.address}"
        rates = WriterRates()
        try:
            totals0, before = await storage_status(both)
            rates.update(Snapshot(0, "", [], totals0, before), now=100.0)
            async with GrpcStorageClient(w1.address) as c1, GrpcStorageClient(w2.address) as c2:
                assert (await c1.send(make_batch(caps[:25]))).stored == 25
                ack = await c2.send(make_batch(caps[15:]))  # 10 resent: duplicates at w2
                assert (ack.stored, ack.duplicates) == (15, 10)
                totals, after = await storage_status(both)
                per_sec = rates.update(Snapshot(0, "", [], totals, after), now=102.0)

                # w2's commit is held: its lag is the age of the batch waiting there.
                entered, release = threading.Event(), threading.Event()
                ingest = w2.store.ingest

                def held(batches):
                    entered.set()
                    release.wait(30)
                    return ingest(batches)

                w2.store.ingest = held  # type: ignore[method-assign]
                clock = [1000.0]
                w2.committer.clock = lambda: clock[0]
                pending = asyncio.ensure_future(c2.send(make_batch(caps[:5])))
                await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
                clock[0] = 1007.5
                _, lagging = await storage_status(both)
                release.set()
                assert (await pending).duplicates == 5
                _, settled = await storage_status(both)
            await w2.stop(0)
            totals_one_down, one_down = await storage_status(both)
        finally:
            await w1.stop(0)
            await w2.stop(0)
        return before, totals, after, per_sec, lagging, settled, totals_one_down, one_down, both.split(",")

    before, totals, after, per_sec, lagging, settled, totals_one_down, one_down, (a1, a2) = run(go())
    assert [(w.up, w.pages, w.lag, w.since_durable, w.queued_batches) for w in before] == [(True, 0, 0.0, -1.0, 0)] * 2
    assert int(totals["pages"]) == 40 and "writer" not in totals
    # The index says which writer wrote what: each writer's objects are under its id.
    reader = Store(writers[0]("w1"), readonly=True)
    written = {"w1": 0, "w2": 0}
    for r in reader.index.iter_rows():
        written[r.warc_file.split("/")[0]] += r.group_length
    reader.close()
    w1v, w2v = after
    assert (w1v.writer_id, w1v.sink, w1v.pages, w1v.duplicates, w1v.bytes_written) == ("w1", "s3", 25, 0, written["w1"])
    assert (w2v.writer_id, w2v.pages, w2v.duplicates, w2v.bytes_written) == ("w2", 15, 10, written["w2"])
    assert w1v.since_durable >= 0 and w1v.lag == 0.0 and w1v.queued_batches == 0
    assert per_sec == {a1: (25 / 2, written["w1"] / 2), a2: (15 / 2, written["w2"] / 2)}
    assert (lagging[1].queued_batches, lagging[1].lag) == (1, 7.5) and lagging[0].lag == 0.0
    assert (settled[1].queued_batches, settled[1].lag, settled[1].duplicates) == (0, 0.0, 15)
    assert [w.up for w in one_down] == [True, False] and one_down[1].error
    assert int(totals_one_down["pages"]) == 40, "the totals come from a writer that answers"
    console = Console(width=160, record=True)
    console.print(render_writers(Snapshot(0, "", [], totals_one_down, one_down), {a1: (12.5, 1e6)}))
    text = console.export_text()
    assert "w1" in text and "12.5" in text and "down" in text and a2 in text
