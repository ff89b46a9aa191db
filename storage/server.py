"""The Storage gRPC service: a thin shell over storage.store.Store with one writer thread."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

# The agent's client-side face alone (the overlay's query client, docs/architecture.md floors).
from agent.peers import PeerDirectory
from consultant.client import ConsultantClient
from storage import validate
from storage.config import StorageSettings
from storage.index import Row
from storage.metrics import SCHEMA as METRICS
from storage.placement import PlacementCheck, RouteCache
from storage.store import BatchResult, Store
from wancrawl import grpcutil
from wancrawl.auth import Rules
from wancrawl.metrics import Sample, serve_metrics
from wancrawl.stats import Counters
from wancrawl.v1 import storage_pb2, storage_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = storage_pb2.DESCRIPTOR.services_by_name["Storage"].full_name

# Who may call what (docs/security.md): agents ingest pages captured as themselves (every
# capture's agent_id; with a consultant configured, only of hosts they own or back up:
# storage/placement.py), operators read.
AUTH_RULES = Rules(SERVICE_NAME, {
    "Ingest": {"agent": "captures.agent_id"},
    "Get": {"operator": ""},
    "Stats": {"operator": ""},
    # An agent promoted to a dead owner's hosts asks what that owner stored; an operator may too.
    "Lookup": {"agent": "", "operator": ""},
    "History": {"operator": ""},
})


class GroupCommitter:
    """Queues batches from every stream; the writer thread takes all that are waiting at once, so
    concurrent agents share one fsync and one index transaction."""

    def __init__(self, store: Store, executor: ThreadPoolExecutor, max_queue: int, max_group: int = 64,
                 linger: float = 0.0, group_bytes: int = 0):
        self.store = store
        self.executor = executor
        self.queue: asyncio.Queue[tuple[storage_pb2.PageBatch, asyncio.Future]] = asyncio.Queue(max_queue)
        self.max_group = max_group
        # An object store makes each group one uploaded part, and a part under 5 MiB closes its
        # object: waiting up to `linger` s for `group_bytes` keeps objects large under light load.
        self.linger = linger
        self.group_bytes = group_bytes
        self.task: asyncio.Task | None = None
        self.clock = time.monotonic
        # Batches received and not yet durable (acknowledged or failed), with when each came, in
        # arrival order: the first is the oldest (lag()). And when the last group became durable.
        self._waiting: dict[asyncio.Future, float] = {}
        self.last_durable: float | None = None

    def waiting(self) -> int:
        return len(self._waiting)

    def lag(self) -> float:
        """Seconds the oldest batch received and not yet durable has waited; 0 when none waits."""
        oldest = next(iter(self._waiting.values()), None)
        return 0.0 if oldest is None else max(0.0, self.clock() - oldest)

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def submit(self, batch: storage_pb2.PageBatch) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiting[fut] = self.clock()  # waiting from now, also while the queue is full
        try:
            await self.queue.put((batch, fut))
        except BaseException:
            self._waiting.pop(fut, None)
            raise
        return fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            items = [await self.queue.get()]
            size = _batch_bytes(items[0][0])
            deadline = loop.time() + self.linger
            while len(items) < self.max_group:
                if not self.queue.empty():
                    items.append(self.queue.get_nowait())
                    size += _batch_bytes(items[-1][0])
                    continue
                left = deadline - loop.time()
                if left <= 0 or size >= self.group_bytes:
                    break
                try:
                    items.append(await asyncio.wait_for(self.queue.get(), left))
                except asyncio.TimeoutError:
                    break
                size += _batch_bytes(items[-1][0])
            await self._commit(loop, items)

    async def _commit(self, loop: asyncio.AbstractEventLoop,
                      items: list[tuple[storage_pb2.PageBatch, asyncio.Future]]) -> None:
        try:
            results = await loop.run_in_executor(self.executor, self.store.ingest, [b for b, _ in items])
        except Exception as exc:  # noqa: BLE001 - every waiter gets the error
            if len(items) > 1:
                # Nothing of the group was kept (the store rolled it back): commit each batch
                # alone, so a batch that breaks the commit fails alone and the others are stored.
                log.warning("group commit of %d batches failed (%s); committing them one by one", len(items), exc)
                for item in items:
                    await self._commit(loop, [item])
                return
            for _, fut in items:
                self._waiting.pop(fut, None)
                if not fut.done():
                    fut.set_exception(exc)
            return
        self.last_durable = self.clock()
        for (_, fut), res in zip(items, results):
            self._waiting.pop(fut, None)
            if not fut.done():
                fut.set_result(res)

    async def stop(self) -> None:
        # Let queued batches finish: their clients are still waiting for an ack.
        while not self.queue.empty():
            await asyncio.sleep(0.01)
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass


def _batch_bytes(batch: storage_pb2.PageBatch) -> int:
    return sum(len(c.response) + len(c.request) + len(c.metadata) for c in batch.captures)


def capture_info(row: Row) -> storage_pb2.CaptureInfo:
    return storage_pb2.CaptureInfo(
        record_id=row.record_id, url=row.url, canonical_url=row.canonical_url, host=row.host,
        agent_id=row.agent_id, fetched_at=row.fetched_at, status=row.status,
        content_type=row.content_type, payload_digest=row.payload_digest,
        record_type=row.record_type, refers_to=row.refers_to or "", warc_file=row.warc_file,
        offset=row.warc_offset, length=row.warc_length, truncated=row.truncated, ip=row.ip,
    )


def stats_message(s: dict) -> storage_pb2.StatsResponse:
    return storage_pb2.StatsResponse(
        pages=s["pages"], responses=s["responses"], revisits=s["revisits"], raw_bytes=s["raw_bytes"],
        stored_bytes=s["stored_bytes"], compression_ratio=s["compression_ratio"],
        warc_files=s["warc_files"], hosts=s["hosts"], agents=s["agents"],
        per_host=[storage_pb2.Count(key=k, pages=n, stored_bytes=b) for k, n, b in s["per_host"]],
        per_agent=[storage_pb2.Count(key=k, pages=n, stored_bytes=b) for k, n, b in s["per_agent"]],
    )



@dataclass(slots=True)
class IngestCounters(Counters):
    """Since start, for Prometheus (storage/metrics.py): what was received and acknowledged."""
    ingest_calls: int = 0
    batches: int = 0
    stored: int = 0
    revisits: int = 0
    duplicates: int = 0
    rejected: int = 0
    rejected_not_placed: int = 0
    bytes_written: int = 0
    captures_received: int = 0
    raw_bytes_received: int = 0
    bytes_received: int = 0

class StorageServicer(storage_pb2_grpc.StorageServicer):
    def __init__(self, store: Store, committer: GroupCommitter, placement: PlacementCheck | None = None, *,
                 writer_id: str = "", sink: str = "local"):
        self.store = store
        self.committer = committer
        self.placement = placement  # None: no consultant configured, any agent may store any host
        self.writer_id = writer_id
        self.sink = sink
        self.started = time.monotonic()
        self.stats = IngestCounters()

    async def _placed(self, batch: storage_pb2.PageBatch) -> tuple[storage_pb2.PageBatch, dict[int, str], list[int] | None]:
        """(what to store, index -> reason for the captures refused by placement, the stored
        captures' indexes in `batch` when some were taken out)."""
        refused = await self.placement.refused(batch.captures) if self.placement is not None else {}
        if not refused:
            return batch, {}, None
        kept = [i for i in range(len(batch.captures)) if i not in refused]
        return storage_pb2.PageBatch(batch_id=batch.batch_id, captures=[batch.captures[i] for i in kept]), refused, kept

    async def Ingest(self, request_iterator, context):
        # Batches are submitted as they arrive (pipelined); the ack waits for all of them.
        pending: list[asyncio.Future] = []
        # Per batch: the captures placement refused (index -> (record id, reason)) and the
        # positions of the stored ones in the batch as sent (None: all of them).
        refusals: list[tuple[dict[int, tuple[str, str]], list[int] | None]] = []
        captures = raw = compressed = 0
        async for batch in request_iterator:
            validate.batch(batch)
            kept, refused, positions = await self._placed(batch)
            pending.append(await self.committer.submit(kept))
            refusals.append(({i: (batch.captures[i].record_id, why) for i, why in refused.items()}, positions))
            captures += len(batch.captures)
            for cap in batch.captures:
                raw += cap.raw_length
                compressed += len(cap.response) + len(cap.request) + len(cap.metadata)
        ack = storage_pb2.IngestAck(batches=len(pending))
        results: list[BatchResult] = await asyncio.gather(*pending)
        not_placed = 0
        for r, (refused_here, positions) in zip(results, refusals):
            ack.stored += r.stored
            ack.revisits += r.revisits
            ack.duplicates += r.duplicates
            ack.bytes_written += r.bytes_written
            for i, rid, reason in r.rejected:
                ack.rejected.add(batch_id=r.batch_id, index=positions[i] if positions is not None else i, record_id=rid,
                                 reason=reason, kind=storage_pb2.REJECTION_KIND_INVALID)
            for i, (rid, reason) in sorted(refused_here.items()):
                ack.rejected.add(batch_id=r.batch_id, index=i, record_id=rid, reason=reason,
                                 kind=storage_pb2.REJECTION_KIND_NOT_PLACED)
                not_placed += 1
        c = self.stats
        c.ingest_calls += 1
        c.batches += ack.batches
        c.stored += ack.stored
        c.revisits += ack.revisits
        c.duplicates += ack.duplicates
        c.rejected += len(ack.rejected) - not_placed
        c.rejected_not_placed += not_placed
        c.bytes_written += ack.bytes_written
        c.captures_received += captures
        c.raw_bytes_received += raw
        c.bytes_received += compressed
        return ack

    async def Get(self, request, context):
        validate.get(request)
        at = request.at if request.has_at else None
        loop = asyncio.get_running_loop()
        # Reads use the default pool: they must not queue behind ingest on the writer thread.
        row, head, body = await loop.run_in_executor(None, self.store.get, request.url, at, request.record_id)
        return storage_pb2.GetResponse(capture=capture_info(row), http_headers=head, body=body)

    async def History(self, request, context):
        validate.history(request)
        limit = request.limit or validate.MAX_HISTORY
        rows = await asyncio.get_running_loop().run_in_executor(None, self.store.history, request.url, limit)
        return storage_pb2.HistoryResponse(captures=[capture_info(r) for r in rows])

    async def Lookup(self, request, context):
        validate.lookup(request)
        found = await asyncio.get_running_loop().run_in_executor(None, self.store.lookup, list(request.urls))
        return storage_pb2.LookupResponse(found=[storage_pb2.Found(url=u, statuses=sorted(s)) for u, s in found.items()])

    def writer_status(self) -> storage_pb2.WriterStatus:
        """This writer's own ingest since start (docs/storage.md: manager status turns two
        readings into rates; lag is the age of the oldest batch received and not yet durable)."""
        c, now, last = self.stats, time.monotonic(), self.committer.last_durable
        return storage_pb2.WriterStatus(
            writer_id=self.writer_id, sink=self.sink, uptime_seconds=now - self.started,
            pages=c.stored + c.revisits, duplicates=c.duplicates, bytes_written=c.bytes_written,
            queued_batches=self.committer.waiting(), lag_seconds=self.committer.lag(),
            since_durable_seconds=-1.0 if last is None else now - last)

    async def Stats(self, request, context):
        validate.stats(request)
        if request.writer_only:
            return storage_pb2.StatsResponse(writer=self.writer_status())
        top = request.top or 20
        s = await asyncio.get_running_loop().run_in_executor(None, self.store.stats, top)
        out = stats_message(s)
        out.writer.CopyFrom(self.writer_status())
        return out


class StorageService:
    """Server plus the things that must stop with it (writer, store, the consultant's channel)."""

    def __init__(self, settings: StorageSettings):
        self.settings = settings
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="storage-writer")
        self.store = Store(settings)
        self.server, self.health, self.security = grpcutil.new_server(settings.tls, name="storage", rules=AUTH_RULES)
        obj = settings.object_store
        s3 = settings.warc.sink == "s3"
        self.committer = GroupCommitter(self.store, self.executor, settings.ingest.queue_batches,
                                        linger=obj.linger if s3 else 0.0, group_bytes=obj.part_bytes if s3 else 0)
        # With a consultant: every capture checked against its host's placement (storage/placement.py),
        # over mutual TLS with storage's own certificate (the consultant admits services to Resolve).
        self.consultant: ConsultantClient | None = None
        self.placement: PlacementCheck | None = None
        self.peers: PeerDirectory | None = None
        p = settings.placement
        if settings.consultant:
            self.consultant = ConsultantClient(settings.consultant, timeout=p.timeout, tls=settings.tls)
            self.placement = PlacementCheck(self.consultant.resolve, RouteCache(p.cache_size), time.monotonic)
        elif settings.peers:
            # No consultant: the agents' overlay answers alike (the same HostRoutes), asked as a
            # non-node (docs/kademlia.md).
            self.peers = PeerDirectory(settings.peers, tls=settings.tls, timeout=p.timeout, preference=p.preference)
            self.placement = PlacementCheck(self.peers.resolve, RouteCache(p.cache_size), time.monotonic)
        self.servicer = StorageServicer(self.store, self.committer, self.placement,
                                        writer_id=obj.writer_id if s3 else "", sink=settings.warc.sink)
        storage_pb2_grpc.add_StorageServicer_to_server(self.servicer, self.server)
        self.metrics_server = None
        self.port = grpcutil.bind(self.server, settings.listen, self.security)
        self.address = grpcutil.host_port(settings.listen, self.port)

    async def start(self) -> None:
        self.committer.start()
        await self.server.start()
        await grpcutil.mark_serving(self.health, [SERVICE_NAME])
        self.security.warn_if_insecure(self.address)
        if self.settings.metrics_listen:
            self.metrics_server = serve_metrics(self.settings.metrics_listen, METRICS, self.address, self._metrics)
        log.info("storage serving on %s (WARCs in %s, index %s)", self.address, self.store.sink.location("") or self.store.warc_dir,
                 self.settings.index_url())
        if self.placement is None:
            log.warning("storage on %s: no consultant configured, so any agent may store pages of any host "
                        "(set `consultant` to check placement: docs/storage.md)", self.address)
        else:
            log.info("storage on %s checks each capture's placement with the consultant at %s", self.address,
                     self.settings.consultant)

    def _metrics(self) -> Sample:
        placement = {**self.placement.stats.as_dict(), "placement_routes_cached": len(self.placement.cache)} if self.placement else {}
        if self.peers is not None:
            placement.update(self.peers.stats.as_dict())
        return {**self.servicer.stats.as_dict(), **placement, "ingest_queue": self.committer.queue.qsize(),
                "ingest_lag_seconds": self.committer.lag(), **self.security.metrics()}

    async def stop(self, grace: float = 5.0) -> None:
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        await grpcutil.mark_not_serving(self.health)
        await self.server.stop(grace)
        await self.committer.stop()
        self.executor.shutdown(wait=True)
        self.store.close()
        if self.consultant is not None:
            await self.consultant.close()
        if self.peers is not None:
            await self.peers.close()


def create_server(settings: StorageSettings) -> tuple[StorageService, int]:
    """Build the service (opens the store, binds the port); call `await svc.start()` to serve."""
    svc = StorageService(settings)
    return svc, svc.port


async def serve(settings: StorageSettings, on_ready=None) -> None:
    svc, port = create_server(settings)

    async def start():
        await svc.start()
        if on_ready is not None:
            on_ready(svc.address)

    async def reload():  # SIGHUP: the TLS certificate, key and CA are read again
        svc.security.reload()

    await grpcutil.run_until_signalled(start, svc.stop, reload)
