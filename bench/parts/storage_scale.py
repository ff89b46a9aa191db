"""Storage at scale (issue 24 item 4): ingest per storage core with an empty index and with
`--rows` index rows (default 10 million), and the index's size per capture, so a deployment can
be sized from docs/benchmarks.md.

What runs: a `storage serve` (local WARC directory, SQLite index in its data dir, fsync per
`--fsync`) takes a probe of `--probe` fresh lab pages over gRPC (bench/storage_ingest.py's
client: batches of 100, 2 streams) with an empty index: ingest pages per storage CPU-second at
the start. It is stopped; the index is then filled to `--rows` rows through storage's own
`Index.commit` (the SQL the ingest path runs, transactions of `--fill-batch` rows, no fsync:
the fill's wall time is not a figure), with rows
made from the probe's own rows (same columns and lengths; new record ids, URLs, digests, WARC
offsets, times), as if `--rows` captures had been ingested. The fill prints, per tenth of
`--rows`: index-commit CPU per row over that tenth and the index on disk per row. The storage
process is started again on the same data dir and takes a second probe of other fresh pages:
ingest per core at the end. Printed beside the targets: end/start ingest per core (target
>= 0.90: flat), ingest per core at the end (>= 3,000 pages/s, bench/storage_ingest.py's target),
index bytes per capture, WARC bytes per capture (probe pages' own), and what 10 GB of WARC and
`--rows` captures come to. The WARC files themselves are not filled (10 GB of WARC would take
the machine's afternoon and change nothing the index sees: a WARC append is O(1)); that
extrapolation is labelled as one.

    nice -n 5 .venv/bin/python bench/parts/storage_scale.py [--rows 10000000] [--probe 10000]
        [--fill-batch 20000] [--fsync os|always] [--keep]
    ... --again DIR [--again-set N]: one more probe of fresh pages into a kept, filled data dir
        (e.g. after a change to storage)

A Stats call is timed after each probe, apart from it: it reads the running totals (a row
per host and per agent, storage/index.py), not the captures; target at most 0.05 s of storage
CPU whatever the rows (it read the whole index before: 3.8 s at 2 million rows).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("WANCRAWL_INSECURE", "1")

import storage_ingest as si  # noqa: E402
from measure import cpu_seconds  # noqa: E402
from storage.client import make_batch  # noqa: E402
from storage.index import Index  # noqa: E402

FLAT_TARGET = 0.90  # ingest per core at the end / at the start
PER_CORE_TARGET = si.TARGET_PAGES_PER_CORE_S
WARC_GB = 10
STATS_CPU_TARGET = 0.05  # storage CPU seconds of a Stats call, at any number of rows


def probe(data: Path, batches, args) -> tuple[int, float, float, float]:
    """One storage process on `data`, every batch sent: (stored, storage CPU s, wall s, a
    Stats call's storage CPU s)."""
    cfg = data.parent / f"{data.name}.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\ndata_dir = "{data}"\n[ingest]\nfsync = "{args.fsync}"\n')
    proc, addr = si.start_storage(cfg)
    try:
        c0, t0, io0 = cpu_seconds(proc.pid), time.perf_counter(), proc_io(proc.pid)
        # Stats apart: not ingest work.
        stored, dup, _ = asyncio.run(si.send_all(addr, batches, args.per_stream, args.streams, stats=False))
        wall, cpu, io1 = time.perf_counter() - t0, cpu_seconds(proc.pid) - c0, proc_io(proc.pid)
        # Bytes storage passed to read() and write() per page: WARC records, the index's WAL
        # and checkpoints, SQLite's page reads (the OS's cache or the disk).
        print(f"  (storage read {(io1['rchar'] - io0['rchar']) / max(stored, 1):,.0f} and wrote "
              f"{(io1['wchar'] - io0['wchar']) / max(stored, 1):,.0f} bytes per page)", flush=True)
        c1, t1 = cpu_seconds(proc.pid), time.perf_counter()
        asyncio.run(stats_call(addr))
        stats_wall, stats_cpu = time.perf_counter() - t1, cpu_seconds(proc.pid) - c1
    finally:
        proc.terminate()
        proc.wait(60)
    assert dup == 0, dup
    print(f"  (a Stats call: {stats_wall:.2f} s wall, {stats_cpu:.2f} s storage CPU; target <= {STATS_CPU_TARGET} s CPU)", flush=True)
    return stored, cpu, wall, stats_cpu


def proc_io(pid: int) -> dict[str, int]:
    """The process's /proc I/O counters (rchar, wchar: bytes through read and write calls)."""
    return {k: int(v) for k, v in (line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())}


async def stats_call(addr: str) -> None:
    client = si.GrpcStorageClient(addr, timeout=600)
    await client.stats()
    await client.close()


def disk(data: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in data.glob(pattern) if p.is_file())


def fill(index: Index, templates: list[dict], rows: int, batch: int, tenth: int):
    """Rows up to `rows` in the index, made from `templates`; yields (rows so far, rows since the
    last yield, CPU s and wall s of their commits) every `tenth` rows."""
    rng = random.Random(1)
    have = len(templates)
    offset = max(t["warc_offset"] + t["group_length"] for t in templates)
    t0 = max(t["fetched_at"] for t in templates)
    mark, cpu, wall = have, 0.0, 0.0
    k = 0
    while have < rows:
        out = []
        for _ in range(min(batch, rows - have)):
            t = templates[k % len(templates)]
            k += 1
            u = dict(t)
            path = f"/fill/{k}/{t['canonical_url'].rsplit('/', 1)[-1]}"
            base = t["canonical_url"].split("/", 3)
            u["canonical_url"] = "/".join(base[:3]) + path
            u["url"] = u["canonical_url"]
            u["record_id"] = f"<urn:uuid:{uuid.UUID(int=rng.getrandbits(128), version=4)}>"
            u["payload_digest"] = "sha1:" + base64.b32encode(rng.getrandbits(160).to_bytes(20, "big")).decode()
            u["fetched_at"] = t0 + k * 0.001
            u["warc_file"] = f"wancrawl-fill-{offset // 1_000_000_000:05d}.warc.gz"
            u["warc_offset"] = offset % 1_000_000_000
            offset += t["group_length"]
            out.append(u)
        # Only the commits count (making the rows is the bench's work, not storage's).
        c, w = time.process_time(), time.perf_counter()
        index.commit(out)
        cpu, wall = cpu + time.process_time() - c, wall + time.perf_counter() - w
        have += len(out)
        if have - mark >= tenth or have >= rows:
            yield have, have - mark, cpu, wall
            mark, cpu, wall = have, 0.0, 0.0


def again(tmp: Path, args) -> int:
    """One more probe into a filled data dir (e.g. after a change to storage): pages after the
    two probes of the first run."""
    data = tmp / "storage"
    first = (2 + args.again_set) * args.probe
    caps, _html, _build = si.build_pages(first + args.probe, 7, os.cpu_count() or 1)
    batches = [make_batch(caps[i:i + args.batch]) for i in range(first, first + args.probe, args.batch)]
    stored, cpu, wall, _ = probe(data, batches, args)
    print(f"again: {stored:,} pages ingested into {data}, {stored / cpu:,.0f} pages per storage CPU-second ({stored / wall:,.0f}/s wall)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000, help="index rows at the end")
    ap.add_argument("--probe", type=int, default=10_000, help="fresh pages ingested at the start and at the end")
    ap.add_argument("--fill-batch", type=int, default=20_000, help="rows per index transaction while filling")
    ap.add_argument("--batch", type=int, default=100, help="pages per PageBatch")
    ap.add_argument("--per-stream", type=int, default=5)
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--fsync", choices=["always", "os"], default="always")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--again", default="", help="a temp dir kept by --keep: one more probe of fresh pages into it (no fill)")
    ap.add_argument("--again-set", type=int, default=0, help="which set of fresh pages --again sends (0, 1, ...: each once)")
    args = ap.parse_args()
    if args.again:
        return again(Path(args.again), args)

    print(f"building {2 * args.probe:,} lab pages as agents would ...", flush=True)
    caps, _html, _build = si.build_pages(2 * args.probe, 7, os.cpu_count() or 1)
    first = [make_batch(caps[i:i + args.batch]) for i in range(0, args.probe, args.batch)]
    last = [make_batch(caps[i:i + args.batch]) for i in range(args.probe, 2 * args.probe, args.batch)]
    tmp = Path(tempfile.mkdtemp(prefix="wancrawl-storage-scale-"))
    data = tmp / "storage"
    try:
        s0, cpu0, wall0, st0 = probe(data, first, args)
        warc0 = disk(data / "warcs", "*.warc.gz")
        print(f"start: {s0:,} pages ingested, {s0 / cpu0:,.0f} pages per storage CPU-second ({s0 / wall0:,.0f}/s wall), "
              f"WARC {warc0 / s0:,.0f} bytes per capture", flush=True)

        url = f"sqlite:///{data / 'index.sqlite'}"
        # No fsync per fill transaction: the fill stands in for ingests, its wall time is not
        # a figure (its CPU per row is printed as a trend).
        index = Index(url, durable=False)
        with index.engine.connect() as conn:
            templates = [dict(r._mapping) for r in conn.execute(index.captures.select())]
        tenth = max(1, args.rows // 10)
        print(f"\nfilling the index to {args.rows:,} rows (Index.commit, {args.fill_batch:,} rows per transaction)", flush=True)
        print(f"{'rows':>12} {'commit CPU us/row':>17} {'commit wall us/row':>18} {'index MB':>9} {'bytes/row':>9}", flush=True)
        fill_rates = []
        for have, n, cpu, wall in fill(index, templates, args.rows, args.fill_batch, tenth):
            size = disk(data, "index.sqlite*")
            fill_rates.append(cpu / n * 1e6)
            print(f"{have:>12,} {fill_rates[-1]:>17.1f} {wall / n * 1e6:>18.1f} {size / 1e6:>9.0f} {size / have:>9.0f}", flush=True)
        index.close()

        s1, cpu1, wall1, st1 = probe(data, last, args)
        rows_end = args.rows + s1
        idx = disk(data, "index.sqlite*")
        per_core0, per_core1 = s0 / cpu0, s1 / cpu1
        ratio = per_core1 / per_core0
        print(f"end: {s1:,} pages ingested at {args.rows:,} rows, {per_core1:,.0f} pages per storage CPU-second ({s1 / wall1:,.0f}/s wall)")
        per_capture = idx / rows_end
        print(f"\n{'figure':52} {'measured':>12} {'target':>10}")
        print(f"{'ingest pages per storage core, empty index':52} {per_core0:>12,.0f} {PER_CORE_TARGET:>10,.0f}")
        print(f"{'ingest pages per storage core, at ' + format(args.rows, ',') + ' rows':52} {per_core1:>12,.0f} {PER_CORE_TARGET:>10,.0f}  "
              f"{'ok' if per_core1 >= PER_CORE_TARGET else 'BELOW'}")
        print(f"{'end / start':52} {ratio:>12.2f} {FLAT_TARGET:>10.2f}  {'ok' if ratio >= FLAT_TARGET else 'BELOW'}")
        print(f"{'a Stats call, storage CPU s, empty / at the end':52} {st0:>5.2f} / {st1:<5.2f} {STATS_CPU_TARGET:>10.2f}  "
              f"{'ok' if max(st0, st1) <= STATS_CPU_TARGET else 'OVER'}")
        print(f"{'index commit CPU per row, last / first tenth':52} {fill_rates[-1] / fill_rates[0]:>12.2f}")
        print(f"{'index (SQLite with WAL) bytes per capture':52} {per_capture:>12,.0f}")
        print(f"{'WARC bytes per capture (the probes: lab pages)':52} {warc0 / s0:>12,.0f}")
        n10 = WARC_GB * 1e9 / (warc0 / s0)
        print(f"\nextrapolated, not measured: {WARC_GB} GB of WARC holds {n10:,.0f} such captures; their index "
              f"{n10 * per_capture / 1e9:.1f} GB; {args.rows:,} captures are {args.rows * warc0 / s0 / 1e9:.0f} GB of WARC "
              f"and {args.rows * per_capture / 1e9:.1f} GB of index (measured)")
        print(f"end/start ingest per core: {ratio:.2f}")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
