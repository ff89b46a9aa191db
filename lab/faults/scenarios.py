"""The fault scenarios of bench/chaos.py by name, and what each asks of the lab: the constants
that define them (outages, when the fault comes, the victims that stay gone) and the keys
lab.cluster.up gets for them (agent tables, balancing, the storage scenarios' writers). No I/O but
the storage scenarios' schema cleanup."""

from __future__ import annotations

import argparse
from typing import Any

CONSULTANT_ONLY = ("consultant", "consultant-stop", "consultant-replica", "consultant-rolling")
SCENARIOS = ("baseline", "restart", "consultant", "storage", "drain", "kill", "kill2", "join", "flap",
             "kill-owner-and-backup", "storage-kill9", "consultant-stop", "cluster-kill9",
             "consultant-replica", "consultant-rolling")
# Scenarios run with two consultant replicas over PostgreSQL (manager.procs.PG_URL).
REPLICA_SCENARIOS = ("consultant-replica", "consultant-rolling")
ROLLING_EVERY_S = 20.0  # consultant-rolling: a kill of the replica in use this often
ROLLING_DOWN_S = 3.0    # ... started again this long after each kill (a supervisor's restart)
# consultant-rolling's politeness delay: a crawl long enough for several kills.
SCENARIO_DELAY = {"consultant-rolling": 0.2}
# Storage at scale (issue 27): two storage writers over SeaweedFS and one PostgreSQL index.
STORAGE_SCENARIOS = ("storage-writer-kill", "object-store-down")
# Continuous crawling (issue 26; docs/continuous.md): the kill and drain faults on a crawl with
# revisits on, over a lab web whose pages change. The crawl never ends by itself: the harness
# ends it once every truth URL was requested, the victim is gone, the replicas are current and
# REVISIT_ROUNDS intervals more have passed; then it reads each live agent's schedule.
REVISIT_SCENARIOS = ("revisit-kill", "revisit-drain")
REVISIT_FAULT = {"revisit-kill": "kill", "revisit-drain": "drain"}
REVISIT_INTERVAL_S = 20.0     # [revisit] policy fixed: every page due again this long after its capture
REVISIT_ROUNDS = 2.0          # intervals the crawl goes on after the takeover (revisits by the new owners)
REVISIT_CHANGE_RATIO = 0.5    # the lab web's [web] change_ratio (hourly pages change every ~minute at time scale 60)
REVISIT_SLACK_S = 1.0         # two captures of a URL less than interval - this apart are stored twice (WARC-Date: 1 s)
SCENARIOS = SCENARIOS + STORAGE_SCENARIOS + REVISIT_SCENARIOS
# Issue 36: one agent's FindNode and Members lie (lab/liar.py) for the whole crawl, the first or
# the last address of storage's `peers` (the agents' order); no other fault. Kademlia mode only:
# in consultant mode nobody asks an agent who is placed where.
LIAR_SCENARIOS = {"liar-first": ("self", 0), "liar-last": ("self", -1), "liar-fabricate": ("fabricate", 0)}
KADEMLIA_ONLY = tuple(LIAR_SCENARIOS)
SCENARIOS = SCENARIOS + KADEMLIA_ONLY
AGENT_FAULTS = ("restart", "drain", "kill", "kill2", "flap", "kill-owner-and-backup") + REVISIT_SCENARIOS  # the ones with a victim
# Victims that stay gone: not expected running at the end, their requests are no recovery.
GONE_VICTIMS = ("drain", "kill", "kill2", "kill-owner-and-backup") + REVISIT_SCENARIOS
# Four agents: seed 002's scheme B (one agent per ISP, three cities) plus a second China Telecom
# agent, so the victim's hosts have a same-ISP agent to fail over to.
DEFAULT_GROUPS = ("unicom-beijing", "cernet-harbin", "telecom-guangzhou", "telecom-beijing")
DEFAULT_VICTIM = "telecom-beijing"
# join: a block none of the default groups is in. With the asn strategy (geo fallback) the
# cernet-beijing and cernet-guangzhou sites (16 hosts) move from cernet-harbin, the only CERNET
# agent, to it; at 40% of seed 9's truth both blocks still have work left (unicom-harbin's sites,
# the other natural choice, are all fetched by then).
DEFAULT_JOIN = "cernet-beijing"
# kill2: how long to wait for the consultant to declare the first victim dead (beyond the lease)
# and then for the live agents' replicas to catch up, before the second kill.
KILL2_DEAD_S = 30.0
KILL2_SYNC_S = 30.0
FLAP_EXTRA_S = 5.0  # flap: the victim stays stopped for lease + this
# Lab seed 0 gives 1,497 truth URLs (< 1,500); seed 9 gives 1,831 over 72 sites with a largest
# host of 278 pages, so a crawl under politeness still ends in ~20-30 s.
DEFAULT_SEED = 9
OUTAGE_S = {"restart": 10.0, "consultant": 20.0, "storage": 30.0,
            # A crash and an ordinary restart (a supervisor's), not an outage to ride out.
            "storage-kill9": 3.0, "cluster-kill9": 3.0,
            # storage-writer-kill: a supervisor restarts the writer; object-store-down: SeaweedFS away 30 s.
            "storage-writer-kill": 3.0, "object-store-down": 30.0}
# consultant-stop: the consultant stays stopped this many leases (45 s at the default 15 s), so
# every agent's lease runs out while it is stopped: the agents' fence must stop their fetching.
CONSULTANT_STOP_LEASES = 3.0
# When the fault comes (share of truth requested), unless --fault-at says: 40%, except for
# consultant-stop, whose fence is only exercised if more than a lease of fetching is left at the
# stop. A seed-9 crawl fetches ~18 s, its largest host's pages one after another to the end: at
# 40% (~3 s) about a lease is left and the crawl can end before any fence closes; at 5% (~1 s)
# the largest host is still being fetched when every lease has run out.
DEFAULT_FAULT_AT = 0.4
FAULT_AT = {"consultant-stop": 0.05, "consultant-rolling": 0.05}
# storage-kill9: the kill waits (at most this long) until storage's WARC files grow between two
# polls WARC_POLL_S apart, i.e. storage is writing an Ingest's records right then.
WARC_GROWTH_WAIT_S = 10.0
WARC_POLL_S = 0.005
# kill-owner-and-backup: replication.backups (r) in the agents' config, when the agents know the
# key (an older agent refuses unknown keys; it keeps one replica, on the first backup).
DEFAULT_BACKUPS = 2


def fault_share(name: str, given: float | None) -> float:
    """The share of truth requested at which the scenario's fault comes: --fault-at if given."""
    return given if given is not None else FAULT_AT.get(name, DEFAULT_FAULT_AT)


def agent_backups_known() -> bool:
    """Whether this checkout's agent has the setting `replication.backups` (r): an agent refuses
    a config key it does not know."""
    import dataclasses

    from agent.settings import ReplicationSettings

    return any(f.name == "backups" for f in dataclasses.fields(ReplicationSettings))


def liar_lab(name: str) -> dict[str, Any]:
    """lab.cluster.up's keys for a liar scenario ({} for the others)."""
    if name not in LIAR_SCENARIOS:
        return {}
    how, at = LIAR_SCENARIOS[name]
    return {"liar": how, "liar_at": at}


def agent_tables(name: str, args: argparse.Namespace) -> str:
    """TOML tables appended to every agent's config for the scenario (lab.cluster.up's
    agent_tables): kill-owner-and-backup sets replication.backups (r) when the agent knows it."""
    if name == "kill-owner-and-backup" and agent_backups_known():
        return f"[replication]\nbackups = {args.backups}\n"
    if name in REVISIT_SCENARIOS:
        return revisit_table(REVISIT_INTERVAL_S)
    return ""


def revisit_table(interval: float) -> str:
    """Revisits on, the fixed policy, every page due again `interval` s after its capture (the
    policy's bounds set to it, so no revisit comes sooner)."""
    return (f"[revisit]\nenabled = true\npolicy = \"fixed\"\ninterval = {interval:g}\n"
            f"min_interval = {interval:g}\nmax_interval = {interval:g}\n")


def balance_lab(args: argparse.Namespace) -> dict[str, str]:
    """lab.cluster.up's keys for --balance (docs/balance.md): "on" or "off" writes the balancer's
    switch into the consultant's [balance] (consultant mode) or every agent's [kademlia] table
    (kademlia mode); "default" writes nothing, so the configs' defaults decide."""
    if args.balance == "default":
        return {}
    on = "true" if args.balance == "on" else "false"
    if args.mode == "kademlia":
        return {"kademlia_keys": f"balance = {on}\n"}
    return {"consultant_tables": f"[balance]\nenabled = {on}\ninterval = {args.balance_interval:g}\n"}


def storage_lab(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """lab.cluster.up's keys for a storage scenario: SeaweedFS, two writers (agent n ships to
    writer n mod 2) over one PostgreSQL index in a fresh schema (the previous runs' chaos_*
    schemas are dropped first); {} for the other scenarios."""
    if name not in STORAGE_SCENARIOS:
        return {}
    import uuid

    import sqlalchemy as sa

    engine = sa.create_engine(args.pg, connect_args={"connect_timeout": 3})
    try:
        with engine.begin() as conn:
            old = conn.execute(sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'chaos\\_%'")).scalars().all()
            for schema in old:
                conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        engine.dispose()
    return {"object_store": True, "storage_writers": 2, "index_url": args.pg,
            "index_schema": f"chaos_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"}
