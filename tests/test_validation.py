"""Validation at the edge (issue 13, items 4 and 5): every bad input the issue lists, refused with
INVALID_ARGUMENT naming the field, alone, and without echoing huge values; epochs a peer sends
are checked with the consultant; `manager seed` numbers physical lines and fails on refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from argparse import Namespace

import pytest

from agent import validate as agent_validate
from agent.placement.hostcache import HostCache
from agent.placement.directory import HostDirectory
from agent.server import AgentServicer
from agent.state.shipper import StorageShipper
from agent.state.spool import Spool
from consultant.client import HostRoute
from storage.client import Ack, GrpcStorageClient, make_batch
from storage.config import load as storage_settings
from storage.server import GroupCommitter, create_server as create_storage
from storage.store import Store
from storage.testing import fetch_result, pages
from wancrawl import checks, errors
from wancrawl.urls import canonical_host
from wancrawl.v1 import agent_pb2, common_pb2, storage_pb2
from wancrawl.warcrecords import build_capture

from consultant_helpers import register_n, running, settings_for

HUGE = "x" * 100_000


def short(exc: BaseException) -> bool:
    """The message does not echo a huge value."""
    return len(str(exc)) < 1200


# -- consultant ----------------------------------------------------------------------------------

def test_register_with_a_nan_capacity_is_invalid_argument_naming_capacity(run, tmp_path):
    async def go():
        async with running(settings_for(tmp_path)) as (_server, c):
            for bad in (math.nan, math.inf, -1.0):
                with pytest.raises(errors.InvalidArgument, match="capacity") as e:
                    await c.register("a1", "127.0.0.1:7000", capacity=bad)
                assert "SQL" not in str(e.value) and "INTERNAL" not in str(e.value)
            nan_lat = common_pb2.Location(lat=math.nan, lon=1.0, has_coordinates=True)
            with pytest.raises(errors.InvalidArgument, match="location.lat"):
                await c.register("a1", "127.0.0.1:7000", location=nan_lat)
            with pytest.raises(errors.InvalidArgument, match="location.lon"):
                await c.register("a1", "127.0.0.1:7000", location=common_pb2.Location(lon=math.inf))
            await register_n(c, 1)
            with pytest.raises(errors.InvalidArgument, match="load.capacity"):
                await c.heartbeat("agent-0", common_pb2.LoadReport(capacity=math.nan))
            with pytest.raises(errors.InvalidArgument, match="load.pages_per_second"):
                await c.heartbeat("agent-0", common_pb2.LoadReport(pages_per_second=math.inf))
            # Nothing bad was stored: the agent lists with its old load, the service still answers.
            assert len((await c.list_agents()).agents) == 1
            assert len(await c.resolve(["fine.cn"])) == 1

    run(go())


def test_long_strings_are_refused_by_the_consultant_without_being_echoed(run, tmp_path):
    async def go():
        async with running(settings_for(tmp_path)) as (_server, c):
            await register_n(c, 1)
            calls = {
                "agent_id": lambda: c.register(HUGE, "127.0.0.1:7000"),
                "address": lambda: c.register("a1", "h:" * 50_000 + "1"),
                "host": lambda: c.explain("a:" * 50_000),
                "hosts[1]": lambda: c.resolve(["ok.cn", "a:" * 50_000]),
            }
            for field, call in calls.items():
                # Before: RESOURCE_EXHAUSTED (the echoed message overflowed gRPC's metadata limit).
                with pytest.raises(errors.InvalidArgument, match=field.replace("[", r"\[")) as e:
                    await call()
                assert short(e.value), field
            with pytest.raises(errors.InvalidArgument) as e:
                await c.set_override("a:" * 50_000, "agent-0")
            assert short(e.value)
            # A malformed host of legal size is answered per host, with its value cut.
            (r,) = await c.resolve(["bad:host" + "x" * 250])
            assert r.error and len(r.error) < 300

    run(go())


def test_messages_cut_long_values():
    assert checks.shown(HUGE).endswith("... (100000 characters)") and len(checks.shown(HUGE)) < 120
    with pytest.raises(errors.InvalidArgument) as e:
        canonical_host("a:" * 50_000)
    assert short(e.value)
    assert len(checks.clip_message(HUGE)) < 1100


# -- storage -------------------------------------------------------------------------------------

def write_storage_config(tmp_path):
    cfg = tmp_path / "storage.toml"
    cfg.write_text('listen = "127.0.0.1:0"\ndata_dir = "data"\n')
    return storage_settings(cfg)


def captures(n: int, seed: int, at: float = 1_700_000_000.0):
    return [build_capture(fetch_result(u, b, at=at + i))
            for i, (u, b) in enumerate(pages(n, seed=seed, min_size=500, max_size=2_000))]


def nan_batch(seed: int, batch_id: str = "bad") -> storage_pb2.PageBatch:
    caps = captures(3, seed)
    caps[1] = dataclasses.replace(caps[1], fetched_at=math.nan)
    return make_batch(caps, batch_id)


def test_a_page_with_a_nan_fetch_time_fails_alone_in_its_group_commit(tmp_path):
    store = Store(write_storage_config(tmp_path))
    try:
        good = [make_batch(captures(4, seed=s), f"good-{s}") for s in (1, 2)]
        # Before: the index commit failed on the NaN and the whole group answered UNAVAILABLE.
        results = store.ingest([good[0], nan_batch(3), good[1]])
        assert [r.stored for r in results] == [4, 2, 4]
        (idx, _rid, reason), = results[1].rejected
        assert idx == 1 and "fetched_at" in reason
        assert store.stats()["pages"] == 10
    finally:
        store.close()


@pytest.mark.parametrize("field,value", [
    ("fetched_at", math.inf), ("fetched_at", -1.0), ("payload_length", 2**63), ("raw_length", 2**64 - 1),
    ("url", "http://a.cn/" + HUGE), ("content_type", HUGE), ("ip", HUGE), ("truncated", HUGE),
])
def test_storage_refuses_each_bad_field_by_name(tmp_path, field, value):
    store = Store(write_storage_config(tmp_path))
    try:
        caps = captures(2, seed=4)
        caps[0] = dataclasses.replace(caps[0], **{field: value})
        (res,) = store.ingest([make_batch(caps, "b")])
        assert res.stored == 1
        (_i, _rid, reason), = res.rejected
        assert field in reason and len(reason) < 600
    finally:
        store.close()


def test_other_clients_batches_are_stored_while_one_sends_a_nan_page(run, tmp_path):
    settings = write_storage_config(tmp_path)

    async def go():
        svc, _port = create_storage(settings)
        await svc.start()
        clients = [GrpcStorageClient(svc.address) for _ in range(7)]
        try:
            sends = [clients[0].send([nan_batch(100)])]
            sends += [c.send([make_batch(captures(5, seed=10 + k), f"ok-{k}")]) for k, c in enumerate(clients[1:])]
            acks = await asyncio.gather(*sends, return_exceptions=True)
        finally:
            for c in clients:
                await c.close()
            await svc.stop(0.5)
        assert all(isinstance(a, Ack) for a in acks), acks
        assert acks[0].stored == 2 and len(acks[0].rejected) == 1 and "fetched_at" in acks[0].rejected[0][3]
        assert [a.stored for a in acks[1:]] == [5] * 6 and not any(a.rejected for a in acks[1:])

    run(go())


def test_storage_refuses_a_malformed_batch_or_read_with_invalid_argument(run, tmp_path):
    settings = write_storage_config(tmp_path)

    async def go():
        svc, _port = create_storage(settings)
        await svc.start()
        client = GrpcStorageClient(svc.address)
        try:
            with pytest.raises(errors.InvalidArgument, match="batch_id") as e:
                await client.send([make_batch(captures(1, seed=5), HUGE)])
            assert short(e.value)
            with pytest.raises(errors.InvalidArgument, match="url") as e:
                await client.get("http://a.cn/" + HUGE)
            assert short(e.value)
            with pytest.raises(errors.InvalidArgument, match="at"):
                await client.get("http://a.cn/", at=math.nan)
        finally:
            await client.close()
            await svc.stop(0.5)

    run(go())


class PoisonStore:
    """A store whose group commit fails whenever the group holds the batch named "poison"."""

    def __init__(self):
        self.groups: list[list[str]] = []

    def ingest(self, batches):
        ids = [b.batch_id for b in batches]
        self.groups.append(ids)
        if "poison" in ids:
            raise errors.Unavailable("the commit failed")
        from storage.store import BatchResult
        return [BatchResult(i, stored=len(b.captures)) for i, b in zip(ids, batches)]


def test_a_failed_group_commit_is_retried_batch_by_batch(run):
    from concurrent.futures import ThreadPoolExecutor

    async def go():
        store = PoisonStore()
        with ThreadPoolExecutor(1) as pool:
            committer = GroupCommitter(store, pool, max_queue=16)  # type: ignore[arg-type]
            futs = [await committer.submit(storage_pb2.PageBatch(batch_id=i)) for i in ("a", "poison", "b")]
            committer.start()  # all three are waiting: one group
            results = await asyncio.gather(*futs, return_exceptions=True)
            await committer.stop()
        assert store.groups[0] == ["a", "poison", "b"] and sorted(store.groups[1:]) == [["a"], ["b"], ["poison"]]
        assert results[0].batch_id == "a" and results[2].batch_id == "b"
        assert isinstance(results[1], errors.Unavailable)

    run(go())


# -- agent: the shipper does not retry what storage refused as invalid -----------------------------

class RefusingStorage:
    """Refuses (INVALID_ARGUMENT) any send that holds a batch named "bad"; rejects capture 0 of
    a batch named "half"."""

    def __init__(self):
        self.sends: list[list[str]] = []

    async def send(self, batches):
        ids = [(storage_pb2.PageBatch.FromString(b) if isinstance(b, bytes) else b).batch_id for b in batches]
        self.sends.append(ids)
        if "bad" in ids:
            raise errors.InvalidArgument("storage: INVALID_ARGUMENT: batch 'bad': too many captures")
        rejected = [("half", 0, "r0", "fetched_at must be a finite number")] if "half" in ids else []
        return Ack(len(ids), 0, 0, 0, 0, rejected)

    async def close(self):
        pass


def test_a_batch_storage_refuses_as_invalid_is_set_aside_not_retried(run, tmp_path):
    spool = Spool(tmp_path / "spool", fsync=False)
    for bid in ("one", "bad", "half", "two"):
        spool.put(make_batch(captures(2, seed=7), bid))
    storage = RefusingStorage()
    shipper = StorageShipper(spool, storage, retry_seconds=1.0)  # type: ignore[arg-type]
    # Before: every send failed (INVALID_ARGUMENT as UNAVAILABLE) and the spool never drained.
    assert run(shipper.send(max_batches=10)) == 4
    assert len(spool) == 0 and storage.sends[0] == ["one", "bad", "half", "two"]
    assert sorted(map(tuple, storage.sends[1:])) == [("bad",), ("half",), ("one",), ("two",)]
    assert shipper.stats.storage_batches_rejected == 1 and shipper.stats.storage_captures_rejected == 1
    kept = sorted(p.name for p in spool.rejected_dir.iterdir())
    assert kept == ["000000000002-2.batch", "000000000003-2-captures.batch"]
    half = Spool.read(spool.rejected_dir / kept[1])
    assert half.batch_id == "half" and len(half.captures) == 1
    assert run(shipper.send(max_batches=10)) == 0  # nothing left to resend
    assert len(Spool(tmp_path / "spool", fsync=False)) == 0, "a restart does not pick rejected/ up"


# -- agent: epochs a peer sends ----------------------------------------------------------------------

class FakePlacement:
    def __init__(self, epoch: int):
        self.epoch = epoch
        self.asked: list[list[str]] = []

    async def resolve(self, hosts):
        self.asked.append(list(hosts))
        return [HostRoute(h, (("agent-a", "127.0.0.1:1"),), 600, self.epoch) for h in hosts]


def directory(placement: FakePlacement, now: list[float]) -> HostDirectory:
    return HostDirectory("agent-a", placement, HostCache(), beta=100, clock=lambda: now[0])  # type: ignore[arg-type]


def test_a_pushed_epoch_the_consultant_has_not_given_is_checked_and_not_adopted(run):
    placement = FakePlacement(epoch=5)
    now = [0.0]
    d = directory(placement, now)
    hosts = [f"h{i}.cn" for i in range(20)]
    run(d.routes(hosts))
    assert d.epoch == 5 and len(placement.asked) == 1
    # A push carrying a huge epoch: one Resolve of one pushed host asks the consultant, which
    # says 5; nothing else is asked again and the cache keeps hitting.
    owns = run(d.owners(hosts[:3], sender_epoch=2**62))
    assert owns == dict.fromkeys(hosts[:3], True)
    assert d.epoch == 5 and placement.asked[1:] == [["h0.cn"]]
    assert d.stats.epoch_claims_refuted == 1
    hits = d.cache.stats.host_cache_hits
    run(d.routes(hosts))
    assert d.cache.stats.host_cache_hits == hits + 20 and len(placement.asked) == 2
    # The same lie again within the check interval costs nothing; after it, one more check.
    run(d.owners(hosts[:1], sender_epoch=2**62))
    assert len(placement.asked) == 2 and d.epoch == 5
    now[0] += 1.5
    run(d.owners(hosts[:1], sender_epoch=2**62))
    assert placement.asked[2:] == [["h0.cn"]] and d.epoch == 5
    # Replicate, HandOver and Claim go through saw_epoch: never adopted as they are either.
    assert d.saw_epoch(2**62) is False and d.epoch == 5


def test_a_pushed_epoch_the_consultant_confirms_makes_cached_routes_stale(run):
    placement = FakePlacement(epoch=5)
    now = [0.0]
    d = directory(placement, now)
    hosts = ["a.cn", "b.cn", "c.cn"]
    run(d.routes(hosts))
    placement.epoch = 6                              # the consultant moved on; a peer heard first
    run(d.owners(["b.cn"], sender_epoch=6))
    assert d.epoch == 6 and placement.asked[1] == ["b.cn"]
    run(d.routes(hosts))
    assert sorted(placement.asked[2]) == ["a.cn", "c.cn"], "older cached answers are asked again"


def test_a_claim_is_kept_while_the_consultant_cannot_be_asked(run):
    class Down(FakePlacement):
        async def resolve(self, hosts):
            raise errors.Unavailable("consultant down")

    now = [0.0]
    d = directory(FakePlacement(epoch=5), now)
    run(d.routes(["a.cn"]))
    d.placement = Down(epoch=0)  # type: ignore[assignment]
    d.saw_epoch(9)
    run(d.routes(["a.cn"]))
    assert d.epoch == 5, "not adopted without the consultant's word"
    d.placement = FakePlacement(epoch=9)  # type: ignore[assignment]
    now[0] += 2
    run(d.routes(["a.cn"]))
    assert d.epoch == 9


# -- agent: the edge ---------------------------------------------------------------------------------

class NoNode:
    def __getattr__(self, name):
        raise AssertionError(f"a refused request reached the node ({name})")


@pytest.mark.parametrize("call,field", [
    (lambda s: s.PushUrls(agent_pb2.PushUrlsRequest(sender_id="peer", epoch=2**64 - 1), None), "epoch"),
    (lambda s: s.PushUrls(agent_pb2.PushUrlsRequest(sender_id=HUGE), None), "sender_id"),
    (lambda s: s.PushUrls(agent_pb2.PushUrlsRequest(), None), "sender_id"),
    (lambda s: s.Claim(agent_pb2.ClaimRequest(claimer_id="b", claimer_address="nowhere"), None), "claimer_address"),
    (lambda s: s.Claim(agent_pb2.ClaimRequest(claimer_id="b", claimer_address="h:1", hosts=["ok.cn", HUGE]), None),
     r"hosts\[1\]"),
    (lambda s: s.Claim(agent_pb2.ClaimRequest(claimer_id="b", claimer_address="h:1", epoch=2**64 - 1), None), "epoch"),
    (lambda s: s.Drain(agent_pb2.DrainRequest(timeout_seconds=math.nan), None), "timeout_seconds"),
])
def test_the_agent_refuses_bad_requests_before_the_node_sees_them(run, call, field):
    with pytest.raises(errors.InvalidArgument, match=field) as e:
        run(call(AgentServicer(NoNode())))  # type: ignore[arg-type]
    assert short(e.value)


def test_replicate_messages_are_checked_one_by_one():
    agent_validate.replicate(agent_pb2.ReplicateRequest(sender_id="b", epoch=3, host="a.cn"))
    bad = agent_pb2.ReplicateRequest(sender_id="b", host="a.cn", state=agent_pb2.HostState(host="a.cn", crawl_delay=math.nan))
    with pytest.raises(errors.InvalidArgument, match="state.crawl_delay"):
        agent_validate.replicate(bad)
    with pytest.raises(errors.InvalidArgument, match="epoch"):
        agent_validate.replicate(agent_pb2.ReplicateRequest(sender_id="b", host="a.cn", epoch=2**64 - 1))
    with pytest.raises(errors.InvalidArgument, match="host") as e:
        agent_validate.replicate(agent_pb2.ReplicateRequest(sender_id="b", host=HUGE))
    assert short(e.value)


def test_handover_parts_are_checked_one_by_one():
    ok = agent_pb2.HandOverRequest(sender_id="b", epoch=3, host=agent_pb2.HostState(host="a.cn"))
    agent_validate.hand_over(ok)
    bad = agent_pb2.HandOverRequest(sender_id="b", epoch=3, host=agent_pb2.HostState(
        host="a.cn", queue=[agent_pb2.QueuedUrl(url="http://a.cn/", not_before=math.inf)]))
    with pytest.raises(errors.InvalidArgument, match=r"host.queue\[0\].not_before"):
        agent_validate.hand_over(bad)
    robots = agent_pb2.HostState(host="a.cn", robots=[agent_pb2.RobotsState(origin="http://a.cn", expires=math.nan)])
    with pytest.raises(errors.InvalidArgument, match=r"host.robots\[0\].expires"):
        agent_validate.hand_over(agent_pb2.HandOverRequest(sender_id="b", host=robots))


def test_a_pushed_url_too_long_is_an_error_of_its_own_and_scope_refusals_are_reported():
    from agent.routing.intake import parse_push

    parsed, errs = parse_push([agent_pb2.UrlItem(url="http://a.cn/"), agent_pb2.UrlItem(url="http://a.cn/" + HUGE)], False)
    assert [i for i, _ in parsed] == [0] and errs[0].startswith("1: url is 100012 characters long") and short(errs[0])


# -- manager seed --------------------------------------------------------------------------------------

def test_seed_line_numbers_are_physical_lines():
    from manager.seed import parse_seeds

    # str.splitlines splits at \r, \x0c and \x1c too: line 5 used to be reported as line 8.
    text = "http://a.cn/\nhttp://b.cn/x\ry\nhttp://c.cn/\x0cz\nhttp://d.cn/\x1cw\nnot a url\r\nhttp://e.cn/\n"
    s = parse_seeds(text)
    assert [n for n, _r, _t in s.bad] == [2, 5]
    assert s.urls[0] == "http://a.cn/" and "http://e.cn/" in s.urls


def test_seed_exits_1_listing_the_urls_agents_refused(run, monkeypatch, capsys):
    import manager.seed as seed

    class Consultant:
        def __init__(self, target):
            pass

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return None

    long_url = "http://a.cn/" + "p" * 10_000

    async def inject_all(_c, urls, force=False):
        res = seed.Injection()
        res.taken["agent-a"] = len(urls) - 1
        res.refused += seed.refusals(urls, [f"{urls.index(long_url)}: out of scope (url_length)"])
        return res

    monkeypatch.setattr(seed, "open_directory", lambda args: Consultant(args.consultant))
    monkeypatch.setattr(seed, "inject_all", inject_all)

    async def go(text):
        import io
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        return await seed.run_seed(Namespace(file="-", sort_query=False, consultant="x", json=False, force=False))

    assert run(go(f"http://b.cn/\n{long_url}\n")) == 1
    err = capsys.readouterr().err
    assert "refused: http://a.cn/ppp" in err and "out of scope (url_length)" in err and len(err) < 400
    monkeypatch.setattr(seed, "inject_all", lambda _c, urls, force=False: _accept_all(seed, urls))
    assert run(go("http://b.cn/\nhttp://c.cn/\n")) == 0, "0 means every valid URL was accepted"


async def _accept_all(seed, urls):
    res = seed.Injection()
    res.taken["agent-a"] = len(urls)
    return res


def test_refusals_map_agent_errors_to_the_urls_sent():
    from manager.seed import refusals

    assert refusals(["u0", "u1", "u2"], ["2: out of scope (domain)", "0: malformed URL: x"]) == [
        ("u2", "out of scope (domain)"), ("u0", "malformed URL: x")]
