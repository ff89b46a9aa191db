"""`manager seed`: check every line, send each URL straight to its owner (one hop saved)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from consultant.client import ConsultantClient
from wancrawl import grpcutil
from wancrawl.errors import InvalidArgument, Unavailable, WancrawlError
from wancrawl.urls import InvalidUrl, canonicalize, host_of
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


async def _push(address: str, urls: list[str]) -> agent_pb2.PushUrlsResponse:
    async with grpcutil.channel(address) as ch:
        return await agent_pb2_grpc.AgentStub(ch).PushUrls(
            agent_pb2.PushUrlsRequest(sender_id="manager", urls=[agent_pb2.UrlItem(url=u) for u in urls]), timeout=60
        )


async def inject(consultant: ConsultantClient, urls: list[str]) -> tuple[Counter, list[str]]:
    """Push URLs to their owners. Returns (accepted per agent, URLs that could not be placed).
    An owner that cannot be reached is replaced by the next agent of the host's preference
    list, then by any live agent (which routes the URL on); "not mine" answers re-resolve."""
    accepted: Counter = Counter()
    pending = list(urls)
    for _ in range(MAX_ROUNDS):
        if not pending:
            break
        hosts = sorted({host_of(u) for u in pending})
        routes = {}
        for i in range(0, len(hosts), BATCH):
            for r in await consultant.resolve(hosts[i : i + BATCH]):
                routes[r.host] = r
        live = [(a.agent_id, a.address) for a in (await consultant.list_agents()).agents]
        by_agent: dict[tuple[str, str], list[str]] = {}
        for u in pending:
            r = routes.get(host_of(u))
            candidates = list(r.agents) if r is not None and r.agents else []
            by_agent.setdefault(candidates[0] if candidates else live[0], []).append(u)
        pending = []
        for (agent_id, address), group in by_agent.items():
            order = [(agent_id, address)] + [a for a in live if a[0] != agent_id]
            for target in order:
                try:
                    resp = None
                    for i in range(0, len(group), BATCH):
                        chunk = group[i : i + BATCH]
                        resp = await _push(target[1], chunk)
                        accepted[target[0]] += resp.accepted
                        pending += [chunk[j] for j in resp.not_mine]
                    break
                except Exception:  # noqa: BLE001 - unreachable agent: the next one
                    continue
            else:
                pending += group
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
            try:
                if not (await c.list_agents()).agents:
                    raise Unavailable("no live agent is registered with the consultant")
                accepted, failed = await inject(c, seeds.urls)
            except WancrawlError:
                raise
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
