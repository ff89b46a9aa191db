"""Names that do not resolve, given up per second by one agent (issue 37's hostile probe in small).

One agent (in this process, every host its own) is handed N URLs on N names that do not exist;
it resolves them with c-ares through the lab's DNS server (`lab dns` in its own process, which
answers NXDOMAIN for every name it does not know) at the default politeness (delay 1 s, a per-IP
delay of 0.25 s). Printed: the seconds until every name is given up, give-ups per second, the
requests made (0: given up on the look-up's answer), beside what the code before issue 37 did:
every failed name waited its turn in one shared politeness bucket ("unresolved", one start per
0.25 s) and made one robots.txt request that failed on DNS, at most 4 give-ups a second (2.5 a
second measured on the hidden hostile web, 4,590 hosts still queued after 8 minutes).

    python bench/dns_giveups.py [--names 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.node import AgentNode  # noqa: E402
from agent.settings import load_settings  # noqa: E402
from agent.state.frontier import Item  # noqa: E402
from consultant.client import HostRoute, Registration  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OLD_BOUND = 1 / 0.25  # give-ups a second the shared bucket allowed at the default per-IP delay


class AllMine:
    """A placement that gives this agent every host (no consultant in this bench)."""

    async def register(self, agent_id, address, **kw) -> Registration:  # type: ignore[no-untyped-def]
        return Registration(1, 600.0)

    async def heartbeat(self, agent_id, load) -> int:  # type: ignore[no-untyped-def]
        return 1

    async def deregister(self, agent_id) -> int:  # type: ignore[no-untyped-def]
        return 2

    async def resolve(self, hosts):  # type: ignore[no-untyped-def]
        return [HostRoute(h, (("me", ""),), 600, 1) for h in hosts]

    async def close(self) -> None:
        pass


async def crawl(dns: str, names: list[str], data: Path) -> tuple[float, dict]:
    over = {"agent_id": "me", "data_dir": str(data), "storage_out.fsync": False, "progress_interval": 0.0,
            "heartbeat_interval": 60.0, "system_dns": True, "dns.resolver": "cares", "dns.nameservers": [dns],
            "fetch.allow_networks": ["127.0.0.0/8"]}
    n = AgentNode(load_settings(None, over), placement=AllMine())  # type: ignore[arg-type]
    await n.start()
    t0 = time.perf_counter()
    n.intake.accept_local([Item(f"http://{h}/", h) for h in names])
    while n.dispatcher.hosts.stats.hosts_dns_failed < len(names):
        await asyncio.sleep(0.05)
    took = time.perf_counter() - t0
    c = n.status_counters()
    await n.stop()
    return took, c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--names", type=int, default=5000)
    args = ap.parse_args()
    names = [f"gone{i}.nowhere{i % 97}.lab" for i in range(args.names)]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "lab.cli", "dns", "--port", str(port)], cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        with tempfile.TemporaryDirectory() as tmp:
            took, c = asyncio.run(crawl(f"127.0.0.1:{port}", names, Path(tmp) / "agent"))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
    rate = len(names) / took
    print(f"{len(names)} names that do not resolve, one agent, c-ares through the lab DNS server")
    print(f"  all given up in {took:.1f} s: {rate:,.0f} give-ups/s; requests made {c['fetches']:.0f}, "
          f"DNS look-ups {c['dns_lookups']:.0f}")
    print(f"  before issue 37: at most {OLD_BOUND:.0f} give-ups/s (one shared bucket), {len(names) / OLD_BOUND:,.0f} s "
          f"for these; ratio {rate / OLD_BOUND:,.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
