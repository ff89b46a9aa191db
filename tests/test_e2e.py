"""End to end: `lab up` (processes), seeds through the manager, the crawl to its end, then storage
holds every URL of the lab's truth exactly once, nothing out of scope, each fetched by its owner."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from consultant.client import ConsultantClient
from lab import checks, topology
from lab.cluster import down, up
from lab.truth import Scope, Truth
from lab.web import Web
from manager.seed import parse_seeds
from wancrawl.urls import host_of

from conftest import REPO

TOPOLOGY = '[sites]\nper_block = 2\nhostile = false\n[web]\npages_max = 40\n'


def test_lab_cluster_crawls_the_truth_exactly_once_by_owners(tmp_path):
    topo_file = tmp_path / "topology.toml"
    topo_file.write_text(TOPOLOGY)
    run = tmp_path / "run"
    cl = up(run, strategy="asn", topology_path=str(topo_file), time_scale=60.0, delay=0.02, concurrency=16)
    try:
        assert len(cl.agents) == 3 and {p.name for p in cl.procs} >= {"web", "consultant", "storage"}

        # The operator's path: manager seed (a bad line and a comment among the seeds), wait.
        seeds_file = tmp_path / "seeds.txt"
        seeds_file.write_text("# seeds\n" + Path(cl.seeds_file).read_text() + "not a url\n\nftp://x.lab/\n")
        p = manager("seed", str(seeds_file), consultant=cl.consultant)
        assert p.returncode == 0, p.stderr
        assert f"{seeds_file}:12: " in p.stderr and f"{seeds_file}:14: scheme 'ftp'" in p.stderr
        assert "9 seed URLs, 2 bad lines" in p.stdout
        assert manager("wait", "--timeout", "120", consultant=cl.consultant).returncode == 0
        status = json.loads(manager("status", "--json", "--storage", cl.storage, consultant=cl.consultant).stdout)
        assert status["idle"] and len(status["agents"]) == 3 and int(status["storage"]["pages"]) > 0
        seeds = parse_seeds(Path(cl.seeds_file).read_text()).urls
        stored = _stored(run)

        async def owners():
            async with ConsultantClient(cl.consultant) as c:
                routes = await c.resolve(sorted({host_of(u) for u, _ in stored}))
                return {r.host: cl.agent_sources[r.owner[0]] for r in routes}

        owner_ip = asyncio.run(owners())
        # A drain of an idle agent: it leaves, with nothing to hand over.
        p = manager("drain", "unicom-beijing", consultant=cl.consultant)
        assert p.returncode == 0 and "0 queued URLs handed over" in p.stdout
        agents = json.loads(manager("agents", "--json", consultant=cl.consultant).stdout)
        assert sorted(a["agent_id"] for a in agents) == ["cernet-harbin", "telecom-guangzhou"]
        # It exits by itself, after its answer (it stops its loops and its server first): wait
        # for that exit, or `down` below may find it still stopping (and stop it) on a loaded machine.
        drained = next(p for p in cl.procs if p.name == "agent-unicom-beijing")
        assert _exits(drained.pid, 60), "the drained agent did not exit by itself"
        # The README's recipe as written (issue 38): a shell with no credentials; the manager
        # finds the run's operator certificate by the address it dials (wancrawl/cli/runs.py).
        bare = {k: v for k, v in os.environ.items() if not k.startswith("WANCRAWL_TLS_") and k != "WANCRAWL_INSECURE"}
        p = subprocess.run([sys.executable, "-m", "manager.cli", "--consultant", cl.consultant, "agents", "--json"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**bare, "PYTHONPATH": str(REPO)})
        assert p.returncode == 0 and len(json.loads(p.stdout)) == 2, p.stderr
        # `lab strategy NAME`: no pid hunting; the consultant places by it once the call returns.
        from lab.strategy import set_strategy

        before, after = set_strategy(cl, "hash")
        assert (before.strategy, after.strategy) == ("asn", "hash") and after.epoch > before.epoch
        _console_shows_what_status_shows(cl, tmp_path, bare)
    finally:
        stopped = down(run)
    assert "web" in stopped and len(stopped) == 5, stopped  # the drained agent had exited by itself

    web = Web(topology.load(str(topo_file)), cl.seed, time_scale=cl.time_scale).with_port(cl.web_port)
    truth = {r.url for r in Truth(web, Scope(allow_domains=cl.allowed_domains, respect_robots=True)).reachable(seeds)}
    counts = collections.Counter(u for u, _ in stored)
    assert [u for u, n in counts.items() if n > 1] == [], "a URL was stored twice"
    assert set(counts) == truth, (sorted(truth - set(counts))[:5], sorted(set(counts) - truth)[:5])
    assert all(host_of(u) in set(cl.allowed_domains) for u in counts), "nothing out of scope"
    log = checks.read_log(cl.web_log)
    assert checks.wrong_owner(log, owner_ip) == [], "every URL fetched by the agent owning its host"
    assert len({a for _, a in stored}) == 3, "all three agents crawled"
    # Storage checked every page's placement with the consultant (over mutual TLS, as a service)
    # and, each page coming from its host's owner, refused none and never had to answer UNAVAILABLE.
    storage_log = (run / "logs" / "storage.log").read_text()
    assert "checks each capture's placement with the consultant" in storage_log
    assert "does not answer" not in storage_log
    assert not any("not-placed" in p.name for p in run.glob("agents/*/spool/rejected/*")), "nothing refused"
    # The agents ran on uvloop, their default event loop (wancrawl/runtime/eventloop.py), gRPC with TLS
    # and all: each says so when it starts serving.
    agent_logs = sorted(run.glob("logs/agent-*.log"))
    assert len(agent_logs) == 3 and all("(event loop: uvloop)" in p.read_text() for p in agent_logs)


def _console_shows_what_status_shows(cl, tmp_path: Path, env: dict) -> None:
    """`manager console` against the lab (credentials found as `manager` finds them): its JSON
    lists the agents and totals `manager status --json` does, and its page loads; where Debian's
    Chromium is installed, the page as a headless browser renders it (the DOM and a screenshot
    under tmp_path)."""
    import shutil
    import urllib.request

    status = json.loads(manager("status", "--json", "--storage", cl.storage, consultant=cl.consultant).stdout)
    proc = subprocess.Popen([sys.executable, "-m", "manager.cli", "--consultant", cl.consultant, "console", "--listen",
                             "127.0.0.1:0", "--storage", cl.storage], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)})
    try:
        line = proc.stdout.readline()  # "manager console: http://127.0.0.1:PORT/ (Ctrl-C stops)"
        assert line.startswith("manager console: http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        url = line.split()[2]
        d = json.loads(urllib.request.urlopen(url + "api/status", timeout=30).read())
        assert d["error"] == "" and d["strategy"] == status["strategy"] == "hash"
        assert sorted((a["agent_id"], a["state"]) for a in d["agents"]) == sorted(
            (a["agent_id"], a["state"]) for a in status["agents"])
        assert d["totals"]["pages"] == sum(a["counters"].get("pages", 0) for a in status["agents"])
        assert d["storage"]["pages"] == status["storage"]["pages"]
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        assert "wancrawl console" in page
        chromium = shutil.which("chromium")
        if chromium:
            shot = tmp_path / "console.png"
            browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                       "--window-size=1400,1500", "--virtual-time-budget=3000"]
            dom = subprocess.run(browser + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
            assert all(f">{a['agent_id']}<" in dom for a in status["agents"]), "the page's script drew every agent"
            subprocess.run(browser + [f"--screenshot={shot}", url], capture_output=True, timeout=120)
            assert shot.stat().st_size > 10_000
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def manager(*args: str, consultant: str) -> subprocess.CompletedProcess:
    # The lab runs with mutual TLS: the manager dials it with the run's operator certificate.
    from wancrawl.grpcutil import effective_tls

    tls = effective_tls(None, consultant)  # registered by the lab for its addresses
    return subprocess.run([sys.executable, "-m", "manager.cli", "--consultant", consultant,
                           "--ca", tls.ca, "--cert", tls.cert, "--key", tls.key, *args],
                          capture_output=True, text=True, timeout=180, cwd=REPO)


def _exits(pid: int, timeout: float) -> bool:
    """Wait for the process to exit (a pidfd turns readable then); False after timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _stored(run: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(f"file:{run / 'storage' / 'index.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT canonical_url, agent_id FROM storage_captures").fetchall()
    finally:
        db.close()
