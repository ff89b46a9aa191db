"""Shared fixtures: PostgreSQL when it answers (else a skip that says why), consultant servers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from pathlib import Path

import pytest

PG_HOST = os.environ.get("WANCRAWL_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("WANCRAWL_TEST_PG_PORT", "5432"))
PG_DB = os.environ.get("WANCRAWL_TEST_PG_DB", "test")
PG_USER = os.environ.get("WANCRAWL_TEST_PG_USER", "postgres")


def _pg_reason() -> str | None:
    """None when PostgreSQL answers on 127.0.0.1:5432, else why not."""
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=1):
            pass
    except OSError as exc:
        return f"PostgreSQL not reachable on {PG_HOST}:{PG_PORT} ({exc}); no Docker engine for testcontainers either"
    try:
        import psycopg

        with psycopg.connect(host=PG_HOST, port=PG_PORT, dbname=PG_DB, user=PG_USER, connect_timeout=2):
            pass
    except Exception as exc:  # noqa: BLE001
        return f"PostgreSQL on {PG_HOST}:{PG_PORT} refused database {PG_DB!r} as {PG_USER!r}: {exc}"
    return None


@pytest.fixture
def pg_url():
    """A SQLAlchemy URL to a fresh schema of the test database, dropped afterwards."""
    reason = _pg_reason()
    if reason:
        pytest.skip(reason)
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(host=PG_HOST, port=PG_PORT, dbname=PG_DB, user=PG_USER, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{PG_DB}?options=-csearch_path%3D{schema}"
    with psycopg.connect(host=PG_HOST, port=PG_PORT, dbname=PG_DB, user=PG_USER, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


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
