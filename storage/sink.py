"""The WARC sink port: where capture groups are appended and read back (no SQL, no gRPC).

Two implementations, picked by `warc.sink` in storage's config: `LocalSink` (a directory, the
default) and `storage.s3sink.S3Sink` (S3-compatible object storage); storage.store.open_sink
picks one. One contract suite runs
over both (tests/test_storage_sink_contract.py).

A write group is what one index transaction covers:

    begin() -> append()* -> sync() -> [index commit of the rows and sync()'s Durable] -> committed()
                                   \\-> [the commit failed] -> rollback()

Invariant held by every sink: after sync() returns, every byte appended since begin() is durable
(fsynced file, uploaded object part), so the index may name it; nothing that rollback() undid is
ever named; committed() may publish (an object store completes objects there, never before the
index names their records, so a crash leaves nothing published that the index does not hold).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from wancrawl.errors import NotFound

from storage.warcfile import SUFFIX, WarcWriter, recover


@dataclass
class Durable:
    """What sync() made durable, for the index transaction: WARC files/objects created in the
    group (storage_warc_files rows) and object parts uploaded (storage_object_parts rows)."""

    files: list[dict] = field(default_factory=list)
    parts: list[dict] = field(default_factory=list)


class IndexView(Protocol):
    """What a sink's recovery asks of the index."""

    def file_rows(self) -> dict[str, tuple[float, int]]: ...
    def file_ends(self) -> dict[str, int]: ...
    def object_parts(self, prefix: str) -> dict[tuple[str, str], list[tuple[int, str, int]]]: ...


class WarcSource(Protocol):
    """Reading WARC files or objects by name (any writer's, for get, export and verify)."""

    def location(self, name: str) -> str:
        """What a CDXJ line's `filename` holds: a bare file name, or s3://bucket/key."""
        ...

    def read_range(self, name: str, offset: int, length: int) -> bytes: ...

    def open(self, name: str) -> BinaryIO:
        """The whole file as a stream; NotFound when absent."""
        ...

    def names(self) -> Iterator[str]:
        """Every WARC file or object the source holds (all writers')."""
        ...


class WarcSink(WarcSource, Protocol):
    """A writer's side: one process appends to its own files or objects."""

    def recover(self, index: IndexView) -> list[str]: ...
    def begin(self) -> None: ...
    def append(self, data: bytes) -> tuple[str, int]: ...
    def sync(self) -> Durable: ...
    def committed(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


class LocalSink:
    """WARC files in one directory (storage/warcfile.py), the default sink."""

    def __init__(self, directory: Path, prefix: str, max_bytes: int, *, fsync: bool):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.prefix, self.max_bytes, self.fsync = prefix, max_bytes, fsync
        self._writer: WarcWriter | None = None

    def _w(self) -> WarcWriter:
        if self._writer is None:
            self._writer = WarcWriter(self.dir, self.prefix, self.max_bytes, fsync=self.fsync)
        return self._writer

    # -- write ---------------------------------------------------------------------------------
    def recover(self, index: IndexView) -> list[str]:
        return recover(self.dir, index.file_rows(), index.file_ends())

    def begin(self) -> None:
        self._w().begin()

    def append(self, data: bytes) -> tuple[str, int]:
        return self._w().append(data)

    def sync(self) -> Durable:
        return Durable(files=self._w().sync())

    def committed(self) -> None:
        pass  # a file is readable as soon as it is written

    def rollback(self) -> None:
        self._w().rollback()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    # -- read ----------------------------------------------------------------------------------
    def location(self, name: str) -> str:
        return name

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        try:
            with open(self.dir / name, "rb") as fh:
                fh.seek(offset)
                data = fh.read(length)
        except FileNotFoundError:
            raise NotFound(f"WARC file {name} named by the index is missing") from None
        if len(data) != length:
            raise NotFound(f"{name}: record at {offset} is cut short ({len(data)} of {length} bytes)")
        return data

    def open(self, name: str) -> BinaryIO:
        try:
            return open(self.dir / name, "rb")
        except FileNotFoundError:
            raise NotFound(f"WARC file {name} is missing") from None

    def names(self) -> Iterator[str]:
        return (p.name for p in sorted(self.dir.glob(f"*{SUFFIX}")))
