"""Resolve throughput per strategy: batches of 256 hosts over gRPC, 16 agents, cold and warm.

The consultant runs in its own process pinned to one core; the client runs on the other.
Prints hosts/s (wall) and hosts per CPU-second of the consultant, beside the targets:
at least 50,000 hosts/s warm and 10,000 hosts/s cold on one core; and the consultant's memory:
RSS once its agents are registered (the bench's hosts file is loaded by then: its DNS stub),
growth per host over the cold pass (the answers it keeps: target at most 1 KB per host, so a
million hosts fit in 1 GB), peak RSS, and its state database on disk.

    python bench/parts/consultant_resolve.py [--hosts 51200] [--strategies hash,xor,geo,asn,weighted] [--tls both|on|off]
        [--agents 16] [--event-loop uvloop|asyncio]

At scale (issue 24 item 4; docs/benchmarks.md): `--hosts 1000000 --agents 1000 --tls off`
(1,000,000 hosts in all: the consultant's answer cache holds 1,000,000 by default, and a scan
over more hosts than that finds none of them warm, see docs/benchmarks.md).

--tls both (the default) runs each strategy with mutual TLS (docs/security.md) and in plaintext
and prints the ratio (target: TLS costs at most 10%).
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from consultant.client import ConsultantClient  # noqa: E402
from lab.cluster import free_port  # noqa: E402
from measure import cpu_seconds, pin  # noqa: E402
from wancrawl import pki  # noqa: E402
from wancrawl.grpcutil import TlsSettings, check_health  # noqa: E402

WARM_TARGET, COLD_TARGET = 50_000, 10_000
HOST_BYTES_TARGET = 1024  # RSS growth per resolved host
BATCH = 256
AGENTS = 16  # --agents
IN_FLIGHT = 4
WARM_PASSES = 3


def world(tmp: Path, n_hosts: int):
    """The lab's City/ASN DBs, and a hosts file spreading the bench's hosts over its blocks."""
    from lab.geodb import write_all
    from lab.topology import load

    topo = load()
    paths = write_all(topo, tmp / "geo")
    blocks = topo.blocks
    hosts = [f"www.h{i}.bench.test" for i in range(n_hosts)]
    lines = []
    for i, h in enumerate(hosts):
        b = blocks[i % len(blocks)]
        base = b.network.split("/")[0].rsplit(".", 1)[0]
        lines.append(f"{base}.{10 + i % 240} {h}\n")
    (tmp / "bench-hosts").write_text("".join(lines))
    isps = {i.slug: [i.asn] for i in topo.isps}
    return topo, paths, hosts, isps


def agent_ip(topo, i: int) -> str:
    """The lab's agent addresses of the blocks in turn; past their 8 slots a block's other
    addresses (.10-.249; the bench's hosts share them, which no strategy minds)."""
    from lab.topology import AGENT_SLOTS

    b = topo.blocks[i % len(topo.blocks)]
    n = i // len(topo.blocks)
    if n < AGENT_SLOTS:
        return topo.agent_address(b.isp, b.city, n)
    return b.network.split("/")[0].rsplit(".", 1)[0] + f".{10 + (n - AGENT_SLOTS) % 240}"


def rss_mb(pid: int, key: str = "VmRSS:") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return 0.0


def make_pki(tmp: Path, topo) -> Path:
    """A CA, the consultant's certificate, the operator's and one per agent id (bound to the
    agent's address: under TLS the consultant places an agent there, docs/security.md)."""
    d = tmp / "pki"
    pki.init(d)
    pki.issue(d, "service", "consultant")
    pki.issue(d, "operator", "bench")
    for i in range(AGENTS):
        pki.issue(d, "agent", f"agent-{i:02d}", source_ip=agent_ip(topo, i))
    return d


def client_tls(tmp: Path, tls: bool, role: str = "operator", name: str = "bench") -> TlsSettings:
    d = tmp / "pki"
    if not tls:
        return TlsSettings(insecure=True)
    return TlsSettings(str(d / "ca.crt"), str(d / f"{role}-{name}.crt"), str(d / f"{role}-{name}.key"))


EVENT_LOOP = ""  # --event-loop: the consultant's loop ("": its default)


def config(tmp: Path, strategy: str, port: int, paths, isps, tls: bool = False) -> Path:
    isp_lines = "".join(f"\"{name}\" = {asns}\n" for name, asns in isps.items())
    text = f"""
listen = "127.0.0.1:{port}"
state_url = "sqlite:///{tmp}/state-{strategy}.db"
strategy = "{strategy}"
log_level = "WARNING"
{f'event_loop = "{EVENT_LOOP}"' if EVENT_LOOP else ""}
# The bench's agents do not heartbeat: their leases outlast the run (a thousand register in
# more than the default 15 s).
lease_seconds = 3600.0
[databases]
city_db = "{paths['city.mmdb']}"
asn_db = "{paths['asn.mmdb']}"
[dns]
hosts_file = "{tmp}/bench-hosts"
system_dns = false
[asn]
fallback = "geo"
[asn.isps]
{isp_lines}"""
    t = client_tls(tmp, tls, "service", "consultant")
    text += f'[tls]\nca = "{t.ca}"\ncert = "{t.cert}"\nkey = "{t.key}"\n' if tls else "[tls]\ninsecure = true\n"
    p = tmp / f"consultant-{strategy}-{'tls' if tls else 'plain'}.toml"
    p.write_text(text)
    return p


async def register_agents(addr: str, topo, tmp: Path, tls: bool) -> None:
    if not tls:  # one channel for them all: a thousand agents register in seconds
        async with ConsultantClient(addr, timeout=60, tls=client_tls(tmp, tls)) as client:
            for i in range(AGENTS):
                ip = agent_ip(topo, i)
                await client.register(f"agent-{i:02d}", f"{ip}:{7000 + i % 50000}", source_ip=ip)
        return
    for i in range(AGENTS):
        ip = agent_ip(topo, i)
        # With TLS an agent registers only as the id in its certificate.
        async with ConsultantClient(addr, timeout=60, tls=client_tls(tmp, tls, "agent", f"agent-{i:02d}")) as client:
            await client.register(f"agent-{i:02d}", f"{ip}:{7000 + i}", source_ip=ip)


async def blast(client: ConsultantClient, hosts: list[str]) -> float:
    batches = [hosts[i : i + BATCH] for i in range(0, len(hosts), BATCH)]
    queue = iter(batches)

    async def worker():
        for b in queue:
            r = await client.resolve_raw(b)
            assert len(r.answers) == len(b) and not r.answers[0].error, r.answers[0].error

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return time.perf_counter() - t0


async def bench_strategy(strategy: str, tmp: Path, topo, paths, hosts, isps, tls: bool = False) -> dict:
    port = free_port()
    cfg = config(tmp, strategy, port, paths, isps, tls)
    proc = subprocess.Popen(
        [sys.executable, "-m", "consultant.cli", "serve", "--config", str(cfg)],
        cwd=ROOT, preexec_fn=pin({0}),
    )
    try:
        addr = f"127.0.0.1:{port}"
        t0 = time.perf_counter()
        while not await check_health(addr, tls=client_tls(tmp, tls)):
            # A million-line hosts file takes the consultant a while to load on a loaded machine.
            if proc.poll() is not None or time.perf_counter() - t0 > 600:
                raise RuntimeError(f"the consultant did not come up (exit {proc.poll()})")
            await asyncio.sleep(0.2)
        print(f"{strategy}: consultant up in {time.perf_counter() - t0:.1f} s, RSS {rss_mb(proc.pid):.0f} MB", flush=True)
        await register_agents(addr, topo, tmp, tls)
        async with ConsultantClient(addr, timeout=60, tls=client_tls(tmp, tls)) as c:
            await blast(c, hosts[:BATCH])  # connection and code paths warmed, not these hosts' answers
            cold_hosts = hosts[BATCH:]
            rss0 = rss_mb(proc.pid)
            c0 = cpu_seconds(proc.pid)
            cold_wall = await blast(c, cold_hosts)
            c1 = cpu_seconds(proc.pid)
            rss1 = rss_mb(proc.pid)
            # Warm answers come fast: several passes, so the CPU clock's ticks do not weigh.
            warm_wall = sum([await blast(c, cold_hosts) for _ in range(WARM_PASSES)])
            c2 = cpu_seconds(proc.pid)
            peak = rss_mb(proc.pid, "VmHWM:")
        n = len(cold_hosts)
        disk = sum(p.stat().st_size for p in tmp.glob(f"state-{strategy}.db*"))
        return {
            "strategy": strategy, "hosts": n, "tls": tls,
            "cold_wall": n / cold_wall, "cold_cpu": n / max(c1 - c0, 1e-9),
            "warm_wall": n * WARM_PASSES / warm_wall, "warm_cpu": n * WARM_PASSES / max(c2 - c1, 1e-9),
            "rss0": rss0, "per_host": (rss1 - rss0) * 1024 * 1024 / n, "peak": peak, "disk": disk / 1e6,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=51_200 + BATCH)
    ap.add_argument("--strategies", default="hash,xor,geo,asn,weighted")
    ap.add_argument("--tls", choices=("both", "on", "off"), default="both",
                    help="mutual TLS on, off, or both side by side with the ratio (default)")
    ap.add_argument("--agents", type=int, default=AGENTS, help="agents registered (default 16)")
    ap.add_argument("--event-loop", choices=("uvloop", "asyncio"), help="the consultant's event loop (default: its default)")
    args = ap.parse_args()
    globals()["AGENTS"] = args.agents
    globals()["EVENT_LOOP"] = args.event_loop or ""
    os.sched_setaffinity(0, {1})
    modes = {"both": (True, False), "on": (True,), "off": (False,)}[args.tls]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        topo, paths, hosts, isps = world(tmp, args.hosts)
        if args.tls != "off":
            make_pki(tmp, topo)
        rows = [asyncio.run(bench_strategy(s, tmp, topo, paths, hosts, isps, tls))
                for s in args.strategies.split(",") for tls in modes]
    print(f"\nResolve throughput: batches of {BATCH}, {AGENTS} agents, {IN_FLIGHT} requests in flight, consultant pinned to one core")
    print(f"{'strategy':<10} {'tls':<4} {'hosts':>7} {'cold h/s':>10} {'cold h/cpu-s':>13} {'warm h/s':>10} {'warm h/cpu-s':>13}   vs targets (cold {COLD_TARGET:,} / warm {WARM_TARGET:,})")
    ok = True
    for r in rows:
        cr, wr = r["cold_wall"] / COLD_TARGET, r["warm_wall"] / WARM_TARGET
        ok &= cr >= 1 and wr >= 1
        print(f"{r['strategy']:<10} {'on' if r['tls'] else 'off':<4} {r['hosts']:>7} {r['cold_wall']:>10,.0f} {r['cold_cpu']:>13,.0f} {r['warm_wall']:>10,.0f} {r['warm_cpu']:>13,.0f}   cold x{cr:.2f}, warm x{wr:.2f}")
    print(f"\nMemory ({args.hosts:,} hosts in the bench's hosts file, {AGENTS} agents; target growth <= {HOST_BYTES_TARGET} bytes per host)")
    print(f"{'strategy':<10} {'tls':<4} {'RSS at start MB':>15} {'growth B/host':>13} {'peak RSS MB':>11} {'state db MB':>11}")
    for r in rows:
        ok &= r["per_host"] <= HOST_BYTES_TARGET
        print(f"{r['strategy']:<10} {'on' if r['tls'] else 'off':<4} {r['rss0']:>15.0f} {r['per_host']:>13.0f} {r['peak']:>11.0f} {r['disk']:>11.1f}")
    print("all targets met" if ok else "SOME TARGETS MISSED")
    tls_ratios(rows)
    return 0


def tls_ratios(rows: list[dict]) -> None:
    """TLS on / off per strategy (target: at least 0.90, TLS costs at most 10%)."""
    pairs = {(r["strategy"], r["tls"]): r for r in rows}
    lines = []
    for s in dict.fromkeys(r["strategy"] for r in rows):
        on, off = pairs.get((s, True)), pairs.get((s, False))
        if on and off:
            cold, warm = on["cold_wall"] / off["cold_wall"], on["warm_wall"] / off["warm_wall"]
            ccpu, wcpu = on["cold_cpu"] / off["cold_cpu"], on["warm_cpu"] / off["warm_cpu"]
            lines.append(f"{s:<10} hosts/s cold {cold:.3f} warm {warm:.3f}   hosts/cpu-s cold {ccpu:.3f} warm {wcpu:.3f}   "
                         f"{'ok' if min(ccpu, wcpu) >= 0.9 else 'OVER 10%'}")
    if lines:
        print("\nTLS on / off (target >= 0.90: TLS costs at most 10%; judged on the consultant's CPU per host, the "
              "wall figures move with whatever else the machine runs)")
        print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
