"""The replication sender alone (issue 24: TLS + replication at most +15% CPU per page): the
owner's CPU per page for the changes path and the Replicator's rounds, without the crawl around
them, so the figure does not drown in the 10-15% spread of whole-agent runs on a shared machine.

A simulated crawl of the lab's shape (72 hosts, ~97 pages each, 6,974 pages): each step pops
`--per-flush` URLs across the hosts, queues one new URL per page (a crawl of N pages queues N
URLs once each), marks them done and flushes the frontier (the group commit); every
`--flushes-per-round` flushes the Replicator runs a round (in the agent about one Replicate call
per 65-145 pages: 48-107 per 6,974-page crawl in session 11's runs). Storage acknowledges every page at once (shipped =
spooled), so each done goes in the round after its flush, as in a crawl whose shipper keeps up.

"off" is the same crawl with the frontier's ChangeLog off (`replication.enabled = false`);
"on" adds the ChangeLog and the rounds, sent to a fake backup that takes the stream as gRPC's
serializer would (SerializeToString of a message, bytes as they are) and answers at once: the
sender's Python, not gRPC's call cost (~0.5 ms per call, docs/benchmarks.md ship path) nor the
network. The difference is what replication adds per page on the owner's side. CPU is
time.process_time; the rounds alternate off and on, best of each.

Runs from any checkout with this file (it uses only the frontier's, ledger's and replicator's
constructors and rounds), so the same command compares two commits:

    python bench/parts/replication_sender.py [--pages 6974] [--hosts 72] [--per-flush 48]
        [--flushes-per-round 2] [--backups 1] [--rounds 5]
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
from agent.ownership.ledger import HostLedger  # noqa: E402
from agent.ownership.replicator import Replicator  # noqa: E402
from agent.state.changes import ChangeLog  # noqa: E402
from agent.state.frontier import Frontier, Item  # noqa: E402
from agent.state.seen import SeenSet  # noqa: E402
from consultant.client import HostRoute  # noqa: E402
from wancrawl.v1 import agent_pb2  # noqa: E402

ME = ("a", "127.0.0.1:1")
BACKUPS = [(f"b{i}", f"127.0.0.1:{2 + i}") for i in range(4)]


class _NoCrawl:
    def import_host(self, host, st): ...
    def export_host(self, host, robots=True): return None
    def drop_host(self, host): ...


class _Directory:
    epoch = 7

    def __init__(self, backups: int):
        self.agents = (ME, *BACKUPS[:backups])

    def saw_epoch(self, epoch): ...
    def forget(self, host): ...

    async def routes(self, hosts):
        return {h: HostRoute(h, self.agents, 300, 7) for h in hosts}


class _Backup:
    """Takes the stream as the gRPC client would put it on the wire, answers at once."""

    def __init__(self, sink: list[int]):
        self.sink = sink

    async def replicate(self, parts):
        for p in parts:
            self.sink.append(len(p if isinstance(p, bytes) else p.SerializeToString()))
        return agent_pb2.ReplicateResponse()


class _Peers:
    def __init__(self):
        self.bytes: list[int] = []

    def get(self, address, server_name=""):
        return _Backup(self.bytes)


def crawl(tmp: Path, replication: bool, args) -> tuple[float, int, int, int]:
    """One simulated crawl: (CPU seconds, pages, Replicate calls, bytes sent)."""
    changes = ChangeLog() if replication else None
    fr, seen = Frontier(tmp / "f.sqlite", changes=changes), SeenSet(tmp / "s.sqlite")
    ledger = HostLedger(fr, seen, _NoCrawl(), wake=lambda h: None)  # type: ignore[arg-type]
    peers = _Peers()
    rep = None
    if changes is not None:
        rep = Replicator(ME[0], changes, ledger, _Directory(args.backups), peers,  # type: ignore[arg-type]
                         spooled=lambda: 0, shipped=lambda: 0, interval=60.0, retry_seconds=1.0,
                         max_pending=1_000_000, clock=time.monotonic, backups=args.backups)
    hosts = [f"www.s{i:04d}.lab" for i in range(args.hosts)]
    per_host = args.pages // args.hosts
    made = {h: 1 for h in hosts}
    roots = [Item(f"http://{h}/", h, 0) for h in hosts]
    for it in roots:
        seen.add_new(it.host, [it.url])
    fr.add(roots)

    async def go() -> int:
        pages = flushes = 0
        while True:
            took: list[Item] = []
            for h in hosts * args.per_flush:  # round robin over the hosts with work
                if len(took) >= args.per_flush:
                    break
                it = fr.pop(h)
                if it is not None:
                    took.append(it)
            if not took:
                break
            new = []
            for it in took:
                h = it.host
                if made[h] < per_host:
                    made[h] += 1
                    new.append(Item(f"http://{h}/section-{made[h] % 7}/page-{made[h]}.html", h, it.depth + 1, it.url))
                fr.done(it)
            fr.add(new)
            fr.flush()
            pages += len(took)
            flushes += 1
            if rep is not None and flushes % args.flushes_per_round == 0:
                await rep.round()
        if rep is not None:
            await rep.round()  # the last changes
        return pages

    t0 = time.process_time()
    pages = asyncio.run(go())
    cpu = time.process_time() - t0
    calls = int(rep.stats.replica_sends) if rep is not None else 0
    fr.close()
    seen.close()
    return cpu, pages, calls, sum(peers.bytes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=6974)
    ap.add_argument("--hosts", type=int, default=72)
    ap.add_argument("--per-flush", type=int, default=48, help="pages per group commit")
    ap.add_argument("--flushes-per-round", type=int, default=2, help="group commits per replication round")
    ap.add_argument("--backups", type=int, default=1, help="r")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    runs: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="repl-sender-") as d:
        for n in range(args.rounds):
            for on in (False, True):
                tmp = Path(d) / f"r{n}-{'on' if on else 'off'}"
                tmp.mkdir()
                cpu, pages, calls, sent = crawl(tmp, on, args)
                runs[on].append(cpu / pages * 1e6)
                print(f"round {n + 1} replication {'on ' if on else 'off'}: {pages} pages, {cpu:.3f} s CPU, "
                      f"{cpu / pages * 1e6:.1f} us/page" + (f", {calls} Replicate calls, {sent / 1e6:.2f} MB" if on else ""))
    off, on = min(runs[False]), min(runs[True])
    print(f"\nbest of {args.rounds}: off {off:.1f} us/page, on {on:.1f} us/page (r={args.backups}): "
          f"replication's sender adds {on - off:.1f} us per page "
          f"(medians {statistics.median(runs[False]):.1f} / {statistics.median(runs[True]):.1f})")


if __name__ == "__main__":
    main()
