"""kill -9 in the middle of a crawl, restart: nothing lost, only uncommitted pages fetched again."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

from lab.testing import ServerThread
from agent.client import AgentClient
from wancrawl.errors import WancrawlError
from wancrawl.v1 import agent_pb2, consultant_pb2

from agent_helpers import fetched_urls, lab_web, normal_hosts, truth_urls
from conftest import REPO, free_port


def _wait(pred, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _status_of(addr):
    async with AgentClient(addr, timeout=10) as c:
        return await c.status()


async def _push(addr, urls):
    async with AgentClient(addr, timeout=10) as c:
        return await c.push("test", 0, [agent_pb2.UrlItem(url=u) for u in urls])


async def _agents(addr):
    from consultant.client import ConsultantClient

    async with ConsultantClient(addr) as c:
        return await c.list_agents(include_dead=True)


def _status(addr):
    try:
        return dict(asyncio.run(_status_of(addr)).counters)
    except WancrawlError:  # not up yet
        return None


def write_configs(tmp_path, topo, hosts: list[str], *, delay: float, top: str = "", sections: str = "") -> tuple[int, int]:
    """hosts, c.toml and a.toml in tmp_path for a consultant and agent a1 (in the lab's first
    block, crawling `hosts`) run as processes; returns (consultant port, agent port). `top`:
    more top-level keys of the agent; `sections`: more TOML sections of it."""
    (tmp_path / "hosts").write_text(topo.hosts_file())
    cport, aport = free_port(), free_port()
    (tmp_path / "c.toml").write_text(
        f'listen = "127.0.0.1:{cport}"\nstate_url = "sqlite:///{tmp_path}/c.db"\n[dns]\nhosts_file = "{tmp_path}/hosts"\nsystem_dns = false\n'
    )
    src = topo.agent_address(topo.blocks[0].isp, topo.blocks[0].city, 0)
    (tmp_path / "a.toml").write_text(f"""
agent_id = "a1"
listen = "127.0.0.1:{aport}"
consultant = "127.0.0.1:{cport}"
data_dir = "{tmp_path}/data"
hosts_file = "{tmp_path}/hosts"
system_dns = false
source_ip = "{src}"
commit_interval = 0.05
{top}[fetch]
allow_networks = ["127.0.0.0/8"]
[politeness]
delay = {delay}
[scope]
allowed_domains = {json.dumps(hosts)}
{sections}""")
    return cport, aport


class Procs:
    """The consultant and agent a1 of write_configs as processes (output in tmp_path/procs.log)."""

    def __init__(self, tmp_path, aport: int):
        self.env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.logs = open(tmp_path / "procs.log", "w")
        self.addr = f"127.0.0.1:{aport}"
        self.agent_cmd = [sys.executable, "-m", "agent.cli", "run", "--config", str(tmp_path / "a.toml")]
        self.consultant = subprocess.Popen([sys.executable, "-m", "consultant.cli", "serve", "--config", str(tmp_path / "c.toml")],
                                           cwd=REPO, env=self.env, stdout=self.logs, stderr=self.logs)
        self.agent = self.start_agent()

    def start_agent(self) -> subprocess.Popen:
        self.agent = subprocess.Popen(self.agent_cmd, cwd=REPO, env=self.env, stdout=self.logs, stderr=self.logs)
        return self.agent


@contextlib.contextmanager
def running(tmp_path, aport: int, seeds: list[str]):
    """Start both processes, wait for the agent, seed it; stop whatever still runs at the end."""
    p = Procs(tmp_path, aport)
    try:
        _wait(lambda: _status(p.addr) is not None, 30, "the agent")
        asyncio.run(_push(p.addr, seeds))
        yield p
    finally:
        for proc in (p.agent, p.consultant):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
        p.logs.close()


def test_kill_9_and_restart_resumes_losing_nothing(tmp_path):
    web = lab_web(seed=4, pages_max=60)
    with ServerThread(web, zero_latency=True) as lab:
        web, port = lab.web, lab.port
        topo = web.topology
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in topo.normal_sites[:4]]
        truth = truth_urls(web, seeds, max_depth=None, allow=hosts)
        cport, aport = write_configs(tmp_path, topo, hosts, delay=0.15, top="concurrency = 8\n")
        with running(tmp_path, aport, seeds) as procs:
            addr = procs.addr
            _wait(lambda: len(fetched_urls(lab, port)) >= len(truth) // 3, 60, "a third of the crawl")
            procs.agent.send_signal(signal.SIGKILL)
            procs.agent.wait(10)
            killed_at = time.time()
            before = collections.Counter(fetched_urls(lab, port))
            assert sum(before.values()) < len(truth), "the kill came too late to test anything"
            n_before = len(lab.server.log)
            recent = {u for u, e in zip(fetched_urls(lab, port), [e for e in lab.server.log[:n_before] if e.path != "/robots.txt"])
                      if e.t >= killed_at - 1.0}

            agent = procs.start_agent()
            _wait(lambda: (_status(addr) or {}).get("idle") == 1.0 and len(set(fetched_urls(lab, port))) >= len(truth), 120, "the crawl to finish")
            counters = _status(addr)
            # SIGTERM: a graceful exit that deregisters from the consultant.
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(30) == 0
            listed = asyncio.run(_agents(f"127.0.0.1:{cport}"))
            assert [(a.agent_id, a.state) for a in listed.agents] == [("a1", consultant_pb2.AGENT_STATE_LEFT)]
        got = collections.Counter(fetched_urls(lab, port))
        assert set(got) == truth, "nothing discovered before the kill was lost"
        again = [u for u, n in got.items() if n > 1]
        # Only pages fetched in the last moment before the kill (in flight, or fetched but not
        # yet committed: commit_interval 0.05 s, spool flush 0.2 s) may come twice, once more.
        for u in again:
            assert before[u] == 1 and got[u] == 2 and u in recent, u
        assert counters["frontier"] == 0 and counters["pages"] > 0
        spool_dir = tmp_path / "data" / "spool"
        from agent.state.spool import Spool

        stored = {c.url for p in Spool(spool_dir).oldest(10**6) for c in Spool.read(p).captures}
        assert stored >= truth, "every fetched page is recorded for storage"
