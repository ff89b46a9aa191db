"""What no-single-view costs (issue 36 item 1): storage's and the manager's overlay look-ups
(agent/peers.py PeerDirectory) with one path from one starting peer (before) and with disjoint
paths from several (now), on a live lab cluster in Kademlia mode (mutual TLS, real processes).

    python bench/parts/peer_lookup.py [--agents 4] [--hosts 1000] [--rounds 5] [--liar self|fabricate]

For each number of paths, `--rounds` resolves of `--hosts` fresh host names (what one ingest
batch of new hosts costs storage): Members and FindNode calls per resolve, wall time per resolve
(median), and the share of hosts whose list is the XOR truth computed here from the agents'
certificates (the independent reference), and how many were contested. With --liar, the first
agent of the peers list runs as lab/liar.py. Figures: docs/kademlia.md ("Trusting no single peer").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.peers import PeerDirectory  # noqa: E402
from lab import cluster  # noqa: E402
from lab.faults.scenarios import DEFAULT_GROUPS  # noqa: E402
from wancrawl.kademlia import xorspace  # noqa: E402


def truth_ids(run: Path, agents: list[str]) -> dict[str, int]:
    return {a: xorspace.node_id_of_cert((run / "pki" / f"agent-{a}.crt").read_bytes()) for a in agents}


async def measure(addresses: list[str], ids: dict[str, int], paths: int, hosts: int, rounds: int) -> dict[str, float]:
    times, right, contested, total = [], 0, 0, 0
    async with PeerDirectory(addresses, paths=paths) as d:
        for r in range(rounds):
            names = [f"www.p{paths}-r{r}-{i}.example" for i in range(hosts)]
            t = time.perf_counter()
            routes = await d.resolve(names)
            times.append(time.perf_counter() - t)
            for rt in routes:
                key = xorspace.host_key(rt.host)
                want = sorted(ids, key=lambda a: ids[a] ^ key)[:3]
                right += list(rt.agent_ids) == want
                contested += bool(rt.contested)
                total += 1
        st = d.stats
        return {"members": st.peer_members_calls / rounds, "find_nodes": st.peer_find_node_calls / rounds,
                "skipped": st.peer_contacts_skipped / rounds,
                "ms": statistics.median(times) * 1000, "right": right / total, "contested": contested}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=1000, help="hosts per resolve")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--paths", default="1,3", help="numbers of disjoint paths to compare")
    ap.add_argument("--liar", choices=("", "self", "fabricate"), default="")
    ap.add_argument("--run-dir", default="")
    args = ap.parse_args(argv)
    run = Path(args.run_dir or tempfile.mkdtemp(prefix="peer-lookup-"))
    groups = list(DEFAULT_GROUPS)[: args.agents]
    cl = cluster.up(run, groups=groups, seed=9, mode="kademlia", liar=args.liar, liar_at=0)
    try:
        ids = truth_ids(run, groups)
        addresses = list(cl.agents.values())
        print(f"{args.agents} agents (Kademlia mode, mutual TLS), {args.hosts} hosts per resolve, {args.rounds} rounds"
              + (f"; {groups[0]} lies ({args.liar}), first in the peers list" if args.liar else ""))
        print(f"{'paths':>5} {'Members/resolve':>16} {'FindNode/resolve':>17} {'skipped/resolve':>16} "
              f"{'ms/resolve (median)':>20} {'right':>7} {'contested':>9}")
        for p in (int(x) for x in args.paths.split(",")):
            m = asyncio.run(measure(addresses, ids, p, args.hosts, args.rounds))
            print(f"{p:>5} {m['members']:>16.1f} {m['find_nodes']:>17.1f} {m['skipped']:>16.1f} {m['ms']:>20.1f} "
                  f"{m['right']:>7.1%} {m['contested']:>9.0f}")
    finally:
        cluster.down(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
