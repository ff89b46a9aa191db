"""The one client of the Agent service: peers, the manager and the CLI call agents through it.

Errors are translated at this boundary (wancrawl.grpcutil.translate): callers see
Unavailable (retry), InvalidArgument, NotFound... never a raw grpc error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import grpc

from wancrawl import grpcutil
from wancrawl.v1 import agent_pb2, agent_pb2_grpc


ReplicateBatch = agent_pb2.ReplicateBatch | bytes
"""A Replicate stream message as replicate() takes it: the message, or its serialized bytes."""


@dataclass(frozen=True)
class PushResult:
    accepted: int
    not_mine: list[int]   # indices of URLs whose host the receiver does not own
    epoch: int            # the receiver's epoch
    errors: list[str]     # "index: reason" for malformed URLs


class AgentClient:
    """One agent, over one channel."""

    def __init__(self, address: str, timeout: float = 30.0, *, tls: grpcutil.TlsSettings | None = None,
                 server_name: str = ""):
        self.address = address
        self.timeout = timeout
        # server_name: the name the agent's certificate must carry (its Kademlia id's, when the
        # caller dials a node by id); default: the address's host.
        self._channel = grpcutil.channel(address, tls, server_name=server_name)
        self._stub = agent_pb2_grpc.AgentStub(self._channel)
        # Replicate takes batches as messages or as their bytes (the replicator serializes each
        # host message once per round, whatever the number of backups it goes to).
        self._replicate = self._channel.stream_unary("/wancrawl.v1.Agent/Replicate",
                                                     request_serializer=grpcutil.message_or_bytes,
                                                     response_deserializer=agent_pb2.ReplicateResponse.FromString)

    def _error(self, exc: grpc.aio.AioRpcError, what: str) -> Exception:
        return grpcutil.translate(exc, f"agent {self.address}: {what}")

    async def push(self, sender_id: str, epoch: int, urls: Iterable[agent_pb2.UrlItem], *, route: bool = False,
                   timeout: float | None = None) -> PushResult:
        """PushUrls. route=True: the receiver routes every URL itself (the manager's seeds)."""
        req = agent_pb2.PushUrlsRequest(sender_id=sender_id, epoch=epoch, urls=urls, route=route)
        try:
            r = await self._stub.PushUrls(req, timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "PushUrls") from None
        return PushResult(r.accepted, list(r.not_mine), r.epoch, list(r.errors))

    async def status(self, timeout: float | None = None) -> agent_pb2.StatusResponse:
        try:
            return await self._stub.Status(agent_pb2.StatusRequest(), timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "Status") from None

    async def drain(self, timeout: float = 120.0) -> tuple[int, int]:
        """Graceful leave of that agent: (URLs handed over, URLs still owed)."""
        try:
            r = await self._stub.Drain(agent_pb2.DrainRequest(timeout_seconds=timeout), timeout=timeout + 30)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "Drain") from None
        return r.handed_over, r.remaining

    async def hand_over(self, parts: AsyncIterator[agent_pb2.HandOverRequest] | Iterable[agent_pb2.HandOverRequest],
                        timeout: float | None = None) -> agent_pb2.HandOverResponse:
        """Stream host states; the answer means all of them are durable at the receiver."""
        try:
            return await self._stub.HandOver(parts, timeout=timeout or self.timeout * 4)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "HandOver") from None

    async def replicate(self, parts: AsyncIterator[ReplicateBatch] | Iterable[ReplicateBatch],
                        timeout: float | None = None) -> agent_pb2.ReplicateResponse:
        """Stream replica changes to a backup (ReplicateBatch messages or their serialized
        bytes); the answer means they are durable there."""
        try:
            return await self._replicate(parts, timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "Replicate") from None

    async def claim(self, claimer_id: str, claimer_address: str, epoch: int, hosts: list[str],
                    timeout: float | None = None) -> agent_pb2.ClaimResponse:
        """Ask this agent to hand over what it holds of hosts the claimer now owns."""
        req = agent_pb2.ClaimRequest(claimer_id=claimer_id, claimer_address=claimer_address, epoch=epoch, hosts=hosts)
        try:
            return await self._stub.Claim(req, timeout=timeout or self.timeout * 4)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "Claim") from None

    # -- the Kademlia overlay (docs/kademlia.md) ----------------------------------------------------
    async def ping(self, sender: agent_pb2.Contact, epoch: int, timeout: float | None = None,
                   request: agent_pb2.PingRequest | None = None) -> agent_pb2.PingResponse:
        """`request`: a whole PingRequest (with the sender's load and delegations) instead of sender and epoch."""
        try:
            req = request or agent_pb2.PingRequest(sender=sender, epoch=epoch)
            return await self._stub.Ping(req, timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "Ping") from None

    async def find_node(self, sender: agent_pb2.Contact | None, targets: list[bytes], count: int, epoch: int,
                        timeout: float | None = None) -> agent_pb2.FindNodeResponse:
        req = agent_pb2.FindNodeRequest(sender=sender, targets=targets, count=count, epoch=epoch)
        try:
            return await self._stub.FindNode(req, timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "FindNode") from None

    async def leave(self, sender: agent_pb2.Contact, timeout: float | None = None) -> None:
        try:
            await self._stub.Leave(agent_pb2.LeaveRequest(sender=sender), timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "Leave") from None

    async def members(self, timeout: float | None = None) -> agent_pb2.MembersResponse:
        """The live members the agent's overlay knows, itself first (consultant-less mode)."""
        try:
            return await self._stub.Members(agent_pb2.MembersRequest(), timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, "Members") from None

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AgentPool:
    """One AgentClient per address, reused across calls."""

    def __init__(self, timeout: float = 30.0, *, tls: grpcutil.TlsSettings | None = None):
        self.timeout = timeout
        self.tls = tls
        self._clients: dict[tuple[str, str], AgentClient] = {}

    def get(self, address: str, server_name: str = "") -> AgentClient:
        """The client of the agent at address; server_name: the name its certificate must carry."""
        c = self._clients.get((address, server_name))
        if c is None:
            c = self._clients[(address, server_name)] = AgentClient(address, self.timeout, tls=self.tls,
                                                                    server_name=server_name)
        return c

    async def drop(self, address: str, server_name: str = "") -> None:
        """Close one client (a node found dead or lying: its channel is not kept)."""
        c = self._clients.pop((address, server_name), None)
        if c is not None:
            await c.close()

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()

    async def __aenter__(self) -> AgentPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
