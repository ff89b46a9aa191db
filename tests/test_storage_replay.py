"""Replay from the bucket: pages stored through the S3 sink into SeaweedFS, the index exported as
CDXJ (filenames s3://bucket/key), and pywb's own replay server (`wayback`, its S3 loader over
boto3) answering for a page with the body that was fetched. pywb runs in a subprocess: importing
its app monkey-patches the whole process with gevent."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from storage.client import make_batch
from storage.config import IndexSettings, IngestSettings, ObjectStoreSettings, StorageSettings, WarcSettings
from storage.store import Store, timestamp14
from storage.testing import fetch_result, pages
from manager.procs import free_port
from wancrawl.warcrecords import build_capture


def test_pywb_replays_a_page_from_the_bucket(bucket, tmp_path, monkeypatch):
    pytest.importorskip("pywb", reason="pywb (the dev extra) is not installed")
    server, name = bucket
    settings = StorageSettings(
        data_dir=str(tmp_path / "data"), index=IndexSettings(), warc=WarcSettings(sink="s3"), ingest=IngestSettings(fsync="os"),
        object_store=ObjectStoreSettings(endpoint=server.endpoint, bucket=name, access_key_id="k", secret_access_key="s",
                                         writer_id="w1", create_bucket=True))
    pairs = list(pages(6, seed=3, min_size=3_000, max_size=8_000))
    at = 1_700_000_000.0
    caps = [build_capture(fetch_result(u, b, at=at)) for u, b in pairs]
    store = Store(settings)
    store.ingest([make_batch(caps)])
    store.close()
    store = Store(settings, readonly=True)
    out = io.StringIO()
    store.export_cdxj(out)
    store.close()
    assert f"s3://{name}/w1/" in out.getvalue()

    index = tmp_path / "index.cdxj"
    index.write_text(out.getvalue())
    # The CDXJ names whole s3:// locations: pywb's archive path prefix must be empty, written as a
    # list (an empty string would be taken as "unset" and pywb's default `archive/` prefixed).
    (tmp_path / "config.yaml").write_text(
        f"collections:\n  bucket:\n    index_paths: {index}\n    archive_paths: ['']\n"
        "framed_replay: false\nenable_memento: true\n")
    # pywb's S3 loader makes a plain boto3 client: the endpoint and keys come from the environment,
    # path-style addressing from an AWS config file, as a deployment against MinIO or Ceph sets them.
    aws = tmp_path / "aws-config"
    aws.write_text("[default]\ns3 =\n    addressing_style = path\n")
    env = {**os.environ, "AWS_ENDPOINT_URL": server.endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(aws)}
    port = free_port()
    log = open(tmp_path / "pywb.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", "from pywb.apps.cli import wayback; wayback()", "--port", str(port),
                             "--bind", "127.0.0.1"], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url, body = pairs[2]
        got = _get_when_up(f"http://127.0.0.1:{port}/bucket/{timestamp14(at)}id_/{url}", proc)
        assert got == body, got.decode(errors="replace").split("<pre>")[-1][:3000]
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def _get_when_up(url: str, proc: subprocess.Popen, attempts: int = 300) -> bytes:
    for _ in range(attempts):
        if proc.poll() is not None:
            raise AssertionError(f"pywb exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}: ".encode() + exc.read()
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise AssertionError("pywb did not answer")
