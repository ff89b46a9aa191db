"""Shared by the seed 002 benchmarks: run one deployment scheme on the lab and count pages."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from consultant.client import ConsultantClient  # noqa: E402
from lab.cluster import down, up  # noqa: E402
from manager.seed import inject, parse_seeds  # noqa: E402
from manager.status import snapshot  # noqa: E402


@dataclass
class Result:
    half: int                 # pages fetched after half the run
    full: int                 # pages fetched at the end
    per_agent: dict[str, int]


async def _measure(cl, seconds: float) -> Result:
    seeds = parse_seeds(Path(cl.seeds_file).read_text())
    async with ConsultantClient(cl.consultant) as c:
        await inject(c, seeds.urls)
        t0 = time.monotonic()
        half = None
        while True:
            await asyncio.sleep(0.5)
            elapsed = time.monotonic() - t0
            snap = await snapshot(c)
            pages = {a.agent_id: int(a.counters.get("pages", 0)) for a in snap.agents}
            if half is None and elapsed >= seconds / 2:
                half = sum(pages.values())
            if elapsed >= seconds:
                return Result(half or 0, sum(pages.values()), pages)


def run_scheme(run_dir: Path, topology_file: Path, strategy: str, groups: list[str], *, seconds: float,
               time_scale: float, delay: float) -> Result:
    """`lab up` the scheme, seed one site per block, count pages for `seconds`, `lab down`."""
    cl = up(run_dir, strategy=strategy, groups=groups, topology_path=str(topology_file), time_scale=time_scale,
            delay=delay, concurrency=64)
    try:
        return asyncio.run(_measure(cl, seconds))
    finally:
        down(run_dir)
