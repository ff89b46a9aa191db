"""The `lab` command line: truth from a seeds file, `lab down` without a cluster, web serving a log."""

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import cli
from lab.truth import Scope, Truth
from lab.web import Web

from conftest import with_default_sigint

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


def test_truth_cli_with_dns_leaves_the_names_that_fail_unfollowed(tmp_path, capsys):
    from lab import topology
    from lab.dns import Zone

    topo_file = ROOT / "configs/lab/dns-failures.toml"
    t = topology.load(topo_file)
    zone = Zone(t)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(s.base_url + "/\n" for s in t.normal_sites[::8] if zone.resolves(s.host)))
    args = ["truth", "--seeds", str(seeds), "--seed", "1", "--max-depth", "2", "--status", "--topology", str(topo_file)]
    assert cli.main(args) == 0
    plain = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert cli.main(args + ["--dns"]) == 0
    dns = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    failing = {u for st, _, u in dns if st == "-1"}
    assert failing and all(not zone.resolves(u.split("/")[2].split(":")[0]) for u in failing)
    assert {u for _, _, u in dns} <= {u for _, _, u in plain} and len(dns) < len(plain), "their links are not followed"


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


def _interrupt(proc: subprocess.Popen) -> None:
    """Ctrl-C the lab web; it must exit (generous bound: the suite may share the cores)."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("lab web did not exit within 60 s of SIGINT") from None


def test_web_subcommand_serves_and_logs(tmp_path):
    import random

    from lab import topology
    from lab.testing import fetch

    port = random.randint(20000, 60000)
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen(
        with_default_sigint([sys.executable, "-m", "lab.cli", "web", "--seed", "2", "--port", str(port), "--zero-latency",
                             "--log", str(log)]),
        cwd=ROOT, stderr=subprocess.DEVNULL,  # a pipe nobody reads could fill and block the web
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
        _interrupt(proc)


def test_dns_subcommand_answers_over_udp_and_tcp(tmp_path):
    """`lab dns`: the topology's names from a process, over UDP and over TCP (the two-byte length
    framing), NXDOMAIN for a name the plan lacks; it stops on SIGINT."""
    import socket as socketlib

    from dnslib import QTYPE, RCODE, DNSRecord

    from lab import topology
    from lab.cluster import free_udp_port

    port = free_udp_port()
    proc = subprocess.Popen(with_default_sigint([sys.executable, "-m", "lab.cli", "dns", "--port", str(port)]),
                            cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        site = topology.load().normal_sites[3]
        for _ in range(100):
            try:
                udp = DNSRecord.parse(DNSRecord.question(site.host).send("127.0.0.1", port, timeout=0.5))
                break
            except (OSError, socketlib.timeout):
                time.sleep(0.05)
        else:
            pytest.fail("lab dns did not come up")
        tcp = DNSRecord.parse(DNSRecord.question(site.host).send("127.0.0.1", port, tcp=True, timeout=2))
        gone = DNSRecord.parse(DNSRecord.question("www.nowhere.lab").send("127.0.0.1", port, timeout=2))
        for r in (udp, tcp):
            assert [(str(rr.rdata), rr.rtype, rr.ttl) for rr in r.rr] == [(site.ip, QTYPE.A, 300)] and r.header.aa
        assert gone.header.rcode == RCODE.NXDOMAIN and not gone.rr and gone.auth[0].rtype == QTYPE.SOA
    finally:
        _interrupt(proc)


def test_web_survives_a_client_that_vanishes_mid_response():
    """An agent killed with kill -9 mid-response must not take the web down (it did: `lab web`
    ran with SIGPIPE at its default, and a send after the peer's reset killed it silently)."""
    import socket

    from lab import topology
    from lab.cluster import free_port

    port = free_port()
    huge = topology.load().hostile_sites["huge"]
    proc = subprocess.Popen(with_default_sigint([sys.executable, "-m", "lab.cli", "web", "--port", str(port), "--time-scale", "60"]),
                            cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind(("127.1.1.2", 0))  # in the plan: the body is paced by the link model
            try:
                s.connect((huge.ip, port))
                break
            except OSError:
                s.close()
                time.sleep(0.05)
        else:
            pytest.fail("lab web did not come up")
        s.sendall(f"GET / HTTP/1.1\r\nHost: {huge.host}:{port}\r\n\r\n".encode())
        time.sleep(0.5)  # not reading: the server's buffers fill while it paces the 10 MB body
        s.shutdown(socket.SHUT_WR)  # the server closes its side once its buffer drains ...
        time.sleep(0.2)
        s.close()  # ... but a reset arrives first (unread data): its next send gets EPIPE
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(2)
    finally:
        _interrupt(proc)


def test_cluster_configs_for_several_agents_in_one_block(tmp_path):
    from agent.settings import consultant_addresses, load_settings as agent_settings
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
    assert consultant_addresses(a) == (cfgs.consultant.address,) and a.storage == cfgs.storage.address
    assert a.agent_id == "unicom-beijing-2" and a.source_ip == "127.2.1.4" and a.fetch.allow_networks == ["127.0.0.0/8"]
    # Each agent's certificate binds its block address: the consultant places it there (lab
    # agents reach the consultant from 127.0.0.1) and refuses another (docs/security.md).
    from pathlib import Path

    from wancrawl.pki import source_ips_of_pem

    for g, svc in cfgs.agents.items():
        assert source_ips_of_pem(Path(agent_settings(svc.config).tls.cert).read_bytes()) == {svc.source_ip}, g
    with pytest.raises(Exception, match="unknown ISP/city group 'nowhere-x'"):
        write_configs(tmp_path / "b", topo, "hash", ["nowhere-x"], delay=0.1, concurrency=8)


def test_cluster_configs_with_the_lab_dns_server_resolve_through_it_alone(tmp_path):
    """`lab up --dns`: every agent and the consultant resolve with c-ares through the lab's
    server, given explicitly, with no hosts file (a name it does not know is NXDOMAIN there, never
    asked of the machine's servers); without it the hosts file, DNS off, as before."""
    from agent.settings import load_settings as agent_settings
    from consultant.settings import load_settings as consultant_settings
    from lab import topology as topo_mod
    from lab.cluster import write_configs

    topo = topo_mod.load()
    cfgs = write_configs(tmp_path, topo, "asn", ["unicom-beijing", "cernet-harbin"], delay=0.1, concurrency=8,
                         dns_server="127.0.0.1:5399")
    c = consultant_settings(cfgs.consultant.config)
    assert (c.dns.system_dns, c.dns.hosts_file, c.dns.resolver, c.dns.nameservers) == (True, "", "cares", ("127.0.0.1:5399",))
    for svc in cfgs.agents.values():
        a = agent_settings(svc.config)
        assert (a.system_dns, a.hosts_file, a.dns.resolver, a.dns.nameservers) == (True, "", "cares", ("127.0.0.1:5399",))
    plain = write_configs(tmp_path / "plain", topo, "asn", ["cernet-harbin"], delay=0.1, concurrency=8)
    a = agent_settings(plain.agents["cernet-harbin"].config)
    assert (a.system_dns, a.dns.resolver) == (False, "system") and a.hosts_file.endswith("hosts")
    assert not consultant_settings(plain.consultant.config).dns.system_dns


def test_kill_and_restart_one_process_of_a_cluster(tmp_path):
    """The fault harness's tools: kill -9 one recorded process, start it again from its record."""
    from lab import cluster, topology

    port = cluster.free_port()
    cl = cluster.Cluster(str(tmp_path), "asn", port, "", "")
    cl.procs.append(cluster._start("web", ["lab.cli", "web", "--port", str(port), "--zero-latency"], tmp_path))
    cl.save()
    try:
        assert cluster._web_up(topology.load().normal_sites[0].ip, port, 30)
        old = cluster.kill(tmp_path, "web")
        assert not cluster._alive(old)
        # Returned only once its sockets are closed: a restart is not answered by the dying web.
        with pytest.raises(OSError):
            socket.create_connection((topology.load().normal_sites[0].ip, port), timeout=2).close()
        with pytest.raises(cluster.FailedPrecondition):
            cluster.kill(tmp_path, "web")
        new = cluster.restart(tmp_path, "web")  # returns once the web answers again
        assert new.pid != old.pid and new.cmd == old.cmd and cluster._alive(new)
        assert [p.pid for p in cluster.Cluster.load(tmp_path).procs] == [new.pid]
        with pytest.raises(cluster.FailedPrecondition):
            cluster.restart(tmp_path, "web")
        with pytest.raises(cluster.NotFound):
            cluster.kill(tmp_path, "nope")
    finally:
        assert cluster.down(tmp_path) == ["web"]


@pytest.mark.postgres
def test_cluster_configs_with_two_consultant_replicas_share_a_fresh_postgres_schema(tmp_path, pg_server):
    import sqlalchemy as sa

    from agent.settings import consultant_addresses, load_settings as agent_settings
    from consultant.settings import load_settings as consultant_settings
    from lab import topology as topo_mod
    from lab.cluster import write_configs
    from storage import config as storage_config
    from manager import procs

    cfgs = write_configs(tmp_path, topo_mod.load(), "hash", ["unicom-beijing", "cernet-harbin"], delay=0.1, concurrency=8,
                         consultants=2)
    assert len(cfgs.replicas) == 2 and cfgs.replicas[0] == cfgs.consultant.address
    c = consultant_settings(cfgs.consultant.config)
    schema = procs.run_schema(tmp_path, "lab")
    assert c.state_url.startswith("postgresql+psycopg://") and c.state_url.endswith(f"search_path%3D{schema}")
    for a in cfgs.agents.values():
        assert consultant_addresses(agent_settings(a.config)) == tuple(cfgs.replicas)
    assert storage_config.load(cfgs.storage.config).consultant == ",".join(cfgs.replicas)
    eng = sa.create_engine(pg_server)
    try:
        with eng.begin() as conn:
            assert conn.execute(sa.text("select 1 from information_schema.schemata where schema_name = :s"), {"s": schema}).first()
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        eng.dispose()
    with pytest.raises(Exception, match="no replicas in kademlia mode"):
        write_configs(tmp_path, topo_mod.load(), "hash", ["unicom-beijing"], delay=0.1, concurrency=8, consultants=2,
                      mode="kademlia")


def test_free_port_never_hands_out_a_port_twice(monkeypatch):
    """The kernel may give a port just closed out again (0.2% of `lab up`'s 7-port batches): two
    agents of one cluster got the same port, and both bound it. Here the kernel answers the same
    port twice in a row: free_port must not hand it out again."""
    from manager import procs

    answers = iter([61001, 61001, 61002])

    class Sock:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, addr):
            self.port = next(answers)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(procs, "_given", {})
    monkeypatch.setattr(procs.socket, "socket", lambda *a, **k: Sock())
    assert [procs.free_port(), procs.free_port()] == [61001, 61002]


def test_a_server_cannot_bind_a_port_another_server_listens_on(run):
    """grpc servers set SO_REUSEPORT by default: a second server on a taken port started and
    shared its connections with the first. Ours refuse it (ConfigError: address in use)."""
    from wancrawl import errors, grpcutil

    async def go():
        first, _, security = grpcutil.new_server()
        port = grpcutil.bind(first, "127.0.0.1:0", security)
        await first.start()
        try:
            second, _, security2 = grpcutil.new_server()
            with pytest.raises(errors.ConfigError):
                grpcutil.bind(second, f"127.0.0.1:{port}", security2)
        finally:
            await first.stop(0)

    run(go())
