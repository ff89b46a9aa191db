"""No component trusts one peer's view of the overlay (issue 36 item 1).

A Kademlia cluster in-process with one lying agent, the first address of storage's and the
manager's peers list: its FindNode answers itself alone (or ten made-up contacts next to each
target), and its Members lists itself alone. Before, storage's placement check started its one
lookup there, kept "only nodes that answered", took the liar for the only node, and refused every
other agent's pages as NOT_PLACED. Now: every honest agent's page of a host it owns or backs up is
stored, an outsider's is still refused, and the manager's lists are the XOR truth computed here
from the agents' ids (the independent reference)."""

from __future__ import annotations

import pytest
from agent_helpers import kademlia_cluster, lab_web, overlay_formed

from agent.placement.kademlia.overlay import Overlay
from lab.liar import lie
from lab.testing import ServerThread
from manager.peers import PeerDirectory
from storage.client import GrpcStorageClient, make_batch
from storage.config import load as storage_settings
from storage.server import create_server as create_storage
from storage.testing import fetch_result
from wancrawl.kademlia import xorspace
from wancrawl.v1 import storage_pb2
from wancrawl.warcrecords import build_capture

HOSTS = [f"www.site{i}.example" for i in range(40)]


def capture(url: str, agent_id: str) -> storage_pb2.Capture:
    body = f"<html><body>{url} fetched by {agent_id}</body></html>".encode() * 20
    return make_batch([build_capture(fetch_result(url, body, agent_id=agent_id))]).captures[0]


def xor_list(ids: dict[str, int], host: str, n: int = 3) -> list[str]:
    key = xorspace.host_key(host)
    return sorted(ids, key=lambda a: ids[a] ^ key)[:n]


@pytest.mark.parametrize("how", ["self", "fabricate"])
def test_a_lying_agent_first_in_the_peers_list_decides_no_placement(tmp_path, run, how):
    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            async with kademlia_cluster(tmp_path, lab, 4) as (servers, _):
                await overlay_formed(servers)
                liar = servers[0]
                assert isinstance(liar.node.overlay, Overlay)
                lie(liar.node.overlay, how)
                ids = {s.node.id: xorspace.insecure_node_id(s.node.id) for s in servers}
                peers = [s.address for s in servers]  # the liar first
                async with PeerDirectory(peers) as d:
                    routes = await d.resolve(HOSTS)
                ss = storage_settings(None, {"listen": "127.0.0.1:0", "data_dir": str(tmp_path / "storage"),
                                             "ingest.fsync": "os", "peers": peers})
                ssrv, _ = create_storage(ss)
                await ssrv.start()
                sc = GrpcStorageClient(ssrv.address)
                acks = {}
                try:
                    for a in ids:  # each agent sends a page of every host, one batch
                        caps = [capture(f"http://{h}/p.html", a) for h in HOSTS]
                        acks[a] = await sc.send(storage_pb2.PageBatch(batch_id=a, captures=caps))
                finally:
                    await sc.close()
                    await ssrv.stop(0)
                return ids, routes, acks

        ids, routes, acks = run(go())
    refused = {(HOSTS[i], a) for a, ack in acks.items() for _b, i, _r, _why in ack.not_placed}
    placed = {(h, a) for h in HOSTS for a in xor_list(ids, h)}
    assert refused == {(h, a) for h in HOSTS for a in ids} - placed, \
        "every page of an agent placed on its host is stored (the liar's included), every other refused"
    assert sum(ack.stored for ack in acks.values()) == len(placed)
    for r in routes:  # the manager's lists: the XOR truth, agreed by every path
        assert list(r.agent_ids) == xor_list(ids, r.host) and not r.contested, r.host


def test_an_agents_own_lookup_admits_no_made_up_contact(tmp_path, run):
    """The agents' own lookups (a partial table's, forced here: the lab's tables are complete)
    run over disjoint paths and admit a node only when it answered as itself: the liar's ten
    made-up contacts per target, which claim its address, fail (its server answers as the liar)
    and enter neither the lookup's result nor the routing table. Before, without TLS, they did
    both (the channel is dialed by id only with TLS; the answer's responder was not read)."""
    web = lab_web(pages_max=5)
    with ServerThread(web, zero_latency=True) as lab:
        async def go():
            async with kademlia_cluster(tmp_path, lab, 4) as (servers, _):
                await overlay_formed(servers)
                lie(servers[0].node.overlay, "fabricate")
                honest = servers[1].node.overlay
                keys = [xorspace.host_key(h) for h in HOSTS[:10]]
                found = await honest.lookup(keys, force=True)
                real = {s.node.id for s in servers}
                return real, found, {c.agent_id for c in honest.table.contacts()}

        real, found, table = run(go())
    assert all({c.agent_id for c in cs} <= real for cs in found.values()), found
    assert all(len(cs) == len(real) - 1 for cs in found.values()), "every other agent found"
    assert table <= real, "no made-up contact in the routing table"
