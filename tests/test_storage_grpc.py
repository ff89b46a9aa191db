"""The Storage gRPC service and the `storage` CLI, with real servers on 127.0.0.1 port 0."""

from __future__ import annotations

import asyncio
import json

import pytest

from storage import cli
from storage.client import GrpcStorageClient, StorageClient, make_batch
from storage.config import load
from storage.server import SERVICE_NAME, create_server
from storage.testing import FakeStorageClient, fetch_result, pages
from wancrawl import grpcutil
from wancrawl.errors import InvalidArgument, NotFound, Unavailable
from wancrawl.warcrecords import build_capture


def write_config(tmp_path, extra=""):
    cfg = tmp_path / "storage.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\ndata_dir = "data"\n[warc]\nmax_file_bytes = 200000\n{extra}')
    return cfg


def run(coro):
    return asyncio.run(coro)


def captures(n, seed=1, at=1_700_000_000.0):
    return [build_capture(fetch_result(u, b, at=at + i)) for i, (u, b) in enumerate(pages(n, seed=seed, min_size=2_000, max_size=9_000))]


async def with_server(settings, fn):
    svc, port = create_server(settings)
    await svc.start()
    try:
        return await fn(svc.address)
    finally:
        await svc.stop(0.5)


def test_ingest_get_stats_over_grpc(tmp_path):
    settings = load(write_config(tmp_path))
    caps = captures(12)

    async def go(addr):
        assert await grpcutil.check_health(addr, SERVICE_NAME)
        client = GrpcStorageClient(addr)
        assert isinstance(client, StorageClient)
        ack = await client.send([make_batch(caps[:6], "one"), make_batch(caps[6:], "two")])
        assert (ack.batches, ack.stored, ack.duplicates, ack.rejected) == (2, 12, 0, [])
        again = await client.send(make_batch(caps[6:], "two-retry"))  # the ack was "lost"
        assert (again.stored, again.duplicates) == (0, 6)
        got = await client.get(caps[4].url)
        assert got.capture.record_id == caps[4].record_id and got.body.startswith(b"<!DOCTYPE html>")
        assert got.http_headers.startswith(b"HTTP/1.1 200 OK")
        with pytest.raises(NotFound):
            await client.get("http://missing.example/")
        with pytest.raises(InvalidArgument, match="mailto"):
            await client.get("mailto:x@example.com")
        st = await client.stats(top=5)
        assert st.pages == 12 and st.hosts == 3 and st.compression_ratio > 2
        assert {c.key: c.pages for c in st.per_host} == {"a.example": 4, "b.example": 4, "c.example": 4}
        await client.close()
        return addr

    run(with_server(settings, go))


def test_a_batch_sent_as_its_serialized_bytes_is_the_same_batch_to_storage(tmp_path):
    """The shipper sends a spool file's bytes as they are (issue 24): storage decodes them as the
    message they serialize. Stored from the bytes, a capture reads back as the message's would,
    and the message sent after its bytes (or in one stream beside them) is a duplicate."""
    settings = load(write_config(tmp_path))
    caps = captures(9)
    one, two, three = make_batch(caps[:3], "one"), make_batch(caps[3:6], "two"), make_batch(caps[6:], "three")

    async def go(addr):
        client = GrpcStorageClient(addr)
        ack = await client.send(one.SerializeToString())
        assert (ack.batches, ack.stored, ack.duplicates, ack.rejected) == (1, 3, 0, [])
        mixed = await client.send([two.SerializeToString(), three, one])
        assert (mixed.batches, mixed.stored, mixed.duplicates) == (3, 6, 3)
        again = await client.send([two, three.SerializeToString()])
        assert (again.stored, again.duplicates) == (0, 6)
        for c in caps[:4]:
            got = await client.get(c.url)
            assert (got.capture.record_id, got.capture.payload_digest, got.capture.fetched_at) == (c.record_id, c.payload_digest, c.fetched_at)
            assert got.http_headers == c.http_headers and got.body.startswith(b"<!DOCTYPE html>")
        with pytest.raises(InvalidArgument):
            await client.send(b"\x0a\xff")  # not a PageBatch: refused whole, as a bad message is
        await client.close()

    run(with_server(settings, go))


def test_concurrent_streams_share_commits_and_stay_idempotent(tmp_path):
    settings = load(write_config(tmp_path))
    caps = captures(40)

    async def go(addr):
        clients = [GrpcStorageClient(addr) for _ in range(4)]
        # Every client sends every capture: each must be stored exactly once.
        batches = [make_batch(caps[i:i + 10]) for i in range(0, 40, 10)]
        acks = await asyncio.gather(*(c.send(batches[k:] + batches[:k]) for k, c in enumerate(clients)))
        assert sum(a.stored for a in acks) == 40
        assert sum(a.duplicates for a in acks) == 120
        st = await clients[0].stats()
        for c in clients:
            await c.close()
        return st

    st = run(with_server(settings, go))
    assert st.pages == 40


def test_rejections_are_reported_per_capture(tmp_path):
    settings = load(write_config(tmp_path))
    caps = captures(2)

    async def go(addr):
        batch = make_batch(caps, "b")
        batch.captures[1].url = "not a url"
        async with GrpcStorageClient(addr) as client:
            return await client.send(batch)

    ack = run(with_server(settings, go))
    assert ack.stored == 1 and len(ack.rejected) == 1
    batch_id, index, rid, reason = ack.rejected[0]
    assert (batch_id, index, rid) == ("b", 1, caps[1].record_id) and "not a url" in reason


def test_unreachable_storage_is_unavailable():
    async def go():
        client = GrpcStorageClient("127.0.0.1:1", timeout=2)
        try:
            await client.send(make_batch(captures(1)))
        finally:
            await client.close()

    with pytest.raises(Unavailable):
        run(go())


def test_fake_client_satisfies_the_interface():
    fake = FakeStorageClient()
    assert isinstance(fake, StorageClient)
    b = make_batch(captures(2))
    assert run(fake.send(b)).stored == 2 and run(fake.send(b)).duplicates == 2


def test_cli_reads_directly_and_over_grpc(tmp_path, capsys):
    cfg = write_config(tmp_path)
    settings = load(cfg)
    caps = captures(6)
    body = dict(pages(6, min_size=2_000, max_size=9_000))[caps[2].url]

    async def go(addr):
        async with GrpcStorageClient(addr) as client:
            await client.send(make_batch(caps))
        # gRPC reads run in a thread: the CLI starts its own event loop.
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, cli.main, ["stats", "--json", "--storage", addr]) == 0
        stats = json.loads(capsys.readouterr().out)
        assert stats["pages"] == 6 and stats["per_host"][0][:2] == ["a.example", 2] and stats["per_host"][0][2] > 0
        assert await loop.run_in_executor(None, cli.main, ["get", caps[2].url, "--storage", addr]) == 0
        assert capsys.readouterr().out == body.decode()

    run(with_server(settings, go))

    assert cli.main(["stats", "--json", "--config", str(cfg)]) == 0
    assert json.loads(capsys.readouterr().out)["pages"] == 6
    assert cli.main(["get", caps[2].url, "--info", "--config", str(cfg)]) == 0
    assert json.loads(capsys.readouterr().out)["record_id"] == caps[2].record_id
    assert cli.main(["export", "--cdxj", "--config", str(cfg)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 6
    assert cli.main(["verify", "--config", str(cfg)]) == 0
    assert "OK" in capsys.readouterr().out
    assert cli.main(["get", "http://nothing.example/", "--config", str(cfg)]) == 2
    assert "no capture" in capsys.readouterr().err


def test_config_errors_name_the_key(tmp_path, capsys):
    cfg = write_config(tmp_path, '[ingest]\nfsync = "sometimes"\n')
    assert cli.main(["stats", "--config", str(cfg)]) == 2
    assert "fsync" in capsys.readouterr().err
    cfg = write_config(tmp_path, "[ingest]\nfsyncc = true\n")
    assert cli.main(["stats", "--config", str(cfg)]) == 2
    assert "ingest.fsyncc" in capsys.readouterr().err


def test_prometheus_metrics_count_what_was_acknowledged(tmp_path):
    import urllib.request

    from conftest import free_port

    port = free_port()
    cfg = tmp_path / "storage.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\ndata_dir = "data"\nmetrics_listen = "127.0.0.1:{port}"\n')
    settings = load(cfg)
    caps = captures(5)

    async def go(addr):
        async with GrpcStorageClient(addr) as client:
            batch = make_batch(caps)
            await client.send(batch)
            await client.send(batch)  # a retry: stored once
        return await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())

    text = run(with_server(settings, go))
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("wancrawl_storage_")}
    assert values["wancrawl_storage_stored_total"] == 5 and values["wancrawl_storage_duplicates_total"] == 5
    assert values["wancrawl_storage_ingest_calls_total"] == 2


def test_lookup_names_the_urls_with_captures_and_their_statuses(tmp_path):
    """Lookup (what a promoted agent asks before refetching) against the captures sent: every
    stored URL, as asked (canonical or not), with the statuses of its captures; nothing else."""
    settings = load(write_config(tmp_path))
    caps = captures(6)
    failed = build_capture(fetch_result("http://d.example/busy", b"try later", status=503))

    async def go(addr):
        client = GrpcStorageClient(addr)
        await client.send(make_batch([*caps, failed]))
        stored = [c.url for c in caps]
        variant = stored[0].replace("http://", "HTTP://").replace(".example/", ".example:80/") + "#frag"
        asked = [*stored, variant, failed.url, "http://missing.example/", "mailto:x@example.com"]
        found = await client.lookup(asked)
        assert found == {**{u: {200} for u in stored}, variant: {200}, failed.url: {503}}
        await client.close()

    run(with_server(settings, go))


def test_history_over_grpc_and_from_the_cli(tmp_path, capsys):
    import dataclasses

    from storage.testing import fetch_result
    from wancrawl.warcrecords import build_capture

    cfg = write_config(tmp_path)
    settings = load(cfg)
    url, body = next(pages(1, min_size=2_000, max_size=3_000))
    a = build_capture(fetch_result(url, body, at=100.0))
    nm = dataclasses.replace(build_capture(fetch_result(url, b"", status=304, at=200.0)), payload_digest=a.payload_digest)
    b = build_capture(fetch_result(url, body, at=300.0))

    async def go(addr):
        async with GrpcStorageClient(addr) as client:
            await client.send(make_batch([a, nm, b]))
            hist = await client.history(url)
            assert [(c.record_id, c.status, c.record_type, c.refers_to) for c in hist.captures] == [
                (a.record_id, 200, "response", ""), (nm.record_id, 304, "revisit", a.record_id),
                (b.record_id, 200, "revisit", a.record_id)]
            assert [c.record_id for c in (await client.history(url, limit=1)).captures] == [b.record_id]
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, cli.main, ["history", url, "--json", "--storage", addr]) == 0
        assert [json.loads(x)["status"] for x in capsys.readouterr().out.splitlines()] == [200, 304, 200]

    run(with_server(settings, go))
    assert cli.main(["history", url, "--config", str(cfg)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and " 304 revisit " in out[1] and out[2].endswith(f"-> {a.record_id}")
    assert cli.main(["history", "http://nothing.example/", "--config", str(cfg)]) == 1
