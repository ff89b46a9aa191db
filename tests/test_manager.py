"""The manager's pure parts: seed lines checked with their numbers, bad lines kept apart."""

from __future__ import annotations

import subprocess
import sys

from manager.seed import parse_seeds

from conftest import REPO, free_port


def test_seed_lines_are_canonicalised_deduplicated_and_bad_ones_numbered():
    text = "# comment\n\nHTTP://Example.COM/a\nhttp://example.com/a#x\nnot a url\nmailto:x@y.cn\n  https://b.cn  \n"
    s = parse_seeds(text)
    assert s.urls == ["http://example.com/a", "https://b.cn/"]
    assert s.duplicates == 1
    assert [(n, r.split(":")[0]) for n, r, _ in s.bad] == [(5, "relative URL without a base"), (6, "scheme 'mailto' is not crawled")]


def test_seed_cli_reports_bad_lines_and_an_unreachable_consultant(tmp_path):
    seeds = tmp_path / "s.txt"
    seeds.write_text("http://a.cn/\nbad line\n")
    p = subprocess.run([sys.executable, "-m", "manager.cli", "--consultant", f"127.0.0.1:{free_port()}", "seed", str(seeds)],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert f"{seeds}:2: relative URL without a base" in p.stderr
    assert p.returncode == 2 and "UNAVAILABLE" in p.stderr
    p = subprocess.run([sys.executable, "-m", "manager.cli", "seed", str(tmp_path / "missing.txt")],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2 and "cannot read" in p.stderr


def test_wait_times_out_with_a_non_zero_exit(tmp_path):
    p = subprocess.run([sys.executable, "-m", "manager.cli", "--consultant", f"127.0.0.1:{free_port()}", "wait", "--timeout", "1", "--quiet"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 1 and "timed out" in p.stdout


def test_status_merges_the_agents_top_hosts_by_pages_bytes_and_give_ups():
    from manager.status import AgentView, Snapshot, render_top_hosts, top_hosts

    a = AgentView("a", "", "alive", "", "", top_hosts=[("big.lab", 900, 10, 0), ("moved.lab", 5, 10**9, 1)])
    b = AgentView("b", "", "alive", "", "", top_hosts=[("moved.lab", 5, 10**9, 2), ("trap.lab", 1, 1, 40)])
    top = top_hosts([a, b], n=2)
    assert [h for h, *_ in top["pages"]] == ["big.lab", "moved.lab"]
    assert top["bytes"][0] == ("moved.lab", 10, 2 * 10**9, 3), "a host that moved between agents adds up"
    assert [h for h, *_ in top["give_ups"]] == ["trap.lab", "moved.lab"]
    assert render_top_hosts(Snapshot(1, "hash", [a, b])).row_count == 3 + 3 + 2  # a measure lists hosts with some of it
