"""`manager seed`: check every line, hand the URLs to live agents, which route them to their owners."""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from agent.client import AgentPool
from consultant.client import ConsultantClient
from wancrawl.errors import InvalidArgument, Unavailable, WancrawlError
from wancrawl.urls import InvalidUrl, canonicalize
from wancrawl.v1 import agent_pb2

BATCH = 1000


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


async def inject(consultant: ConsultantClient, urls: list[str], force: bool = False) -> tuple[Counter, list[str]]:
    """Hand URLs to live agents in chunks (PushUrls with route): each agent keeps those of its
    own hosts and pushes the rest to their owners, so the manager is not a second router. A
    chunk an agent cannot take goes to the next live agent. Returns (URLs taken per agent,
    URLs no agent took). force: owners queue them even if seen (an operator's re-seed)."""
    live = [(a.agent_id, a.address) for a in (await consultant.list_agents()).agents]
    if not live:
        raise Unavailable("no live agent is registered with the consultant")
    taken: Counter = Counter()
    failed: list[str] = []
    async with AgentPool(timeout=60) as pool:
        for n, i in enumerate(range(0, len(urls), BATCH)):
            chunk = urls[i : i + BATCH]
            items = [agent_pb2.UrlItem(url=u, force=force) for u in chunk]
            for k in range(len(live)):
                agent_id, address = live[(n + k) % len(live)]  # spread the routing work
                try:
                    r = await pool.get(address).push("manager", 0, items, route=True)
                except WancrawlError:
                    continue  # unreachable or failing: the next agent
                taken[agent_id] += r.accepted
                break
            else:
                failed += chunk
    return taken, failed


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
            accepted, failed = await inject(c, seeds.urls, force=getattr(args, "force", False))
    summary = {
        "valid": len(seeds.urls), "bad_lines": len(seeds.bad), "duplicates": seeds.duplicates,
        "accepted": sum(accepted.values()), "routed_by": dict(accepted), "not_injected": len(failed),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['valid']} seed URLs, {summary['bad_lines']} bad lines, {summary['duplicates']} duplicates; "
              f"{summary['accepted']} accepted (routed to their owners by {len(accepted)} agents)"
              + "".join(f"\n  {a}: {n}" for a, n in sorted(accepted.items()))
              + (f"\n{len(failed)} could not be injected" if failed else ""))
    return 1 if failed else 0
