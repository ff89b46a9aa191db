"""A storage process killed with SIGKILL during ingest loses no acknowledged page and recovers cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from storage.client import GrpcStorageClient, make_batch
from storage.config import load
from storage.store import Store
from storage.testing import fetch_result, pages
from wancrawl.errors import Unavailable
from wancrawl.warcrecords import build_capture

ROOT = Path(__file__).resolve().parent.parent


def start_storage(cfg: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "storage.cli", "serve", "--config", str(cfg)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("storage serving on "):
            return proc, line.split()[-1]
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"storage did not start: {proc.stderr.read()}")


@pytest.mark.parametrize("fsync", ["always", "os"])
def test_sigkill_during_ingest_loses_no_acknowledged_page(tmp_path, fsync):
    cfg = tmp_path / "storage.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\ndata_dir = "data"\n[warc]\nmax_file_bytes = 300000\n[ingest]\nfsync = "{fsync}"\n')
    caps = [build_capture(fetch_result(u, b, at=1_700_000_000.0 + i))
            for i, (u, b) in enumerate(pages(600, min_size=2_000, max_size=8_000))]
    batches = [make_batch(caps[i:i + 10], f"b{i}") for i in range(0, len(caps), 10)]
    proc, addr = start_storage(cfg)
    acked: set[str] = set()

    async def sender():
        client = GrpcStorageClient(addr, timeout=10)
        try:
            for b in batches:
                try:
                    ack = await client.send(b)
                except Unavailable:
                    return
                assert not ack.rejected
                acked.update(c.record_id for c in b.captures)
        finally:
            await client.close()

    async def killer():
        while len(acked) < 150:
            await asyncio.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)

    async def main():
        await asyncio.wait_for(asyncio.gather(sender(), killer()), 60)

    asyncio.run(main())
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    assert 150 <= len(acked) < len(caps), "the kill must land during ingest"

    settings = load(cfg)
    store = Store(settings)  # recovery runs here
    for rid in acked:
        row, _head, body = store.get(record_id=rid)
        assert row.record_id == rid and body
    assert store.verify()["ok"], store.verify()["problems"]
    # warcio reads every file and finds exactly what the index names.
    n_records = 0
    files = sorted(store.warc_dir.glob("*.warc.gz"))
    for path in files:
        with open(path, "rb") as fh:
            n_records += sum(1 for _ in ArchiveIterator(fh))
    indexed = store.stats()["pages"]
    assert n_records == len(files) + 3 * indexed
    store.close()

    # The agent resends what was in flight (and everything unacknowledged): stored once.
    proc, addr = start_storage(cfg)
    try:
        async def resend():
            async with GrpcStorageClient(addr) as client:
                return await client.send(batches)

        ack = asyncio.run(resend())
        assert ack.stored + ack.duplicates == len(caps)
        assert ack.duplicates >= len(acked)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert proc.returncode == 0
    store = Store(settings)
    assert store.stats()["pages"] == len(caps)
    assert store.verify()["ok"]
    store.close()
