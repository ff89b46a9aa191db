"""`manager seed`: check every line, hand the URLs to live agents, which route them to their owners."""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from agent.client import AgentPool
from manager.directory import Directory, open_directory
from wancrawl.errors import InvalidArgument, Unavailable, WancrawlError
from wancrawl.urls import InvalidUrl, canonicalize, host_of_canonical
from wancrawl.v1 import agent_pb2

BATCH = 1000


@dataclass
class SeedFile:
    urls: list[str] = field(default_factory=list)        # canonical, unique, in file order
    bad: list[tuple[int, str, str]] = field(default_factory=list)  # (line number, reason, text)
    duplicates: int = 0


def scheme_hint(raw: str) -> str:
    """For a line that is a host (or host/path) without a scheme, the URL the user meant:
    "no scheme: did you mean http://example.com/?"; "" for anything else."""
    if "://" in raw or raw[:1] in "/.?#" or " " in raw:
        return ""
    meant = "http://" + raw + ("" if "/" in raw else "/")
    try:
        canonicalize(meant)
    except InvalidUrl:
        return ""
    host = raw.split("/", 1)[0].split(":", 1)[0]
    if "." not in host and host != "localhost":
        return ""  # "page.html" is a dotted relative path; "index" is no host either
    return f"no scheme: did you mean {meant}?"


def parse_seeds(text: str, sort_query: bool = False) -> SeedFile:
    """Seed lines: blank lines and # comments skipped, each URL canonicalised, bad lines kept
    with their numbers and reasons. Line numbers are the file's physical lines: only "\n" ends a
    line (str.splitlines would also split at \r, \x0b, \x0c, \x1c-\x1e, \x85 and U+2028/9, and
    shift every later number)."""
    out = SeedFile()
    seen: set[str] = set()
    for n, line in enumerate(text.split("\n"), 1):
        raw = line.strip()
        if not raw or raw.startswith("#"):
            continue
        try:
            url = canonicalize(raw, sort_query=sort_query)
        except InvalidUrl as exc:
            out.bad.append((n, scheme_hint(raw) or str(exc), raw[:200]))
            continue
        if url in seen:
            out.duplicates += 1
            continue
        seen.add(url)
        out.urls.append(url)
    return out


@dataclass
class Injection:
    taken: Counter = field(default_factory=Counter)               # URLs accepted, per routing agent
    failed: list[str] = field(default_factory=list)               # URLs no agent could be asked about
    refused: list[tuple[str, str]] = field(default_factory=list)  # (URL, reason) an agent refused


def refusals(chunk: list[str], errors: list[str]) -> list[tuple[str, str]]:
    """The agent's "index: reason" errors as (URL, reason) of the chunk it was sent."""
    out = []
    for e in errors:
        idx, _, reason = e.partition(": ")
        if idx.isdigit() and int(idx) < len(chunk):
            out.append((chunk[int(idx)], reason))
        else:
            out.append(("?", e))
    return out


async def inject(consultant: Directory, urls: list[str], force: bool = False) -> tuple[Counter, list[str]]:
    """`inject_all` for callers that only count: (URLs taken per agent, URLs no agent took)."""
    res = await inject_all(consultant, urls, force)
    return res.taken, res.failed


async def inject_all(consultant: Directory, urls: list[str], force: bool = False) -> Injection:
    """Hand URLs to live agents in chunks (PushUrls with route): each agent keeps those of its
    own hosts and pushes the rest to their owners, so the manager is not a second router. A
    chunk an agent cannot take goes to the next live agent. `consultant`: the consultant, or the
    agents' overlay (manager/peers.py) when there is none. Returns the URLs taken per agent,
    those no agent took and those an agent refused (out of its scope, malformed) with the
    reason. force: owners queue them even if seen (an operator's re-seed)."""
    live = [(a.agent_id, a.address) for a in (await consultant.list_agents()).agents]
    if not live:
        raise Unavailable("no live agent: none is registered with the consultant (or listed by the overlay, with --peers)")
    if force:
        return await _inject_forced(consultant, urls)
    res = Injection()
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
                res.taken[agent_id] += r.accepted
                res.refused += refusals(chunk, r.errors)
                break
            else:
                res.failed += chunk
    return res


async def _inject_forced(consultant: Directory, urls: list[str]) -> Injection:
    """`seed --force`: each URL straight to its host's owner (then the rest of its preference
    list), never through a routing agent. `force` is the operator's alone (agent/server.py
    AUTH_RULES): an agent that routed it on would be refused by the owner, and its pushes
    retried for ever (the crawl never idle)."""
    res = Injection()
    by_host: dict[str, list[str]] = {}
    for u in urls:
        by_host.setdefault(host_of_canonical(u), []).append(u)
    routes = {r.host: r for r in await consultant.resolve(sorted(by_host))}
    targets: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for host, us in by_host.items():
        r = routes.get(host)
        if r is None or not r.agents:
            res.failed += us
            continue
        targets.setdefault(tuple(r.agents), []).extend(us)
    async with AgentPool(timeout=60) as pool:
        for agents, us in targets.items():
            for i in range(0, len(us), BATCH):
                chunk = us[i : i + BATCH]
                for agent_id, address in agents:
                    items = [agent_pb2.UrlItem(url=u, force=True) for u in chunk]
                    try:
                        pushed = await pool.get(address).push("manager", 0, items, route=False)
                    except WancrawlError:
                        continue  # the next of the preference list
                    res.taken[agent_id] += pushed.accepted
                    res.refused += refusals(chunk, pushed.errors)
                    chunk = [chunk[j] for j in pushed.not_mine if 0 <= j < len(chunk)]  # indices: a route that moved meanwhile
                    if not chunk:
                        break
                res.failed += chunk
    return res


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
    res = Injection()
    if seeds.urls:
        async with open_directory(args) as c:
            res = await inject_all(c, seeds.urls, force=getattr(args, "force", False))
    accepted, failed = res.taken, res.failed
    for url, reason in res.refused:
        print(f"refused: {url if len(url) <= 200 else url[:200] + '...'}: {reason}", file=sys.stderr)
    summary = {
        "valid": len(seeds.urls), "bad_lines": len(seeds.bad), "duplicates": seeds.duplicates,
        "accepted": sum(accepted.values()), "routed_by": dict(accepted), "not_injected": len(failed),
        "refused": [{"url": u, "reason": r} for u, r in res.refused],
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['valid']} seed URLs, {summary['bad_lines']} bad lines, {summary['duplicates']} duplicates; "
              f"{summary['accepted']} accepted (routed to their owners by {len(accepted)} agents)"
              + "".join(f"\n  {a}: {n}" for a, n in sorted(accepted.items()))
              + (f"\n{len(res.refused)} refused by the agents (listed on stderr)" if res.refused else "")
              + (f"\n{len(failed)} could not be injected" if failed else ""))
    # 0 only when every valid URL was accepted.
    return 1 if failed or res.refused else 0
