"""The agent's gRPC shell (PushUrls, HandOver, Drain, Status), Prometheus metrics, create_server() and serve()."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import sys
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from grpc_health.v1 import health_pb2

from agent import metrics, validate
from agent.node import AgentNode
from agent.placement.kademlia.identity import caller_node_id
from agent.placement.kademlia.overlay import announce_from_proto, announce_to_proto, from_proto, to_proto
from agent.settings import AgentSettings
from wancrawl import grpcutil
from wancrawl.kademlia import xorspace
from wancrawl.runtime import eventloop, malloc
from wancrawl.auth import Rules
from wancrawl.errors import ConfigError, FailedPrecondition, InvalidArgument, PermissionDenied, Unavailable
from wancrawl.metrics import Sample, serve_metrics
from wancrawl.pki import Identity, identity_of_pem
from wancrawl.v1 import agent_pb2, agent_pb2_grpc

log = logging.getLogger("agent")
T = TypeVar("T")

SERVICE_NAME = "wancrawl.v1.Agent"
HEALTH_INTERVAL = 1.0  # seconds between looks at the node's durable progress
STATUS_NOTES = 1000  # parked and given-up hosts listed in a Status at most

# Who may call what (docs/security.md): role -> the request field that must be the caller's
# own name ("" = none). Peers push, hand over, replicate and claim as themselves; operators
# seed (PushUrls, the manager's sender "manager" with route=true), watch and drain.
AUTH_RULES = Rules(SERVICE_NAME, {
    "PushUrls": {"agent": "sender_id", "operator": ""},
    "Status": {"operator": ""},
    "Drain": {"operator": ""},
    "HandOver": {"agent": "sender_id"},
    "Replicate": {"agent": "items.sender_id"},  # a ReplicateBatch: every message's sender
    "Claim": {"agent": "claimer_id"},
    # The overlay (consultant-less mode): nodes as themselves; anyone of ours may look up and list.
    "Ping": {"agent": "sender.agent_id"},
    "FindNode": {"agent": "sender.agent_id", "operator": "", "service": ""},
    "Leave": {"agent": "sender.agent_id"},
    "Members": {"agent": "", "operator": "", "service": ""},
}, flags={
    # Seed routing and `seed --force` are the operator's: from an agent, `force` would refetch
    # pages already stored and `route` would make this agent route URLs on the sender's behalf.
    "PushUrls": {"route": frozenset({"operator"}), "urls.force": frozenset({"operator"})},
})
MAX_PUSH = validate.MAX_PUSH


async def _checked(messages: AsyncIterator[T], check: Callable[[T], None]) -> AsyncIterator[T]:
    """A request stream whose every message passes `check` (INVALID_ARGUMENT ends the call)."""
    async for m in messages:
        check(m)
        yield m


class AgentServicer(agent_pb2_grpc.AgentServicer):
    def __init__(self, node: AgentNode):
        self.node = node

    async def PushUrls(self, request, context):
        validate.push_urls(request)
        r = await self.node.push(request.epoch, request.urls, request.route)
        return agent_pb2.PushUrlsResponse(accepted=r.accepted, not_mine=r.not_mine, epoch=self.node.directory.epoch, errors=r.errors)

    async def HandOver(self, request_iterator, context):
        return await self.node.handoff.receive(_checked(request_iterator, validate.hand_over))

    async def Replicate(self, request_iterator, context):
        node = self.node
        if node.replicas is None:
            raise FailedPrecondition("replication is off on this agent (replication.enabled = false)")
        applied = 0
        sender = ""
        # Each host's fate is decided at its first message of the stream and kept for the rest:
        # a full copy may span batches, and half of one (the reset applied, the rest refused, or
        # the other way round) would leave a replica with part of the owner's queue.
        refused: dict[str, str] = {}
        taken: set[str] = set()
        async for batch in request_iterator:
            validate.replicate_batch(batch)
            for m in batch.items:
                if not m.host:
                    raise InvalidArgument("Replicate: a message without a host")
                if sender and m.sender_id != sender:
                    raise InvalidArgument("Replicate: one stream, one sender")
                sender = m.sender_id
            if not batch.items:
                continue
            node.directory.saw_epoch(batch.items[-1].epoch)
            # Only a host's owner replicates it, to its backups (agent/ownership/guard.py). A
            # refused host is answered by name and the rest applied: a host whose move the
            # sender has not seen yet must not hold back its others' replicas (issue 23).
            new = list(dict.fromkeys(m.host for m in batch.items if m.host not in refused and m.host not in taken))
            if new:
                drops = {m.host for m in batch.items if m.drop}
                refused.update(await node.guard.replicate(sender, new, drops & set(new)))
                fresh = {h for h in new if h not in refused}
                # A replica of another agent that this message would replace goes to the sender
                # (the host's owner now) first: that agent may have died as the host moved off it
                # (docs/replication.md, "A move at a death"); or, that agent alive off the
                # host's list, the host is refused and the replica kept for its handover.
                superseded = {m.host: old for m in batch.items
                              if m.host in fresh and not m.drop and (old := node.replicas.owner(m.host)) not in (None, sender)}
                if superseded:
                    refused.update(await node.ownership.superseded(sender, superseded))
                taken.update(h for h in fresh if h not in refused)
            items = [m for m in batch.items if m.host in taken]
            if items:
                applied += node.replicas.apply(sender, items)
        if refused:
            host, why = next(iter(refused.items()))
            log.info("refused %d hosts of a Replicate from %s (%s: %s)", len(refused), sender, host, why)
        return agent_pb2.ReplicateResponse(applied=applied, refused=[agent_pb2.HostNote(host=h, reason=r)
                                                                     for h, r in refused.items()])

    async def Claim(self, request, context):
        validate.claim(request)
        return await self.node.ownership.claimed((request.claimer_id, request.claimer_address), request.epoch,
                                                 list(request.hosts))

    # -- the Kademlia overlay (docs/kademlia.md) --------------------------------------------------
    def _overlay(self):
        overlay = self.node.overlay
        if overlay is None:
            raise FailedPrecondition("this agent places hosts through a consultant (mode = \"consultant\"): no overlay")
        return overlay

    def _caller(self, context, contact: agent_pb2.Contact):
        """The caller's contact, once its id is the one its certificate gives (S/Kademlia)."""
        c = from_proto(contact)
        expected = caller_node_id(context, c.agent_id)
        if c.node_id != expected:
            raise PermissionDenied(f"node id {xorspace.id_hex(c.node_id)[:12]}... is not the one {c.agent_id}'s "
                                   f"certificate gives ({xorspace.id_hex(expected)[:12]}...)")
        return c

    async def Ping(self, request, context):
        validate.ping(request)
        overlay = self._overlay()
        sender = self._caller(context, request.sender)
        if overlay.left:
            raise FailedPrecondition("this agent left the overlay")
        await overlay.heard_from(sender, request.epoch, announce_from_proto(request))
        answer = agent_pb2.PingResponse(responder=to_proto(overlay.me), epoch=overlay.epoch)
        announce_to_proto(overlay.balancing.announce(), answer)
        return answer

    async def FindNode(self, request, context):
        validate.find_node(request)
        overlay = self._overlay()
        if request.HasField("sender"):
            await overlay.heard_from(self._caller(context, request.sender), request.epoch)
        found = overlay.find([xorspace.id_from_bytes(t) for t in request.targets], request.count)
        return agent_pb2.FindNodeResponse(responder=to_proto(overlay.me), epoch=overlay.epoch,
                                          closest=[agent_pb2.Closest(contacts=[to_proto(c) for c in cs]) for cs in found])

    async def Leave(self, request, context):
        validate.leave(request)
        self._overlay().left_by(self._caller(context, request.sender))
        return agent_pb2.LeaveResponse()

    async def Members(self, request, context):
        validate.members(request)
        overlay = self._overlay()
        if not overlay.joined:
            # Not in the overlay (yet, or any more): its view is itself alone. The asker (the
            # manager, storage's placement check) must ask another agent, not trust that.
            raise Unavailable("this agent is not in the overlay yet (joining through kademlia.bootstrap)")
        return agent_pb2.MembersResponse(members=[to_proto(c) for c in overlay.members()], epoch=overlay.epoch)

    async def Drain(self, request, context):
        validate.drain(request)
        handed, remaining = await self.node.drain(request.timeout_seconds or 120.0)
        return agent_pb2.DrainResponse(handed_over=handed, remaining=remaining)

    async def Status(self, request, context):
        validate.status(request)
        d = self.node.dispatcher
        parked = d.parked(self.node.clock())  # a scan of the waiting hosts: once per Status
        # A flood of dead names gives up thousands of hosts: the lists are cut (the counters
        # keep the totals), so a Status stays far below gRPC's 4 MiB message limit.
        given_up = list(itertools.islice(d.given_up.items(), STATUS_NOTES))
        if len(d.given_up) > STATUS_NOTES:
            given_up.append((f"(+{len(d.given_up) - STATUS_NOTES} more)", "not listed: Status lists the first "
                                                                         f"{STATUS_NOTES}"))
        return agent_pb2.StatusResponse(
            agent_id=self.node.id, load=self.node.load_report(), counters=self.node.status_counters(len(parked)),
            parked=[agent_pb2.HostNote(host=p.host, reason=p.reason, until=p.until) for p in parked[:STATUS_NOTES]],
            given_up=[agent_pb2.HostNote(host=h, reason=r) for h, r in given_up],
            top_hosts=[agent_pb2.HostCost(host=t.host, pages=t.pages, bytes=t.bytes, give_ups=t.give_ups)
                       for t in self.node.incidents.hosts.top(TOP_HOSTS)],
        )


TOP_HOSTS = 10  # hosts per measure in a Status answer


class AgentServer:
    """A running agent: gRPC server, health service, the crawl node, optional metrics."""

    def __init__(self, settings: AgentSettings, node: AgentNode | None = None, **node_kwargs):
        self.settings = settings
        self.grpc, self.health, self.security = grpcutil.new_server(settings.tls, name=f"agent {settings.agent_id}",
                                                                    rules=AUTH_RULES)
        _check_identity(settings, self.security)
        self.port = grpcutil.bind(self.grpc, settings.listen, self.security)
        self.address = settings.advertise or grpcutil.host_port(settings.listen, self.port)
        self.node = node or AgentNode(settings, address=self.address, **node_kwargs)
        agent_pb2_grpc.add_AgentServicer_to_server(AgentServicer(self.node), self.grpc)
        self.metrics_server = None
        self.metrics_snapshot: Sample = {}
        self._snapshots: asyncio.Task | None = None
        self._serving = False  # what the health service says now
        self._health: asyncio.Task | None = None

    async def start(self) -> None:
        await self.grpc.start()
        await self.node.start()
        # What start made (modules, classes, functions, the node's components: some 60,000
        # objects) lives as long as the process: out of the collector's view, so each full
        # collection walks only the crawl's own objects (a full collection of it all took
        # 50-80 ms on the loop, bench/scale.py's longest stalls after the pass budget). Garbage
        # is collected first: a cycle frozen while garbage would never be freed.
        gc.collect()
        gc.freeze()
        await grpcutil.mark_serving(self.health, [SERVICE_NAME])
        self._serving = True
        self._health = asyncio.create_task(self._health_loop(), name="health")
        self.security.warn_if_insecure(self.address)
        if self.settings.metrics_listen:
            self.refresh_metrics()
            self._snapshots = asyncio.create_task(self._snapshot_loop())
            self.metrics_server = serve_metrics(self.settings.metrics_listen, metrics.SCHEMA, self.node.id,
                                                lambda: self.metrics_snapshot)
        log.info("agent %s serving on %s (event loop: %s)", self.node.id, self.address, eventloop.loop_name())

    def refresh_metrics(self) -> None:
        """Prometheus scrapes from its own thread: it reads this copy, made on the loop (every
        second, and whenever a caller wants the scrape to show the state now)."""
        self.metrics_snapshot = metrics.sample(self.node, self.security)

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.refresh_metrics()

    async def refresh_health(self) -> None:
        """SERVING while the node makes durable progress, NOT_SERVING while it does not
        (agent/state/progress.py): a health check sees what the consultant sees when this
        agent's heartbeats stop (issue 21: a wedged agent used to go on saying SERVING)."""
        serving = not self.node.progress.stalled()
        if serving == self._serving:
            return
        self._serving = serving
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_INTERVAL)
            await self.refresh_health()

    async def reload(self) -> None:
        """SIGHUP: read the TLS certificate, key and CA again (new connections to this agent use
        them; its own channels to peers, the consultant and storage take them when reopened)."""
        self.security.reload()

    async def stop(self, grace: float = 5.0) -> None:
        if self._health is not None:
            self._health.cancel()
        await grpcutil.mark_not_serving(self.health)
        if self._snapshots is not None:
            self._snapshots.cancel()
        await self.node.stop()
        await self.grpc.stop(grace)
        if self.metrics_server is not None:
            self.metrics_server.shutdown()


def _check_identity(settings: AgentSettings, security: grpcutil.Security) -> None:
    """An agent's certificate must name it: the consultant and its peers would refuse it anyway,
    this says why at start."""
    if security.insecure:
        return
    try:
        with open(security.tls.cert, "rb") as fh:
            ident = identity_of_pem(fh.read())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"tls.cert {security.tls.cert}: {exc}") from None
    want = Identity("agent", settings.agent_id)
    if ident != want:
        raise ConfigError(f"tls.cert {security.tls.cert} is for {ident or 'no wancrawl identity'}, not {want} "
                          f"(`wancrawl pki issue DIR agent {settings.agent_id}`)")


def create_server(settings: AgentSettings, **node_kwargs) -> tuple[AgentServer, int]:
    """Build (not start) an agent; node_kwargs inject consultant, storage or fetcher (tests)."""
    server = AgentServer(settings, **node_kwargs)
    return server, server.port


def dump_tasks() -> None:
    """SIGUSR2: every asyncio task's stack to the log (what is the agent waiting for?)."""
    import io

    for t in asyncio.all_tasks():
        buf = io.StringIO()
        try:
            t.print_stack(limit=8, file=buf)
        except Exception:  # noqa: BLE001 - frames of compiled coroutines have no line numbers
            buf.write(repr(t))
        log.warning("task %s:\n%s", t.get_name(), buf.getvalue())


async def serve(settings: AgentSettings) -> None:
    import signal

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, dump_tasks)
    server, _ = create_server(settings)
    # Start-up's objects are frozen in AgentServer.start. Here, for the process only: the youngest
    # generation is collected every 7,000 container allocations, not 700, so most of a page's
    # short-lived objects are freed by their reference counts before a collection has to walk them
    # (issue 24: GC time 0.29 s -> 0.07 s in a 6,974-page bench crawl, docs/benchmarks.md).
    gc.set_threshold(7000, 10, 10)
    mem = settings.memory
    if mem.heap_keep_bytes and not malloc.keep_heap(mem.heap_keep_bytes, mem.heap_mmap_bytes):
        log.info("memory.heap_keep_bytes: no glibc mallopt here, the C allocator's defaults stay")
    # Exit on SIGTERM/SIGINT, or once a Drain has handed everything over.
    await grpcutil.run_until_signalled(server.start, server.stop, server.reload, finished=server.node.drained)


def run(settings: AgentSettings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format=f"%(asctime)s {settings.agent_id} %(levelname)s %(message)s", stream=sys.stderr)
    eventloop.run(serve(settings), settings.event_loop)


__all__ = ["AgentServer", "create_server", "run", "serve"]
