"""`agent run|status`: run a crawler agent, or ask a running one for its counters."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from wancrawl.errors import WancrawlError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agent", description="wancrawl crawler agent")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run an agent")
    r.add_argument("--config", help="TOML config file (see configs/agent-*.toml)")
    r.add_argument("--id", dest="agent_id", help="agent id (unique in the crawl)")
    r.add_argument("--listen", help="host:port of the Agent gRPC service")
    r.add_argument("--advertise", help="host:port peers dial (default: the bound listen address)")
    r.add_argument("--consultant", metavar="ADDR[,ADDR...]",
                   help="consultant address, or its replicas separated by commas, best first (replaces the file's)")
    r.add_argument("--storage", help="storage address (empty: pages stay in the spool)")
    r.add_argument("--source-ip", help="local address fetches come from")
    r.add_argument("--data-dir", help="frontier, seen set, outbox and spool live here")
    r.add_argument("--hosts-file", help="host -> IP before DNS")
    r.add_argument("--city", help="location: city")
    r.add_argument("--lat", type=float, help="location: latitude")
    r.add_argument("--lon", type=float, help="location: longitude")
    r.add_argument("--asn", type=int, help="location: AS number")
    r.add_argument("--fetcher", help="lean (the default), aiohttp or httpx")
    r.add_argument("--event-loop", help="uvloop (default) or asyncio")
    r.add_argument("--concurrency", type=int)
    r.add_argument("--delay", type=float, help="politeness delay per host (s)")
    r.add_argument("--allow-network", action="append", help="CIDR fetches may reach although private (repeat)")
    r.add_argument("--metrics-listen", help="host:port for Prometheus metrics")
    r.add_argument("--log-level")
    r.add_argument("--contact", help="URL (or mailto:) where site owners can reach whoever runs this crawl; the "
                                     "User-Agent becomes 'wancrawl/0.1 (+CONTACT)' (env WANCRAWL_CONTACT). Given (even empty, as the compose "
                                     "agents pass ${WANCRAWL_CONTACT}), it must be one: an agent of the real web has "
                                     "no honest default (manager crawl --contact's rule)")
    s = sub.add_parser("status", help="counters of a running agent")
    s.add_argument("--agent", required=True, help="agent address host:port")
    s.add_argument("--json", action="store_true")
    return p


def _run(args) -> int:
    from agent.server import run
    from agent.settings import load_settings
    from wancrawl.contact import required as required_contact

    contact = args.contact if args.contact is not None else os.environ.get("WANCRAWL_CONTACT")
    overrides = {
        "agent_id": args.agent_id, "listen": args.listen, "advertise": args.advertise,
        # the flag replaces both keys of the file (consultants = [...] would otherwise disagree)
        "consultants": [] if args.consultant else None, "consultant": args.consultant, "storage": args.storage, "data_dir": args.data_dir,
        "hosts_file": args.hosts_file, "location.city": args.city, "location.lat": args.lat,
        "location.lon": args.lon, "location.asn": args.asn, "fetcher": args.fetcher,
        "event_loop": args.event_loop,
        "concurrency": args.concurrency, "politeness.delay": args.delay,
        "fetch.allow_networks": args.allow_network, "metrics_listen": args.metrics_listen,
        "log_level": args.log_level, "source_ip": args.source_ip,
        "fetch.user_agent": None if contact is None else required_contact(contact),
    }
    run(load_settings(args.config, overrides))
    return 0


async def _status(args) -> int:
    from google.protobuf import json_format

    from agent.client import AgentClient

    async with AgentClient(args.agent) as client:
        r = await client.status(timeout=10)
    if args.json:
        print(json_format.MessageToJson(r, preserving_proto_field_name=True))
    else:
        print(f"agent {r.agent_id}")
        for k, v in sorted(r.counters.items()):
            print(f"  {k:<24} {v:g}")
    return 0


def main(argv: list[str] | None = None) -> int:
    import faulthandler
    import signal

    # `kill -USR1 <pid>` prints every thread's stack to the log: for "why is it stuck?".
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = parser().parse_args(argv)
    try:
        if args.cmd == "run":
            return _run(args)
        return asyncio.run(_status(args))
    except WancrawlError as exc:
        print(f"agent: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
