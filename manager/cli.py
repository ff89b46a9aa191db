"""`manager`: inject seeds, watch the crawl, drain agents, wait for the end, report."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from wancrawl.errors import WancrawlError

DEFAULT_CONSULTANT = os.environ.get("WANCRAWL_CONSULTANT", "127.0.0.1:50051")
DEFAULT_PEERS = os.environ.get("WANCRAWL_PEERS", "")


class ConsultantAddresses(argparse.Action):
    """--consultant A --consultant B, or --consultant A,B: one comma-joined list, best first
    (the first use replaces the default; ConsultantClient splits it). A repeated address is an
    error naming the flag."""

    def __call__(self, parser, namespace, values, option_string=None):
        from wancrawl.errors import ConfigError
        from wancrawl.failover import parse_addresses

        before = getattr(namespace, "_consultant_given", False) and namespace.consultant
        try:
            joined = ",".join(parse_addresses([before or "", str(values)], where=option_string or "--consultant"))
        except ConfigError as exc:
            parser.error(str(exc))
        if not joined:
            parser.error(f"{option_string}: no address given")
        namespace.consultant, namespace._consultant_given = joined, True


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="manager", description="wancrawl manager: crawl, seeds, status, drain, wait, report")
    p.add_argument("--consultant", action=ConsultantAddresses, default=DEFAULT_CONSULTANT, metavar="ADDR[,ADDR...]",
                   help="consultant address; replicas over one state: repeat the flag or separate by commas, best first "
                        "(calls fail over to the next; env WANCRAWL_CONSULTANT)")
    p.add_argument("--peers", default=DEFAULT_PEERS, metavar="ADDR[,ADDR...]",
                   help="no consultant: agents in Kademlia mode (mode = \"kademlia\"); seed, status, wait, drain and agents "
                        "ask the first that answers, which answers from the overlay (env WANCRAWL_PEERS; wins over --consultant)")
    t = p.add_argument_group("mutual TLS (docs/security.md): an operator certificate from `wancrawl pki issue DIR operator NAME`")
    t.add_argument("--ca", help="CA certificate (env WANCRAWL_TLS_CA)")
    t.add_argument("--cert", help="operator certificate (env WANCRAWL_TLS_CERT)")
    t.add_argument("--key", help="its key (env WANCRAWL_TLS_KEY)")
    t.add_argument("--insecure", action="store_true", help="plaintext, for services run with [tls] insecure = true (env WANCRAWL_INSECURE=1)")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("seed", help="inject seed URLs (one per line; - for standard input)")
    s.add_argument("file")
    s.add_argument("--json", action="store_true")
    s.add_argument("--sort-query", action="store_true", help="canonicalise with sorted query parameters (as the agents do)")
    s.add_argument("--force", action="store_true",
                   help="queue the URLs even where agents have seen them (after fixing a site or a setting)")

    st = sub.add_parser("status", help="live view of agents, queues, pages/s, storage")
    st.add_argument("--json", action="store_true", help="print once as JSON")
    st.add_argument("--storage", help="storage address, for its totals; several writers separated by commas: "
                                      "a row per writer (pages/s, MB/s, lag)")
    st.add_argument("--interval", type=float, default=1.0)
    st.add_argument("--wide", action="store_true", help="every column, however wide the terminal (by default the "
                                                        "columns that fit it, the others named under the table)")

    co = sub.add_parser("console", help="the operator's page in a browser: agents, rates, hosts, incidents (read-only)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    co.add_argument("--listen", default="127.0.0.1:8765", help="address:port to serve on (port 0: any free one); "
                                                               "off loopback it needs --token")
    co.add_argument("--token", default=os.environ.get("WANCRAWL_CONSOLE_TOKEN", ""),
                    help="required on every request when given (?token= or Authorization: Bearer; env WANCRAWL_CONSOLE_TOKEN)")
    co.add_argument("--storage", help="storage address(es), for the archive's totals and each writer's state")
    co.add_argument("--interval", type=float, default=1.0, help="seconds between two polls of the cluster")

    a = sub.add_parser("agents", help="list agents")
    a.add_argument("--all", action="store_true", help="include dead and departed agents")
    a.add_argument("--json", action="store_true")

    d = sub.add_parser("drain", help="graceful leave: the agent hands its queues to their new owners and exits")
    d.add_argument("agent", help="agent id")
    d.add_argument("--timeout", type=float, default=120.0)

    w = sub.add_parser("wait", help="block until the crawl is finished (nothing fetchable is left); list what is left and why; exit 0 then, 1 on timeout")
    w.add_argument("--timeout", type=float, default=0.0, help="seconds (0 = no limit)")
    w.add_argument("--stable", type=float, default=1.0, help="seconds every agent must stay idle")
    w.add_argument("--quiet", action="store_true")

    r = sub.add_parser("report", help="PNG plots of the crawl: pages/s per agent, pages per agent, locality")
    r.add_argument("--out", required=True, help="directory for the PNG files and summary.json")
    r.add_argument("--storage-config", help="storage TOML: read its index directly")
    r.add_argument("--index", help="SQLAlchemy URL of storage's index (instead of --storage-config)")

    from manager.crawl import add_parser as add_crawl

    add_crawl(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from wancrawl.cli.pipes import broken_pipe
    from wancrawl.grpcutil import quiet_core_logs

    args = parser().parse_args(argv)
    if args.cmd != "crawl":  # crawl's services inherit the environment: their logs keep grpc's
        quiet_core_logs()
    try:
        _client_tls(args)
        if args.cmd == "seed":
            from manager.seed import run_seed

            return asyncio.run(run_seed(args))
        if args.cmd in ("status", "agents"):
            from manager.status import run_agents, run_status

            return asyncio.run(run_status(args) if args.cmd == "status" else run_agents(args))
        if args.cmd == "console":
            from manager.console.server import run_console

            return asyncio.run(run_console(args))
        if args.cmd == "wait":
            from manager.status import run_wait

            return asyncio.run(run_wait(args))
        if args.cmd == "drain":
            from manager.status import run_drain

            return asyncio.run(run_drain(args))
        if args.cmd == "crawl":
            from manager.crawl import run_crawl

            return run_crawl(args)
        if args.cmd == "report":
            from manager.report import run_report

            return run_report(args)
    except WancrawlError as exc:
        print(f"manager {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return broken_pipe()
    except KeyboardInterrupt:
        return 130
    return 2


def _client_tls(args: argparse.Namespace) -> None:
    """--ca/--cert/--key or --insecure: the credentials of every call this command makes."""
    from wancrawl.errors import ConfigError
    from wancrawl.grpcutil import TlsSettings, set_default_client_tls

    if args.insecure or args.ca or args.cert or args.key:
        tls = TlsSettings(args.ca or "", args.cert or "", args.key or "", insecure=args.insecure)
        if not tls.insecure and not (tls.ca and tls.cert and tls.key):
            raise ConfigError("--ca, --cert and --key go together")
        set_default_client_tls(tls)


if __name__ == "__main__":
    sys.exit(main())
