"""The consultant as a user runs it: `consultant serve` in a process, the CLI against it, SIGHUP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, free_port


def cli(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "consultant.cli", *args], capture_output=True, text=True, timeout=60, cwd=REPO)
    if check and p.returncode != 0:
        raise AssertionError(f"consultant {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def wait_until(pred, timeout=15.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def served(tmp_path):
    port = free_port()
    cfg = tmp_path / "consultant.toml"
    cfg.write_text(f'listen = "127.0.0.1:{port}"\nstate_url = "sqlite:///{tmp_path}/state.db"\nstrategy = "hash"\n[dns]\nsystem_dns = false\n')
    log = open(tmp_path / "consultant.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "consultant.cli", "serve", "--config", str(cfg)], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    addr = f"127.0.0.1:{port}"
    ok = wait_until(lambda: cli("agents", "--consultant", addr, check=False).returncode == 0)
    assert ok, (tmp_path / "consultant.log").read_text()
    yield proc, addr, cfg, tmp_path
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    log.close()


def _register(addr, *agents):
    import asyncio

    from consultant.client import ConsultantClient

    async def go():
        async with ConsultantClient(addr) as c:
            for a in agents:
                await c.register(a, f"127.0.0.5:{7000 + len(a)}")

    asyncio.run(go())


def test_cli_resolve_explain_agents_json_and_sighup_swap(served):
    proc, addr, cfg, tmp = served
    _register(addr, "a1", "a22", "a333")
    agents = json.loads(cli("agents", "--json", "--consultant", addr).stdout)
    assert sorted(a["agent_id"] for a in agents["agents"]) == ["a1", "a22", "a333"]
    res = json.loads(cli("resolve", "example.com", "b.example", "--json", "--consultant", addr).stdout)
    assert [a["host"] for a in res["answers"]] == ["example.com", "b.example"]
    assert len(res["answers"][0]["agents"]) == 3
    text = cli("resolve", "example.com", "--consultant", addr).stdout
    assert "example.com" in text and "ttl=300s" in text
    ex = json.loads(cli("explain", "example.com", "--json", "--consultant", addr).stdout)
    assert ex["strategy"] == "hash" and [c["rank"] for c in ex["candidates"]] == [0, 1, 2]
    assert "rendezvous" in cli("explain", "example.com", "--consultant", addr).stdout
    bad = cli("resolve", "bad host", "--consultant", addr, check=False)
    assert bad.returncode == 1 and "malformed host name" in bad.stdout

    # Swap the strategy by editing one line and sending SIGHUP: the epoch goes up.
    epoch = res["epoch"]
    cfg.write_text(cfg.read_text().replace('strategy = "hash"', 'strategy = "xor"'))
    proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: json.loads(cli("agents", "--json", "--consultant", addr).stdout)["strategy"] == "xor")
    res2 = json.loads(cli("resolve", "example.com", "--json", "--consultant", addr).stdout)
    assert int(res2["epoch"]) == int(epoch) + 1
    # A broken config on SIGHUP is reported and the running one kept.
    cfg.write_text("bogus_key = 1\n" + cfg.read_text())
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert json.loads(cli("agents", "--json", "--consultant", addr).stdout)["strategy"] == "xor"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    log = (tmp / "consultant.log").read_text()
    assert "unknown key 'bogus_key'" in log


def test_serve_with_a_bad_config_exits_with_the_key_named(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('strategy = "geo"\n[databases]\ncity_db = "/no/such.mmdb"\n')
    p = cli("serve", "--config", str(cfg), "--listen", "127.0.0.1:0", "--state-url", f"sqlite:///{tmp_path}/s.db", check=False)
    assert p.returncode == 2 and "databases.city_db: file /no/such.mmdb not found" in p.stderr
    cfg.write_text('strategee = "hash"\n')
    p = cli("serve", "--config", str(cfg), check=False)
    assert p.returncode == 2 and "unknown key 'strategee'" in p.stderr


def test_unreachable_consultant_gives_a_clear_error():
    p = cli("agents", "--consultant", f"127.0.0.1:{free_port()}", check=False)
    assert p.returncode == 2 and "UNAVAILABLE" in p.stderr
