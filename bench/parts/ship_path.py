"""The agent's ship path alone: CPU per page to send spooled batches of lab pages to a real
storage over gRPC, the spool file parsed into a PageBatch and serialized again by gRPC
("parsed", the shipper before issue 24's change) against the file's bytes sent as they are
("bytes", agent/state/shipper.py now). Storage decodes the same message either way.

This process (the sender) is pinned to core 0, `storage serve` to core 1. Rounds alternate the
two ways over the same spool files (a resent capture is a duplicate at storage: it is not
written twice, which does not change what the sender does); CPU is this process's
(time.process_time: every thread, gRPC's included), best of the rounds.

    python bench/parts/ship_path.py [--pages 3000] [--batch 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from agent.state.spool import Spool  # noqa: E402
from lab import topology  # noqa: E402
from lab.web import Web  # noqa: E402
from storage.client import GrpcStorageClient, make_batch  # noqa: E402
from storage.testing import fetch_result  # noqa: E402
from wancrawl import grpcutil  # noqa: E402
from wancrawl.warcrecords import build_capture  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def ship(client: GrpcStorageClient, paths: list[Path], raw: bool, per_call: int) -> float:
    t0 = time.process_time()
    for i in range(0, len(paths), per_call):
        group = paths[i:i + per_call]
        batches = [Spool.read_bytes(p) if raw else Spool.read(p) for p in group]
        await client.send(batches)
    return time.process_time() - t0


async def measure(addr: str, paths: list[Path], rounds: int, per_call: int) -> dict[str, list[float]]:
    client = GrpcStorageClient(addr)
    await ship(client, paths[:5], True, per_call)  # warm the channel
    out: dict[str, list[float]] = {"parsed": [], "bytes": []}
    for _ in range(rounds):
        for mode in ("parsed", "bytes"):
            out[mode].append(await ship(client, paths, mode == "bytes", per_call))
    await client.close()
    return out


def main() -> int:
    os.environ["WANCRAWL_INSECURE"] = "1"  # plaintext on loopback, as agent_throughput.py with --tls off
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=100, help="pages per spool file (storage_out.batch_pages)")
    ap.add_argument("--per-call", type=int, default=10, help="files per Ingest call (the shipper's max_batches)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    web = Web(topology.load(), 1)
    pages = [(web.url(s, web.page_path(s, i)), web.render_page(s, i))
             for s in web.topology.normal_sites for i in range(web.pages(s))][: args.pages]
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        spool = Spool(tmp / "spool", fsync=False)
        caps = [build_capture(fetch_result(u, b, at=1_700_000_000.0 + i)) for i, (u, b) in enumerate(pages)]
        paths = [spool.put(make_batch(caps[i:i + args.batch])) for i in range(0, len(caps), args.batch)]
        port = free_port()
        cfg = tmp / "storage.toml"
        cfg.write_text(f'listen = "127.0.0.1:{port}"\ndata_dir = "{tmp / "storage"}"\n')
        proc = subprocess.Popen([sys.executable, "-m", "storage.cli", "serve", "--config", str(cfg)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=lambda: os.sched_setaffinity(0, {1}))
        os.sched_setaffinity(0, {0})
        try:
            addr = f"127.0.0.1:{port}"
            for _ in range(100):
                if asyncio.run(grpcutil.check_health(addr, "wancrawl.v1.Storage")):
                    break
                time.sleep(0.1)
            res = asyncio.run(measure(addr, paths, args.rounds, args.per_call))
        finally:
            proc.terminate()
            proc.wait(10)
    n = len(caps)
    print(f"{n} lab pages in {len(paths)} spool files of {args.batch}, {args.per_call} files per Ingest call, {args.rounds} rounds")
    best = {m: min(v) / n * 1e6 for m, v in res.items()}
    for m, v in res.items():
        print(f"{m:7s} sender CPU us/page: best {best[m]:6.1f}  rounds {' '.join(f'{x / n * 1e6:.1f}' for x in v)}")
    print(f"saved by sending the bytes: {best['parsed'] - best['bytes']:.1f} us per page")
    return 0


if __name__ == "__main__":
    sys.exit(main())
