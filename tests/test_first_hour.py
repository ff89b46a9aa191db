"""A new user's first hour (issue 38): every dead end of the README's recipes and the errors met
on the way, each with the message that names its fix."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lab import cli as lab_cli
from lab import topology
from lab.cluster import choose_web_port
from manager.seed import parse_seeds
from wancrawl import errors, grpcutil, pki
from wancrawl.cli import runs as localruns

from conftest import REPO, free_port


# --- credentials: the manager finds a run's operator certificate by the address it dials ----------

def _run_record(run: Path, addresses: list[str]) -> Path:
    d = run / "pki"
    pki.init(d, name="test CA")
    pki.issue(d, "operator", "lab")
    (d / "operator.env").write_text("export WANCRAWL_TLS_CA=...\n")
    localruns.write(d, run, addresses, str(d / "ca.crt"), str(d / "operator-lab.crt"), str(d / "operator-lab.key"))
    return d


def test_a_client_without_credentials_uses_the_run_that_lists_the_address(tmp_path, monkeypatch):
    d = _run_record(tmp_path / "run" / "lab", ["127.0.0.1:5001", "127.0.0.1:5002"])
    monkeypatch.chdir(tmp_path)
    for k in (grpcutil.ENV_CA, grpcutil.ENV_CERT, grpcutil.ENV_KEY, grpcutil.ENV_INSECURE):
        monkeypatch.delenv(k, raising=False)
    tls = grpcutil.effective_tls(None, "127.0.0.1:5002")
    assert (tls.ca, tls.cert, tls.key) == (str(d / "ca.crt"), str(d / "operator-lab.crt"), str(d / "operator-lab.key"))
    assert not tls.insecure
    # Another address gets nothing from that run: the error names the run's operator.env and
    # the installed command (`wancrawl pki`), not `python -m wancrawl.pki`.
    with pytest.raises(errors.ConfigError) as e:
        grpcutil.effective_tls(None, "127.0.0.1:5003")
    msg = str(e.value)
    assert "source run/lab/pki/operator.env" in msg and "`wancrawl pki issue DIR operator NAME`" in msg
    assert "python -m" not in msg
    # Credentials the user gave win over a run's record.
    monkeypatch.setenv(grpcutil.ENV_INSECURE, "1")
    assert grpcutil.effective_tls(None, "127.0.0.1:5002").insecure


def test_the_newest_run_listing_an_address_wins_and_next_says_when_to_source(tmp_path, monkeypatch):
    old = _run_record(tmp_path / "run" / "old", ["127.0.0.1:5001"])
    new = _run_record(tmp_path / "run" / "new", ["127.0.0.1:5001"])
    os.utime(old / localruns.RECORD, (1, 1))
    found = localruns.find("127.0.0.1:5001", [tmp_path / "run"])
    assert found is not None and found.ca == str(new / "ca.crt")
    monkeypatch.chdir(tmp_path)
    assert localruns.discoverable(tmp_path / "run" / "new")
    assert not localruns.discoverable(tmp_path / "elsewhere")


def test_lab_up_next_line_is_a_command_that_works_from_here(tmp_path, monkeypatch):
    from lab.cluster import Cluster

    monkeypatch.chdir(tmp_path)
    here = Cluster(str(tmp_path / "run" / "lab"), "asn", 1, "127.0.0.1:7", "", seeds_file="s.txt")
    away = Cluster(str(tmp_path / "x" / "lab"), "asn", 1, "127.0.0.1:7", "", seeds_file="s.txt")
    assert lab_cli.next_command(here) == "manager --consultant 127.0.0.1:7 seed s.txt"
    assert lab_cli.next_command(away) == f"source {tmp_path}/x/lab/pki/operator.env && manager --consultant 127.0.0.1:7 seed s.txt"


# --- connection failures in plain words -------------------------------------------------------

def test_a_wrong_ca_and_a_refused_connection_say_what_they_are(tmp_path, run):
    """Through real handshakes: the server's certificate from one CA, the client trusting another."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        pki.init(d, name=f"CA {d.name}")
        pki.issue(d, "service", "consultant")
        pki.issue(d, "operator", "op")
    server_tls = grpcutil.TlsSettings(str(a / "ca.crt"), str(a / "service-consultant.crt"), str(a / "service-consultant.key"))
    other_ca = grpcutil.TlsSettings(str(b / "ca.crt"), str(a / "operator-op.crt"), str(a / "operator-op.key"))
    other_cert = grpcutil.TlsSettings(str(a / "ca.crt"), str(b / "operator-op.crt"), str(b / "operator-op.key"))

    async def call(target: str, tls: grpcutil.TlsSettings) -> str:
        async with grpcutil.channel(target, tls) as ch:
            try:
                await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            except grpc.aio.AioRpcError as exc:
                return str(grpcutil.translate(exc, "consultant"))
        return "answered"

    async def go():
        server, health, security = grpcutil.new_server(server_tls, name="test")
        port = grpcutil.bind(server, "127.0.0.1:0", security)
        await server.start()
        try:
            return await call(f"127.0.0.1:{port}", other_ca), await call(f"127.0.0.1:{port}", other_cert), port
        finally:
            await server.stop(0)

    wrong_ca, wrong_cert, port = run(go())
    assert wrong_ca.startswith(f"consultant: UNAVAILABLE: TLS: this CA did not sign the server's certificate at 127.0.0.1:{port}")
    assert "operator.env from another run?" in wrong_ca and "OPENSSL" not in wrong_ca and not wrong_ca.endswith(": OK")
    assert "refused our certificate" in wrong_cert
    refused_port = free_port()
    refused = run(call(f"127.0.0.1:{refused_port}", server_tls))
    assert f"connection refused: nothing listens at 127.0.0.1:{refused_port}" in refused


# --- lab up / lab web / lab demo: arguments checked first, defaults shown ----------------------

def test_lab_up_with_an_unknown_strategy_fails_before_starting_anything(tmp_path, capsys):
    run_dir = tmp_path / "lab"
    assert lab_cli.main(["up", "--strategy", "typo", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "lab up: unknown strategy 'typo' (known: asn, geo, hash, weighted, xor)" in err
    assert not run_dir.exists(), "nothing written, nothing started"
    assert lab_cli.main(["demo", "--strategy", "typo", "--run-dir", str(run_dir)]) == 2
    assert lab_cli.main(["up", "--groups", "mars-olympus", "--run-dir", str(run_dir)]) == 2
    assert "unknown ISP/city group 'mars-olympus'" in capsys.readouterr().err and not run_dir.exists()


def test_lab_web_on_a_taken_port_is_one_line(capsys):
    t = topology.load()
    with socket.socket() as s:
        s.bind((t.site_ips[0], 0))
        s.listen()
        port = s.getsockname()[1]
        assert lab_cli.main(["web", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err == f"lab web: port {port} is taken on {t.site_ips[0]} (another `lab web` or `lab up`? stop it, or --port)\n"


def test_the_lab_web_port_is_kept_per_run_dir_or_asked_for():
    t = topology.load()
    with socket.socket() as s:
        s.bind((t.site_ips[3], 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(errors.ConfigError, match=f"--web-port {taken} is taken on {t.site_ips[3]}"):
            choose_web_port(t, taken, 0)
        fresh = choose_web_port(t, 0, taken)  # the previous run's port is taken now: another one
        assert fresh != taken
    assert choose_web_port(t, 0, taken) == taken  # free again: the seeds file of the last run works
    assert choose_web_port(t, fresh, 0) == fresh


def test_lab_up_and_demo_help_show_every_default(capsys):
    for cmd, expected in (("up", ["(default: asn)", "(default: 60.0)", "(default: run/lab)", "(default: 32)", "(default: 0.05)"]),
                          ("demo", ["(default: asn)", "(default: 110.0)", "(default: run/demo)"])):
        with pytest.raises(SystemExit):
            lab_cli.main([cmd, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert all(e in out for e in expected), (cmd, [e for e in expected if e not in out])
        assert "(default: None)" not in out and "(default: False)" not in out


def test_lab_strategy_checks_the_name_and_rewrites_the_config(tmp_path):
    from consultant.settings import from_data, load_settings
    from lab.strategy import rewrite_config

    cfg = tmp_path / "consultant.toml"
    cfg.write_text(from_data({"strategy": "asn", "listen": "127.0.0.1:1"}, source=str(cfg)).to_toml())
    with pytest.raises(errors.ConfigError, match="unknown strategy 'gep'"):
        rewrite_config(cfg, "gep")
    assert load_settings(cfg).strategy == "asn"
    assert rewrite_config(cfg, "geo") == "geo" and load_settings(cfg).strategy == "geo"
    assert rewrite_config(cfg, "") == "geo"  # no name: the file as it is, checked


# --- seeds and pipes ------------------------------------------------------------------------

def test_a_bare_host_in_a_seeds_file_gets_a_scheme_hint():
    s = parse_seeds("example.com\nexample.com/a\nlocalhost:8080\n/x\nnot a url\nmailto:x@y.cn\n")
    assert [(n, r) for n, r, _ in s.bad] == [
        (1, "no scheme: did you mean http://example.com/?"),
        (2, "no scheme: did you mean http://example.com/a?"),
        (3, "no scheme: did you mean http://localhost:8080/?"),
        (4, "relative URL without a base"),
        (5, "relative URL without a base"),
        (6, "scheme 'mailto' is not crawled"),
    ]


@pytest.mark.parametrize("argv", [["storage.cli", "verify", "--config", "{cfg}"],
                                  ["manager.cli", "--insecure", "seed", "{bad}"]])
def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path, argv):
    """`storage ... | head`: the pipe's reader is closed before the command writes a byte, so
    its first write fails (EPIPE) whatever the timing."""
    cfg = tmp_path / "storage.toml"
    cfg.write_text(f'data_dir = "{tmp_path}/data"\n')
    bad = tmp_path / "bad.txt"
    bad.write_text("example.com\n")
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", *(a.format(cfg=cfg, bad=bad) for a in argv)], stdout=w,
                           stderr=subprocess.PIPE, text=True, timeout=60, cwd=REPO)
    finally:
        os.close(w)
    assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr
    assert p.returncode == 141



# --- manager status: whole cells at 100 and 120 columns, every column explained --------------

def _busy_snapshot():
    from manager.status import AgentView, Snapshot

    counters = {"pages": 123456, "frontier": 98765, "hosts_with_work": 4321, "load_level": -19.6, "in_flight": 32,
                "errors": 1234, "pushes": 45678, "spool_batches": 12, "replica_hosts": 2345, "replica_unsynced": 3,
                "replica_lag_items": 4567, "idle": 0.0}
    names = ["telecom-guangzhou-7", "unicom-beijing", "cernet-harbin-a-very-long-agent-name"]
    agents = [AgentView(n, "127.0.0.1:1", "alive", "Guangzhou", "telecom", counters=dict(counters), reachable=True,
                        parked=[("p.lab", 0.0, "robots")] * 12, given_up=[("g.lab", "DNS")] * 7) for n in names]
    return Snapshot(42, "asn", agents), {n: 321.5 for n in names}


@pytest.mark.parametrize("width", [100, 120])
def test_status_at_a_terminal_width_shows_whole_cells_and_names_what_it_leaves_out(width):
    from rich.console import Console

    from manager.status import render

    snap, rates = _busy_snapshot()
    console = Console(width=width, record=True, color_system=None)
    console.print(render(snap, rates, width))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text, "a cell or header was cut"
    for a in snap.agents:
        assert a.agent_id in text
    for figure in ("123456", "98765", "321.5", "12", "7"):
        assert figure in text
    assert "not shown at this width" in text and "--wide" in text


def test_status_piped_shows_every_column_and_every_name_whole():
    from rich.console import Console

    from manager.columns import COLUMNS, natural_width
    from manager.status import render

    snap, rates = _busy_snapshot()
    table = render(snap, rates, None)
    console = Console(width=natural_width(table), record=True, color_system=None)
    console.print(table)
    text = console.export_text()
    assert "…" not in text and "not shown" not in text
    assert all(c.header in " ".join(text.split()) for c in COLUMNS)
    assert all(a.agent_id in text for a in snap.agents)


def test_docs_explain_every_status_column():
    from manager.columns import COLUMNS

    doc = " ".join((REPO / "docs" / "manager.md").read_text().split())
    missing = [c.header for c in COLUMNS if f"| {c.header} | {c.doc} |" not in doc]
    assert not missing, f"docs/manager.md lacks the row of: {missing} (python -m manager.columns prints the table)"


# --- manager console: the page and its JSON over the snapshots `manager status` reads -------------

def _console_snapshot(pages: float):
    from manager.status import AgentView, Snapshot

    a = AgentView("unicom-beijing", "127.0.0.1:1", "alive", "Beijing", "unicom", reachable=True,
                  counters={"pages": pages, "frontier": 40, "idle": 0.0, "errors": 2, "retries": 5},
                  parked=[("slow.lab", 1000.0 + 90, "backed off after 3 errors")],
                  given_up=[("gone.lab", "DNS: gone.lab does not resolve")],
                  top_hosts=[("big.lab", int(pages), 10**6, 0)])
    b = AgentView("cernet-harbin", "127.0.0.1:2", "dead", "Harbin", "cernet")
    return Snapshot(7, "asn", [a, b])


def test_console_serves_the_page_and_a_json_view_of_the_snapshots(run):
    from manager.console.server import Console, create_app

    pages = iter([100.0, 160.0])
    clock = iter([10.0, 12.0])
    console = Console(lambda: _take(_console_snapshot(next(pages))), "consultant", 1.0,
                      clock=lambda: next(clock), wall=lambda: 1000.0)
    run(console.poll())
    run(console.poll())
    client = _Client(create_app(console), run)
    d = client.get("/api/status").json()
    assert d["error"] == "" and (d["strategy"], d["epoch"]) == ("asn", 7)
    assert [(a["agent_id"], a["state"], a["pages"], a["pages_per_second"]) for a in d["agents"]] == [
        ("unicom-beijing", "alive", 160.0, 30.0), ("cernet-harbin", "dead", 0, 0.0)]
    assert d["totals"]["pages"] == 160 and d["totals"]["agents_alive"] == 1 and d["totals"]["pages_per_second"] == 30.0
    assert d["history"]["total"] == [0.0, 30.0] and d["history"]["agents"]["unicom-beijing"] == [None, 30.0]
    assert d["parked"] == [{"host": "slow.lab", "agent": "unicom-beijing", "next_try_in": 90.0, "reason": "backed off after 3 errors"}]
    assert d["given_up"][0]["kind"] == "DNS failure"
    assert {"counter": "retries", "what": "retries", "count": 5} in d["incidents"]
    assert d["top_hosts"][0]["host"] == "big.lab" and d["not_built"]
    page = client.get("/")
    assert page.status_code == 200 and "wancrawl console" in page.text and "static/uPlot.iife.min.js" in page.text
    for asset in ("uPlot.iife.min.js", "uPlot.min.css", "console.js", "console.css"):
        assert client.get(f"/static/{asset}").status_code == 200, asset


async def _take(snap):
    return snap


class _Client:
    """Requests to the ASGI app in this process (httpx's ASGI transport; starlette's TestClient
    is deprecated over httpx)."""

    def __init__(self, app, run):
        import httpx

        self.httpx, self.app, self.run = httpx, app, run

    def get(self, path: str, headers: dict | None = None):
        async def go():
            transport = self.httpx.ASGITransport(app=self.app)
            async with self.httpx.AsyncClient(transport=transport, base_url="http://console") as c:
                return await c.get(path, headers=headers)

        return self.run(go())


def test_console_off_loopback_needs_a_token_and_then_checks_it(run):
    from manager.console.server import Console, create_app, listen_socket

    with pytest.raises(errors.ConfigError, match="off loopback the console needs --token"):
        listen_socket("0.0.0.0:0", "")
    with listen_socket("127.0.0.1:0", "") as s:
        s.listen()
        with pytest.raises(errors.ConfigError, match="cannot listen there"):
            listen_socket(f"127.0.0.1:{s.getsockname()[1]}", "")
    console = Console(lambda: _take(_console_snapshot(1.0)), "consultant")
    run(console.poll())
    client = _Client(create_app(console, token="s3cret"), run)
    assert client.get("/api/status").status_code == 401 and client.get("/").status_code == 401
    assert client.get("/api/status?token=s3cret").status_code == 200
    assert client.get("/api/status", headers={"Authorization": "Bearer s3cret"}).json()["epoch"] == 7
