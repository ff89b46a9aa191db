"""The overlay's messages over the agents' gRPC service (agent/client.py): Ping, FindNode and
Leave. A node is dialed by its id: with TLS the channel asks for the certificate name its id
gives (wancrawl/kademlia/xorspace.py id_san), so an address that answers with another key fails the call."""

from __future__ import annotations

from agent import validate
from agent.client import AgentPool
from agent.peers import responder_is
from agent.placement.kademlia.delegation import Announce
from agent.placement.kademlia.overlay import announce_from_proto, announce_to_proto, from_proto, to_proto
from wancrawl import errors
from wancrawl.kademlia import xorspace
from wancrawl.kademlia.table import Contact
from wancrawl.v1 import agent_pb2


class GrpcTransport:
    """Implements overlay.Transport. Owns its client pool."""

    def __init__(self, pool: AgentPool, *, secure: bool, timeout: float):
        self.pool = pool
        self.secure = secure
        self.timeout = timeout

    def _client(self, c: Contact):
        return self.pool.get(c.address, xorspace.id_san(c.node_id) if self.secure else "")

    async def ping(self, to: Contact, me: Contact, epoch: int, said: Announce) -> tuple[Contact, int, Announce]:
        r = await self._client(to).ping(to_proto(me), epoch, timeout=self.timeout, request=_request(me, epoch, said))
        return _contact(r.responder), r.epoch, _announce(r)

    async def bootstrap_ping(self, address: str, me: Contact, epoch: int, said: Announce) -> tuple[Contact, int, Announce]:
        """A bootstrap peer is known by address only: the answer names its contact, which the
        overlay then verifies by id before it enters the table."""
        r = await self.pool.get(address).ping(to_proto(me), epoch, timeout=self.timeout, request=_request(me, epoch, said))
        return _contact(r.responder), r.epoch, _announce(r)

    async def find_node(self, to: Contact, me: Contact, targets: list[int], count: int,
                        epoch: int) -> tuple[list[list[Contact]], int]:
        r = await self._client(to).find_node(to_proto(me), [xorspace.id_bytes(t) for t in targets], count, epoch,
                                             timeout=self.timeout * 2)
        if len(r.closest) != len(targets):
            raise errors.Unavailable(f"FindNode from {to.agent_id}: {len(r.closest)} answers to {len(targets)} targets")
        responder_is(to, r.responder)  # answered as itself (the only check without TLS): else a failed call
        return [[_contact(c) for c in cl.contacts] for cl in r.closest], r.epoch

    async def leave(self, to: Contact, me: Contact) -> None:
        await self._client(to).leave(to_proto(me), timeout=self.timeout)

    async def close(self) -> None:
        await self.pool.close()


def _contact(c) -> Contact:
    try:
        return from_proto(c)
    except ValueError as exc:
        raise errors.Unavailable(f"a malformed contact in an answer: {exc}") from None


def _request(me: Contact, epoch: int, said: Announce) -> agent_pb2.PingRequest:
    req = agent_pb2.PingRequest(sender=to_proto(me), epoch=epoch)
    announce_to_proto(said, req)
    return req


def _announce(r: agent_pb2.PingResponse) -> Announce:
    """A peer's answer is checked as a request would be: a bad load or delegation fails the call."""
    try:
        validate.ping_announce(r)
        return announce_from_proto(r)
    except (errors.InvalidArgument, ValueError) as exc:
        raise errors.Unavailable(f"a malformed Ping answer: {exc}") from None
