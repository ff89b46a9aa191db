"""The `lab` command line: truth from a seeds file, `lab down` without a cluster, web serving a log."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import cli
from lab.truth import Scope, Truth
from lab.web import Web

ROOT = Path(__file__).resolve().parents[1]


def test_down_without_a_cluster_says_so(tmp_path, capsys):
    assert cli.main(["down", "--run-dir", str(tmp_path)]) == 2
    assert "no cluster in" in capsys.readouterr().err


def test_truth_cli_matches_the_api(tmp_path, capsys):
    from lab import topology

    web = Web(topology.load(), seed=3)
    s = web.topology.normal_sites[4]
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(f"# seeds\n{s.base_url.upper()}/./\nnot a url\n{web.topology.hostile_sites['calendar'].base_url}\n")
    assert cli.main(["truth", "--seeds", str(seeds), "--seed", "3", "--max-depth", "3", "--allow-domain", f"{s.isp}-{s.city}.lab", "--allow-domain", "calendar.telecom-guangzhou.lab"]) == 0
    out, err = capsys.readouterr()
    assert "line 3" in err
    want = Truth(web, Scope(max_depth=3, allow_domains=[f"{s.isp}-{s.city}.lab", "calendar.telecom-guangzhou.lab"])).reachable(
        [s.base_url + "/", web.topology.hostile_sites["calendar"].base_url + "/"]
    )
    assert out.split() == [r.url for r in want]
    assert any("/cal/" in u for u in out.split())


def test_plan_lists_blocks_and_sites(capsys):
    assert cli.main(["plan", "--topology", str(ROOT / "configs/lab/world.toml")]) == 0
    out = capsys.readouterr().out
    assert "block 127.4.5.0/24\ttelecom-saopaulo\tAS4134" in out
    assert "www.s0000.level3-newyork.lab" in out


def test_bad_topology_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[sites]\nper_blok = 3\n")
    assert cli.main(["plan", "--topology", str(bad)]) == 2
    assert "sites.per_blok" in capsys.readouterr().err


def test_web_subcommand_serves_and_logs(tmp_path):
    import random

    from lab import topology
    from lab.testing import fetch

    port = random.randint(20000, 60000)
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab.cli", "web", "--seed", "2", "--port", str(port), "--zero-latency", "--log", str(log)],
        cwd=ROOT, stderr=subprocess.PIPE,
    )
    try:
        t = topology.load()
        s = t.normal_sites[0]
        for _ in range(100):
            try:
                r = fetch(s, port, "/", source="127.1.1.2")
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("lab web did not come up")
        assert r.status == 200
        assert r.body == Web(t, seed=2).with_port(port).respond(s.host, "/").body
        time.sleep(0.4)  # the log is flushed every 0.2 s
        from lab.checks import read_log

        entries = read_log(log)
        assert entries and entries[-1].client == "127.1.1.2" and entries[-1].host == s.host
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


def test_cluster_configs_for_several_agents_in_one_block(tmp_path):
    from agent.settings import load_settings as agent_settings
    from consultant.settings import load_settings as consultant_settings
    from lab import topology as topo_mod
    from lab.cluster import write_configs

    topo = topo_mod.load()
    cfgs = write_configs(tmp_path, topo, "hash", ["unicom-beijing#0", "unicom-beijing#2", "cernet-harbin"], delay=0.1, concurrency=8)
    assert sorted(cfgs.agents) == ["cernet-harbin", "unicom-beijing", "unicom-beijing-2"]
    assert {g: a.source_ip for g, a in cfgs.agents.items()} == {
        "unicom-beijing": "127.2.1.2", "unicom-beijing-2": "127.2.1.4", "cernet-harbin": "127.3.2.2"}
    c = consultant_settings(cfgs.consultant.config)
    assert c.strategy == "hash" and c.listen == cfgs.consultant.address
    a = agent_settings(cfgs.agents["unicom-beijing-2"].config)
    assert a.consultant == cfgs.consultant.address and a.storage == cfgs.storage.address
    assert a.agent_id == "unicom-beijing-2" and a.source_ip == "127.2.1.4" and a.fetch.allow_networks == ["127.0.0.0/8"]
    with pytest.raises(Exception, match="unknown ISP/city group 'nowhere-x'"):
        write_configs(tmp_path / "b", topo, "hash", ["nowhere-x"], delay=0.1, concurrency=8)
