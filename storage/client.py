"""What an agent needs to ship captures to storage: the StorageClient interface and its gRPC implementation."""

from __future__ import annotations

import dataclasses

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import grpc

from wancrawl import grpcutil
from wancrawl.v1 import storage_pb2, storage_pb2_grpc
from wancrawl.warcrecords import Capture

LOOKUP_BATCH = 5_000  # URLs per Lookup call (storage takes up to 10,000)


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

    async def send(self, batches: storage_pb2.PageBatch | Sequence[storage_pb2.PageBatch], timeout: float | None = None) -> Ack:
        """Deliver one or more batches; return once storage has made them durable (within
        `timeout` seconds when given, else the client's own timeout).

        Raises Unavailable when storage cannot be reached or fails (keep the batches spooled
        and retry: resending is safe) and InvalidArgument for a request storage refuses whole.
        """
        ...

    async def lookup(self, urls: Sequence[str]) -> dict[str, set[int]]:
        """URL -> the HTTP statuses of its captures, for the URLs storage holds (Unavailable when
        it cannot be asked)."""
        ...

    async def close(self) -> None: ...


class GrpcStorageClient:
    """StorageClient over gRPC: one client-streaming Ingest call per send()."""

    def __init__(self, target: str, *, timeout: float = 60.0, tls: grpcutil.TlsSettings | None = None):
        self.target = target
        self.timeout = timeout
        self._channel = grpcutil.channel(target, tls)
        self._stub = storage_pb2_grpc.StorageStub(self._channel)

    async def send(self, batches, timeout: float | None = None) -> Ack:
        if isinstance(batches, storage_pb2.PageBatch):
            batches = [batches]

        async def gen():
            for b in batches:
                yield b

        try:
            ack = await self._stub.Ingest(gen(), timeout=self.timeout if timeout is None else min(timeout, self.timeout))
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, f"storage {self.target}: Ingest") from None
        return Ack.from_proto(ack)

    async def get(self, url: str = "", at: float | None = None, record_id: str = "") -> storage_pb2.GetResponse:
        req = storage_pb2.GetRequest(url=url, record_id=record_id, has_at=at is not None, at=at or 0.0)
        try:
            return await self._stub.Get(req, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, f"storage {self.target}: Get") from None

    async def lookup(self, urls: Sequence[str]) -> dict[str, set[int]]:
        """URL -> the HTTP statuses of its captures at storage, for the URLs that have any."""
        out: dict[str, set[int]] = {}
        for i in range(0, len(urls), LOOKUP_BATCH):
            req = storage_pb2.LookupRequest(urls=list(urls[i:i + LOOKUP_BATCH]))
            try:
                resp = await self._stub.Lookup(req, timeout=self.timeout)
            except grpc.aio.AioRpcError as exc:
                raise grpcutil.translate(exc, f"storage {self.target}: Lookup") from None
            out.update((f.url, set(f.statuses)) for f in resp.found)
        return out

    @classmethod
    async def stats_of(cls, target: str, top: int = 20, timeout: float = 30.0) -> storage_pb2.StatsResponse:
        """One Stats call on a fresh channel (a command that asks once, then exits)."""
        async with cls(target, timeout=timeout) as s:
            return await s.stats(top=top)

    async def stats(self, top: int = 20) -> storage_pb2.StatsResponse:
        try:
            return await self._stub.Stats(storage_pb2.StatsRequest(top=top), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, f"storage {self.target}: Stats") from None

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "GrpcStorageClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
