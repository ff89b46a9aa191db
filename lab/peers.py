"""The operator's view of a lab cluster without a consultant (mode "kademlia"): seed and wait by
asking the agents themselves.

With a consultant, `manager seed` and `manager wait` learn the live agents from it. In
kademlia mode there is nobody to ask but the agents: any agent's Members lists the overlay's
live members, each answers Status, and a seed chunk pushed with route=true is routed by the
agent that takes it (as `manager seed` does). The snapshot is manager.status's, so "idle" means
exactly what it means in consultant mode.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from agent.client import AgentPool
from agent.peers import PATHS
from manager.seed import BATCH, Injection, refusals
from manager.status import AgentView, Snapshot, wait_finished
from wancrawl.errors import Unavailable, WancrawlError
from wancrawl.v1 import agent_pb2


async def members(pool: AgentPool, addresses: list[str]) -> list[tuple[str, str]]:
    """(agent id, address) of the overlay's live members, as the first PATHS agents of
    `addresses` that answer see them together (no single agent's view: issue 36, a lying agent
    first in the list would have listed itself alone, and `wait` called the crawl idle from it)."""
    views: list[list[tuple[str, str]]] = []
    for address in addresses:
        if len(views) == PATHS:
            break
        try:
            r = await pool.get(address).members(timeout=5)
        except WancrawlError:
            continue
        views.append([(m.agent_id, m.address) for m in r.members])
    if not views:
        raise Unavailable(f"no agent answers Members (asked {', '.join(addresses) or 'nobody'})")
    return list(dict.fromkeys(m for v in views for m in v))


async def inject(addresses: list[str], urls: list[str], force: bool = False) -> Injection:
    """manager.seed.inject_all without a consultant: the live agents from an agent's Members,
    then chunks pushed with route=true, spread over them, a chunk one cannot take going to the
    next."""
    res = Injection()
    async with AgentPool(timeout=60) as pool:
        live = await members(pool, addresses)
        for n, i in enumerate(range(0, len(urls), BATCH)):
            chunk = urls[i : i + BATCH]
            items = [agent_pb2.UrlItem(url=u, force=force) for u in chunk]
            for k in range(len(live)):
                agent_id, address = live[(n + k) % len(live)]
                try:
                    r = await pool.get(address).push("manager", 0, items, route=True)
                except WancrawlError:
                    continue
                res.taken[agent_id] += r.accepted
                res.refused += refusals(chunk, r.errors)
                break
            else:
                res.failed += chunk
    return res


async def snapshot(addresses: list[str]) -> Snapshot:
    """manager.status.snapshot from the overlay: every live member's Status."""
    async with AgentPool(timeout=5) as pool:
        live = await members(pool, addresses)
        views = [AgentView(a, addr, "alive", "", "") for a, addr in live]

        async def status(v: AgentView) -> agent_pb2.StatusResponse | None:
            try:
                return await pool.get(v.address).status(timeout=3)
            except WancrawlError:
                return None

        for v, r in zip(views, await asyncio.gather(*(status(v) for v in views))):
            if r is not None:
                v.counters, v.reachable = dict(r.counters), True
    return Snapshot(0, "kademlia", views)


async def wait_idle(addresses: list[str], timeout: float, stable: float) -> bool:
    """manager.status.wait_finished over the overlay's members; False on timeout."""
    return await wait_finished(lambda: snapshot(addresses), timeout, stable)


def pages(snap: Snapshot) -> Counter:
    """Pages fetched per agent so far (its Status counter)."""
    return Counter({a.agent_id: int(a.counters.get("pages", 0)) for a in snap.agents})
