"""Storage ingests a page only from its host's owner or backups (issue 21, attack 6;
storage/placement.py, docs/security.md): a real storage server in-process asks a real in-process
consultant, and the agent's shipper copes with the refusals."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from agent.state.shipper import StorageShipper
from agent.state.spool import Spool
from consultant.client import ConsultantClient
from consultant.server import create_server as create_consultant
from storage.client import GrpcStorageClient, make_batch
from storage.config import load as storage_settings
from storage.placement import PlacementCheck, RouteCache
from storage.server import create_server as create_storage
from storage.testing import fetch_result
from wancrawl import errors, pki
from wancrawl.grpcutil import TlsSettings
from wancrawl.placement import HostRoute
from wancrawl.v1 import storage_pb2
from wancrawl.warcrecords import build_capture

from conftest import REPO, free_port
from consultant_helpers import register_n, settings_for

HOSTS = [f"site{i}.example" for i in range(40)]


def cap(url: str, agent_id: str, n: int = 0) -> storage_pb2.Capture:
    body = f"<html><body>{url} fetched by {agent_id} ({n})</body></html>".encode() * 20
    return make_batch([build_capture(fetch_result(url, body, agent_id=agent_id, at=1_700_000_000.0 + n))]).captures[0]


def batch(bid: str, *caps: storage_pb2.Capture) -> storage_pb2.PageBatch:
    return storage_pb2.PageBatch(batch_id=bid, captures=list(caps))


@contextlib.asynccontextmanager
async def cluster(tmp: Path, agents: int, *, consultant_port: int | None = None, ttl: int = 300):
    """A consultant with `agents` registered agents (agent-0..), and storage checking placement with it."""
    port = consultant_port or free_port()
    cs = settings_for(tmp, strategy="hash", listen=f"127.0.0.1:{port}", ttl_seconds=ttl)
    csrv, _ = create_consultant(cs)
    await csrv.start()
    client = ConsultantClient(csrv.address)
    await register_n(client, agents)
    ss = storage_settings(None, {"listen": "127.0.0.1:0", "data_dir": str(tmp / "storage"), "ingest.fsync": "os",
                                 "consultant": csrv.address})
    ssrv, _ = create_storage(ss)
    await ssrv.start()
    sc = GrpcStorageClient(ssrv.address)
    box = {"consultant": csrv}
    try:
        yield box, client, ssrv, sc
    finally:
        await sc.close()
        await client.close()
        await ssrv.stop(0)
        with contextlib.suppress(Exception):
            await box["consultant"].stop(0)


async def routes(client: ConsultantClient, hosts=HOSTS) -> dict[str, list[str]]:
    return {r.host: [a for a, _ in r.agents] for r in await client.resolve(list(hosts))}


def stored_by(ssrv, url: str) -> list[str]:
    """The agents whose captures of `url` storage indexed."""
    idx = ssrv.store.index
    return sorted(r.agent_id for r in idx.iter_rows() if r.url == url)


# -- the rule, against a real consultant -----------------------------------------------------------

def test_a_page_of_a_host_the_sender_is_not_placed_on_is_refused_and_the_rest_stored(tmp_path, run):
    async def go():
        async with cluster(tmp_path, 5) as (_, client, ssrv, sc):
            lists = await routes(client)
            agents = {f"agent-{i}" for i in range(5)}
            # A host whose list (owner, backup, backup) leaves some agent out, and a host that agent is on.
            host, placed = next((h, ags) for h, ags in lists.items() if len(ags) == 3)
            outsider = sorted(agents - set(placed))[0]
            own_host = next(h for h, ags in lists.items() if outsider in ags)
            owner, backup = placed[0], placed[-1]
            mine, theirs = f"http://{own_host}/mine.html", f"http://{host}/theirs.html"
            bad = cap(f"http://{own_host}/bad.html", outsider)
            bad.payload_digest = "nocolon"  # malformed: refused by validation, after the refused one
            ack = await sc.send(batch("b1", cap(mine, outsider), cap(theirs, outsider), bad))
            # The outsider's page of another agent's host is refused by placement, alone; the
            # malformed capture is refused as invalid, and both are named by their index in the batch.
            assert ack.stored == 1
            assert [(b, i) for b, i, _, _ in ack.not_placed] == [("b1", 1)]
            assert [(b, i) for b, i, _, _ in ack.rejected] == [("b1", 2)]
            reason = ack.not_placed[0][3]
            assert outsider in reason and host in reason and owner in reason
            assert await sc.lookup([theirs]) == {}, "the refused page is not in the index"
            with pytest.raises(errors.NotFound):
                await sc.get(theirs)
            # The host's owner and its last backup store the same URL.
            a1 = await sc.send(batch("b2", cap(theirs, owner, 1)))
            a2 = await sc.send(batch("b3", cap(theirs, backup, 2)))
            assert (a1.stored, a1.not_placed, a2.stored, a2.not_placed) == (1, [], 1, [])
            assert stored_by(ssrv, theirs) == sorted([owner, backup])
            assert stored_by(ssrv, mine) == [outsider]
            c = ssrv.servicer.stats
            assert (c.rejected_not_placed, c.rejected, c.stored) == (1, 1, 3)
            # One Resolve per batch with hosts to ask; the owner's and backup's hosts were cached.
            assert ssrv.placement.stats.placement_resolves == 1

    run(go())


def test_a_stale_route_cache_does_not_refuse_a_new_owner(tmp_path, run):
    async def go():
        async with cluster(tmp_path, 4) as (_, client, ssrv, sc):
            lists = await routes(client)
            host, placed = next((h, ags) for h, ags in lists.items() if len(ags) == 3)
            newcomer = sorted({f"agent-{i}" for i in range(4)} - set(placed))[0]
            old_owner = placed[0]
            url = f"http://{host}/page.html"
            assert (await sc.send(batch("b1", cap(url, old_owner)))).stored == 1  # storage caches the route
            resolves = ssrv.placement.stats.placement_resolves
            # The host moves to the newcomer (an override: a new epoch). Storage's cached route is
            # still within its TTL and has not seen the new epoch.
            await client.set_override(host, newcomer)
            assert (await routes(client, [host]))[host][:2] == [newcomer, old_owner]
            ack = await sc.send(batch("b2", cap(url, newcomer, 1)))
            assert (ack.stored, ack.not_placed) == (1, []), "a cached route must not refuse the new owner"
            assert ssrv.placement.stats.placement_resolves == resolves + 1  # asked once, then accepted
            # The old owner's late page (fetched just before the move) is accepted: it is a backup now.
            ack = await sc.send(batch("b3", cap(f"http://{host}/late.html", old_owner, 2)))
            assert (ack.stored, ack.not_placed) == (1, [])
            assert ssrv.placement.stats.placement_resolves == resolves + 1  # the fresh route placed it

    run(go())


def test_consultant_unreachable_stores_nothing_unchecked_and_loses_nothing(tmp_path, run):
    """Decided: UNAVAILABLE for what no cached route places (the agent keeps the batch in its
    spool), a cached route however old for what it places."""
    port = free_port()

    async def go():
        # TTL 0: storage's cached routes are expired at once, so every batch would ask.
        async with cluster(tmp_path, 4, consultant_port=port, ttl=0) as (box, client, ssrv, sc):
            lists = await routes(client)
            host, placed = next((h, ags) for h, ags in lists.items() if len(ags) == 3)
            outsider = sorted({f"agent-{i}" for i in range(4)} - set(placed))[0]
            owner = placed[0]
            new_host = next(h for h in HOSTS if owner in lists[h] and h != host)
            assert (await sc.send(batch("b0", cap(f"http://{host}/0.html", owner)))).stored == 1
            await box["consultant"].stop(0)

            # The owner's next page of a host storage has an (expired) route for: stored by that route.
            ack = await sc.send(batch("b1", cap(f"http://{host}/1.html", owner, 1)))
            assert (ack.stored, ack.not_placed) == (1, [])
            assert ssrv.placement.stats.placement_stale_routes >= 1
            # A page of a host storage never resolved, and the outsider's page of the cached host
            # (the route might be stale: it could be the new owner): UNAVAILABLE, nothing stored.
            unseen = f"http://{new_host}/2.html"
            for b in (batch("b2", cap(unseen, owner, 2)), batch("b3", cap(f"http://{host}/3.html", outsider, 3))):
                with pytest.raises(errors.Unavailable, match="consultant"):
                    await sc.send(b)
            assert await sc.lookup([unseen, f"http://{host}/3.html"]) == {}
            assert ssrv.placement.stats.placement_unavailable == 2

            # The agent's shipper keeps the batch spooled while storage says UNAVAILABLE ...
            spool = Spool(tmp_path / "spool", fsync=False)
            spool.put(batch("b2", cap(unseen, owner, 2)))
            shipper = StorageShipper(spool, GrpcStorageClient(ssrv.address), retry_seconds=1.0)
            assert await shipper.send(max_batches=10) == -1
            assert len(spool) == 1 and not spool.rejected_dir.exists()
            # ... and ships it once the consultant answers again (same port, same state).
            box["consultant"], _ = create_consultant(settings_for(tmp_path, strategy="hash", listen=f"127.0.0.1:{port}",
                                                                  ttl_seconds=0))
            await box["consultant"].start()
            await asyncio.wait_for(ssrv.consultant.channel.channel_ready(), 30)
            assert await shipper.send(max_batches=10) == 1
            assert len(spool) == 0 and stored_by(ssrv, unseen) == [owner]
            await shipper.close()

    run(go())


# -- the agent's shipper and a NOT_PLACED refusal --------------------------------------------------

class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_shipper_resends_a_not_placed_capture_until_it_is_placed_and_sets_it_aside_after_the_hold(tmp_path, run):
    """An agent the consultant does not list (declared dead during a pause: here deregistered)
    ships pages: refused as not placed, they stay in the spool under their seq (the replicas'
    "done" still waits for them), are not resent at once, and are stored once it registers
    again. Pages of a host it is never placed on are set aside after the hold, not resent forever."""
    async def go():
        async with cluster(tmp_path, 4) as (_, client, ssrv, sc):
            lists = await routes(client)
            late = "agent-3"
            host = next(h for h, ags in lists.items() if late in ags)
            never = next(h for h, ags in lists.items() if late not in ags and len(ags) == 3)
            a, b, c, d = (f"http://{host}/a.html", f"http://{host}/b.html", f"http://{never}/c.html", f"http://{never}/d.html")
            await client.deregister(late)  # the consultant no longer lists it anywhere
            spool = Spool(tmp_path / "spool", fsync=False)
            first = spool.put(batch("p1", cap(a, late), cap(b, late, 1), cap(d, late, 3)))
            seq = int(first.stem.split("-")[0])
            clock = Clock()
            shipper = StorageShipper(spool, GrpcStorageClient(ssrv.address), retry_seconds=1.0,
                                     not_placed_hold=60.0, clock=clock)
            assert await shipper.send(max_batches=10) == 1
            assert shipper.stats.storage_captures_not_placed == 3
            assert len(spool) == 1 and not spool.rejected_dir.exists(), "kept for a resend, not set aside"
            assert spool.shipped_through() < seq, "its pages do not count as shipped"
            assert await shipper.send(max_batches=10) == 0, "not resent at once"
            # A later batch is not held up by the waiting one.
            spool.put(batch("p2", cap(c, late, 2)))
            assert await shipper.send(max_batches=10) == 1
            assert shipper.stats.storage_captures_not_placed == 4 and len(spool) == 2

            await client.register(late, "127.0.0.13:7003")  # back: on its hosts' lists again
            clock.t += 1.0
            assert await shipper.send(max_batches=10) == 2
            # Its own host's pages are stored now (storage's cached route, refused before, was asked again) ...
            assert stored_by(ssrv, a) == [late] == stored_by(ssrv, b)
            # ... the other host's pages are still refused: in their files under their seqs (a restart sees them).
            assert shipper.stats.storage_captures_not_placed == 6 and shipper.stats.captures_stored == 2
            again = Spool(tmp_path / "spool", fsync=False)
            assert (len(again), again.pages, again.shipped_through()) == (2, 2, seq - 1)
            assert [[x.url for x in Spool.read(p).captures] for p in again.oldest(2)] == [[d], [c]]
            clock.t += 0.5  # they wait as long as they have been refused
            assert await shipper.send(max_batches=10) == 0
            rounds = 0
            while len(spool) and rounds < 20:
                clock.t += 15.0
                rounds += 1
                await shipper.send(max_batches=10)
            assert len(spool) == 0 and rounds < 20
            kept = sorted(p.name for p in spool.rejected_dir.iterdir())
            assert len(kept) == 2 and all("-not-placed-" in k for k in kept)
            assert sorted(x.url for k in kept for x in Spool.read(spool.rejected_dir / k).captures) == [c, d]
            assert stored_by(ssrv, c) == [] == stored_by(ssrv, d)
            assert shipper.stats.storage_captures_rejected == 2 and shipper.stats.captures_stored == 2
            assert await shipper.send(max_batches=10) == 0 and not shipper._refused_since
            await shipper.close()

    run(go())


# -- over mutual TLS: storage resolves with its service certificate ----------------------------------

def test_with_mutual_tls_storage_asks_the_consultant_as_a_service(tmp_path, run):
    d = tmp_path / "pki"
    pki.init(d)
    for role, name in [("service", "consultant"), ("service", "storage"), ("agent", "a1"), ("agent", "a2")]:
        pki.issue(d, role, name)

    def tls(role: str, name: str) -> TlsSettings:
        return TlsSettings(str(d / "ca.crt"), str(d / f"{role}-{name}.crt"), str(d / f"{role}-{name}.key"))

    async def go():
        t = tls("service", "consultant")
        csrv, _ = create_consultant(settings_for(tmp_path, strategy="hash", tls__ca=t.ca, tls__cert=t.cert, tls__key=t.key))
        await csrv.start()
        t = tls("service", "storage")
        ssrv, _ = create_storage(storage_settings(None, {
            "listen": "127.0.0.1:0", "data_dir": str(tmp_path / "storage"), "ingest.fsync": "os",
            "consultant": csrv.address, "tls.ca": t.ca, "tls.cert": t.cert, "tls.key": t.key}))
        await ssrv.start()
        try:
            async with ConsultantClient(csrv.address, tls=tls("agent", "a1")) as c:
                await c.register("a1", "127.0.0.1:7001")
            url = "http://only.example/x.html"
            for name, stored in (("a2", 0), ("a1", 1)):
                async with GrpcStorageClient(ssrv.address, tls=tls("agent", name)) as sc:
                    ack = await sc.send(batch(name, cap(url, name)))
                assert ack.stored == stored and len(ack.not_placed) == 1 - stored, (name, ack)
            assert stored_by(ssrv, url) == ["a1"]
        finally:
            await ssrv.stop(0)
            await csrv.stop(0)

    run(go())


# -- the check alone: batching and the cache ---------------------------------------------------------

def test_one_resolve_per_batch_for_every_host_to_ask_and_cached_routes_only_accept(run):
    asked: list[list[str]] = []
    table = {"a.example": ("x", "y"), "b.example": ("y", "z"), "c.example": ("z", "x")}
    epoch = [7]
    now = [0.0]

    async def resolve(hosts: list[str]) -> list[HostRoute]:
        asked.append(hosts)
        return [HostRoute(h, tuple((a, f"{a}:1") for a in table[h]), 300, epoch[0]) for h in hosts]

    check = PlacementCheck(resolve, RouteCache(100), lambda: now[0])
    caps = [cap(f"http://{h}/{i}.html", "x", i) for i in range(3) for h in table]
    refused = run(check.refused(caps))
    # b.example does not list x: its three captures are refused, naming the host and the agent.
    assert sorted(refused) == [1, 4, 7] and asked == [["a.example", "b.example", "c.example"]]
    assert all("b.example" in r and "'x'" in r for r in refused.values())
    asked.clear()
    # Cached routes accept without a call; one that does not place x is asked again (it might
    # be stale), once for the batch.
    assert sorted(run(check.refused(caps))) == [1, 4, 7] and asked == [["b.example"]]
    asked.clear()
    table["b.example"] = ("x", "y")
    epoch[0] = 8  # b moved to x: the next answer brings a newer epoch ...
    assert run(check.refused(caps)) == {} and asked == [["b.example"]]
    asked.clear()
    # ... which makes the routes of the older epoch stale: asked again, in one call.
    assert run(check.refused(caps)) == {} and asked == [["a.example", "c.example"]]
    asked.clear()
    now[0] = 301.0  # TTLs ran out: every host asked again, in one call
    run(check.refused(caps))
    assert asked == [["a.example", "b.example", "c.example"]]


def test_a_contested_answer_accepts_the_agents_it_lists_and_refuses_nobody(run):
    """Issue 36: where the overlay's disjoint lookups disagree (HostRoute.contested), an agent
    the merged answer lists is placed (it answered as itself, no path found closer ones); one it
    leaves out is not known to be unplaced: the call is held (UNAVAILABLE, the agent resends),
    counted, never a NOT_PLACED refusal; once the paths agree again it is refused as usual."""
    contested = ["1 of 3 disjoint lookup paths found other closest nodes"]

    async def resolve(hosts: list[str]) -> list[HostRoute]:
        return [HostRoute(h, (("x", "x:1"), ("y", "y:1")), 300, 7, contested=contested[0]) for h in hosts]

    check = PlacementCheck(resolve, RouteCache(100), lambda: 0.0)
    assert run(check.refused([cap("http://a.example/1.html", "x"), cap("http://a.example/2.html", "y")])) == {}
    with pytest.raises(errors.Unavailable, match="disjoint lookup paths"):
        run(check.refused([cap("http://a.example/3.html", "x"), cap("http://a.example/4.html", "z")]))
    assert check.stats.placement_contested == 1
    contested[0] = ""
    assert list(run(check.refused([cap("http://a.example/4.html", "z")]))) == [0]


def test_without_a_consultant_storage_asks_the_agents_overlay(tmp_path, run):
    """Kademlia mode: storage's `peers` are agents of the overlay; a capture is stored only from
    its host's XOR owner or backups (the preference list computed here, independently, from the
    agents' ids), and refused from any other agent."""
    from lab.testing import ServerThread
    from wancrawl.kademlia import xorspace

    from agent_helpers import kademlia_cluster, lab_web, overlay_formed

    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            async with kademlia_cluster(tmp_path, lab, 4) as (servers, _):
                await overlay_formed(servers)
                ids = {s.node.id: xorspace.insecure_node_id(s.node.id) for s in servers}
                ss = storage_settings(None, {"listen": "127.0.0.1:0", "data_dir": str(tmp_path / "storage"),
                                             "ingest.fsync": "os", "peers": [servers[1].address, servers[0].address]})
                ssrv, _ = create_storage(ss)
                await ssrv.start()
                sc = GrpcStorageClient(ssrv.address)
                try:
                    host = HOSTS[0]
                    key = xorspace.host_key(host)
                    ranked = sorted(ids, key=lambda a: ids[a] ^ key)
                    placed, outsider = ranked[:3], ranked[3]
                    url = f"http://{host}/p.html"
                    out = await sc.send(batch("k1", cap(url, outsider)))
                    assert out.stored == 0 and [(b, i) for b, i, _, _ in out.not_placed] == [("k1", 0)]
                    for n, a in enumerate(placed):
                        ack = await sc.send(batch(f"k{n + 2}", cap(url, a, n + 1)))
                        assert (ack.stored, ack.not_placed) == (1, []), a
                    assert stored_by(ssrv, url) == sorted(placed)
                finally:
                    await sc.close()
                    await ssrv.stop(0)

        run(go())


# -- what storage loads of the agent -----------------------------------------------------------------

HTTP_CLIENTS = ("aiohttp", "httpx", "httptools")  # the agent's fetch backends' libraries (agent/fetch/)


def loaded_by(module: str) -> tuple[list[str], list[str]]:
    """The agent's modules and the HTTP client libraries that `import module` loads, in a fresh
    interpreter (this one has the whole agent loaded already)."""
    code = (f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'agent')); "
            f"print([m for m in {HTTP_CLIENTS!r} if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    agent, http = (ast.literal_eval(line) for line in p.stdout.splitlines())
    return agent, http


@pytest.mark.parametrize("module,faces", [
    ("storage.server", ["agent", "agent.client", "agent.peers"]),  # its placement check without a consultant
    ("agent.peers", ["agent", "agent.client", "agent.peers"]),
    ("agent.client", ["agent", "agent.client"]),
])
def test_storage_loads_only_the_agents_client_side_faces(module, faces):
    """Storage asks the overlay through agent/peers.py on agent/client.py and nothing else of the
    agent's: not its settings, whose defaults drag in every fetch backend, nor any room."""
    assert loaded_by(module) == (faces, [])


def test_the_agents_settings_load_the_fetch_backends_storage_does_without():
    """The probe above can fail: the agent's settings load the fetchers and their libraries."""
    agent, http = loaded_by("agent.settings")
    assert "agent.fetch" in agent and sorted(http) == sorted(HTTP_CLIENTS)
