"""Agents' failover between storage writers ranked by region (storage/client.py): a real
client over two writers sharing one index, the first stopped mid-way. The decision is
wancrawl/failover.py's Ranking, shared with the consultant's replicas (tests/test_failover.py)."""

from __future__ import annotations

import asyncio

from storage.client import FailoverStorageClient, StorageClient, make_batch, storage_client
from storage.config import IndexSettings, IngestSettings, StorageSettings, WarcSettings
from storage.server import create_server
from storage.store import Store
from storage.testing import fetch_result, pages
from wancrawl.errors import ConfigError, Unavailable
from manager.procs import free_port
from wancrawl.warcrecords import build_capture

def test_one_address_is_a_plain_client_several_fail_over():
    async def go():  # grpc.aio channels belong to a running loop
        one = storage_client("127.0.0.1:1")
        assert not isinstance(one, FailoverStorageClient)
        both = storage_client("127.0.0.1:1, 127.0.0.1:2")
        assert isinstance(both, FailoverStorageClient) and both.targets == ["127.0.0.1:1", "127.0.0.1:2"]
        assert isinstance(both, StorageClient)
        try:
            storage_client("127.0.0.1:1,127.0.0.1:1")
            raise AssertionError("a writer listed twice is a configuration error")
        except ConfigError:
            pass
        await one.close()
        await both.close()

    asyncio.run(go())


def test_an_agent_fails_over_to_the_next_writer_and_back(tmp_path):
    """Writer a (the agent's region) is stopped: the same client ships to b; nothing is lost, a
    batch resent after the switch is stored once (one index); a restarted a is used again."""
    index = IndexSettings(url=f"sqlite:///{tmp_path / 'index.sqlite'}")
    ports = [free_port(), free_port()]

    def writer(k: int) -> StorageSettings:
        return StorageSettings(listen=f"127.0.0.1:{ports[k]}", data_dir=str(tmp_path / f"w{k}"), index=index,
                               warc=WarcSettings(max_file_bytes=200_000, prefix=f"w{k}"), ingest=IngestSettings(fsync="os"))

    caps = [build_capture(fetch_result(u, b, at=1_700_000_000.0 + i))
            for i, (u, b) in enumerate(pages(30, seed=5, min_size=2_000, max_size=6_000))]
    batches = [make_batch(caps[i:i + 10], batch_id=f"b{i}") for i in range(0, 30, 10)]
    now = [0.0]

    async def go():
        a, _ = create_server(writer(0))
        b, _ = create_server(writer(1))
        await a.start()
        await b.start()
        client = FailoverStorageClient([a.address, b.address], timeout=5.0, retry_after=10.0, max_retry_after=10.0,
                                       clock=lambda: now[0])
        try:
            assert (await client.send(batches[0])).stored == 10
            await a.stop(0)
            ack = await client.send(batches[:2])  # the first batch again: a duplicate at b
            assert (ack.stored, ack.duplicates) == (10, 10)
            assert client.writers.current == 1
            assert client.writers.stats.failovers == 1
            now[0] += 11.0  # past retry_after: a is asked first again (it is still down: b answers)
            assert (await client.send(batches[2])).stored == 10
            a2, _ = create_server(writer(0))
            await a2.start()
            # The client's channel to a reconnects with a short backoff (failover.RECONNECT_OPTIONS):
            # until then a fails fast and b answers; each later try past retry_after asks a first again.
            for _ in range(40):
                now[0] += 11.0
                assert (await client.send(batches[2])).duplicates == 10
                if client.writers.current == 0:
                    break
                await asyncio.sleep(0.25)
            assert client.writers.current == 0, "back to its own region's writer"
            await a2.stop(0)
            await b.stop(0)
            try:
                await client.send(batches[0])
                raise AssertionError("every writer down must raise Unavailable (the agent keeps the batch spooled)")
            except Unavailable as exc:
                assert "no storage writer answered" in str(exc)
        finally:
            await client.close()

    asyncio.run(go())
    store = Store(writer(0), readonly=True)
    assert store.stats()["pages"] == 30
    store.close()


def test_a_hung_writer_is_passed_within_one_call(tmp_path):
    """The agent's own writer accepts connections and never answers (paused, partitioned): the
    batch reaches the next writer within the same send, and later sends go there directly."""
    from test_failover import silent_listener

    settings_ = StorageSettings(listen=f"127.0.0.1:{free_port()}", data_dir=str(tmp_path / "w"),
                                ingest=IngestSettings(fsync="os"))
    caps = [build_capture(fetch_result(u, b)) for u, b in pages(4, seed=7)]

    async def go():
        live, _ = create_server(settings_)
        await live.start()
        try:
            with silent_listener() as hung:
                client = FailoverStorageClient([hung, live.address], timeout=10.0, attempt_timeout=1.0)
                try:
                    first = await client.send(make_batch(caps[:2]))
                    counters = client.writers.stats.as_dict()
                    second = await client.send(make_batch(caps[2:]))
                    return first, counters, second, client.writers.stats.as_dict(), client.writers.current
                finally:
                    await client.close()
        finally:
            await live.stop(0)

    first, counters, second, after, current = asyncio.run(go())
    assert (first.stored, second.stored) == (2, 2)
    assert counters == {"attempts": 2, "failovers": 1, "all_failed": 0}
    assert after == {"attempts": 3, "failovers": 1, "all_failed": 0}, "the hung writer is not asked again at once"
    assert current == 1
