"""A small async client of the Consultant service; agents, the manager and the CLI use it."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from wancrawl import errors, failover, grpcutil
# The answers' types live at the bottom floor, shared with storage and the overlay's query client.
from wancrawl.placement import HostRoute, LiveAgents, Registration
from wancrawl.v1 import consultant_pb2 as pb, consultant_pb2_grpc as pb_grpc


class ConsultantClient:
    """The consultant over gRPC: what agents need of it (it implements agent.placement.Placement)
    plus the operator calls.

    `target` is one address or several replicas over one state ('a:1,b:2' or a list), best
    first. A call goes to one replica and, when it does not answer (UNAVAILABLE, or no answer
    within `attempt_timeout`), to the next within the call's `timeout`; wancrawl/failover.py
    decides the order and when to go back to a better-ranked one. With several replicas the
    first attempt gets at most timeout / replicas by default, so a heartbeat that meets a hung
    replica still reaches the next well inside the lease (15 s; heartbeats every 5 s)."""

    def __init__(self, target: str | Sequence[str], timeout: float = 10.0, *, tls: grpcutil.TlsSettings | None = None,
                 attempt_timeout: float = 0.0, retry_after: float = 5.0):
        addresses = failover.parse_addresses(target, where="consultant")
        if not addresses:
            raise errors.ConfigError("consultant: no address given")
        self.target = ",".join(addresses)
        self.timeout = timeout
        self.replicas = failover.FailoverChannels(
            addresses, lambda a: grpcutil.channel(a, tls, options=failover.RECONNECT_OPTIONS),
            attempt_timeout=attempt_timeout or timeout / len(addresses), retry_after=retry_after)
        self._stubs: dict[grpc.aio.Channel, pb_grpc.ConsultantStub] = {}

    @property
    def channel(self) -> grpc.aio.Channel:
        """The channel of the replica the next call goes to first."""
        r = self.replicas
        return r.channel(r.ranking.order(r.clock())[0])

    async def close(self) -> None:
        await self.replicas.close()

    def metrics(self) -> dict[str, float]:
        """For the agent's Status and Prometheus (agent/metrics.py): calls that moved to another
        replica, calls no replica answered, and which replica answered last (0 = the first listed)."""
        c = self.replicas.stats
        return {"consultant_failovers": c.failovers, "consultant_unanswered": c.all_failed,
                "consultant_replica": float(self.replicas.current)}

    async def __aenter__(self) -> "ConsultantClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, method: str, request):
        async def invoke(ch: grpc.aio.Channel, timeout: float):
            stub = self._stubs.get(ch)
            if stub is None:
                stub = self._stubs[ch] = pb_grpc.ConsultantStub(ch)
            return await getattr(stub, method)(request, timeout=timeout)

        try:
            return await self.replicas.call(invoke, self.timeout)
        except grpc.aio.AioRpcError as exc:
            several = len(self.replicas.addresses) > 1 and exc.code() in failover.FAILOVER_CODES
            raise grpcutil.translate(exc, f"consultant (no replica of {self.target} answered; the last)" if several
                                     else "consultant") from None

    async def register(self, agent_id, address, *, location=None, source_ip="", capacity=0.0) -> Registration:
        r = await self._call("Register", pb.RegisterRequest(
            agent_id=agent_id, address=address, location=location, source_ip=source_ip, capacity=capacity))
        return Registration(r.epoch, r.lease_seconds, r.location, r.strategy)

    async def heartbeat(self, agent_id, load) -> int:
        return (await self._call("Heartbeat", pb.HeartbeatRequest(agent_id=agent_id, load=load))).epoch

    async def deregister(self, agent_id) -> int:
        return (await self._call("Deregister", pb.DeregisterRequest(agent_id=agent_id))).epoch

    async def resolve_raw(self, hosts: list[str]) -> pb.ResolveResponse:
        return await self._call("Resolve", pb.ResolveRequest(hosts=hosts))

    async def resolve(self, hosts: list[str]) -> list[HostRoute]:
        r = await self.resolve_raw(hosts)
        table = [(a.agent_id, a.address) for a in r.agents]
        return [
            HostRoute(a.host, tuple(table[i] for i in a.agents), a.ttl_seconds, r.epoch, a.error)
            for a in r.answers
        ]

    async def explain(self, host: str) -> pb.ExplainResponse:
        return await self._call("Explain", pb.ExplainRequest(host=host))

    async def list_agents(self, include_dead: bool = False) -> pb.ListAgentsResponse:
        return await self._call("ListAgents", pb.ListAgentsRequest(include_dead=include_dead))

    async def live_agents(self) -> LiveAgents:
        """The agents alive at the consultant's current epoch (their lease holds)."""
        r = await self._call("LiveAgents", pb.LiveAgentsRequest())
        return LiveAgents(r.epoch, {a.agent_id: a.address for a in r.agents})

    async def set_override(self, host: str, agent_id: str) -> int:
        return (await self._call("SetOverride", pb.SetOverrideRequest(host=host, agent_id=agent_id))).epoch

    async def clear_override(self, host: str) -> int:
        return (await self._call("ClearOverride", pb.ClearOverrideRequest(host=host))).epoch
