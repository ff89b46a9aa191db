"""What an agent needs to ship captures to storage: the StorageClient interface and its gRPC implementation."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

import grpc

from wancrawl import errors, failover, grpcutil
from wancrawl.v1 import storage_pb2, storage_pb2_grpc
from wancrawl.warcrecords import Capture

LOOKUP_BATCH = 5_000  # URLs per Lookup call (storage takes up to 10,000)
T = TypeVar("T")


@dataclass(frozen=True)
class Ack:
    """Storage's answer for what was sent. Everything sent and in neither `rejected` nor
    `not_placed` is durable. Each refusal is (batch_id, index, record_id, reason):
    `rejected`: malformed, refused the same way if sent again; `not_placed`: the sender is not on
    the host's preference list by the consultant's answer now (storage/placement.py), which may
    change back (an agent declared dead during a pause registers again)."""

    batches: int
    stored: int
    revisits: int
    duplicates: int
    bytes_written: int
    rejected: list[tuple[str, int, str, str]] = field(default_factory=list)
    not_placed: list[tuple[str, int, str, str]] = field(default_factory=list)

    @classmethod
    def from_proto(cls, m: storage_pb2.IngestAck) -> "Ack":
        def of(not_placed: bool) -> list[tuple[str, int, str, str]]:
            # A kind this client does not know counts as invalid: set aside, never stored twice.
            return [(r.batch_id, r.index, r.record_id, r.reason) for r in m.rejected
                    if (r.kind == storage_pb2.REJECTION_KIND_NOT_PLACED) == not_placed]
        return cls(m.batches, m.stored, m.revisits, m.duplicates, m.bytes_written, of(False), of(True))


_CAPTURE_FIELDS = tuple(f.name for f in dataclasses.fields(Capture))


def to_proto(c: Capture) -> storage_pb2.Capture:
    # The dataclass and the message carry the same fields under the same names. Read field by
    # field: dataclasses.asdict deep-copies every value, the page's bytes included (issue 24).
    return storage_pb2.Capture(**{name: getattr(c, name) for name in _CAPTURE_FIELDS})


def make_batch(captures: Iterable[Capture], batch_id: str | None = None) -> storage_pb2.PageBatch:
    """A PageBatch from warcrecords captures. Serialize it (SerializeToString) to spool it: a
    resent batch keeps its record ids, so storage stores it once."""
    return storage_pb2.PageBatch(batch_id=batch_id or uuid.uuid4().hex, captures=[to_proto(c) for c in captures])


@runtime_checkable
class StorageClient(Protocol):
    """The agent's view of storage. A test fake implements these methods."""

    async def send(self, batches: Batch | Sequence[Batch], timeout: float | None = None) -> Ack:
        """Deliver one or more batches, each a PageBatch or its serialized bytes (a spool
        file as it is); return once storage has made them durable (within `timeout` seconds
        when given, else the client's own timeout).

        Raises Unavailable when storage cannot be reached or fails (keep the batches spooled
        and retry: resending is safe) and InvalidArgument for a request storage refuses whole.
        """
        ...

    async def lookup(self, urls: Sequence[str]) -> dict[str, set[int]]:
        """URL -> the HTTP statuses of its captures, for the URLs storage holds (Unavailable when
        it cannot be asked)."""
        ...

    async def close(self) -> None: ...


Batch = storage_pb2.PageBatch | bytes
"""A batch as send() takes it: the message, or its serialized bytes (what the spool holds)."""


def ingest_method(channel: grpc.aio.Channel) -> grpc.aio.StreamUnaryMultiCallable:
    """Storage's Ingest on `channel`, taking PageBatch messages or their bytes (the generated
    stub's serializer takes messages only)."""
    # A spool file is a serialized PageBatch: it goes on the wire as it is.
    return channel.stream_unary("/wancrawl.v1.Storage/Ingest", request_serializer=grpcutil.message_or_bytes,
                                response_deserializer=storage_pb2.IngestAck.FromString)


async def _ingest(ingest: grpc.aio.StreamUnaryMultiCallable, batches: Sequence[Batch], timeout: float) -> Ack:
    """One client-streaming Ingest call (raises grpc's AioRpcError: the callers translate)."""
    async def gen():
        for b in batches:
            yield b

    return Ack.from_proto(await ingest(gen(), timeout=timeout))


def _one_or_many(batches: Batch | Sequence[Batch]) -> Sequence[Batch]:
    return [batches] if isinstance(batches, (storage_pb2.PageBatch, bytes)) else batches


def _lookup_chunks(urls: Sequence[str]) -> list[storage_pb2.LookupRequest]:
    return [storage_pb2.LookupRequest(urls=list(urls[i:i + LOOKUP_BATCH])) for i in range(0, len(urls), LOOKUP_BATCH)]


class GrpcStorageClient:
    """StorageClient over gRPC: one client-streaming Ingest call per send()."""

    def __init__(self, target: str, *, timeout: float = 60.0, tls: grpcutil.TlsSettings | None = None):
        self.target = target
        self.timeout = timeout
        self._channel = grpcutil.channel(target, tls)
        self._stub = storage_pb2_grpc.StorageStub(self._channel)
        self._ingest = ingest_method(self._channel)

    async def send(self, batches, timeout: float | None = None) -> Ack:
        try:
            return await _ingest(self._ingest, _one_or_many(batches),
                                 self.timeout if timeout is None else min(timeout, self.timeout))
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, f"storage {self.target}: Ingest") from None

    async def get(self, url: str = "", at: float | None = None, record_id: str = "") -> storage_pb2.GetResponse:
        req = storage_pb2.GetRequest(url=url, record_id=record_id, has_at=at is not None, at=at or 0.0)
        try:
            return await self._stub.Get(req, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, f"storage {self.target}: Get") from None

    async def history(self, url: str, limit: int = 0) -> storage_pb2.HistoryResponse:
        """Every capture of a URL over time, oldest first (the last `limit` when > 0)."""
        try:
            return await self._stub.History(storage_pb2.HistoryRequest(url=url, limit=limit), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, f"storage {self.target}: History") from None

    async def lookup(self, urls: Sequence[str]) -> dict[str, set[int]]:
        """URL -> the HTTP statuses of its captures at storage, for the URLs that have any."""
        out: dict[str, set[int]] = {}
        for req in _lookup_chunks(urls):
            try:
                resp = await self._stub.Lookup(req, timeout=self.timeout)
            except grpc.aio.AioRpcError as exc:
                raise grpcutil.translate(exc, f"storage {self.target}: Lookup") from None
            out.update((f.url, set(f.statuses)) for f in resp.found)
        return out

    @classmethod
    async def stats_of(cls, target: str, top: int = 20, timeout: float = 30.0,
                       writer_only: bool = False) -> storage_pb2.StatsResponse:
        """One Stats call on a fresh channel (a command that asks once, then exits)."""
        async with cls(target, timeout=timeout) as s:
            return await s.stats(top=top, writer_only=writer_only)

    async def stats(self, top: int = 20, writer_only: bool = False) -> storage_pb2.StatsResponse:
        """The archive's totals (from the index every writer shares) and this writer's own
        status; `writer_only`: the writer's status alone (cheap: no index query)."""
        try:
            return await self._stub.Stats(storage_pb2.StatsRequest(top=top, writer_only=writer_only), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, f"storage {self.target}: Stats") from None

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "GrpcStorageClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class FailoverStorageClient:
    """StorageClient over several storage writers ranked by region (the agent's own first).
    The same ranked-address failover as the consultant's replicas (wancrawl/failover.py: a
    `Ranking` decides, `FailoverChannels` runs the call): a call goes to one writer and, on
    UNAVAILABLE or a deadline (an attempt but the last gets at most `attempt_timeout`), to the
    next; a writer that failed is asked first again after `retry_after` seconds (doubling while
    it keeps failing), so an agent returns to its own region's writer once it is back. Ingest is
    idempotent across writers (the index's primary key), so a batch resent to another writer
    after a timeout is stored once."""

    def __init__(self, targets: Sequence[str], *, timeout: float = 60.0, tls: grpcutil.TlsSettings | None = None,
                 attempt_timeout: float = 0.0, retry_after: float = 5.0, max_retry_after: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        addresses = failover.parse_addresses(targets, where="storage")
        if not addresses:
            raise errors.ConfigError("storage: no address given")
        self.targets = list(addresses)
        self.timeout = timeout
        self.writers = failover.FailoverChannels(
            addresses, lambda a: grpcutil.channel(a, tls, options=failover.RECONNECT_OPTIONS),
            attempt_timeout=attempt_timeout or timeout / len(addresses), retry_after=retry_after,
            max_retry_after=max_retry_after, clock=clock)
        self._stubs: dict[grpc.aio.Channel, storage_pb2_grpc.StorageStub] = {}
        self._ingests: dict[grpc.aio.Channel, grpc.aio.StreamUnaryMultiCallable] = {}

    def _stub(self, ch: grpc.aio.Channel) -> storage_pb2_grpc.StorageStub:
        stub = self._stubs.get(ch)
        if stub is None:
            stub = self._stubs[ch] = storage_pb2_grpc.StorageStub(ch)
        return stub

    def _ingest(self, ch: grpc.aio.Channel) -> grpc.aio.StreamUnaryMultiCallable:
        ingest = self._ingests.get(ch)
        if ingest is None:
            ingest = self._ingests[ch] = ingest_method(ch)
        return ingest

    async def _call(self, what: str, invoke: Callable[[grpc.aio.Channel, float], Awaitable[T]],
                    timeout: float | None = None) -> T:
        try:
            return await self.writers.call(invoke,
                                           self.timeout if timeout is None else min(timeout, self.timeout))
        except grpc.aio.AioRpcError as exc:
            several = exc.code() in failover.FAILOVER_CODES
            raise grpcutil.translate(exc, f"storage: {what}: no storage writer answered ({', '.join(self.targets)}); the last"
                                     if several else f"storage: {what}") from None

    async def send(self, batches, timeout: float | None = None) -> Ack:
        batches = _one_or_many(batches)
        return await self._call("Ingest", lambda ch, t: _ingest(self._ingest(ch), batches, t), timeout)

    async def lookup(self, urls: Sequence[str]) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for req in _lookup_chunks(urls):
            async def one(ch: grpc.aio.Channel, t: float, req=req) -> storage_pb2.LookupResponse:
                return await self._stub(ch).Lookup(req, timeout=t)
            resp = await self._call("Lookup", one)
            out.update((f.url, set(f.statuses)) for f in resp.found)
        return out

    async def close(self) -> None:
        await self.writers.close()


def storage_client(addresses: str, *, tls: grpcutil.TlsSettings | None = None) -> GrpcStorageClient | FailoverStorageClient:
    """The client for an agent's `storage` setting: one address, or several separated by commas,
    ranked (its region's writer first)."""
    targets = failover.parse_addresses(addresses, where="storage")
    return GrpcStorageClient(targets[0], tls=tls) if len(targets) == 1 else FailoverStorageClient(targets, tls=tls)
