"""Pages waiting for storage: serialized batches in a directory, drained when storage answers."""

from __future__ import annotations

import math
import os
from pathlib import Path

from wancrawl.v1 import storage_pb2


class Spool:
    """One file per PageBatch, `<seq>-<pages>.batch`, written whole (temp file, fsync, rename)
    so a crash leaves either the whole batch or nothing. Invariant: a file is removed only
    after storage acknowledged its batch; resending is safe (record ids make ingest
    idempotent). `_files` mirrors the directory (path -> pages), so counting costs nothing;
    `_since` holds, for the files written by this process, the earliest `fetched_at` of their
    captures (the shipper sends a file's bytes unparsed when none can be suspect)."""

    def __init__(self, directory: str | Path, fsync: bool = True):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        for tmp in self.dir.glob("*.tmp"):
            tmp.unlink()  # a write that never finished: its pages were never marked done
        self._files: dict[Path, int] = {p: int(p.stem.split("-")[1]) for p in sorted(self.dir.glob("*.batch"))}
        self._next = max((int(p.stem.split("-")[0]) for p in self._files), default=0) + 1
        self._since: dict[Path, float] = {}

    def put(self, batch: storage_pb2.PageBatch) -> Path:
        seq = self._next
        self._next += 1
        final = self._write(seq, batch)
        self._files[final] = len(batch.captures)
        self._since[final] = min((c.fetched_at for c in batch.captures), default=math.inf)
        return final

    def replace(self, path: Path, batch: storage_pb2.PageBatch) -> Path:
        """Put `batch` in place of spooled `path` under the same seq (so it keeps its age: what
        `shipped_through` says stays true for the captures it still holds); return its new path.
        A crash between writing the new file and removing the old leaves both: sent again, the
        captures they share are stored once (record ids)."""
        seq = int(path.stem.split("-")[0])
        final = self._write(seq, batch)
        if final != path:
            path.unlink(missing_ok=True)
        self._files = {(final if p == path else p): (len(batch.captures) if p == path else n) for p, n in self._files.items()}
        self._since.pop(path, None)
        self._since[final] = min((c.fetched_at for c in batch.captures), default=math.inf)
        return final

    def _write(self, seq: int, batch: storage_pb2.PageBatch) -> Path:
        """Write a batch file whole (temp file, fsync, rename) and return its path."""
        name = f"{seq:012d}-{len(batch.captures)}"
        tmp, final = self.dir / f"{name}.tmp", self.dir / f"{name}.batch"
        with open(tmp, "wb") as fh:
            fh.write(batch.SerializeToString())
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, final)
        if self.fsync:
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return final

    @property
    def rejected_dir(self) -> Path:
        """Where batches and captures storage refused as invalid are kept for an operator (never
        resent: the same bytes would be refused again)."""
        return self.dir / "rejected"

    def set_aside(self, path: Path) -> Path:
        """Move a spooled batch storage refused (INVALID_ARGUMENT) to rejected/; it leaves the spool."""
        self.rejected_dir.mkdir(exist_ok=True)
        dest = self.rejected_dir / path.name
        os.replace(path, dest)
        self._files.pop(path, None)
        self._since.pop(path, None)
        return dest

    def keep_rejected(self, batch: storage_pb2.PageBatch, name: str) -> Path:
        """Write the captures storage rejected from an acknowledged batch to rejected/NAME."""
        self.rejected_dir.mkdir(exist_ok=True)
        dest = self.rejected_dir / name
        dest.write_bytes(batch.SerializeToString())
        return dest

    def oldest(self, n: int) -> list[Path]:
        return list(self._files)[:n]  # sequence numbers only grow: insertion order is age

    @staticmethod
    def read(path: Path) -> storage_pb2.PageBatch:
        b = storage_pb2.PageBatch()
        b.ParseFromString(path.read_bytes())
        return b

    @staticmethod
    def read_bytes(path: Path) -> bytes:
        """A spooled batch as it is on disk: a serialized PageBatch."""
        return path.read_bytes()

    def pages_in(self, path: Path) -> int:
        """How many captures the spooled file holds (0 for a file not in the spool)."""
        return self._files.get(path, 0)

    def fetched_from(self, path: Path) -> float | None:
        """The earliest fetched_at of the file's captures; None when not known (a file found on
        disk at start, written by an earlier process)."""
        return self._since.get(path)

    def remove(self, paths: list[Path]) -> None:
        for p in paths:
            p.unlink(missing_ok=True)
            self._files.pop(p, None)
            self._since.pop(p, None)

    def last_seq(self) -> int:
        """Seq of the newest batch written (0: none yet)."""
        return self._next - 1

    def shipped_through(self) -> int:
        """Every batch with a seq up to this one is acknowledged by storage (removed)."""
        first = next(iter(self._files), None)
        return int(first.stem.split("-")[0]) - 1 if first is not None else self._next - 1

    def __len__(self) -> int:
        return len(self._files)

    @property
    def pages(self) -> int:
        return sum(self._files.values())
