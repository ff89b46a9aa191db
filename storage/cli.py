"""`storage` command line: serve, get, stats, export --cdxj, verify."""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
import json
import time
import logging
import sys
from datetime import datetime, timezone

from wancrawl.runtime import eventloop
from wancrawl.errors import WancrawlError

from storage import config as storage_config


def _parse_time(text: str) -> float:
    """Epoch seconds, a 14-digit WARC timestamp, or ISO 8601."""
    try:
        return float(text) if len(text) != 14 else datetime.strptime(text, "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise WancrawlError(f"--at {text!r}: expected epoch seconds, YYYYmmddHHMMSS or ISO 8601") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


def _settings(args) -> storage_config.StorageSettings:
    return storage_config.load(args.config, {"listen": getattr(args, "listen", None)})


def _open_store(args):
    from storage.store import Store

    if not args.config:
        raise WancrawlError("give --config FILE (read the index and WARCs directly) or --storage ADDR")
    return Store(_settings(args), readonly=True)


def cmd_serve(args) -> int:
    from storage.server import serve

    settings = _settings(args)
    eventloop.run(serve(settings, on_ready=lambda addr: print(f"storage serving on {addr}", flush=True)), settings.event_loop)
    return 0


def cmd_history(args) -> int:
    fields = ("record_id", "fetched_at", "status", "record_type", "payload_digest", "refers_to", "agent_id", "url")
    if args.storage:
        from storage.client import GrpcStorageClient

        async def go():
            async with GrpcStorageClient(args.storage) as client:
                return await client.history(args.url, args.limit)

        rows = [{f: getattr(c, f) for f in fields} for c in asyncio.run(go()).captures]
    else:
        store = _open_store(args)
        try:
            rows = [{f: getattr(r, f) for f in fields} for r in store.history(args.url, args.limit)]
        finally:
            store.close()
    for r in rows:
        if args.json:
            print(json.dumps(r))
        else:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["fetched_at"]))
            ref = f" -> {r['refers_to']}" if r["refers_to"] else ""
            print(f"{when} {r['status']} {r['record_type']:8} {r['payload_digest']} {r['record_id']}{ref}")
    return 0 if rows else 1


def cmd_get(args) -> int:
    at = _parse_time(args.at) if args.at else None
    if args.storage:
        from storage.client import GrpcStorageClient

        async def go():
            async with GrpcStorageClient(args.storage) as client:
                return await client.get(args.url, at)

        resp = asyncio.run(go())
        info = {f.name: v for f, v in resp.capture.ListFields()}
        head, body = resp.http_headers, resp.body
    else:

        store = _open_store(args)
        try:
            row, head, body = store.get(args.url, at)
        finally:
            store.close()
        info = dataclasses.asdict(row)
    if args.info:
        print(json.dumps(info, indent=2, default=str))
        return 0
    out = sys.stdout.buffer
    if args.headers:
        out.write(head)
    out.write(body)
    out.flush()
    return 0


def _print_stats(s: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(s, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title="storage", show_header=False)
    for key in ("pages", "responses", "revisits", "raw_bytes", "stored_bytes", "compression_ratio", "warc_files", "hosts", "agents"):
        v = s[key]
        t.add_row(key, f"{v:.2f}" if isinstance(v, float) else f"{v:,}")
    console.print(t)
    for title, rows in (("per host", s["per_host"]), ("per agent", s["per_agent"])):
        tt = Table(title=title)
        tt.add_column("key")
        tt.add_column("pages", justify="right")
        tt.add_column("stored bytes", justify="right")
        for k, n, b in rows:
            tt.add_row(k, f"{n:,}", f"{b:,}")
        console.print(tt)


def cmd_stats(args) -> int:
    if args.storage:
        from google.protobuf.json_format import MessageToDict

        from storage.client import GrpcStorageClient

        async def go():
            async with GrpcStorageClient(args.storage) as client:
                return await client.stats(args.top)

        m = asyncio.run(go())
        d = MessageToDict(m, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
        s = {k: (int(v) if isinstance(v, str) and v.isdigit() else v) for k, v in d.items() if not k.startswith("per_")}
        s["per_host"] = [(c.key, c.pages, c.stored_bytes) for c in m.per_host]
        s["per_agent"] = [(c.key, c.pages, c.stored_bytes) for c in m.per_agent]
    else:
        store = _open_store(args)
        try:
            s = store.stats(args.top)
        finally:
            store.close()
    _print_stats(s, args.json)
    return 0


def cmd_export(args) -> int:
    if not args.cdxj:
        raise WancrawlError("export: only --cdxj is supported")
    store = _open_store(args)
    try:
        if args.output and args.output != "-":
            with open(args.output, "w", encoding="utf-8") as fh:
                n = store.export_cdxj(fh)
            print(f"wrote {n} CDXJ lines to {args.output}", file=sys.stderr)
        else:
            store.export_cdxj(sys.stdout)
    finally:
        store.close()
    return 0


def cmd_verify(args) -> int:
    store = _open_store(args)
    try:
        report = store.verify()
    finally:
        store.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for p in report["problems"]:
            print(f"PROBLEM {p}")
        print(f"{report['files']} files, {report['records']} records, {report['captures_checked']} captures checked: "
              + ("OK" if report["ok"] else f"{len(report['problems'])} problems"))
    return 0 if report["ok"] else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="storage", description="wancrawl storage: WARC files with an SQL index")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)

    def reader(sp, grpc_ok: bool):
        sp.add_argument("--config", help="storage TOML; read the index and WARC directory directly (read-only)")
        if grpc_ok:
            sp.add_argument("--storage", metavar="ADDR", help="ask a running storage over gRPC instead")

    s = sub.add_parser("serve", help="run the storage gRPC service")
    s.add_argument("--config", required=True)
    s.add_argument("--listen", help="host:port (overrides the config)")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("get", help="print the payload of a URL's latest capture (or the one nearest --at)")
    s.add_argument("url")
    s.add_argument("--at", help="epoch seconds, YYYYmmddHHMMSS or ISO 8601")
    s.add_argument("--headers", action="store_true", help="print the HTTP status line and headers first")
    s.add_argument("--info", action="store_true", help="print the index entry as JSON instead of the payload")
    reader(s, True)
    s.set_defaults(fn=cmd_get)

    s = sub.add_parser("history", help="every capture of a URL over time, oldest first (responses and revisits)")
    s.add_argument("url")
    s.add_argument("--limit", type=int, default=0, help="the last N captures (0: all)")
    s.add_argument("--json", action="store_true", help="one JSON object per capture")
    reader(s, True)
    s.set_defaults(fn=cmd_history)

    s = sub.add_parser("stats", help="pages, bytes, compression ratio, per host and per agent")
    s.add_argument("--json", action="store_true")
    s.add_argument("--top", type=int, default=20)
    reader(s, True)
    s.set_defaults(fn=cmd_stats)

    s = sub.add_parser("export", help="export the index (CDXJ for pywb)")
    s.add_argument("--cdxj", action="store_true", required=True)
    s.add_argument("-o", "--output", default="-")
    reader(s, False)
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("verify", help="re-read every WARC record and check digests against the index")
    s.add_argument("--json", action="store_true")
    reader(s, False)
    s.set_defaults(fn=cmd_verify)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.cmd != "serve":
        from wancrawl.grpcutil import quiet_core_logs

        quiet_core_logs()
    try:
        return args.fn(args)
    except WancrawlError as exc:
        print(f"storage {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        from wancrawl.cli.pipes import broken_pipe

        return broken_pipe()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
