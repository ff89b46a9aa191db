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


def test_consultant_flag_takes_replicas_repeated_or_comma_separated():
    from manager.cli import parser

    assert parser().parse_args(["agents"]).consultant  # the default stays one address
    assert parser().parse_args(["--consultant", "a:1", "--consultant", "b:2,c:3", "agents"]).consultant == "a:1,b:2,c:3"
    assert parser().parse_args(["--consultant", "a:1,b:2", "agents"]).consultant == "a:1,b:2"


def test_manager_seeds_through_a_replica_list_whose_first_address_is_dead(run, tmp_path):
    """--consultant DEAD --consultant LIVE: the seeds reach the agents through the second."""
    import asyncio
    import json

    from lab.testing import ServerThread

    from agent_helpers import cluster, lab_web, normal_hosts

    web = lab_web(seed=4, pages_max=10)
    with ServerThread(web, zero_latency=True) as lab:
        seeds = [lab.web.url(s, "/") for s in lab.web.topology.normal_sites[:3]]
        (tmp_path / "seeds.txt").write_text("\n".join(seeds) + "\n")

        async def go():
            async with cluster(tmp_path, lab, 1, agent_keys={"scope.allowed_domains": normal_hosts(lab.web)}) as (cs, _, agents, _s):
                dead = f"127.0.0.1:{free_port()}"
                p = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "manager.cli", "--consultant", f"{dead},{cs.address}", "seed", "--json",
                    str(tmp_path / "seeds.txt"), cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                out, err = await asyncio.wait_for(p.communicate(), timeout=120)
                return p.returncode, out.decode(), err.decode(), agents[0].node.id

        rc, out, err, agent_id = run(go())
        assert rc == 0, err
        assert json.loads(out)["routed_by"] == {agent_id: len(seeds)}


def test_progress_key_ignores_the_order_the_directory_lists_agents_in():
    """An overlay lists agents by XOR distance from whichever agent answered: the same idle crawl
    listed in another order is no progress (else `wait` never sees it stay idle: the Kademlia
    join scenario timed out with every agent idle)."""
    from manager.status import AgentView, Snapshot

    def view(name: str, pages: float) -> AgentView:
        return AgentView(name, "127.0.0.1:1", "alive", "", "", counters={"pages": pages, "idle": 1.0}, reachable=True)

    a, b = view("a", 10), view("b", 20)
    assert Snapshot(1, "", [a, b]).progress_key() == Snapshot(1, "", [b, a]).progress_key()
    assert Snapshot(1, "", [a, b]).progress_key() != Snapshot(1, "", [a, view("b", 21)]).progress_key()


def test_status_merges_the_agents_top_hosts_by_pages_bytes_and_give_ups():
    from manager.status import AgentView, Snapshot, cost_rows, render_top_hosts, top_hosts

    a = AgentView("a", "", "alive", "", "", top_hosts=[("big.lab", 900, 10, 0), ("moved.lab", 5, 10**9, 1)])
    b = AgentView("b", "", "alive", "", "", top_hosts=[("moved.lab", 5, 10**9, 2), ("trap.lab", 1, 1, 40)])
    top = top_hosts([a, b], n=2)
    assert [h for h, *_ in top["pages"]] == ["big.lab", "moved.lab"]
    assert top["bytes"][0] == ("moved.lab", 10, 2 * 10**9, 3), "a host that moved between agents adds up"
    assert [h for h, *_ in top["give_ups"]] == ["trap.lab", "moved.lab"]
    # Each host once, saying which lists it tops (it listed big.lab and moved.lab under pages and
    # again under bytes, with nothing saying why).
    assert cost_rows([a, b], n=2) == [("big.lab", 900, 10, 0, "pages, bytes"),
                                      ("moved.lab", 10, 2 * 10**9, 3, "pages, bytes, give-ups"),
                                      ("trap.lab", 1, 1, 40, "give-ups")]
    assert render_top_hosts(Snapshot(1, "hash", [a, b]), n=2).row_count == 3
