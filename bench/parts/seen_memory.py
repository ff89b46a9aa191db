"""Seen-set benchmark: RSS per URL, the longest call (a stall of the agent's event loop), insert and
lookup rates for N URLs (default 10 million), and its bytes per URL on disk, against issue 24's
targets: at most 12 bytes per URL (in memory and on disk) and no call over 100 ms."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.state.seen import SeenSet  # noqa: E402

TARGET_BYTES_PER_URL = 12.0  # issue 24 (BUbiNG's sieve is the anchor); was 250 MB per 10M (25 bytes)
STALL_TARGET = 0.100  # no add_new or flush call over 100 ms: the agent runs both on its event loop
WORDS = ["news", "article", "2024", "products", "category", "index", "page", "view", "item", "blog",
         "docs", "en", "search", "tag", "user", "profile", "archive", "static", "img", "about"]


def rss_mb(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


def host_name(i: int) -> str:
    return f"www.site{i}.{('com', 'net', 'org', 'cn', 'de')[i % 5]}"


def batch(rng: random.Random, host: str, start: int, n: int) -> list[str]:
    """URLs of one page's worth of links: 60-110 characters, paths and queries like real sites."""
    out = []
    for k in range(start, start + n):
        a, b = WORDS[k % 20], WORDS[(k * 7) % 20]
        if k % 3:
            out.append(f"https://{host}/{a}/{b}/{k}-{rng.getrandbits(24):06x}.html")
        else:
            out.append(f"https://{host}/{a}?id={k}&ref={b}&sort=desc&p={k % 97}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000_000, help="URLs to insert (default 10,000,000)")
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=50, help="URLs per add_new call (links of one page)")
    ap.add_argument("--flush-every", type=int, default=3_000,
                    help="URLs between group commits (default 3,000: an agent committing every 0.1 s at 1,000 pages/s "
                         "with 30 new links a page)")
    ap.add_argument("--lookups", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=None, help="data dir (default: a temporary one)")
    args = ap.parse_args(argv)
    n = args.n
    rng = random.Random(1)
    tmp = tempfile.TemporaryDirectory() if args.dir is None else None
    d = Path(tmp.name) if tmp else args.dir
    d.mkdir(parents=True, exist_ok=True)

    base = rss_mb()
    s = SeenSet(d / "seen.db")
    per_host = [0] * args.hosts
    t_ins = 0.0
    # The longest call by the CPU this thread spent in it (a stall of the seen set's making) and
    # its wall time: on a shared machine a call can take longer while the process is not scheduled.
    longest: tuple[float, float, str] = (0.0, 0.0, "")
    done = since_flush = 0
    wall0 = time.perf_counter()
    while done < n:
        h = rng.randrange(args.hosts)
        k = min(args.batch, n - done)
        urls = batch(rng, host_name(h), per_host[h], k)
        per_host[h] += k
        t0, c0 = time.perf_counter(), time.thread_time()
        s.add_new(host_name(h), urls)
        t1, c1 = time.perf_counter(), time.thread_time()
        longest = max(longest, (c1 - c0, t1 - t0, f"add_new at {done:,}"))
        since_flush += k
        if since_flush >= args.flush_every:
            s.flush()
            since_flush = 0
            longest = max(longest, (time.thread_time() - c1, time.perf_counter() - t1, f"flush at {done:,}"))
        t_ins += time.perf_counter() - t0
        done += k
    t0 = time.perf_counter()
    s.flush()
    t_ins += time.perf_counter() - t0
    wall = time.perf_counter() - wall0
    after = rss_mb()
    peak = rss_mb("VmHWM")  # includes the moment of the last rehash, when old and new tables coexist
    assert len(s) >= n * 0.999, (len(s), n)  # only 64-bit collisions may merge URLs

    # Lookups: half present (same generator, same seed), half absent.
    lr = random.Random(2)
    probes = []
    for _ in range(args.lookups // 2):
        h = lr.randrange(args.hosts)
        if per_host[h]:
            k = 3 * lr.randrange((per_host[h] + 2) // 3)  # the query-string URLs are reproducible
            probes.append(f"https://{host_name(h)}/{WORDS[k % 20]}?id={k}&ref={WORDS[(k * 7) % 20]}&sort=desc&p={k % 97}")
        probes.append(f"https://{host_name(h)}/absent/{lr.getrandbits(40)}")
    t0 = time.perf_counter()
    hits = sum(1 for u in probes if (u in s))
    t_look = time.perf_counter() - t0

    delta = after - base
    target = TARGET_BYTES_PER_URL * n / 1e6
    disk = sum(p.stat().st_size for p in d.iterdir()) / 1e6
    print(f"seen set: {n:,} URLs over {args.hosts:,} hosts, add_new batches of {args.batch}, "
          f"flush every {args.flush_every:,} (Python {sys.version.split()[0]})")
    print(f"  buckets: {len(s._b):,}, {s.memory_bytes() / 1e6:.0f} MB = {s.memory_bytes() / len(s):.2f} bytes/URL")
    print(f"  RSS delta {delta:.0f} MB = {delta * 1e6 / n:.1f} bytes/URL; process RSS {after:.0f} MB")
    print(f"  peak process RSS during inserts: {peak:.0f} MB")
    print(f"  target {target:.0f} MB for {n:,} URLs ({TARGET_BYTES_PER_URL:.0f} bytes/URL): ratio {delta / target:.2f} of target "
          f"({'ok' if delta <= target else 'OVER'})")
    print(f"  longest call {longest[0] * 1000:.1f} ms CPU, {longest[1] * 1000:.1f} ms wall ({longest[2]}; "
          f"target <= {STALL_TARGET * 1000:.0f} ms CPU: {'ok' if longest[0] <= STALL_TARGET else 'OVER'})")
    print(f"  insert: {n / t_ins:,.0f} URLs/s = {t_ins / n * 1e6:.2f} us/URL incl. group commits "
          f"(wall {wall:.0f} s with URL generation)")
    print(f"  lookup: {len(probes) / t_look:,.0f} URLs/s = {t_look / len(probes) * 1e6:.2f} us/URL "
          f"({hits:,} of {len(probes):,} present)")
    files = ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB" for p in sorted(d.iterdir()))
    disk_ok = disk * 1e6 / n <= TARGET_BYTES_PER_URL
    print(f"  disk: {disk:.0f} MB = {disk * 1e6 / n:.1f} bytes per URL on disk (target <= {TARGET_BYTES_PER_URL:.0f}: "
          f"{'ok' if disk_ok else 'OVER'}); {files}; packed fingerprints {s.disk_parts()}")
    t0 = time.perf_counter()
    s.close()
    del s, probes
    s2 = SeenSet(d / "seen.db")
    print(f"  reopen (reload {len(s2):,} fingerprints): {time.perf_counter() - t0:.1f} s")
    s2.close()
    if tmp:
        tmp.cleanup()
    return 0 if delta <= target and longest[0] <= STALL_TARGET and disk_ok else 1


if __name__ == "__main__":
    sys.exit(main())
