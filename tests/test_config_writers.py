"""The lab's and the manager's service configs against the f-string writers they replaced
(tests/config_writers_before.py, the code as it was): for the arguments the lab's benches and
`manager crawl` use, every service loads equal settings from both files (issue 34, item 5)."""

from __future__ import annotations

import itertools
from pathlib import Path

import config_writers_before as before
import pytest

from agent.settings import load_settings as agent_settings
from consultant.settings import load_settings as consultant_settings
from lab import cluster, topology
from manager import procs
from storage import config as storage_config
from wancrawl import pki

CONTACT = "https://example.org/wancrawl-test"
GROUPS = ["unicom-beijing", "cernet-harbin", "telecom-guangzhou", "telecom-beijing"]


@pytest.fixture
def same_ports_and_pki(monkeypatch):
    """Both writers draw the same ports and [tls] tables: `reset()` before each starts the
    sequence again (no socket is bound, no certificate issued: the files are only loaded)."""
    counter = itertools.count(20000)

    def reset() -> None:
        nonlocal counter
        counter = itertools.count(20000)

    def port() -> int:
        return next(counter)

    def tls(run: Path, role: str, name: str, source_ip: str = "") -> str:
        return pki.tls_table(run / procs.PKI_DIR, role, name)

    for mod in (cluster, before):
        monkeypatch.setattr(mod, "free_port", port)
        monkeypatch.setattr(mod, "_pki", tls)
    monkeypatch.setattr(procs, "pg_schema_url", lambda url, schema, fresh=False: f"{url}?options=-csearch_path%3D{schema}")
    return reset


def _loaded(configs: cluster.Configs) -> dict[str, object]:
    out: dict[str, object] = {"configs": configs}
    if configs.consultant is not None:
        out["consultant"] = consultant_settings(configs.consultant.config)
    for w in configs.writers:
        out[str(w.config)] = storage_config.load(w.config)
    for g, a in configs.agents.items():
        out[g] = agent_settings(a.config)
    return out


LAB_CASES = {
    "chaos": dict(strategy="asn", groups=GROUPS, delay=0.05, concurrency=32, lease=10.0),
    "tables": dict(strategy="asn", groups=GROUPS + ["unicom-beijing#1"], delay=0.25, concurrency=7, lease=6.0, allow_hostile=True,
                   agent_keys={"cernet-harbin": {"concurrency": 3, "delay": 1.5}, "telecom-beijing": {"delay": 0}},
                   consultant_tables="[balance]\nenabled = false\ninterval = 2.5\n",
                   agent_tables="[replication]\nbackups = 2\n[load]\nperiod = 3.0\nblock = 20\n"),
    "kademlia": dict(strategy="asn", groups=GROUPS, delay=0.05, concurrency=32, lease=10.0, mode="kademlia",
                     kademlia_keys="balance = true\nbalance_max_moves = 4\n", agent_tables="[load]\nperiod = 2.0\n"),
    "replicas": dict(strategy="geo", groups=GROUPS[:2], delay=0.05, concurrency=32, consultants=2,
                     object_store="http://127.0.0.1:8333", storage_writers=2, index_url="postgresql+psycopg://u@h/db",
                     index_schema="lab_x"),
}


@pytest.mark.parametrize("case", sorted(LAB_CASES))
def test_lab_configs_load_as_the_f_string_ones_did(tmp_path, same_ports_and_pki, case):
    topo = topology.load(None)
    kwargs = LAB_CASES[case]
    same_ports_and_pki()
    old = _loaded(before.write_configs(tmp_path, topo, **kwargs))
    same_ports_and_pki()
    new = _loaded(cluster.write_configs(tmp_path, topo, **kwargs))
    assert new == old
    assert len(old) == 1 + (case != "kademlia") + kwargs.get("storage_writers", 1) + len(kwargs["groups"])


def _plan(tmp_path: Path, *extra: str):
    from manager.cli import parser
    from manager.crawl import make_plan

    args = parser().parse_args(["crawl", "urls.txt", "--out", str(tmp_path / "out"), *extra])
    return make_plan(args, ["http://a.example/", "http://b.example:8080/x"], CONTACT)


MANAGER_CASES = {
    "default": (),
    "external": ("--follow-external", "--delay", "0.5", "--max-depth", "-1", "--max-pages-per-host", "-1",
                 "--allow-network", "127.0.0.0/8", "--concurrency", "4"),
    "continuous": ("--continuous", "--revisit-policy", "optimal", "--revisit-interval", "30", "--revisit-budget", "50"),
    "kademlia": ("--mode", "kademlia"),
    "replicas": ("--consultants", "2", "--consultant-db", "postgresql+psycopg://u@h/db", "--storage-writers", "2",
                 "--index-url", "postgresql+psycopg://u@h/db", "--object-store"),
}


def _write_and_load(path: Path, text: str, loader):
    path.write_text(text)
    return loader(path)


@pytest.mark.parametrize("case", sorted(MANAGER_CASES))
def test_manager_configs_load_as_the_f_string_ones_did(tmp_path, case):
    from manager import crawl

    plan = _plan(tmp_path, *MANAGER_CASES[case])
    (tmp_path / "hosts").write_text("127.0.0.1 a.example\n")
    tls = pki.tls_table(tmp_path / "pki", "service", "x")
    consultant = "" if plan.kademlia else "127.0.0.1:2,127.0.0.1:4"
    for name, (old_text, new_text, loader) in {
        "consultant": (before.consultant_toml(plan, "127.0.0.1:2", tls, "postgresql+psycopg://u@h/db?x"),
                       crawl.consultant_toml(plan, "127.0.0.1:2", tls, "postgresql+psycopg://u@h/db?x"), consultant_settings),
        "consultant-sqlite": (before.consultant_toml(plan, "127.0.0.1:2", tls), crawl.consultant_toml(plan, "127.0.0.1:2", tls),
                              consultant_settings),
        "storage": (before.storage_toml(plan, "127.0.0.1:3", consultant, tls, peers=["127.0.0.1:5", "127.0.0.1:6"]),
                    crawl.storage_toml(plan, "127.0.0.1:3", consultant, tls, peers=["127.0.0.1:5", "127.0.0.1:6"]), storage_config.load),
        "storage-2": (before.storage_toml(plan, "127.0.0.1:3", consultant, tls, writer=2, endpoint="http://127.0.0.1:8333"),
                      crawl.storage_toml(plan, "127.0.0.1:3", consultant, tls, writer=2, endpoint="http://127.0.0.1:8333"),
                      storage_config.load),
        "agent": (before.agent_toml(plan, "local-1", "127.0.0.1:1", consultant, "127.0.0.1:3", tls, bootstrap=["127.0.0.1:4"]),
                  crawl.agent_toml(plan, "local-1", "127.0.0.1:1", consultant, "127.0.0.1:3", tls, bootstrap=["127.0.0.1:4"]),
                  agent_settings),
    }.items():
        old = _write_and_load(tmp_path / f"{name}-old.toml", old_text, loader)
        new = _write_and_load(tmp_path / f"{name}-new.toml", new_text, loader)
        assert new == old, name
