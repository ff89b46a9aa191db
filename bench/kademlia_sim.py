"""Issue 22 item 8, internet scale in simulation: 10,000 Kademlia nodes in one process, driving the
agent's own routing core (wancrawl/kademlia/table.py and lookup.py, not a copy of it).

    python bench/kademlia_sim.py                       # 10,000 nodes, the defaults below
    python bench/kademlia_sim.py --nodes 2000 --lookups 500
    python bench/kademlia_sim.py --k 20 --alpha 3 --ping-interval 30 --refresh-interval 3600

Every node has its own RoutingTable. An RPC is a function call: the callee answers FIND_NODE from
its table (its k closest to each target) and learns the caller (Kademlia §2.2: every message
refreshes the receiver's table, which is how the others learn a newcomer); the caller learns the
callee when it answers, and removes it when it does not. A full bucket pings its least recently
seen contact before it admits a newcomer (a live one stays, a dead one is removed and the newest
replacement candidate goes in). Lookups are the agent's Lookup state machine, driven
synchronously round by round (up to alpha queries in flight per round; no asyncio: faster, and
the same rounds), and one batch through the agent's async lookup_many.

Phases, all in one run:
1. Join: nodes join one by one through one bootstrap node (Kademlia §2.3, seed 001 §2.4.1): touch
   the bootstrap, look up one's own id, then refresh every bucket farther than the closest
   neighbour (one lookup of a random id in each).
2. Hops: lookups of random keys from random nodes; hops (Lookup.hops: the sequential round trips
   on the chain of answers that led to the closest result, its own answer included) against
   log2(n). Target: at most log2(n) + 2.
3. Success under churn: a lookup succeeds when its closest result (or the asker itself, when it
   is closer: the caller adds itself, as the agent does) is the true closest LIVE node, by brute
   force over all live ids. 0%, then 10%, then 30% of the nodes crash at once and nobody is told:
   their entries stay in every table until a failed RPC or ping removes them, as in the protocol.
   Target: at least 99% at 10% churn.
4. Routing messages per node per minute under the defaults: pings to the k closest every ping
   interval, and one bucket refresh (a lookup per bucket in use, the RPCs counted in the sim on
   sampled nodes, as if no traffic had refreshed any bucket: the worst case) every refresh
   interval.

Defaults: k = 20, alpha = 3 (the Kademlia paper's and libp2p's; go-libp2p sends 10 queries in
parallel in its own DHT), refresh every 600 s (libp2p; the paper's tRefresh is 3600 s, printed
too). Seed 001 names k (even), alpha and the four RPCs but gives no values.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wancrawl.kademlia.lookup import Lookup, LookupStats, lookup_many
from wancrawl.kademlia.table import Contact, RoutingTable
from wancrawl.kademlia.xorspace import ID_BITS

PAPER_REFRESH = 3600.0


class Sim:
    """The network: a table per node, a set of crashed nodes, and counters of the messages sent."""

    def __init__(self, k: int, alpha: int, rng: random.Random) -> None:
        self.k, self.alpha, self.rng = k, alpha, rng
        self.tables: dict[int, RoutingTable] = {}
        self.contact: dict[int, Contact] = {}
        self.dead: set[int] = set()
        self.now = 0.0  # one tick per RPC: the tables' least-recently-seen order needs a clock
        self.rpcs = 0  # FIND_NODE calls (a batched call counts once)
        self.pings = 0  # liveness checks of full buckets' least recently seen contacts

    def heard(self, table: RoutingTable, c: Contact) -> None:
        evict = table.touch(c, self.now)
        if evict is not None:
            self.pings += 1
            if evict.node_id in self.dead:
                table.remove(evict.node_id)
            else:
                table.touch(evict, self.now)

    def find_nodes(self, caller: int, callee: Contact, targets: list[int]) -> dict[int, list[Contact]] | None:
        """One FIND_NODE RPC carrying `targets`; None when the callee has crashed."""
        self.rpcs += 1
        self.now += 1.0
        if callee.node_id in self.dead:
            self.tables[caller].remove(callee.node_id)
            return None
        t = self.tables[callee.node_id]
        self.heard(t, self.contact[caller])
        self.heard(self.tables[caller], callee)
        return {x: t.closest(x, self.k) for x in targets}

    def lookup(self, origin: int, target: int) -> Lookup:
        table = self.tables[origin]
        lk = Lookup(target, table.closest(target, self.k), k=self.k, alpha=self.alpha, self_id=origin)
        table.refreshed(target, self.now)
        while not lk.done:
            for c in lk.next_queries():
                reply = self.find_nodes(origin, c, [target])
                if reply is None:
                    lk.failed(c)
                else:
                    lk.answered(c, reply[target])
        return lk

    def add(self, nid: int) -> None:
        self.contact[nid] = Contact(nid, f"agent-{len(self.contact)}", f"10.{len(self.contact) >> 16}.{len(self.contact) >> 8 & 255}.{len(self.contact) & 255}:7000")
        self.tables[nid] = RoutingTable(nid, k=self.k)

    def join(self, nid: int, bootstrap: int, refresh_interval: float) -> None:
        """Kademlia §2.3: insert the bootstrap, look up one's own id, refresh the buckets farther
        than the closest neighbour."""
        self.add(nid)
        table = self.tables[nid]
        self.heard(table, self.contact[bootstrap])
        self.lookup(nid, nid)
        for x in table.refresh_targets(self.now, refresh_interval, self.rng):
            self.lookup(nid, x)

    def live(self) -> list[int]:
        return [x for x in self.tables if x not in self.dead]


def closest_of(ids: list[int], key: int) -> int:
    return min(ids, key=lambda x: x ^ key)


def success(sim: Sim, lookups: int) -> tuple[float, list[int]]:
    """Lookups of random keys from random live nodes: the share whose closest result is the true
    closest live node, and their hops."""
    live = sim.live()
    ok, hops = 0, []
    for _ in range(lookups):
        origin, key = sim.rng.choice(live), sim.rng.getrandbits(ID_BITS)
        lk = sim.lookup(origin, key)
        res = lk.result()
        found = origin if not res or (origin ^ key) < (res[0].node_id ^ key) else res[0].node_id
        ok += found == closest_of(live, key)
        hops.append(lk.hops)
    return ok / lookups, hops


def crash(sim: Sim, share: float) -> None:
    """Crash nodes (never told to anyone) until `share` of all nodes are dead."""
    ids = list(sim.tables)
    want = round(share * len(ids)) - len(sim.dead)
    if want > 0:
        sim.dead.update(sim.rng.sample(sim.live(), want))


def p99(xs: list[int]) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else float(xs[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--alpha", type=int, default=3)
    ap.add_argument("--lookups", type=int, default=2000, help="lookups of random keys per churn level")
    ap.add_argument("--refresh-sample", type=int, default=200, help="nodes whose full bucket refresh is counted")
    ap.add_argument("--batch", type=int, default=200, help="keys looked up at once by one node through lookup_many")
    ap.add_argument("--ping-interval", type=float, default=30.0, help="seconds between pings of the k closest")
    ap.add_argument("--refresh-interval", type=float, default=600.0, help="bucket refresh interval (s): libp2p 600, paper 3600")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    sim = Sim(args.k, args.alpha, rng)
    n = args.nodes
    log2n = math.log2(n)
    print(f"$ python bench/kademlia_sim.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"defaults used: k={args.k} alpha={args.alpha} ping_interval={args.ping_interval:g}s "
          f"refresh_interval={args.refresh_interval:g}s (paper: k=20 alpha=3 tRefresh=3600s; "
          f"libp2p: k=20 alpha=3, 10 in go-libp2p queries, refresh 600s; seed 001 gives no values)")

    t0 = time.perf_counter()
    ids = [rng.getrandbits(ID_BITS) for _ in range(n)]
    sim.add(ids[0])
    for i, nid in enumerate(ids[1:], 1):
        sim.join(nid, ids[0], args.refresh_interval)
        if i % 2000 == 0:
            print(f"  joined {i:,} nodes ({time.perf_counter() - t0:.0f} s)", flush=True)
    join_s = time.perf_counter() - t0
    sizes = [len(t) for t in sim.tables.values()]
    print(f"join: {n:,} nodes through one bootstrap in {join_s:.0f} s; {sim.rpcs / n:.0f} FIND_NODE RPCs and "
          f"{sim.pings / n:.1f} pings per join; table size mean {statistics.mean(sizes):.0f}, min {min(sizes)}, max {max(sizes)}")

    # Refresh cost, measured before any crash on sampled nodes, every bucket in use stale.
    sample = rng.sample(ids, min(args.refresh_sample, n))
    rpcs0, pings0 = sim.rpcs, sim.pings
    lookups_per_refresh = 0
    for nid in sample:
        for x in sim.tables[nid].refresh_targets(sim.now + 1e12, args.refresh_interval, rng):
            sim.lookup(nid, x)
            lookups_per_refresh += 1
    refresh_msgs = (sim.rpcs - rpcs0 + sim.pings - pings0) / len(sample)
    lookups_per_refresh_mean = lookups_per_refresh / len(sample)

    results: dict[float, float] = {}
    hops0: list[int] = []
    for share in (0.0, 0.1, 0.3):
        crash(sim, share)
        t1 = time.perf_counter()
        rate, hops = success(sim, args.lookups)
        results[share] = rate
        if share == 0.0:
            hops0 = hops
        print(f"churn {share:>4.0%}: {len(sim.dead):,} crashed, lookup success {rate:.2%} over {args.lookups:,} lookups, "
              f"hops mean {statistics.mean(hops):.2f} max {max(hops)} ({time.perf_counter() - t1:.0f} s)", flush=True)

    # One node looks up many keys at once through the async batched driver (as the agent resolves a
    # batch of hosts): RPCs against one lookup at a time.
    origin = rng.choice(sim.live())
    keys = [rng.getrandbits(ID_BITS) for _ in range(args.batch)]
    st = LookupStats()

    async def find_nodes(c: Contact, targets: list[int]) -> dict[int, list[Contact]]:
        reply = sim.find_nodes(origin, c, targets)
        if reply is None:
            raise ConnectionError(f"{c.address} does not answer")
        return reply

    batch = asyncio.run(lookup_many(keys, lambda t: sim.tables[origin].closest(t, args.k), find_nodes,
                                    k=args.k, alpha=args.alpha, stats=st, self_id=origin))
    live = sim.live()
    batch_ok = sum(1 for t in keys if (batch[t] and batch[t][0].node_id == closest_of(live, t)) or closest_of(live, t) == origin)
    before = sim.rpcs
    for t in keys:
        sim.lookup(origin, t)
    single = sim.rpcs - before

    ping_per_min = args.k * 60.0 / args.ping_interval
    refresh_per_min = refresh_msgs * 60.0 / args.refresh_interval
    paper_refresh_per_min = refresh_msgs * 60.0 / PAPER_REFRESH
    total = ping_per_min + refresh_per_min
    print()
    print(f"Kademlia simulation: {n:,} nodes, k={args.k}, alpha={args.alpha}, seed {args.seed}, "
          f"{time.perf_counter() - t0:.0f} s in all")
    print(f"lookup hops (0% churn, {len(hops0):,} random keys): mean {statistics.mean(hops0):.2f}, p99 {p99(hops0):.0f}, "
          f"max {max(hops0)}; log2(n) = {log2n:.1f} (target: at most log2(n) + 2 = {log2n + 2:.1f})")
    print(f"lookup success: 0% churn {results[0.0]:.2%}, 10% churn {results[0.1]:.2%}, 30% churn {results[0.3]:.2%} "
          f"(target at 10%: >= 99%)")
    print(f"batched lookups (lookup_many, 30% churn): {args.batch} keys from one node in {st.rounds} rounds, {st.rpcs} RPCs "
          f"({st.failures} failed), {batch_ok / args.batch:.1%} found the closest live node; "
          f"{single} RPCs one lookup at a time")
    print(f"bucket refresh: {lookups_per_refresh_mean:.1f} lookups and {refresh_msgs:.0f} messages (RPCs + pings) per node per refresh")
    print(f"routing messages per node per minute: {total:.1f} = pings {ping_per_min:.1f} (k={args.k} every {args.ping_interval:g} s) "
          f"+ refresh {refresh_per_min:.1f} (every {args.refresh_interval:g} s; {paper_refresh_per_min:.1f} at the paper's 3600 s); "
          f"each is one request and its reply")
    print(f"lookup success at 10% churn: {results[0.1]:.2%} (target >= 99%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
