"""Pages waiting for storage: serialized batches in a directory, drained when storage answers."""

from __future__ import annotations

import os
from pathlib import Path

from wancrawl.v1 import storage_pb2


class Spool:
    """One file per PageBatch (`<seq>.batch`), written whole (temp file, fsync, rename) so a
    crash leaves either the whole batch or nothing. Invariant: a file is removed only after
    storage acknowledged its batch; resending is safe (record ids make ingest idempotent)."""

    def __init__(self, directory: str | Path, fsync: bool = True):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        for tmp in self.dir.glob("*.tmp"):
            tmp.unlink()  # a write that never finished: its pages were never marked done
        seqs = [int(p.stem) for p in self.dir.glob("*.batch")]
        self._next = max(seqs, default=0) + 1

    def put(self, batch: storage_pb2.PageBatch) -> Path:
        data = batch.SerializeToString()
        seq = self._next
        self._next += 1
        tmp = self.dir / f"{seq:012d}.tmp"
        final = self.dir / f"{seq:012d}.batch"
        with open(tmp, "wb") as fh:
            fh.write(data)
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

    def oldest(self, n: int) -> list[Path]:
        return sorted(self.dir.glob("*.batch"))[:n]

    @staticmethod
    def read(path: Path) -> storage_pb2.PageBatch:
        b = storage_pb2.PageBatch()
        b.ParseFromString(path.read_bytes())
        return b

    def remove(self, paths: list[Path]) -> None:
        for p in paths:
            p.unlink(missing_ok=True)

    def __len__(self) -> int:
        return sum(1 for _ in self.dir.glob("*.batch"))

    def pages(self) -> int:
        return sum(len(self.read(p).captures) for p in self.oldest(10**9))
