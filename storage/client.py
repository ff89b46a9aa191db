"""What an agent needs to ship captures to storage: the StorageClient interface and its gRPC implementation."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

import grpc

from wancrawl import errors, grpcutil
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

    async def history(self, url: str, limit: int = 0) -> storage_pb2.HistoryResponse:
        """Every capture of a URL over time, oldest first (the last `limit` when > 0)."""
        try:
            return await self._stub.History(storage_pb2.HistoryRequest(url=url, limit=limit), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpcutil.translate(exc, f"storage {self.target}: History") from None

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


@dataclass
class WriterChoice:
    """Which of an agent's ranked storage writers (its region's first) the next call goes to.
    Pure: the caller passes the time. The current writer is kept until it fails (UNAVAILABLE or a
    deadline), then the next in rank is used; `back_after` seconds after the first writer failed,
    it is tried again first, so an agent returns to its own region's writer once it is back."""

    n: int
    back_after: float = 30.0
    current: int = 0
    failed_at: float | None = None  # when the first-ranked writer last failed

    def order(self, now: float) -> list[int]:
        """Writers to try for one call, in order: the chosen one, then the rest by rank."""
        first = 0 if self.failed_at is None or now - self.failed_at >= self.back_after else self.current
        return [first] + [i for i in range(self.n) if i != first]

    def failed(self, i: int, now: float) -> None:
        if i == 0:
            self.failed_at = now
        if i == self.current:
            self.current = (i + 1) % self.n

    def succeeded(self, i: int) -> None:
        self.current = i
        if i == 0:
            self.failed_at = None


class FailoverStorageClient:
    """StorageClient over several storage writers ranked by region (the agent's own first):
    a call goes to the writer WriterChoice names and, on Unavailable (UNAVAILABLE, a deadline),
    to the next. Ingest is idempotent across writers (the index's primary key), so a batch
    resent to another writer after a timeout is stored once."""

    def __init__(self, targets: Sequence[str], *, timeout: float = 60.0, tls: grpcutil.TlsSettings | None = None,
                 back_after: float = 30.0, clock: Callable[[], float] = time.monotonic):
        if not targets:
            raise ValueError("FailoverStorageClient needs at least one storage address")
        self.targets = list(targets)
        self.clients = [GrpcStorageClient(t, timeout=timeout, tls=tls) for t in self.targets]
        self.choice = WriterChoice(len(self.clients), back_after)
        self.clock = clock

    async def _call(self, what: Callable[[GrpcStorageClient], Awaitable[T]]) -> T:
        last: errors.Unavailable | None = None
        for i in self.choice.order(self.clock()):
            try:
                result = await what(self.clients[i])
            except errors.Unavailable as exc:
                self.choice.failed(i, self.clock())
                last = exc
                continue
            self.choice.succeeded(i)
            return result
        assert last is not None
        raise errors.Unavailable(f"no storage writer answered ({', '.join(self.targets)}): {last}")

    async def send(self, batches, timeout: float | None = None) -> Ack:
        return await self._call(lambda c: c.send(batches, timeout))

    async def lookup(self, urls: Sequence[str]) -> dict[str, set[int]]:
        return await self._call(lambda c: c.lookup(urls))

    async def close(self) -> None:
        for c in self.clients:
            await c.close()


def storage_client(addresses: str, *, tls: grpcutil.TlsSettings | None = None) -> GrpcStorageClient | FailoverStorageClient:
    """The client for an agent's `storage` setting: one address, or several separated by commas,
    ranked (its region's writer first)."""
    targets = [a.strip() for a in addresses.split(",") if a.strip()]
    return GrpcStorageClient(targets[0], tls=tls) if len(targets) == 1 else FailoverStorageClient(targets, tls=tls)
