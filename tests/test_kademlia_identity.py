"""Node ids bound to certificates (S/Kademlia): an agent cannot take an id its certificate does not
give it. The id is the SHA-1 of the certificate's public key (wancrawl/kademlia/xorspace.py); a caller's
contact is checked against its certificate, and a contact is dialed with TLS asking for its id's
name, so an address cannot answer for an id that is not its own."""

from __future__ import annotations

import asyncio

import pytest

from agent.client import AgentClient
from agent.placement.kademlia.overlay import to_proto
from agent.server import create_server
from wancrawl import errors, pki
from wancrawl.grpcutil import TlsSettings
from wancrawl.kademlia import xorspace
from wancrawl.kademlia.table import Contact

from agent_helpers import agent_config


def _tls(d, name: str) -> TlsSettings:
    return TlsSettings(str(d / "ca.crt"), str(d / f"agent-{name}.crt"), str(d / f"agent-{name}.key"))


def _id(d, name: str) -> int:
    return xorspace.node_id_of_cert((d / f"agent-{name}.crt").read_bytes())


@pytest.fixture
def pki_dir(tmp_path):
    d = tmp_path / "pki"
    pki.init(d)
    for name in ("a1", "a2", "liar"):
        pki.issue(d, "agent", name)
    return d


def test_an_agent_cannot_take_an_id_its_certificate_does_not_give_it(run, tmp_path, pki_dir):
    d = pki_dir
    hosts = tmp_path / "hosts"
    hosts.write_text("")

    async def go():
        servers = []
        for name in ("a1", "a2"):
            t = _tls(d, name)
            keys = {"mode": "kademlia", "kademlia.bootstrap": [servers[0].address] if servers else [],
                    "tls.ca": t.ca, "tls.cert": t.cert, "tls.key": t.key, "tls.insecure": False}
            s = agent_config(tmp_path, name, "", hosts, "127.0.0.1", **keys)
            srv, _ = create_server(s)
            await srv.start()
            servers.append(srv)
        a1, a2 = servers
        try:
            # The honest ones: each knows the other by the id its certificate gives.
            for _ in range(500):
                if len(a1.node.overlay.table) == 1 and len(a2.node.overlay.table) == 1:
                    break
                await asyncio.sleep(0.01)
            assert a1.node.overlay.me.node_id == _id(d, "a1")
            assert [c.node_id for c in a1.node.overlay.table.contacts()] == [_id(d, "a2")]

            # 1. The liar calls as itself but claims an id next to a victim key: refused.
            victim = xorspace.host_key("www.victim.example")
            liar_tls = _tls(d, "liar")
            async with AgentClient(a1.address, tls=liar_tls) as c:
                forged = Contact(victim ^ 1, "liar", "127.0.0.1:1")
                # (PERMISSION_DENIED reaches callers as Unavailable: wancrawl/grpcutil.py translate)
                with pytest.raises(errors.Unavailable, match="PERMISSION_DENIED.*certificate gives"):
                    await c.ping(to_proto(forged), 1)
                # Its true id is accepted (the check is the binding, not the caller).
                await c.ping(to_proto(Contact(_id(d, "liar"), "liar", "127.0.0.1:1")), 1)

            # 2. A forged contact for a real address (a2's) with an id that is not a2's: dialing it
            # by that id fails TLS, so it never enters a routing table.
            fake = Contact(victim ^ 1, "a2", a2.address)
            assert await a1.node.overlay.verify(fake) is False
            assert fake.node_id not in a1.node.overlay.table
            # ... and a1's answer for the victim's host names only the certificate-bound ids.
            routes = await a1.node.placement.resolve(["www.victim.example"])
            assert {a for a, _ in routes[0].agents} == {"a1", "a2"}
            # The liar at its own address never answered a ping back (127.0.0.1:1): not admitted.
            assert _id(d, "liar") not in a1.node.overlay.table
        finally:
            for s in servers:
                await s.stop(0)

    run(go())
