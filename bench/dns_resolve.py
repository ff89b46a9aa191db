"""Resolves per second: the c-ares resolver beside the thread-pool (getaddrinfo-model) resolver,
both asking the lab's DNS server on loopback, in one run (issue 37).

The lab's server (`lab dns`, lab/dns.py) runs as its own process on a topology of many sites;
this process resolves N distinct names (every one a cache miss) through wancrawl.hostres with
each backend, then the same names again (every one a cache hit):

* "cares":  wancrawl/dns/cares.py, c-ares through aiodns, the lab server given explicitly;
* "thread": hostres.SystemLookup, getaddrinfo's model (a blocking look-up per name in the event
  loop's thread pool), its getaddrinfo a blocking stub asking the lab server (lab/dns.py
  blocking_stub). The machine's real getaddrinfo cannot be pointed at a port, and asking the
  machine's servers would send queries off this machine: the stub stands in for it, so the
  figure is the thread-pool model's, not glibc's.

Printed: resolves/s (wall), this process's CPU per 1,000 resolves, the server's CPU, and the
ratio cares/thread. Loopback only.

    python bench/dns_resolve.py [--names 10000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab import topology  # noqa: E402
from lab.dns import blocking_stub  # noqa: E402
from wancrawl.hostres import ResolverSettings, SystemLookup, make_resolver  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid: int) -> float:
    """A child's CPU seconds so far (/proc; utime + stime in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.bind(("127.0.0.1", 0))
        return u.getsockname()[1]


async def measure(kind: str, address: str, names: list[str], concurrency: int, server_pid: int) -> dict[str, float]:
    s = ResolverSettings(resolver=kind if kind == "cares" else "system", timeout=5.0, tries=2, max_concurrency=concurrency,
                         **({"nameservers": (address,)} if kind == "cares" else {}))
    r = make_resolver(s, {}, dns=True)
    if kind != "cares":
        r.backend = SystemLookup(s.timeout, concurrency, getaddrinfo=blocking_stub(address, 5.0))
    out: dict[str, float] = {}
    for phase in ("miss", "hit"):
        c0, s0, t0 = cpu(), proc_cpu(server_pid), time.perf_counter()
        got = await r.resolve_many(names)
        wall = time.perf_counter() - t0
        out[f"{phase}_rps"] = len(names) / wall
        out[f"{phase}_cpu_ms_per_1k"] = (cpu() - c0) / len(names) * 1e6
        out[f"{phase}_server_cpu"] = proc_cpu(server_pid) - s0
        out[f"{phase}_failed"] = sum(ip is None for ip in got.values())
    out["lookups"] = r.lookups
    await r.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--names", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=64, help="look-ups in flight (cares: per server; [dns] max_concurrency)")
    args = ap.parse_args()
    per_block = max(1, args.names // 9 + 1)
    with tempfile.TemporaryDirectory() as tmp:
        topo_file = Path(tmp) / "topology.toml"
        topo_file.write_text(f"[sites]\nper_block = {per_block}\nhostile = false\n[dns]\ncname_ratio = 0.2\n")
        topo = topology.load(topo_file)
        names = [s.host for s in topo.normal_sites][: args.names]
        port = free_udp_port()
        address = f"127.0.0.1:{port}"
        server = subprocess.Popen([sys.executable, "-m", "lab.cli", "dns", "--port", str(port), "--topology", str(topo_file)],
                                  cwd=REPO, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.0)
            from dnslib import DNSRecord  # type: ignore[import-untyped]

            for _ in range(50):  # until it answers
                try:
                    DNSRecord.question(names[0]).send("127.0.0.1", port, timeout=0.5)
                    break
                except OSError:
                    time.sleep(0.2)
            res = {k: asyncio.run(measure(k, address, names, args.concurrency, server.pid)) for k in ("thread", "cares")}
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(10)
    print(f"{len(names)} distinct names ({sum(1 for _ in names)} sites, a fifth behind CNAME chains), "
          f"lab DNS server on {address}, {args.concurrency} in flight")
    print(f"{'resolver':<8} {'miss/s':>9} {'CPU ms/1k':>10} {'server CPU s':>13} {'failed':>7} {'hit/s':>10} {'CPU ms/1k':>10}")
    for k, r in res.items():
        print(f"{k:<8} {r['miss_rps']:9.0f} {r['miss_cpu_ms_per_1k']:10.1f} {r['miss_server_cpu']:13.2f} {r['miss_failed']:7.0f} "
              f"{r['hit_rps']:10.0f} {r['hit_cpu_ms_per_1k']:10.2f}")
    print(f"ratio cares/thread: {res['cares']['miss_rps'] / res['thread']['miss_rps']:.2f}x resolves/s (misses), "
          f"{res['thread']['miss_cpu_ms_per_1k'] / max(res['cares']['miss_cpu_ms_per_1k'], 1e-9):.2f}x less CPU per resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
