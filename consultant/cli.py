"""`consultant serve|resolve|explain|agents|override`: run the service or ask a running one."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from google.protobuf import json_format

from wancrawl.errors import WancrawlError

DEFAULT_CONSULTANT = os.environ.get("WANCRAWL_CONSULTANT", "127.0.0.1:50051")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="consultant", description="wancrawl's DNS-like host -> agent service")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the consultant")
    s.add_argument("--config", help="TOML config file (see configs/consultant-*.toml)")
    s.add_argument("--listen", help="host:port to serve on (port 0: any)")
    s.add_argument("--state-url", help="SQLAlchemy URL of the state (sqlite:///file.db, postgresql+psycopg://...)")
    s.add_argument("--strategy", help="partition strategy: hash, xor, geo, asn, weighted")
    s.add_argument("--hosts-file", help="hosts file for host -> IP (before DNS)")
    s.add_argument("--no-system-dns", action="store_true", help="resolve hosts only through the hosts file")
    s.add_argument("--city-db", help="MaxMind City DB (default: the GeoLite2 DB shipped with maxminddb-geolite2)")
    s.add_argument("--asn-db", help="MaxMind ASN DB")
    s.add_argument("--pyasn-file", help="pyasn ipasn file")
    s.add_argument("--lease-seconds", type=float)
    s.add_argument("--log-level")
    s.add_argument("--metrics-listen", help="host:port for Prometheus metrics")
    s.add_argument("--agent-locations", help="TOML file of [<agent id>] tables: agents' locations stated by the operator "
                                             "(agents behind NAT or in containers; docs/security.md)")

    def client_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--consultant", default=DEFAULT_CONSULTANT, help="consultant address (env WANCRAWL_CONSULTANT)")
        sp.add_argument("--json", action="store_true", help="print JSON")

    r = sub.add_parser("resolve", help="which agents own these hosts")
    r.add_argument("hosts", nargs="+")
    client_args(r)
    e = sub.add_parser("explain", help="why a host goes where it goes; --capacity: what each agent can do")
    e.add_argument("host", nargs="?")
    e.add_argument("--capacity", action="store_true",
                   help="each agent's resources, measured rate and the runtime model's prediction (seed 003)")
    client_args(e)
    a = sub.add_parser("agents", help="list agents")
    a.add_argument("--all", action="store_true", help="include dead and departed agents")
    client_args(a)
    o = sub.add_parser("override", help="pin a host to an agent, or unpin it")
    o.add_argument("action", choices=["set", "clear"])
    o.add_argument("host")
    o.add_argument("agent", nargs="?")
    client_args(o)
    return p


def _capacity(r, as_json: bool) -> int:
    """`explain --capacity`: seed 003's node parameters, each agent's measured rate (its backlogged
    heartbeat intervals) beside the fitted model's prediction (consultant/capacity/)."""
    if as_json:
        print(json.dumps({"model": r.capacity_model, "cv_errors_seconds": dict(r.capacity_errors), "agents": [
            {"agent_id": a.agent_id, "samples": a.samples, "measured_rate": a.measured_rate, "predicted_rate": a.predicted_rate,
             "resources": json_format.MessageToDict(a.load.resources, preserving_proto_field_name=True)} for a in r.agents]}, indent=2))
        return 0
    errs = ", ".join(f"{k} {v:.3f}s" for k, v in sorted(r.capacity_errors.items()))
    print(f"runtime model: {r.capacity_model or 'none yet (too few samples: agents report one per busy heartbeat)'}"
          + (f"  (cross-validated error: {errs})" if errs else ""))
    print(f"{'agent':<20} {'cores':>5} {'GHz':>5} {'mem GB':>7} {'Mbit/s':>7} {'samples':>7} {'measured p/s':>12} {'predicted p/s':>13}")
    for a in r.agents:
        res = a.load.resources
        print(f"{a.agent_id:<20} {res.cores:>5.0f} {res.cpu_ghz:>5.2f} {res.memory_gb:>7.1f} {res.bandwidth_mbps:>7.1f} "
              f"{a.samples:>7} {a.measured_rate:>12.1f} {a.predicted_rate:>13.1f}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from consultant.server import run
    from consultant.settings import load_settings

    overrides = {
        "listen": args.listen, "state_url": args.state_url, "strategy": args.strategy,
        "dns.hosts_file": args.hosts_file, "databases.city_db": args.city_db,
        "databases.asn_db": args.asn_db, "databases.pyasn_file": args.pyasn_file,
        "lease_seconds": args.lease_seconds, "log_level": args.log_level,
        "dns.system_dns": False if args.no_system_dns else None, "metrics_listen": args.metrics_listen,
        "agent_locations": args.agent_locations,
    }
    settings = load_settings(args.config, overrides)
    run(settings)
    return 0


def _location(loc) -> str:
    where = loc.city or "?"
    if loc.country:
        where += f", {loc.country}"
    if loc.has_coordinates:
        where += f" ({loc.lat:.2f}, {loc.lon:.2f})"
    if loc.asn:
        where += f" AS{loc.asn}"
    if loc.isp:
        where += f" [{loc.isp}]"
    return where


async def _client_cmd(args: argparse.Namespace) -> int:
    from consultant.client import ConsultantClient

    async with ConsultantClient(args.consultant) as c:
        if args.cmd == "resolve":
            r = await c.resolve_raw(args.hosts)
            table = [(a.agent_id, a.address) for a in r.agents]
            if args.json:
                print(json.dumps({"epoch": r.epoch, "answers": [
                    {"host": a.host, "agents": [{"agent_id": table[i][0], "address": table[i][1]} for i in a.agents],
                     "ttl": a.ttl_seconds, **({"error": a.error} if a.error else {})} for a in r.answers]}, indent=2))
            else:
                print(f"epoch {r.epoch}")
                for a in r.answers:
                    if a.error:
                        print(f"{a.host}\tERROR {a.error}")
                    else:
                        print(f"{a.host}\t" + " ".join(f"{table[i][0]}@{table[i][1]}" for i in a.agents) + f"\tttl={a.ttl_seconds}s")
            return 1 if any(a.error for a in r.answers) else 0
        if args.cmd == "explain" and args.capacity:
            return _capacity(await c.list_agents(), args.json)
        if args.cmd == "explain":
            if not args.host:
                print("consultant explain: HOST is required (or --capacity)", file=sys.stderr)
                return 2
            e = await c.explain(args.host)
            if args.json:
                print(json_format.MessageToJson(e, preserving_proto_field_name=True, always_print_fields_with_no_presence=True))
                return 0
            print(f"host      {e.host}\nip        {e.ip or 'unknown'}\nsite      {_location(e.site)}")
            print(f"strategy  {e.strategy}  (epoch {e.epoch}, ttl {e.ttl_seconds}s)")
            if e.override_agent:
                print(f"override  pinned to {e.override_agent}")
            for n in e.notes:
                print(f"note      {n}")
            print("rank  agent                 score         where / why")
            for cand in e.candidates:
                print(f"{cand.rank:>4}  {cand.agent_id:<20}  {cand.score:>12.4f}  {_location(cand.location)}: {cand.detail}")
            return 0
        if args.cmd == "agents":
            r = await c.list_agents(include_dead=args.all)
            if args.json:
                print(json_format.MessageToJson(r, preserving_proto_field_name=True))
                return 0
            print(f"epoch {r.epoch}, strategy {r.strategy}, {len(r.agents)} agents")
            now = time.time()
            for a in r.agents:
                state = {1: "alive", 2: "dead", 3: "left"}.get(a.state, "?")
                print(f"{a.agent_id:<20} {state:<6} {a.address:<22} {_location(a.location)}  "
                      f"queue={a.load.queue_length} L={a.load.load_level:+.1f} pages/s={a.load.pages_per_second:.1f} "
                      f"lease={a.lease_expires - now:+.0f}s")
            return 0
        if args.cmd == "override":
            if args.action == "set":
                if not args.agent:
                    print("consultant override set: AGENT is required", file=sys.stderr)
                    return 2
                epoch = await c.set_override(args.host, args.agent)
            else:
                epoch = await c.clear_override(args.host)
            print(json.dumps({"epoch": epoch}) if args.json else f"epoch {epoch}")
            return 0
    return 2


def main(argv: list[str] | None = None) -> int:
    from wancrawl.cli.pipes import broken_pipe
    from wancrawl.grpcutil import quiet_core_logs

    args = parser().parse_args(argv)
    try:
        if args.cmd == "serve":
            return _serve(args)
        quiet_core_logs()
        return asyncio.run(_client_cmd(args))
    except WancrawlError as exc:
        print(f"consultant {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return broken_pipe()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
