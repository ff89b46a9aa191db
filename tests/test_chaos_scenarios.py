"""The lab helpers behind bench/chaos.py's kill2, join and flap scenarios: pause/resume (and
`down` stopping a paused process), and add_agent's config and bookkeeping."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest

from lab import cluster, topology
from wancrawl import pki

# A process that runs until signalled and dies of SIGTERM, started the way the lab starts services.
IDLE = ["http.server", "0", "--bind", "127.0.0.1"]


def _one_proc_cluster(tmp_path, name: str, args: list[str]) -> cluster.Proc:
    cl = cluster.Cluster(str(tmp_path), "asn", 0, "", "")
    p = cluster._start(name, args, tmp_path)
    cl.procs.append(p)
    cl.save()
    _wait_alive(p)
    return p


def _wait_alive(p: cluster.Proc) -> None:
    # Right after the exec, /proc/PID/cmdline can read empty for a moment.
    end = time.monotonic() + 10
    while not cluster._alive(p) and time.monotonic() < end:
        time.sleep(0.01)


def test_pause_resume_and_down_stops_a_paused_process(tmp_path):
    p = _one_proc_cluster(tmp_path, "agent-x", IDLE)
    try:
        cluster.pause(tmp_path, "agent-x")
        assert cluster._state(p.pid) == "T" and cluster._alive(p)
        cluster.resume(tmp_path, "agent-x")
        assert cluster._state(p.pid) not in ("T", "t", "")
        cluster.pause(tmp_path, "agent-x")
        t = time.monotonic()
        # A paused process holds SIGTERM pending: down continues it first, so it stops at once
        # rather than after down's 20 s SIGKILL timeout.
        assert cluster.down(tmp_path) == ["agent-x"]
        assert time.monotonic() - t < 10 and not cluster._alive(p)
        with pytest.raises(cluster.FailedPrecondition):
            cluster.pause(tmp_path, "agent-x")
    finally:
        if cluster._alive(p):
            cluster.kill(tmp_path, "agent-x")


def test_add_agent_copies_the_first_agents_settings_and_records_it(tmp_path, monkeypatch):
    topo = topology.load(None)
    cfgs = cluster.write_configs(tmp_path, topo, "asn", ["telecom-beijing"], delay=0.25, concurrency=7, lease=15.0)
    first = cfgs.agents["telecom-beijing"]
    cl = cluster.Cluster(str(tmp_path), "asn", 0, cfgs.consultant.address, cfgs.storage.address,
                         agents={"telecom-beijing": first.address}, agent_sources={"telecom-beijing": first.source_ip})
    # The first agent's record (its process is not needed: add_agent reads its recorded --config).
    cl.procs.append(cluster.Proc("agent-telecom-beijing", 0, ["python", "-m", "agent.cli", "run", "--config", str(first.config)], ""))
    cl.save()
    started: list[list[str]] = []
    real_start = cluster._start

    def fake_start(name, args, run, cpu=None):
        started.append(args)
        p = real_start(name, IDLE, run)
        _wait_alive(p)
        return p

    async def healthy(address, timeout):
        return True

    registered: list[tuple[str, str]] = []

    async def listed(consultant, agent_id, timeout):  # add_agent returns once the consultant lists it
        registered.append((consultant, agent_id))
        return True

    monkeypatch.setattr(cluster, "_start", fake_start)
    monkeypatch.setattr(cluster, "_healthy", healthy)
    monkeypatch.setattr(cluster, "_registered", listed)
    p = cluster.add_agent(tmp_path, "unicom-harbin")
    try:
        cfg = tmp_path / "agents" / "unicom-harbin.toml"
        assert started == [["agent.cli", "run", "--config", str(cfg)]]
        assert registered == [(cfgs.consultant.address, "unicom-harbin")]
        new, old = tomllib.loads(cfg.read_text()), tomllib.loads(first.config.read_text())
        own = {"agent_id": "unicom-harbin", "data_dir": str(tmp_path / "agents" / "unicom-harbin"),
               "source_ip": topo.agent_address("unicom", "harbin")}
        assert {k: new[k] for k in own} == own and new["listen"] != old["listen"] and new["listen"] == p.address
        # Its own certificate (mutual TLS, docs/security.md), from the run's CA.
        assert new["tls"]["cert"].endswith("/pki/agent-unicom-harbin.crt") and new["tls"]["ca"] == old["tls"]["ca"]
        assert pki.source_ips_of_pem(Path(new["tls"]["cert"]).read_bytes()) == {own["source_ip"]}  # where it is placed
        strip = lambda d: {k: v for k, v in d.items() if k not in ("agent_id", "listen", "data_dir", "source_ip", "tls")}  # noqa: E731
        assert strip(new) == strip(old) and new["politeness"]["delay"] == 0.25 and new["concurrency"] == 7
        saved = cluster.Cluster.load(tmp_path)
        assert saved.agents["unicom-harbin"] == p.address and saved.agent_sources["unicom-harbin"] == own["source_ip"]
        assert [q.name for q in saved.procs] == ["agent-telecom-beijing", "agent-unicom-harbin"]
        assert cluster.agent_config(tmp_path, "telecom-beijing") == old
        with pytest.raises(cluster.FailedPrecondition):
            cluster.add_agent(tmp_path, "unicom-harbin")
        with pytest.raises(cluster.ConfigError):
            cluster.add_agent(tmp_path, "nowhere-atlantis")
        assert cluster.down(tmp_path) == ["agent-unicom-harbin"]  # down stops the joiner
    finally:
        if cluster._alive(p):
            cluster.kill(tmp_path, "agent-unicom-harbin")


def test_kill_all_signals_every_process_before_waiting_and_restart_all_starts_services_first(tmp_path, monkeypatch):
    # cluster-kill9's helpers: a web (left alone), a consultant, storage and two agents.
    cl = cluster.Cluster(str(tmp_path), "asn", 0, "", "")
    for name in ("web", "consultant", "storage", "agent-a", "agent-b"):
        p = cluster._start(name, IDLE, tmp_path)
        p.address = "" if name == "web" else f"127.0.0.1:{len(cl.procs) + 1}"
        cl.procs.append(p)
    cl.save()
    for p in cl.procs:
        _wait_alive(p)
    victims = ["agent-a", "consultant", "agent-b", "storage"]
    old = {p.name: p for p in cl.procs}
    calls: list[tuple[str, int]] = []
    real_kill, real_exited = cluster.os.kill, cluster.procs.exited

    def kill(pid, sig):
        calls.append(("kill", pid))
        real_kill(pid, sig)

    def exited(p):
        calls.append(("wait", p.pid))
        return real_exited(p)

    monkeypatch.setattr(cluster.os, "kill", kill)
    monkeypatch.setattr(cluster.procs, "exited", exited)
    try:
        gone = cluster.kill_all(tmp_path, victims)
        monkeypatch.setattr(cluster.os, "kill", real_kill)
        monkeypatch.setattr(cluster.procs, "exited", real_exited)
        assert [p.name for p in gone] == victims
        # At the same moment: every signal sent before any victim is waited for.
        kills = [pid for what, pid in calls if what == "kill"]
        assert kills == [old[n].pid for n in victims] and calls[:len(kills)] == [("kill", pid) for pid in kills]
        assert all(cluster.procs.exited(old[n]) for n in victims) and cluster._alive(old["web"])
        with pytest.raises(cluster.FailedPrecondition):  # one already dead: nothing signalled
            cluster.kill_all(tmp_path, ["web", "agent-a"])
        assert cluster._alive(old["web"])

        events: list[tuple[str, str]] = []
        real_start = cluster._start

        def start(name, args, run, cpu=None):
            events.append(("start", name))
            return real_start(name, args, run)

        async def healthy(address, timeout):
            events.append(("health", address))
            return True

        monkeypatch.setattr(cluster, "_start", start)
        monkeypatch.setattr(cluster, "_healthy", healthy)
        back = cluster.restart_all(tmp_path, victims)
        for p in back:
            _wait_alive(p)
        assert [p.name for p in back] == victims and all(p.pid != old[p.name].pid for p in back)
        assert [p.address for p in back] == [old[n].address for n in victims]  # same addresses
        # The consultant and storage are started and answer before any agent starts.
        addr = {n: old[n].address for n in victims}
        assert events == [("start", "consultant"), ("start", "storage"), ("health", addr["consultant"]), ("health", addr["storage"]),
                          ("start", "agent-a"), ("start", "agent-b"), ("health", addr["agent-a"]), ("health", addr["agent-b"])]
        saved = {p.name: p.pid for p in cluster.Cluster.load(tmp_path).procs}
        assert saved == {"web": old["web"].pid, **{p.name: p.pid for p in back}}
        with pytest.raises(cluster.FailedPrecondition):  # running: not started twice
            cluster.restart_all(tmp_path, ["storage"])
    finally:
        monkeypatch.undo()
        cluster.down(tmp_path)
