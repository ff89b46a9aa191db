"""Shared by the benchmarks: a process's CPU seconds, and pinning a subprocess to cores."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (not its children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(cores: set[int]):
    """A preexec_fn that pins the child to `cores` (or to what this process may use)."""
    cores = cores & os.sched_getaffinity(0) or os.sched_getaffinity(0)
    return lambda: os.sched_setaffinity(0, cores)
