"""`lab strategy NAME`: swap a running lab's partition strategy without hunting for a pid.

The consultant re-reads its config on SIGHUP (consultant/server.py reload): a new strategy bumps
the epoch and agents re-resolve. Here the lab rewrites that config (checked as the consultant
checks it, so a typo is refused before any process is signalled), signals every replica it
started (by the pids in cluster.json, each checked to still run its command) and waits until the
consultant answers with the new strategy.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from lab.cluster import WRITTEN_BY, Cluster, check_strategy, replica_name
from manager import procs
from wancrawl.errors import ConfigError, FailedPrecondition, Unavailable


@dataclass(frozen=True)
class Placing:
    strategy: str
    epoch: int


def rewrite_config(path: Path, name: str) -> str:
    """Set `strategy = NAME` in the consultant's config (NAME "": keep the file's) after checking
    the whole file as the consultant will; returns the strategy the file now names."""
    from consultant.settings import from_data

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if name:
        check_strategy(name, "consultant")
        data["strategy"] = name
    settings = from_data(data, source=str(path))  # ConfigError names the key
    if name:
        path.write_text(WRITTEN_BY + settings.to_toml())
    return settings.strategy


async def _placing(consultant: str) -> Placing:
    from consultant.client import ConsultantClient

    async with ConsultantClient(consultant) as c:
        listed = await c.list_agents()
    return Placing(listed.strategy, listed.epoch)


async def _await_strategy(consultant: str, want: str, timeout: float) -> Placing:
    deadline = time.monotonic() + timeout
    while True:
        now = await _placing(consultant)
        if now.strategy == want or time.monotonic() > deadline:
            return now
        await asyncio.sleep(0.2)


def set_strategy(cl: Cluster, name: str, timeout: float = 30.0) -> tuple[Placing, Placing]:
    """(before, after): the lab's consultant config set to strategy NAME ("" = re-read it as
    it is) and every live replica signalled. Unavailable when the consultant does not report the
    strategy within `timeout` (its log says why)."""
    if cl.mode != "consultant":
        raise FailedPrecondition("a Kademlia-mode lab has no consultant: hosts are placed by XOR distance")
    config = Path(cl.run_dir) / "consultant.toml"
    want = rewrite_config(config, name)
    before = asyncio.run(_placing(cl.consultant))
    names = {replica_name(i) for i in range(len([a for a in cl.consultant.split(",") if a]))}
    live = [p for p in cl.procs if p.name in names and procs.alive(p)]
    if not live:
        raise FailedPrecondition(f"no consultant of {cl.run_dir} is running (`lab up` first)")
    for p in live:
        os.kill(p.pid, signal.SIGHUP)
    after = asyncio.run(_await_strategy(cl.consultant, want, timeout))
    if after.strategy != want:
        raise Unavailable(f"the consultant still places by {after.strategy} after {timeout:.0f}s: "
                          f"see {cl.run_dir}/logs/consultant.log")
    return before, after
