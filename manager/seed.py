"""`manager seed`: check every line, send each URL straight to its owner (one hop saved)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from consultant.client import ConsultantClient
from wancrawl import grpcutil
from wancrawl.errors import InvalidArgument, Unavailable
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical
from wancrawl.v1 import agent_pb2, agent_pb2_grpc

BATCH = 1000
MAX_ROUNDS = 4


@dataclass
class SeedFile:
    urls: list[str] = field(default_factory=list)        # canonical, unique, in file order
    bad: list[tuple[int, str, str]] = field(default_factory=list)  # (line number, reason, text)
    duplicates: int = 0


def parse_seeds(text: str, sort_query: bool = False) -> SeedFile:
    """Seed lines: blank lines and # comments skipped, each URL canonicalised, bad lines kept
    with their numbers and reasons."""
    out = SeedFile()
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        raw = line.strip()
        if not raw or raw.startswith("#"):
            continue
        try:
            url = canonicalize(raw, sort_query=sort_query)
        except InvalidUrl as exc:
            out.bad.append((n, str(exc), raw[:200]))
            continue
        if url in seen:
            out.duplicates += 1
            continue
        seen.add(url)
        out.urls.append(url)
    return out


async def inject(consultant: ConsultantClient, urls: list[str]) -> tuple[Counter, list[str]]:
    """Push URLs to their owners. Returns (accepted per agent, URLs that could not be placed).
    A batch whose owner cannot be reached goes to the next agent of the host's preference
    list, then to any live agent (which routes it on); "not mine" answers are resolved again."""
    accepted: Counter = Counter()
    pending = list(urls)
    channels: dict[str, object] = {}

    async def push(address: str, chunk: list[str]) -> agent_pb2.PushUrlsResponse:
        ch = channels.get(address) or channels.setdefault(address, grpcutil.channel(address))
        req = agent_pb2.PushUrlsRequest(sender_id="manager", urls=[agent_pb2.UrlItem(url=u) for u in chunk])
        return await agent_pb2_grpc.AgentStub(ch).PushUrls(req, timeout=60)

    try:
        for _ in range(MAX_ROUNDS):
            if not pending:
                break
            hosts = sorted({host_of_canonical(u) for u in pending})
            routes = {r.host: r for i in range(0, len(hosts), BATCH) for r in await consultant.resolve(hosts[i : i + BATCH])}
            live = [(a.agent_id, a.address) for a in (await consultant.list_agents()).agents]
            if not live:
                raise Unavailable("no live agent is registered with the consultant")
            by_agent: dict[tuple[str, str], list[str]] = {}
            for u in pending:
                r = routes.get(host_of_canonical(u))
                by_agent.setdefault(r.agents[0] if r is not None and r.agents else live[0], []).append(u)
            pending = []
            for first, group in by_agent.items():
                order = [first] + [a for a in live if a != first]
                for i in range(0, len(group), BATCH):
                    chunk = group[i : i + BATCH]
                    for agent_id, address in order:
                        try:
                            resp = await push(address, chunk)
                        except grpc.aio.AioRpcError:
                            continue  # unreachable: the next agent
                        accepted[agent_id] += resp.accepted
                        pending += [chunk[j] for j in resp.not_mine]
                        break
                    else:
                        pending += chunk
    finally:
        for ch in channels.values():
            await ch.close()  # type: ignore[attr-defined]
    return accepted, pending


async def run_seed(args) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(args.file).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InvalidArgument(f"cannot read {args.file}: {exc.strerror}") from None
    seeds = parse_seeds(text, sort_query=args.sort_query)
    for n, reason, raw in seeds.bad:
        print(f"{args.file}:{n}: {reason}: {raw!r}", file=sys.stderr)
    accepted: Counter = Counter()
    failed: list[str] = []
    if seeds.urls:
        async with ConsultantClient(args.consultant) as c:
            accepted, failed = await inject(c, seeds.urls)
    summary = {
        "valid": len(seeds.urls), "bad_lines": len(seeds.bad), "duplicates": seeds.duplicates,
        "accepted": sum(accepted.values()), "per_agent": dict(accepted), "not_injected": len(failed),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['valid']} seed URLs, {summary['bad_lines']} bad lines, {summary['duplicates']} duplicates; "
              f"{summary['accepted']} accepted by {len(accepted)} agents"
              + "".join(f"\n  {a}: {n}" for a, n in sorted(accepted.items()))
              + (f"\n{len(failed)} could not be injected" if failed else ""))
    return 1 if failed else 0
