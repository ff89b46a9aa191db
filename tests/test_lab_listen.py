"""`lab web --listen`: every site on one socket (a container on a compose network,
scripts/compose-e2e.sh), `lab hosts --ip` pointing every name at it, and `lab warcs` reading
what a crawl stored from the WARC files against the truth."""

import http.client
import io
import json
import socket

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from lab import cli, topology
from lab.testing import ServerThread, small_topology
from lab.truth import Scope, Truth
from lab.warcs import check, file_sources, warc_files
from lab.web import Web


def get(port: int, host: str, target: str = "/") -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", target, headers={"Host": host})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def test_listen_serves_every_site_on_one_socket_and_logs_the_plan_address(tmp_path):
    web = Web(small_topology(), seed=4)
    log = tmp_path / "requests.jsonl"
    a, b = web.topology.normal_sites[0], web.topology.normal_sites[7]
    assert a.ip != b.ip and "127.0.0.1" not in (a.ip, b.ip)
    with ServerThread(web, listen="127.0.0.1", log_path=str(log)) as st:
        assert st.server is not None and st.server.model is None  # no link model on one socket
        # Without --listen both would be 421 here: neither site's plan address is 127.0.0.1.
        for s in (a, b):
            status, body = get(st.port, f"{s.host}:{st.port}")
            assert status == 200 and body == st.web.respond(s.host, "/").body
        page = st.web.page_path(b, 1)
        assert get(st.port, b.host, page) == (200, st.web.respond(b.host, page).body)
        assert get(st.port, "www.nowhere.lab")[0] == st.web.respond("www.nowhere.lab", "/").status
        with pytest.raises(OSError):  # nothing listens on the plan's addresses
            socket.create_connection((a.ip, st.port), timeout=2).close()
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["host"], e["site_ip"]) for e in entries[:3]] == [(a.host, a.ip), (b.host, b.ip), (b.host, b.ip)]
    assert entries[3]["site_ip"] == "127.0.0.1"  # no site: the socket's address, as before


def test_hosts_points_every_name_at_one_address(capsys):
    assert cli.main(["hosts", "--ip", "10.89.35.250"]) == 0
    lines = [ln.split("\t") for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    topo = topology.load()
    names = {s.host for s in topo.sites}
    assert {ip for ip, _ in lines} == {"10.89.35.250"}
    assert names <= {h for _, h in lines}
    assert cli.main(["hosts"]) == 0  # without --ip: each name to its plan address
    plan = dict(reversed(ln.split("\t")) for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#"))
    assert all(plan[s.host] == s.ip for s in topo.sites)


def write_warc(path, records):
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=True)
        for rec_type, url in records:
            http_headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            if rec_type == "request":
                http_headers = StatusAndHeaders("GET / HTTP/1.1", [("Host", "x")], is_http_request=True)
            w.write_record(w.create_warc_record(url, rec_type, payload=io.BytesIO(b"<p>x</p>"), http_headers=http_headers))


def test_warcs_counts_stored_lost_twice_and_outside(tmp_path):
    truth = {"http://a.lab/", "http://a.lab/p.html", "http://b.lab/", "http://b.lab/gone"}
    (tmp_path / "w").mkdir()
    write_warc(tmp_path / "w" / "one.warc.gz", [("request", "http://a.lab/"), ("response", "HTTP://A.LAB:80/"),
                                                ("response", "http://a.lab/p.html")])
    write_warc(tmp_path / "w" / "two.warc.gz", [("revisit", "http://a.lab/p.html"), ("response", "http://b.lab/"),
                                                ("revisit", "http://b.lab/gone"), ("response", "http://elsewhere.lab/")])
    (tmp_path / "w" / "half.warc.gz.open").write_bytes(b"not yet")
    files = warc_files([tmp_path / "w"])
    assert [f.name for f in files] == ["one.warc.gz", "two.warc.gz"]
    c = check(truth, file_sources(files))
    # /gone has only a revisit (no page of its own): lost; p.html a response and a revisit: twice.
    assert (c.truth, c.stored, c.lost, c.stored_twice, c.outside_truth) == (4, 3, 1, 1, 1)
    assert c.lost_urls == ["http://b.lab/gone"]


def test_warcs_command_takes_truth_from_the_seeds(tmp_path, capsys):
    web = Web(topology.load(), seed=0)  # the command's (no --topology)
    s = web.topology.normal_sites[3]
    seeds = tmp_path / "seeds"
    seeds.write_text(s.base_url + "/\n")
    truth = [r.url for r in Truth(web, Scope(max_depth=1, respect_robots=True)).reachable([s.base_url + "/"])]
    write_warc(tmp_path / "all.warc.gz", [("response", u) for u in truth])
    assert cli.main(["warcs", "--seeds", str(seeds), "--max-depth", "1", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["files"], out["truth"], out["stored"], out["lost"], out["stored_twice"]) == (1, len(truth), len(truth), 0, 0)
    write_warc(tmp_path / "all.warc.gz", [("response", u) for u in truth[1:]])
    assert cli.main(["warcs", "--seeds", str(seeds), "--max-depth", "1", str(tmp_path)]) == 1
    assert json.loads(capsys.readouterr().out)["lost_urls"] == [truth[0]]
    cli.main(["warcs", "--seeds", str(seeds), "--max-depth", "1", "--names", str(tmp_path)])
    assert capsys.readouterr().out.splitlines()[1:] == [str(tmp_path / "all.warc.gz")]


def test_web_listen_stops_on_sigterm_with_its_log_flushed(tmp_path):
    """`docker compose stop` sends SIGTERM to the lab web, PID 1 of its container, where a signal
    without a handler is ignored: it must stop as on Ctrl-C (exit 0, the log's last lines written)."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from lab.cluster import free_port

    port, log = free_port(), tmp_path / "requests.jsonl"
    s = topology.load().normal_sites[2]
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "web", "--listen", "127.0.0.1", "--port", str(port), "--log", str(log)],
                            cwd=Path(__file__).resolve().parents[1], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                status, _body = get(port, s.host)
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("lab web did not come up")
        assert status == 200
        proc.send_signal(signal.SIGTERM)  # at once: the periodic flush (0.2 s) may not have run
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [(e["host"], e["site_ip"]) for e in map(json.loads, log.read_text().splitlines())] == [(s.host, s.ip)]


def test_compose_e2e_lab_files_agree_with_their_topology():
    """scripts/compose-e2e.sh's seeds are the home page of every site of its topology, the
    probe asks the first, and the crawl is small (one site a block, no hostile site)."""
    from pathlib import Path

    from lab.truth import read_seeds

    d = Path(__file__).resolve().parents[1] / "deploy/e2e/lab"
    t = topology.load(d / "topology.toml")
    seeds, errors = read_seeds((d / "seeds.txt").read_text())
    assert not errors and seeds == [s.base_url + "/" for s in t.sites] and not t.hostile_sites
    first = t.sites[0]
    assert f'"Host": "{first.host}:{first.port}"' in (d / "probe.py").read_text()
    truth = Truth(Web(t, 0), Scope(respect_robots=True, max_depth=8)).reachable(seeds)
    assert 50 <= len(truth) <= 300  # a crawl of well under a minute at the agents' 1 s delay


def test_warcs_reads_every_writers_objects_from_the_bucket(bucket, tmp_path):
    """The object-store profile's WARCs are objects under each writer's prefix: `lab warcs
    --bucket-of STORAGE_TOML` reads them all (and nothing that is not a WARC)."""
    from lab.warcs import bucket_sources
    from storage import config
    from storage.s3sink import make_client

    server, name = bucket
    toml = tmp_path / "storage.toml"
    toml.write_text(server.toml(name, "w1"))
    s3 = make_client(config.load(toml).object_store)
    s3.create_bucket(Bucket=name)
    for key, urls in (("w1/a.warc.gz", ["http://a.lab/"]), ("w2/b.warc.gz", ["http://a.lab/", "http://b.lab/"])):
        write_warc(tmp_path / "x.warc.gz", [("response", u) for u in urls])
        s3.put_object(Bucket=name, Key=key, Body=(tmp_path / "x.warc.gz").read_bytes())
    s3.put_object(Bucket=name, Key="w1/notes.txt", Body=b"not a WARC")
    sources = bucket_sources(toml)
    assert [n for n, _ in sources] == [f"s3://{name}/w1/a.warc.gz", f"s3://{name}/w2/b.warc.gz"]
    c = check({"http://a.lab/", "http://b.lab/", "http://c.lab/"}, sources)
    assert (c.stored, c.lost, c.stored_twice) == (2, 1, 1)
