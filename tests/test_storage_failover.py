"""Agents' failover between storage writers ranked by region (storage/client.py): the pure
decision (WriterChoice, hypothesis against a small model) and a real client over two writers
sharing one index, the first stopped mid-way."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings, strategies as st

from storage.client import FailoverStorageClient, StorageClient, WriterChoice, make_batch, storage_client
from storage.config import IndexSettings, IngestSettings, StorageSettings, WarcSettings
from storage.server import create_server
from storage.store import Store
from storage.testing import fetch_result, pages
from wancrawl.errors import Unavailable
from wancrawl.procs import free_port
from wancrawl.warcrecords import build_capture

# (writer index, answers?, seconds since the last event)
events = st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.floats(0, 50)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.floats(1, 60), events)
def test_writer_choice_follows_the_rules(n, back_after, evs):
    c = WriterChoice(n, back_after)
    now = 0.0
    first_failed: float | None = None
    current = 0
    for i, ok, dt in evs:
        now += dt
        order = c.order(now)
        # Every writer once per call, the chosen one first.
        assert sorted(order) == list(range(n))
        # Model: the first-ranked writer is tried first once back_after has passed since it failed
        # (or it never failed); otherwise the writer that last answered (or the next after a failure).
        expect = 0 if first_failed is None or now - first_failed >= back_after else current
        assert order[0] == expect
        i %= n
        if ok:
            c.succeeded(i)
            current = i
            if i == 0:
                first_failed = None
        else:
            c.failed(i, now)
            if i == 0:
                first_failed = now
            if i == current:
                current = (i + 1) % n


def test_one_address_is_a_plain_client_several_fail_over():
    async def go():  # grpc.aio channels belong to a running loop
        one = storage_client("127.0.0.1:1")
        assert not isinstance(one, FailoverStorageClient)
        both = storage_client("127.0.0.1:1, 127.0.0.1:2")
        assert isinstance(both, FailoverStorageClient) and both.targets == ["127.0.0.1:1", "127.0.0.1:2"]
        assert isinstance(both, StorageClient)
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
        client = FailoverStorageClient([a.address, b.address], timeout=5.0, back_after=10.0, clock=lambda: now[0])
        try:
            assert (await client.send(batches[0])).stored == 10
            await a.stop(0)
            ack = await client.send(batches[:2])  # the first batch again: a duplicate at b
            assert (ack.stored, ack.duplicates) == (10, 10)
            assert client.choice.current == 1
            now[0] += 11.0  # past back_after: a is asked first again (it is still down: b answers)
            assert (await client.send(batches[2])).stored == 10
            a2, _ = create_server(writer(0))
            await a2.start()
            # The client's channel to a reconnects with gRPC's backoff: until then a fails fast and
            # b answers; each later try past back_after asks a first again.
            for _ in range(40):
                now[0] += 11.0
                assert (await client.send(batches[2])).duplicates == 10
                if client.choice.current == 0:
                    break
                await asyncio.sleep(0.25)
            assert client.choice.current == 0, "back to its own region's writer"
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
