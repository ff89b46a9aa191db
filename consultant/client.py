"""A small async client of the Consultant service; agents, the manager and the CLI use it."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from wancrawl import grpcutil
from wancrawl.v1 import common_pb2, consultant_pb2 as pb, consultant_pb2_grpc as pb_grpc

@dataclass(frozen=True)
class HostRoute:
    """One host's answer: agents owner first, as (agent_id, address) pairs."""

    host: str
    agents: tuple[tuple[str, str], ...]
    ttl: int
    epoch: int
    error: str = ""

    @property
    def owner(self) -> tuple[str, str] | None:
        return self.agents[0] if self.agents else None


@dataclass
class Registration:
    epoch: int
    lease_seconds: float
    location: common_pb2.Location = field(default_factory=common_pb2.Location)
    strategy: str = ""


class ConsultantClient:
    """The consultant over gRPC: what agents need of it (it implements agent.placement.Placement)
    plus the operator calls."""

    def __init__(self, target: str, timeout: float = 10.0, *, tls: grpcutil.TlsSettings | None = None):
        self.target = target
        self.timeout = timeout
        self.channel = grpcutil.channel(target, tls)
        self.stub = pb_grpc.ConsultantStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> "ConsultantClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, method, request):
        try:
            return await method(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, "consultant") from None

    async def register(self, agent_id, address, *, location=None, source_ip="", capacity=0.0) -> Registration:
        r = await self._call(self.stub.Register, pb.RegisterRequest(
            agent_id=agent_id, address=address, location=location, source_ip=source_ip, capacity=capacity))
        return Registration(r.epoch, r.lease_seconds, r.location, r.strategy)

    async def heartbeat(self, agent_id, load) -> int:
        return (await self._call(self.stub.Heartbeat, pb.HeartbeatRequest(agent_id=agent_id, load=load))).epoch

    async def deregister(self, agent_id) -> int:
        return (await self._call(self.stub.Deregister, pb.DeregisterRequest(agent_id=agent_id))).epoch

    async def resolve_raw(self, hosts: list[str]) -> pb.ResolveResponse:
        return await self._call(self.stub.Resolve, pb.ResolveRequest(hosts=hosts))

    async def resolve(self, hosts: list[str]) -> list[HostRoute]:
        r = await self.resolve_raw(hosts)
        table = [(a.agent_id, a.address) for a in r.agents]
        return [
            HostRoute(a.host, tuple(table[i] for i in a.agents), a.ttl_seconds, r.epoch, a.error)
            for a in r.answers
        ]

    async def explain(self, host: str) -> pb.ExplainResponse:
        return await self._call(self.stub.Explain, pb.ExplainRequest(host=host))

    async def list_agents(self, include_dead: bool = False) -> pb.ListAgentsResponse:
        return await self._call(self.stub.ListAgents, pb.ListAgentsRequest(include_dead=include_dead))

    async def set_override(self, host: str, agent_id: str) -> int:
        return (await self._call(self.stub.SetOverride, pb.SetOverrideRequest(host=host, agent_id=agent_id))).epoch

    async def clear_override(self, host: str) -> int:
        return (await self._call(self.stub.ClearOverride, pb.ClearOverrideRequest(host=host))).epoch
