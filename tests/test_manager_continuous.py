"""`manager crawl --continuous` (issue 26 item 5): the crawl does not end, every fetched page is
revisited with a conditional request (the test sites are Python's http.server, which answers
If-Modified-Since with 304), Ctrl-C stops it and the same --out resumes with the schedule whole."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from test_manager_crawl import CONTACT, _alive_services, _crawl_args, _crawler_requests, interrupt_when
import test_manager_crawl

sites = test_manager_crawl.sites  # the fixture: three manuals served by http.server

from manager.cli import parser
from manager.crawl import agent_toml, make_plan


def _schedule(out: Path) -> dict[str, tuple[int, int]]:
    """URL -> (visits, changes) over every agent's revisit schedule (read beside stopped agents)."""
    got: dict[str, tuple[int, int]] = {}
    for db in sorted((out / "agents").glob("*/frontier.sqlite")):
        c = sqlite3.connect(str(db))
        try:
            for url, visits, changes in c.execute("SELECT url, visits, changes FROM revisit"):
                assert url not in got, f"{url} scheduled by two agents"
                got[url] = (visits, changes)
        finally:
            c.close()
    return got


def test_plan_writes_the_revisit_section_only_for_a_continuous_crawl(tmp_path):
    from agent.settings import load_settings

    def toml(*extra: str) -> str:
        p = make_plan(parser().parse_args(["crawl", "urls.txt", "--out", str(tmp_path), *extra]), ["http://a.example/"], CONTACT)
        return agent_toml(p, "local-1", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "")

    assert "[revisit]" not in toml()
    (tmp_path / "a.toml").write_text(toml("--continuous", "--revisit-policy", "optimal", "--revisit-interval", "600",
                                          "--revisit-budget", "50"))
    s = load_settings(tmp_path / "a.toml")
    assert s.revisit.enabled and s.revisit.policy == "optimal" and s.revisit.interval == 600.0
    assert s.revisit.pages_per_host_day == 50.0 and s.revisit.min_interval <= 600.0
    (tmp_path / "b.toml").write_text(toml())
    assert not load_settings(tmp_path / "b.toml").revisit.enabled


def test_continuous_crawl_revisits_stops_on_ctrl_c_and_resumes_with_the_schedule(sites, tmp_path):
    for log in sites["logs"].values():
        log.clear()
    out = tmp_path / "crawl"
    ref = sites["ref"]["urls"]
    args = ("--delay", "0", "--no-report", "--continuous", "--revisit-policy", "fixed", "--revisit-interval", "1")
    # Every page fetched, then each fetched again at least once: the crawl goes on by itself.
    want = {(urlsplit(u).hostname, urlsplit(u).path) for u in ref}

    def revisited() -> bool:
        reqs = _crawler_requests(sites)
        return want <= set(reqs) and sum(reqs.values()) >= 2 * len(ref)

    interrupt_when(_crawl_args(sites, out, *args), tmp_path, revisited, timeout=150)
    assert want <= set(_crawler_requests(sites)), "not every page was fetched in time"
    assert _alive_services(out) == []
    sched = _schedule(out)
    # Exactly the pages stored with a 2xx answer are scheduled (not the 404s of broken links).
    db = sqlite3.connect(str(out / "storage" / "index.sqlite"))
    ok = {u for (u,) in db.execute("SELECT url FROM storage_captures WHERE status BETWEEN 200 AND 299")}
    statuses = {s for (s,) in db.execute("SELECT DISTINCT status FROM storage_captures")}
    db.close()
    assert set(sched) == ok and ok <= ref and len(ok) > 100, (len(sched), len(ok), sorted(ok ^ set(sched))[:5])
    assert 304 in statuses  # http.server answers If-Modified-Since: the revisits were conditional
    revisited = sum(v for v, _ in sched.values())
    assert revisited > 0 and all(c == 0 for _, c in sched.values()), "the static sites never change"

    for log in sites["logs"].values():
        log.clear()
    p = subprocess.run(_crawl_args(sites, out, *args, "--timeout", "15"), capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr  # --timeout ends a continuous crawl, still running
    assert "resuming" in p.stdout
    assert "freshness estimate" in p.stderr  # the progress line (every 5 s without a terminal)
    again = _schedule(out)
    assert set(again) == set(sched), "the schedule came through the restart whole"
    assert sum(v for v, _ in again.values()) > revisited  # and the revisits went on from it
    # No first visit again: every page the second run asked for was a scheduled revisit.
    assert {path for _, path in _crawler_requests(sites)}, "the second run revisited nothing"


def test_status_sums_the_revisit_figures_of_every_agent():
    from manager.status import AgentView, Snapshot, render, revisit_line, revisit_summary

    one = {"revisits_scheduled": 10, "revisits_due": 2, "revisits": 8, "revisits_changed": 2, "revisits_unchanged": 6,
           "not_modified": 5, "not_modified_bytes": 2_000_000}
    two = {**one, "revisits_changed": 0, "revisits_unchanged": 0}
    snap = Snapshot(1, "hash", [AgentView("a", "x", "alive", "", "", one, True), AgentView("b", "y", "alive", "", "", two, True)])
    r = revisit_summary(snap)
    assert r["revisits_scheduled"] == 20 and r["revisits_due"] == 4 and r["revisits_changed"] == 2
    assert r["freshness"] == 6 / 8
    line = revisit_line(snap)
    assert "20 scheduled, 4 due" in line and "2 pages changed" in line and "4.0 MB saved" in line and "0.75" in line
    assert line in str(render(snap, {}).caption)
    one_shot = Snapshot(1, "hash", [AgentView("a", "x", "alive", "", "", {"pages": 3}, True)])
    assert revisit_summary(one_shot) is None and revisit_line(one_shot) == ""
