"""Issue 34, item 5: the agent's numbers come from one registry (AgentNode.stats).

status_counters() (the Status RPC and Prometheus, agent/metrics.py) is the registry's snapshot
plus the node's own levels. Checked against the metrics schema written by hand (agent/metrics.py
HELP and GAUGES), and against events made to happen here: a count shows in status, and a name
two components count is their sum.
"""

from __future__ import annotations

import dataclasses

import pytest

from agent.metrics import GAUGES, HELP
from agent.node import AgentNode
from agent.placement.hostcache import HostRoute
from agent.settings import load_settings
from consultant.client import Registration
from wancrawl.metrics import SERVER_HELP
from wancrawl.stats import StatsError

# Exported only in a mode this node is not in: the overlay's (mode = "kademlia",
# tests/test_kademlia_agents.py) and the labelled families (fetch_errors, incidents: agent/metrics.py sample).
KADEMLIA_ONLY = {n for n in HELP if n.startswith("overlay_")}
LABELLED = {"fetch_errors", "incidents"}


class Placement:
    """Owns every host for agent "me"; counts nothing itself."""

    async def register(self, agent_id, address, *, location=None, source_ip="", capacity=0.0) -> Registration:
        return Registration(epoch=1, lease_seconds=15.0)

    async def heartbeat(self, agent_id, load) -> int:
        return 1

    async def deregister(self, agent_id) -> int:
        return 1

    async def resolve(self, hosts: list[str]) -> list[HostRoute]:
        return [HostRoute(h, (("me", "me:1"),), 300, 1) for h in hosts]

    async def close(self) -> None:
        pass


class Storage:
    """Enough of a storage client for the node to build its StoredCheck (never called here)."""

    async def lookup(self, urls):
        return {}


def make_node(tmp_path, *, consultant: bool = False, **keys) -> AgentNode:
    """Every optional part on: replication (with the stored check), revisits, the loop lag."""
    s = load_settings(None, {"agent_id": "me", "data_dir": str(tmp_path / "me"), "storage_out.fsync": False,
                             "revisit.enabled": True, "loop_lag_interval": 0.05,
                             **({"consultant": "127.0.0.1:1"} if consultant else {}), **keys})
    return AgentNode(s, placement=None if consultant else Placement(), storage=Storage())  # type: ignore[arg-type]


def test_status_names_are_the_metric_schema(tmp_path, run):
    """Every name status gives has a meaning in HELP, and every meaning in HELP is given (the
    modes this node is not in aside): the registry lost no component and renamed nothing."""

    async def go():
        node = make_node(tmp_path, consultant=True)  # the real ConsultantClient: its failover counts
        try:
            return set(node.status_counters()), node.stats.counter_names()
        finally:
            await node.placement.close()

    names, counted = run(go())
    assert names == set(HELP) - set(SERVER_HELP) - KADEMLIA_ONLY - LABELLED
    assert not counted & GAUGES, "a typed counter is declared a level"


def test_a_counted_event_shows_in_status_and_shared_names_sum(tmp_path, run):
    """Events made to happen, counted by hand: each shows in status once, and consultant_rpcs,
    counted by membership (register) and the directory (resolve), is their sum."""
    node = make_node(tmp_path)
    before = node.status_counters()
    node.gate.hold(["a.example"])
    assert not node.gate.allows("a.example", 0.0)               # one fence refusal
    node.directory.saw_epoch(before["epoch"] + 5)               # one epoch claim

    async def go():
        await node.membership.register()                        # one consultant RPC (membership)
        await node.directory.lookup(["a.example", "b.example"])  # one more (the directory)

    run(go())
    after = node.status_counters()
    changed = {k: after[k] - before[k] for k in after if k in before and after[k] != before[k]}
    assert changed["fence_refusals"] == 1 and changed["epoch_claims"] == 1
    assert changed["consultant_rpcs"] == 2
    assert node.membership.stats.consultant_rpcs == node.directory.stats.consultant_rpcs == 1
    assert node.stats.namespaced()["membership.consultant_rpcs"] == 1


def test_every_component_counts_into_a_slotted_dataclass_registered_once(tmp_path):
    """A mistyped name raises instead of counting a new key; registering a part twice raises."""
    node = make_node(tmp_path)
    for c in (node.routing.stats, node.intake.stats, node.directory.stats, node.gate.stats, node.handoff.stats,
              *node.ownership.stats.values(), node.commit_log.stats, node.shipper.stats):
        assert dataclasses.is_dataclass(c)
        with pytest.raises(AttributeError):
            c.no_such_count = 1  # type: ignore[union-attr]
    with pytest.raises(StatsError):
        node.stats.register("gate.again", node.gate.stats)
