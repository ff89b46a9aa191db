"""WARC file appending with size-based rotation, group rollback and crash recovery (no SQL, no gRPC)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from wancrawl import warcrecords

log = logging.getLogger(__name__)

SUFFIX = ".warc.gz"


def needs_rotation(size: int | None, header_len: int, incoming: int, max_bytes: int) -> bool:
    """Rotate before a capture that would push the file past max_bytes, but never leave a file
    without captures (a capture larger than max_bytes gets a file of its own)."""
    if size is None:
        return True
    return size + incoming > max_bytes and size > header_len


@dataclass
class _Open:
    name: str
    path: Path
    fh: BinaryIO
    size: int
    header_len: int


class WarcWriter:
    """Appends capture groups to the current WARC file; one writer per directory at a time."""

    def __init__(self, directory: Path, prefix: str, max_bytes: int, *, fsync: bool, info: dict[str, str] | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self.max_bytes = max_bytes
        self.fsync = fsync
        self.info = info or {"software": "wancrawl-storage", "format": "WARC File Format 1.1"}
        self.current: _Open | None = None
        self._serial = len(list(self.dir.glob(f"*{SUFFIX}")))
        self._touched: dict[str, _Open] = {}
        self._marks: dict[str, int] = {}
        self._new: list[dict] = []

    # A "group" is what one index transaction covers; rollback undoes its appends.
    def begin(self) -> None:
        # Files the last group rotated away from stayed open for its rollback: close them now.
        for f in self._touched.values():
            if f is not self.current and not f.fh.closed:
                f.fh.close()
        self._touched.clear()
        self._marks.clear()
        self._new.clear()
        if self.current is not None:
            self._marks[self.current.name] = self.current.size

    def append(self, data: bytes) -> tuple[str, int]:
        """Write one capture group; return (file name, offset)."""
        cur = self.current
        if cur is None or needs_rotation(cur.size, cur.header_len, len(data), self.max_bytes):
            cur = self._rotate()
        offset = cur.size
        cur.fh.write(data)
        cur.size += len(data)
        self._touched[cur.name] = cur
        return cur.name, offset

    def sync(self) -> list[dict]:
        """Make the group durable per policy; return the rows of files created in this group."""
        for f in self._touched.values():
            f.fh.flush()
            if self.fsync:
                os.fsync(f.fh.fileno())
        if self._new and self.fsync:
            _fsync_dir(self.dir)
        return list(self._new)

    def rollback(self) -> None:
        """Forget everything appended since begin() (the index commit failed)."""
        new_names = {r["name"] for r in self._new}
        for name, f in list(self._touched.items()):
            if name in new_names:
                continue
            f.fh.flush()
            keep = self._marks.get(name, f.header_len)
            os.truncate(f.path, keep)
            f.fh.seek(keep)
            f.size = keep
        for name in new_names:
            created = self._touched.get(name) or (self.current if self.current and self.current.name == name else None)
            if created is not None:
                created.fh.close()
            (self.dir / name).unlink(missing_ok=True)
            if self.current is not None and self.current.name == name:
                self.current = None
        self._touched.clear()
        self._new.clear()

    def _rotate(self) -> _Open:
        if self.current is not None:
            self.current.fh.flush()
            if self.fsync:
                os.fsync(self.current.fh.fileno())
            if self.current.name not in self._touched:
                self.current.fh.close()
        self._serial += 1
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        name = f"{self.prefix}-{stamp}-{self._serial:05d}-{os.getpid()}{SUFFIX}"
        path = self.dir / name
        header = warcrecords.warcinfo_member(name, self.info)
        fh = open(path, "xb", buffering=1 << 20)
        fh.write(header)
        self.current = _Open(name, path, fh, len(header), len(header))
        self._touched[name] = self.current
        self._new.append({"name": name, "created_at": time.time(), "warcinfo_length": len(header)})
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.fh.flush()
            if self.fsync:
                os.fsync(self.current.fh.fileno())
            self.current.fh.close()
            self.current = None
        for f in self._touched.values():
            if not f.fh.closed:
                f.fh.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover(directory: Path, file_rows: dict[str, tuple[float, int]], file_ends: dict[str, int]) -> list[str]:
    """Cut WARC files back to what the index names: bytes past the last indexed capture were
    never acknowledged (the writer died between append and commit). Returns what was changed."""
    actions: list[str] = []
    directory = Path(directory)
    if not directory.exists():
        return actions
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        row = file_rows.get(path.name)
        if row is None:
            # Renamed, not deleted: an index pointed at the wrong directory must not destroy WARCs.
            path.rename(path.with_name(path.name + ".orphan"))
            actions.append(f"set aside {path.name} as .orphan (not in the index: never committed)")
            continue
        keep = max(row[1], file_ends.get(path.name, 0))
        size = path.stat().st_size
        if size > keep:
            os.truncate(path, keep)
            actions.append(f"truncated {path.name} from {size} to {keep} bytes (unacknowledged tail)")
    for name in file_rows:
        if not (directory / name).exists():
            actions.append(f"missing {name} (named by the index)")
    for a in actions:
        log.warning("recovery: %s", a)
    return actions
