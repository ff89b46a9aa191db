"""Shared by the benchmarks: a process's CPU seconds, and pinning a subprocess to cores."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (not its children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def page_faults(pid: int) -> int:
    """Minor + major page faults of a process so far (not its children), from /proc: a heap that
    is given back to the kernel and taken again shows here, CPU of the kernel's, whatever the load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]) + int(fields[9])


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (utime + stime) by thread name of a live process, threads of one name summed
    (the main thread goes by the process's name; gRPC's core names its own). Threads that
    ended are not in it: compare two snapshots taken while the process runs."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def pin(cores: set[int]):
    """A preexec_fn that pins the child to `cores` (or to what this process may use)."""
    cores = cores & os.sched_getaffinity(0) or os.sched_getaffinity(0)
    return lambda: os.sched_setaffinity(0, cores)
