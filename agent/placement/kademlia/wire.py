"""The overlay's messages over the agents' gRPC service (agent/client.py): Ping, FindNode and
Leave. A node is dialed by its id: with TLS the channel asks for the certificate name its id
gives (wancrawl/xorspace.py id_san), so an address that answers with another key fails the call."""

from __future__ import annotations

from agent.client import AgentPool
from agent.placement.kademlia.overlay import from_proto, to_proto
from agent.placement.kademlia.table import Contact
from wancrawl import errors, xorspace


class GrpcTransport:
    """Implements overlay.Transport. Owns its client pool."""

    def __init__(self, pool: AgentPool, *, secure: bool, timeout: float):
        self.pool = pool
        self.secure = secure
        self.timeout = timeout

    def _client(self, c: Contact):
        return self.pool.get(c.address, xorspace.id_san(c.node_id) if self.secure else "")

    async def ping(self, to: Contact, me: Contact, epoch: int) -> tuple[Contact, int]:
        r = await self._client(to).ping(to_proto(me), epoch, timeout=self.timeout)
        return _contact(r.responder), r.epoch

    async def bootstrap_ping(self, address: str, me: Contact, epoch: int) -> tuple[Contact, int]:
        """A bootstrap peer is known by address only: the answer names its contact, which the
        overlay then verifies by id before it enters the table."""
        r = await self.pool.get(address).ping(to_proto(me), epoch, timeout=self.timeout)
        return _contact(r.responder), r.epoch

    async def find_node(self, to: Contact, me: Contact, targets: list[int], count: int,
                        epoch: int) -> tuple[list[list[Contact]], int]:
        r = await self._client(to).find_node(to_proto(me), [xorspace.id_bytes(t) for t in targets], count, epoch,
                                             timeout=self.timeout * 2)
        if len(r.closest) != len(targets):
            raise errors.Unavailable(f"FindNode from {to.agent_id}: {len(r.closest)} answers to {len(targets)} targets")
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
