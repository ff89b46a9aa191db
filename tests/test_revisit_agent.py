"""Continuous crawling with real agents on the lab's changing web (issue 26): revisits with
conditional requests, 304s handled as unchanged and shipped with the digest they confirm, the
schedule through kill -9 of the agent and through a handover (no URL drops out)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import sqlite3

from agent.state.frontier import Frontier
from lab.testing import ServerThread

from agent_helpers import cluster, fetched_urls, lab_web, normal_hosts, seed, truth_urls
from test_agent_budgets import until

REVISIT = {"revisit__enabled": True, "revisit__interval": 0.6, "revisit__min_interval": 0.2, "revisit__max_interval": 5.0,
           "scope__max_depth": -1}


@contextlib.contextmanager
def _changing_lab():
    """The changing web served on loopback: (server thread, web, normal hosts, a seed per site)."""
    with ServerThread(_changing_web(), zero_latency=True) as lab:
        web = lab.web
        yield lab, web, normal_hosts(web), [web.url(s, "/") for s in web.topology.normal_sites]


def _changing_web(**kw):
    # time_scale 3600: a lab hour each wall second; a third of the pages change, hourly on average.
    return lab_web(seed=6, time_scale=3600.0, pages_max=25, change_ratio=0.5, change_means=[3600.0], **kw)


def test_revisits_send_conditional_requests_and_304s_are_unchanged(tmp_path):
    web = _changing_web()
    with ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        # The site with the most changing pages.
        site = max(web.topology.normal_sites[:8], key=lambda s: sum(web.change_rate(s, i) > 0 for i in range(web.pages(s))))
        assert sum(web.change_rate(site, i) > 0 for i in range(web.pages(site))) >= 3
        seeds = [web.url(site, "/")]
        truth = truth_urls(web, seeds, max_depth=None, allow=[site.host])

        async def run():
            async with cluster(tmp_path, lab, 1, agent_keys={**REVISIT, "scope__allowed_domains": [site.host]}) as (_, _, servers, storages):
                node = servers[0].node
                await seed(node, seeds)
                d = node.dispatcher.stats["revisits"]
                await until(lambda: d.not_modified >= 10 and d.revisits_changed >= 3, "revisits, some 304, some changed", 60)
                counters = node.status_counters()
                await servers[0].stop(0)
                return node, counters, storages[0]

        node, counters, storage = asyncio.run(run())
        assert set(fetched_urls(lab, lab.port)) == truth
        assert counters["revisits_scheduled"] == len(truth) and 0 < counters["revisit_freshness"] < 1
        assert counters["revisits"] == counters["revisits_changed"] + counters["revisits_unchanged"]
        # Every 304 is a capture with status 304 whose payload digest is that of the agent's
        # previous capture of the URL (the one it confirms); a 200 revisit of a page the lab did
        # not change has that digest too (storage makes it an identical-payload-digest revisit).
        by_url = collections.defaultdict(list)
        for c in storage.captures.values():
            by_url[c.url].append(c)
        n304 = 0
        for url, caps in by_url.items():
            caps.sort(key=lambda c: c.fetched_at)
            assert caps[0].status == 200
            # The first capture is not flagged a refetch (storage asks its index nothing for
            # it); every revisit is (storage compares it with the URL's latest capture).
            assert not caps[0].refetch and all(c.refetch for c in caps[1:]), url
            for prev, cur in zip(caps, caps[1:]):
                if cur.status == 304:
                    n304 += 1
                    assert cur.payload_digest == prev.payload_digest, url
                    assert b"304" in cur.http_headers.split(b"\r\n")[0]
        assert n304 >= 10 and n304 == counters["not_modified"] <= counters["revisits_unchanged"]
        assert counters["not_modified_bytes"] > 0
        # Against the lab's truth: the changes each URL's revisits detected are at most the
        # versions its page went through, none for a page that never changes, and some were seen.
        end = lab.server.model_now()
        f = Frontier(node.frontier.path)
        entries = f.export_schedule(site.host)
        f.close()
        assert {e.url for e in entries} == truth
        for e in entries:
            assert e.changes <= web.version_of_url(e.url, end), e.url
            if web.change_rate(*web.page_of_url(e.url)) == 0:
                assert e.changes == 0, e.url
        assert sum(e.changes for e in entries) >= 3
        # No 304 was retried or counted an error.
        assert counters["errors"] == 0 and counters["retries"] == 0


def test_the_schedule_survives_kill_9_of_the_agent_and_revisits_resume(tmp_path):
    """A revisiting agent killed with SIGKILL: every URL the lab served it is queued or
    scheduled in its data dir (none drops out), and restarted from it, it revisits again."""
    from test_agent_resume import _status, _wait, running, write_configs

    web = _changing_web()
    with ServerThread(web, zero_latency=True) as lab:
        web, port = lab.web, lab.port
        topo = web.topology
        hosts = normal_hosts(web)[:3]
        seeds = [web.url(s, "/") for s in topo.normal_sites[:3]]
        _, aport = write_configs(tmp_path, topo, hosts, delay=0.05, sections="max_depth = -1\n[revisit]\nenabled = true\n"
                                                                             "interval = 0.5\nmin_interval = 0.2\n")
        with running(tmp_path, aport, seeds) as procs:
            _wait(lambda: (_status(procs.addr) or {}).get("revisits", 0) >= 20, 60, "revisits")
            procs.agent.send_signal(signal.SIGKILL)
            procs.agent.wait(10)
            served = {u for u in fetched_urls(lab, port)}
            f = Frontier(tmp_path / "data" / "frontier.sqlite")
            held = {it.url for h in hosts for it in f.export_host(h)} | {e.url for h in hosts for e in f.export_schedule(h)}
            f.close()
            missing = served - held
            assert not missing, f"{len(missing)} URLs dropped out of queue and schedule, e.g. {sorted(missing)[:3]}"
            n_log = len(lab.server.log)
            procs.start_agent()
            _wait(lambda: (_status(procs.addr) or {}).get("revisits", 0) >= 10, 60, "revisits after the restart")
            assert len(lab.server.log) > n_log
        db = sqlite3.connect(tmp_path / "data" / "frontier.sqlite")
        urls = [u for (u,) in db.execute("SELECT url FROM revisit")]
        assert len(urls) == len(set(urls)) and set(urls) >= served - {u for (u,) in db.execute("SELECT url FROM queue")}


def test_a_drain_hands_the_schedule_over_whole(tmp_path):
    """Agent A drains: every URL of A's schedule is in B's afterwards, with its digest and
    validators (B's next request for it is conditional on A's capture)."""
    web = _changing_web()
    with ServerThread(web, zero_latency=True) as lab:
        web = lab.web
        hosts = normal_hosts(web)
        seeds = [web.url(s, "/") for s in web.topology.normal_sites[:6]]

        async def run():
            keys = {**REVISIT, "revisit__interval": 30.0, "revisit__max_interval": 60.0, "scope__allowed_domains": hosts}
            async with cluster(tmp_path, lab, 2, agent_keys=keys) as (_, _, servers, _):
                a, b = servers[0].node, servers[1].node
                await seed(a, seeds)
                await until(lambda: a.frontier.hosts_with_work() == 0 and b.frontier.hosts_with_work() == 0
                            and a.dispatcher.idle() and b.dispatcher.idle() and a.dispatcher.stats["outcome"].pages > 5, "first visits", 60)
                a.commit_log.commit(force=True)
                mine = {h: {e.url: e for e in a.frontier.export_schedule(h)} for h in hosts}
                mine = {h: s for h, s in mine.items() if s}
                assert mine, "agent A scheduled nothing"
                _, remaining = await a.drain(timeout=30)
                b.commit_log.commit(force=True)
                theirs = {h: {e.url: e for e in b.frontier.export_schedule(h)} for h in mine}
                return mine, theirs, remaining

        mine, theirs, remaining = asyncio.run(run())
        assert not remaining
        for h, entries in mine.items():
            assert set(entries) <= set(theirs[h]), f"{h}: {len(set(entries) - set(theirs[h]))} URLs dropped out"
            for url, e in entries.items():
                got = theirs[h][url]
                assert (got.digest, got.etag, got.modified) == (e.digest, e.etag, e.modified)



def test_a_dead_owners_schedule_goes_on_from_its_replica(run, tmp_path):
    """kill -9 (in process) of a revisiting agent whose replicas are current: its backups
    promote its hosts with their schedules, so every URL it had scheduled is scheduled by a
    survivor (the chaos table's counting: none drops out)."""
    from test_agent_replication import CONSULTANT, _keys, _until as until_sync, crash

    with _changing_lab() as (lab, web, hosts, seeds):

        async def go():
            keys = {**_keys(hosts), **REVISIT, "revisit__interval": 30.0, "revisit__max_interval": 60.0}
            async with cluster(tmp_path, lab, 3, agent_keys=keys, consultant_keys=CONSULTANT) as (_, _, agents, _):
                nodes = [a.node for a in agents]
                await seed(nodes[0], seeds)
                await until_sync(lambda: all(n.frontier.hosts_with_work() == 0 and n.dispatcher.idle() for n in nodes)
                                 and nodes[1].dispatcher.stats["outcome"].pages > 5, 60)
                for n in nodes:
                    n.commit_log.commit(force=True)
                await until_sync(lambda: all(n.replicator.gauges()["replica_unsynced"] == 0 for n in nodes), 20)
                for n in nodes:
                    await n.replicator.round()
                victim = nodes[1]
                theirs = {e.url for h in hosts for e in victim.frontier.export_schedule(h)}
                owned = set(victim.ledger.owned_hosts())
                await crash(agents[1])
                rest = [nodes[0], nodes[2]]
                # Every host of the victim promoted by one survivor or the other.
                await until_sync(lambda: sum(n.status_counters()["hosts_promoted"] for n in rest) >= len(owned), 30)
                for n in rest:
                    n.commit_log.commit(force=True)
                ours = {e.url for n in rest for h in hosts for e in n.frontier.export_schedule(h)}
                return theirs, ours

        theirs, ours = run(go())
        assert theirs, "the victim scheduled nothing"
        assert theirs <= ours, f"{len(theirs - ours)} of the dead agent's scheduled URLs dropped out"


def test_pages_a_dead_owner_stored_before_its_replicas_heard_of_them_stay_scheduled(run, tmp_path):
    """bench/chaos.py revisit-kill's finding: the owner's last pages reached storage, but it died
    before a replication round carried their "done" and schedule entries to its backups. The
    promoted backup asks storage before fetching them (agent/crawl/refetch.py), storage holds
    them, so they are not fetched again; they must still enter its revisit schedule (25 of 1,831
    dropped out of every schedule in the first chaos run)."""
    from test_agent_replication import CONSULTANT, _keys, _until as until_sync, crash

    from agent_helpers import wait_idle

    with _changing_lab() as (lab, web, hosts, seeds):

        async def go():
            keys = {**_keys(hosts), **REVISIT, "revisit__interval": 300.0, "revisit__max_interval": 600.0,
                    "replication__unshipped_grace": 0.5}
            async with cluster(tmp_path, lab, 3, agent_keys=keys, consultant_keys=CONSULTANT) as (_, _, agents, _):
                nodes = [a.node for a in agents]
                victim = nodes[1]
                await seed(nodes[0], seeds)
                await until_sync(lambda: victim.status_counters()["pages"] >= 10, 60)
                await until_sync(lambda: all(n.replicator.gauges()["replica_unsynced"] == 0 for n in nodes), 20)
                # Replication stops; the pages fetched from then on reach storage but not the backups.
                tasks = {t.get_name(): t for t in victim.tasks}
                tasks["replication"].cancel()
                await asyncio.gather(tasks["replication"], return_exceptions=True)
                before = victim.dispatcher.stats["outcome"].pages
                await until_sync(lambda: victim.dispatcher.stats["outcome"].pages >= before + 3, 30)
                await victim.dispatcher.stop()
                victim.commit_log.commit(force=True)
                while len(victim.spool):
                    assert await victim.shipper.send(max_batches=50) > 0, "the fake storage takes every batch"
                theirs = {e.url for h in hosts for e in victim.frontier.export_schedule(h) if e.last > 0}
                await crash(agents[1])
                rest = [nodes[0], nodes[2]]
                await until_sync(lambda: sum(n.status_counters()["hosts_promoted"] for n in rest) > 0, 30)
                await wait_idle(rest, timeout=120)
                for n in rest:
                    n.commit_log.commit(force=True)
                ours = {e.url for n in rest for h in hosts for e in n.frontier.export_schedule(h) if e.last > 0}
                avoided = sum(n.stored_check.stats.refetches_avoided for n in rest
                              if n.stored_check is not None)
                return theirs, ours, avoided

        theirs, ours, avoided = run(go())
        assert avoided > 0, "no page of the window was found at storage: the case tests nothing"
        assert theirs, "the victim scheduled nothing"
        assert theirs <= ours, f"{len(theirs - ours)} of the dead agent's scheduled URLs dropped out: {sorted(theirs - ours)[:5]}"
