"""The consultant's gRPC shell: proto <-> service translation, create_server() and serve()."""

from __future__ import annotations

import json
import logging
from typing import Any

from google.protobuf import json_format

from consultant import validate
from consultant.capacity.book import resources_of
from consultant.metrics import SCHEMA as METRICS
from consultant.membership import ALIVE, DEAD, LEFT, AgentRecord
from consultant.service import ConsultantService
from consultant.settings import ConsultantSettings, load_settings
from consultant.whereabouts import Evidence, connection_ip
from wancrawl import grpcutil
from wancrawl.runtime import eventloop
from wancrawl.auth import Rules, peer_source_ips
from wancrawl.metrics import serve_metrics
from wancrawl.errors import ConfigError
from wancrawl.v1 import common_pb2, consultant_pb2 as pb, consultant_pb2_grpc as pb_grpc

log = logging.getLogger("consultant")

SERVICE_NAME = "wancrawl.v1.Consultant"
# Who may call what (docs/security.md): role -> the request field that must be the caller's
# own name ("" = no such field). Agents act only as themselves; operators list and override.
AUTH_RULES = Rules(SERVICE_NAME, {
    "Register": {"agent": "agent_id"},
    "Heartbeat": {"agent": "agent_id"},
    "Deregister": {"agent": "agent_id", "operator": ""},
    # Storage (a service) resolves the hosts of the pages agents ingest: only owners and backups
    # may store a host's pages (storage/placement.py).
    "Resolve": {"agent": "", "operator": "", "service": ""},
    "Explain": {"operator": ""},
    "ListAgents": {"operator": ""},
    # Who is alive now (agents: is a replica's owner that left a host's list dead, or did the
    # host only move? agent/ownership/settle.py). Cheap, unlike ListAgents (no store read, no refit).
    "LiveAgents": {"agent": "", "operator": "", "service": ""},
    "SetOverride": {"operator": ""},
    "ClearOverride": {"operator": ""},
})
_STATE = {ALIVE: pb.AGENT_STATE_ALIVE, DEAD: pb.AGENT_STATE_DEAD, LEFT: pb.AGENT_STATE_LEFT}


def location_of(rec: AgentRecord, isp: str) -> common_pb2.Location:
    return common_pb2.Location(
        city=rec.city, country=rec.country, lat=rec.lat or 0.0, lon=rec.lon or 0.0,
        has_coordinates=rec.lat is not None, asn=rec.asn, isp=isp,
    )


def evidence_of(context: Any, verified: bool) -> Evidence:
    """What the server itself knows of a caller: under mutual TLS, the source address its
    certificate binds and the connection's remote address; in plaintext nothing is verified."""
    if not verified:
        return Evidence()
    return Evidence(True, frozenset(peer_source_ips(context)), connection_ip(str(context.peer() or "")))


class ConsultantServicer(pb_grpc.ConsultantServicer):
    def __init__(self, service: ConsultantService, verified: bool = False):
        self.service = service
        self.verified = verified  # mutual TLS: callers' certificates are checked (Register's evidence)
        self._refs_epoch = -1
        self._refs: list[common_pb2.AgentRef] = []

    def _agent_refs(self, directory) -> list[common_pb2.AgentRef]:
        # Built once per epoch: the agents table every Resolve reply carries.
        if directory.epoch != self._refs_epoch or len(self._refs) != len(directory.records):
            self._refs = [common_pb2.AgentRef(agent_id=r.agent_id, address=r.address) for r in directory.records]
            self._refs_epoch = directory.epoch
        return self._refs

    async def Register(self, request, context):
        validate.register(request)
        loc = request.location
        has = loc.has_coordinates or bool(loc.lat or loc.lon)
        rec = AgentRecord(
            agent_id=request.agent_id, address=request.address, city=loc.city, country=loc.country,
            lat=loc.lat if has else None, lon=loc.lon if has else None, asn=loc.asn,
            source_ip=request.source_ip, capacity=request.capacity,
        )
        epoch, stored = await self.service.register(rec, evidence_of(context, self.verified))
        return pb.RegisterResponse(
            epoch=epoch, lease_seconds=self.service.settings.lease_seconds,
            location=location_of(stored, self.service.directory.site_isp(stored.asn)),
            strategy=self.service.settings.strategy,
        )

    async def Heartbeat(self, request, context):
        validate.heartbeat(request)
        load = json_format.MessageToDict(request.load, preserving_proto_field_name=True)
        epoch = await self.service.heartbeat(request.agent_id, load)
        return pb.HeartbeatResponse(epoch=epoch, lease_seconds=self.service.settings.lease_seconds)

    async def Deregister(self, request, context):
        validate.deregister(request)
        return pb.DeregisterResponse(epoch=await self.service.deregister(request.agent_id))

    async def Resolve(self, request, context):
        validate.resolve(request, self.service.settings.max_batch)
        res = await self.service.resolve(list(request.hosts))
        ttl = self.service.settings.ttl_seconds
        Answer = pb.HostAnswer
        answers = [
            Answer(host=r.host, agents=r.agents, ttl_seconds=ttl) if not r.error else Answer(host=r.host, error=r.error)
            for r in res.results
        ]
        return pb.ResolveResponse(epoch=res.epoch, agents=self._agent_refs(res.directory), answers=answers)

    async def Explain(self, request, context):
        validate.explain(request)
        e = await self.service.explain(request.host)
        s = e.site
        site = common_pb2.Location(
            city=s.city, country=s.country, lat=s.lat or 0.0, lon=s.lon or 0.0,
            has_coordinates=s.lat is not None, asn=s.asn, isp=s.isp,
        )
        d = self.service.directory
        cands = [
            pb.Candidate(
                agent_id=r.record.agent_id, address=r.record.address, rank=r.rank, score=r.score,
                detail=r.detail, location=location_of(r.record, d.site_isp(r.record.asn)),
            )
            for r in e.ranked
        ]
        return pb.ExplainResponse(
            host=e.host, ip=s.ip or "", site=site, strategy=e.strategy, epoch=e.epoch,
            candidates=cands, override_agent=e.override_agent, notes=e.notes, ttl_seconds=e.ttl,
        )

    async def ListAgents(self, request, context):
        validate.list_agents(request)
        await self.service.refit_capacity(wait=0.5)
        snap = await self.service.snapshot()
        d = self.service.directory
        views = {v.agent_id: v for v in d.views}
        out = []
        for rec in sorted(snap.agents.values(), key=lambda r: r.agent_id):
            if rec.state != ALIVE and not request.include_dead:
                continue
            load = common_pb2.LoadReport()
            try:
                json_format.ParseDict(json.loads(rec.load_json or "{}"), load, ignore_unknown_fields=True)
            except (ValueError, json_format.ParseError):
                pass
            view = views.get(rec.agent_id)
            weight = 0.0 if view is None else self.service.partitioner.weight_of(view)
            cap = self.service.capacity.agent(rec.agent_id, resources_of(json_format.MessageToDict(load, preserving_proto_field_name=True)))
            out.append(
                pb.AgentInfo(
                    agent_id=rec.agent_id, address=rec.address, location=location_of(rec, d.site_isp(rec.asn)),
                    state=_STATE.get(rec.state, pb.AGENT_STATE_UNSPECIFIED), registered_at=rec.registered_at,
                    last_heartbeat=rec.last_heartbeat, lease_expires=rec.lease_expires, load=load,
                    capacity=rec.capacity, weight=weight, measured_rate=cap.measured_rate,
                    predicted_rate=cap.predicted_rate, samples=cap.samples,
                )
            )
        fit = self.service.capacity.fit()
        return pb.ListAgentsResponse(epoch=snap.epoch, strategy=self.service.settings.strategy, agents=out,
                                     capacity_model=fit.model.name if fit else "", capacity_errors=fit.errors if fit else {})

    async def LiveAgents(self, request, context):
        validate.live_agents(request)
        d = self.service.directory  # one epoch's live agents, replaced whole: a consistent read
        return pb.LiveAgentsResponse(epoch=d.epoch, agents=self._agent_refs(d))

    async def SetOverride(self, request, context):
        validate.set_override(request)
        return pb.SetOverrideResponse(epoch=await self.service.set_override(request.host, request.agent_id))

    async def ClearOverride(self, request, context):
        validate.clear_override(request)
        return pb.SetOverrideResponse(epoch=await self.service.clear_override(request.host))


class ConsultantServer:
    """A running consultant: the gRPC server, its health service and the application."""

    def __init__(self, settings: ConsultantSettings, service: ConsultantService):
        self.settings = settings
        self.service = service
        self.grpc, self.health, self.security = grpcutil.new_server(settings.tls, name="consultant", rules=AUTH_RULES)
        pb_grpc.add_ConsultantServicer_to_server(ConsultantServicer(service, verified=not self.security.insecure), self.grpc)
        self.port = grpcutil.bind(self.grpc, settings.listen, self.security)
        self.address = grpcutil.host_port(settings.listen, self.port)
        self.metrics_server: Any = None  # prometheus_client's HTTP server, while serving

    async def start(self) -> None:
        await self.service.start()
        await self.grpc.start()
        await grpcutil.mark_serving(self.health, [SERVICE_NAME])
        self.security.warn_if_insecure(self.address)
        if self.settings.metrics_listen:
            self.metrics_server = serve_metrics(self.settings.metrics_listen, METRICS, self.address,
                                                lambda: {**self.service.metrics(), **self.security.metrics()})
        log.info("consultant serving on %s (strategy %s, epoch %d)", self.address, self.settings.strategy, self.service.directory.epoch)

    async def stop(self, grace: float = 2.0) -> None:
        if getattr(self, "_stopped", False):
            return
        self._stopped = True
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        await grpcutil.mark_not_serving(self.health)
        await self.grpc.stop(grace)
        await self.service.stop()

    async def reload(self) -> None:
        """Re-read the config file (SIGHUP): a new strategy bumps the epoch; the TLS certificate,
        key and CA are read again (new connections use them)."""
        self.security.reload()
        if self.settings.source == "defaults":
            log.warning("SIGHUP: no config file to reload")
            return
        try:
            new = load_settings(self.settings.source, _kept_overrides(self.settings))
            await self.service.reload(new)
            self.settings = new
        except ConfigError as exc:
            log.error("SIGHUP: config not reloaded, keeping the running one: %s", exc)


def _kept_overrides(settings: ConsultantSettings) -> dict:
    # Flags given on the command line (listen, state, the agent locations file) keep their
    # values across reloads; the locations file's content is read again.
    return {"listen": settings.listen, "state_url": settings.state_url, "agent_locations": settings.agent_locations or None}


def create_server(settings: ConsultantSettings) -> tuple[ConsultantServer, int]:
    """Build (not start) a consultant; ConfigError for a bad strategy, DB or listen address."""
    service = ConsultantService(settings)
    server = ConsultantServer(settings, service)
    return server, server.port


async def serve(settings: ConsultantSettings) -> None:
    server, _port = create_server(settings)
    await grpcutil.run_until_signalled(server.start, server.stop, server.reload)


def run(settings: ConsultantSettings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    eventloop.run(serve(settings), settings.event_loop)


__all__ = ["ConsultantServer", "create_server", "serve", "run"]
