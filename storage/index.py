"""The SQL index of captures and WARC files (SQLAlchemy Core; SQLite by default, PostgreSQL in production)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from wancrawl.errors import Unavailable


def make_tables(schema: str | None = None) -> tuple[sa.MetaData, sa.Table, sa.Table]:
    md = sa.MetaData(schema=schema)
    captures = sa.Table(
        "storage_captures", md,
        sa.Column("record_id", sa.String(100), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("canonical_url", sa.Text, nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("fetched_at", sa.Float, nullable=False),  # epoch seconds
        sa.Column("warc_date", sa.String(40), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("content_type", sa.String(255), nullable=False),
        sa.Column("payload_digest", sa.String(64), nullable=False),
        sa.Column("payload_length", sa.BigInteger, nullable=False),
        sa.Column("record_type", sa.String(16), nullable=False),  # response | revisit
        sa.Column("refers_to", sa.String(100)),
        sa.Column("truncated", sa.String(32), nullable=False, default=""),
        sa.Column("ip", sa.String(64), nullable=False, default=""),
        sa.Column("warc_file", sa.String(255), nullable=False),
        sa.Column("warc_offset", sa.BigInteger, nullable=False),
        sa.Column("warc_length", sa.BigInteger, nullable=False),  # the response/revisit record
        sa.Column("group_length", sa.BigInteger, nullable=False),  # response + request + metadata
        sa.Column("raw_length", sa.BigInteger, nullable=False),
        sa.Index("ix_storage_captures_url_time", "canonical_url", "fetched_at"),
        sa.Index("ix_storage_captures_digest", "payload_digest"),
        sa.Index("ix_storage_captures_host", "host"),
        sa.Index("ix_storage_captures_agent", "agent_id"),
        sa.Index("ix_storage_captures_file", "warc_file", "warc_offset"),
    )
    files = sa.Table(
        "storage_warc_files", md,
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("warcinfo_length", sa.BigInteger, nullable=False),
    )
    return md, captures, files


def make_parts_table(md: sa.MetaData) -> sa.Table:
    """Object parts the index names (S3 sink): recovery completes an abandoned multipart upload
    with exactly these, so an object never holds a record the index does not."""
    return sa.Table(
        "storage_object_parts", md,
        sa.Column("object", sa.String(255), primary_key=True),
        sa.Column("upload_id", sa.String(255), primary_key=True),
        sa.Column("part_number", sa.Integer, primary_key=True),
        sa.Column("etag", sa.String(255), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
    )


def make_totals_tables(md: sa.MetaData) -> tuple[sa.Table, sa.Table, sa.Table]:
    """Running totals per host and per agent, kept by `Index.commit` in the transaction that
    inserts the captures, so Stats reads them instead of the whole index; and the index's
    meta table (name -> value), which says when the totals were filled from the captures."""
    hosts = sa.Table(
        "storage_host_totals", md,
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("captures", sa.BigInteger, nullable=False),
        sa.Column("stored_bytes", sa.BigInteger, nullable=False),  # sum of group_length
    )
    # Stats' busiest hosts: the first `top` entries of this index, not a sort of every host.
    sa.Index("ix_storage_host_totals_top", hosts.c.captures.desc(), hosts.c.host)
    agents = sa.Table(
        "storage_agent_totals", md,
        sa.Column("agent_id", sa.String(128), primary_key=True),
        sa.Column("captures", sa.BigInteger, nullable=False),
        sa.Column("revisits", sa.BigInteger, nullable=False),
        sa.Column("raw_bytes", sa.BigInteger, nullable=False),
        sa.Column("stored_bytes", sa.BigInteger, nullable=False),
    )
    meta = sa.Table(
        "storage_index_meta", md,
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    return hosts, agents, meta


def totals_of(rows: Iterable[dict]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """What capture rows add to the totals: host -> [captures, stored bytes] and agent ->
    [captures, revisits, raw bytes, stored bytes]."""
    hosts: dict[str, list[int]] = {}
    agents: dict[str, list[int]] = {}
    for r in rows:
        h = hosts.setdefault(r["host"], [0, 0])
        h[0] += 1
        h[1] += r["group_length"]
        a = agents.setdefault(r["agent_id"], [0, 0, 0, 0])
        a[0] += 1
        a[1] += r["record_type"] == "revisit"
        a[2] += r["raw_length"]
        a[3] += r["group_length"]
    return hosts, agents


@dataclass(frozen=True)
class Row:
    record_id: str
    url: str
    canonical_url: str
    host: str
    agent_id: str
    fetched_at: float
    warc_date: str
    status: int
    content_type: str
    payload_digest: str
    payload_length: int
    record_type: str
    refers_to: str | None
    truncated: str
    ip: str
    warc_file: str
    warc_offset: int
    warc_length: int
    group_length: int
    raw_length: int




_SCHEMA_LOCK = 0x77637374  # "wcst": the advisory lock key of storage's table creation


class Index:
    """Reads and writes the capture index; every method is blocking (call it off the event loop)."""

    def __init__(self, url: str, *, schema: str | None = None, durable: bool = True,
                 sqlite_cache_mb: int = 64, sqlite_wal_autocheckpoint: int = 16_384):
        self.url = url
        self.schema = schema
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        try:
            self.engine = sa.create_engine(url, **kwargs)
        except Exception as exc:  # noqa: BLE001 - bad URLs raise many types
            raise Unavailable(f"index {url!r}: {exc}") from None
        if self.engine.dialect.name == "sqlite":
            sync = "FULL" if durable else "NORMAL"

            @event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn, _record):  # WAL lets readers work while the writer commits
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA synchronous={sync}")
                cur.execute(f"PRAGMA cache_size={-1024 * int(sqlite_cache_mb)}")  # negative: KiB
                cur.execute(f"PRAGMA wal_autocheckpoint={int(sqlite_wal_autocheckpoint)}")
                cur.close()

        self.metadata, self.captures, self.files = make_tables(schema)
        self.parts = make_parts_table(self.metadata)
        self.host_totals, self.agent_totals, self.meta = make_totals_tables(self.metadata)
        try:
            with self.engine.begin() as conn:
                if self.engine.dialect.name == "postgresql":
                    # Several writers starting at once over one database: IF NOT EXISTS is not
                    # atomic in PostgreSQL (two creators collide on the catalog's unique index),
                    # so creation is serialised by a transaction-scoped advisory lock.
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK})
                if schema and self.engine.dialect.name == "postgresql":
                    conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
                self.metadata.create_all(conn)
                self._fill_totals(conn)
        except sa.exc.OperationalError as exc:
            raise Unavailable(f"index database unavailable ({url}): {exc.orig}") from None

    def close(self) -> None:
        self.engine.dispose()

    # -- writes ---------------------------------------------------------------------------
    def commit(self, rows: Sequence[dict], new_files: Sequence[dict] = (), parts: Sequence[dict] = ()) -> None:
        """Insert capture rows, new WARC file rows and object parts in one transaction. Two
        writers storing one record id: the primary key refuses the second commit (it is rolled
        back and retried, and then finds the record: a duplicate)."""
        with self.engine.begin() as conn:
            if new_files:
                conn.execute(self.files.insert(), list(new_files))
            if parts:
                conn.execute(self.parts.insert(), list(parts))
            if rows:
                conn.execute(self.captures.insert(), list(rows))
                self._add_totals(conn, rows)

    def _fill_totals(self, conn: sa.Connection) -> None:
        """Fill the totals from the captures once, for an index made before they existed (or a
        new, empty one): the meta row "totals" says it was done. Writers of an older version
        do not keep the totals, so every writer of one index must run this version or later."""
        if conn.execute(sa.select(self.meta.c.value).where(self.meta.c.name == "totals")).first() is not None:
            return
        if self.engine.dialect.name == "postgresql":
            # No capture committed by another writer between the count and the meta row.
            conn.execute(sa.text(f"LOCK TABLE {self._qualified(self.captures)} IN SHARE ROW EXCLUSIVE MODE"))
        # The meta row first: on SQLite its insert takes the write lock before the count reads.
        claimed = conn.execute(self._upsert(self.meta, ["name"], [{"name": "totals", "value": "filled"}], add=None))
        if claimed.rowcount == 0:
            return  # another process filled them meanwhile
        c = self.captures.c
        conn.execute(self.host_totals.insert().from_select(
            ["host", "captures", "stored_bytes"],
            sa.select(c.host, sa.func.count(), sa.func.coalesce(sa.func.sum(c.group_length), 0)).group_by(c.host)))
        conn.execute(self.agent_totals.insert().from_select(
            ["agent_id", "captures", "revisits", "raw_bytes", "stored_bytes"],
            sa.select(c.agent_id, sa.func.count(),
                      sa.func.coalesce(sa.func.sum(sa.case((c.record_type == "revisit", 1), else_=0)), 0),
                      sa.func.coalesce(sa.func.sum(c.raw_length), 0), sa.func.coalesce(sa.func.sum(c.group_length), 0))
            .group_by(c.agent_id)))

    def _qualified(self, table: sa.Table) -> str:
        return self.engine.dialect.identifier_preparer.format_table(table)

    def _upsert(self, table: sa.Table, keys: list[str], values: list[dict], add: list[str] | None) -> Any:
        """INSERT of `values`; on a key already there, add the `add` columns to its row (None:
        leave the row alone). SQLite and PostgreSQL both say ON CONFLICT."""
        from sqlalchemy.dialects import postgresql, sqlite

        insert: Any = postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert
        stmt = insert(table).values(values)
        if add is None:
            return stmt.on_conflict_do_nothing(index_elements=keys)
        return stmt.on_conflict_do_update(index_elements=keys, set_={k: table.c[k] + stmt.excluded[k] for k in add})

    def _add_totals(self, conn: sa.Connection, rows: Sequence[dict]) -> None:
        """Add the committed rows to the running totals, in the same transaction. In key order,
        so two writers' transactions lock shared rows in one order (no deadlock on PostgreSQL)."""
        hosts, agents = totals_of(rows)
        host_rows = [{"host": h, "captures": n, "stored_bytes": b} for h, (n, b) in sorted(hosts.items())]
        agent_rows = [{"agent_id": a, "captures": n, "revisits": rv, "raw_bytes": raw, "stored_bytes": b}
                      for a, (n, rv, raw, b) in sorted(agents.items())]
        for chunk in _chunks(host_rows, 500):  # SQLite binds at most 32,766 parameters a statement
            conn.execute(self._upsert(self.host_totals, ["host"], chunk, ["captures", "stored_bytes"]))
        for chunk in _chunks(agent_rows, 500):
            conn.execute(self._upsert(self.agent_totals, ["agent_id"], chunk, ["captures", "revisits", "raw_bytes", "stored_bytes"]))

    # -- lookups used by ingest ---------------------------------------------------------
    def existing_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(ids)
        found: set[str] = set()
        c = self.captures.c
        with self.engine.connect() as conn:
            for chunk in _chunks(ids, 500):
                found.update(conn.execute(sa.select(c.record_id).where(c.record_id.in_(chunk))).scalars())
        return found

    def originals(self, digests: Iterable[str]) -> dict[str, tuple[str, str, str, str]]:
        """digest -> (record_id, url, warc_date, digest) of the earliest stored response with that payload."""
        digests = list(digests)
        out: dict[str, tuple[str, str, str, str]] = {}
        c = self.captures.c
        with self.engine.connect() as conn:
            for chunk in _chunks(digests, 500):
                q = (sa.select(c.payload_digest, c.record_id, c.url, c.warc_date)
                     .where(c.payload_digest.in_(chunk), c.record_type == "response", c.truncated == "")
                     .order_by(c.fetched_at))
                for d, rid, url, date in conn.execute(q):
                    out.setdefault(d, (rid, url, date, d))
        return out

    def latest(self, canonical_urls: Iterable[str]) -> dict[str, Row]:
        """canonical URL -> its latest indexed capture (any type), for those that have one."""
        wanted = sorted(set(canonical_urls))
        out: dict[str, Row] = {}
        c = self.captures.c
        with self.engine.connect() as conn:
            for chunk in _chunks(wanted, 500):
                newest = (sa.select(c.canonical_url.label("u"), sa.func.max(c.fetched_at).label("t"))
                          .where(c.canonical_url.in_(chunk)).group_by(c.canonical_url).subquery())
                q = (sa.select(self.captures).join(newest, sa.and_(c.canonical_url == newest.c.u, c.fetched_at == newest.c.t))
                     .order_by(c.fetched_at, c.record_id))
                for r in conn.execute(q):
                    out[r.canonical_url] = Row(**r._mapping)
        return out

    def latest_with_digest(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Row]:
        """(canonical URL, payload digest) -> the latest indexed capture of that URL with that digest."""
        wanted = sorted(set(pairs))
        out: dict[tuple[str, str], Row] = {}
        c = self.captures.c
        with self.engine.connect() as conn:
            for chunk in _chunks(wanted, 500):
                q = (sa.select(self.captures)
                     .where(c.canonical_url.in_({u for u, _ in chunk}), c.payload_digest.in_({d for _, d in chunk}))
                     .order_by(c.fetched_at, c.record_id))
                asked = set(chunk)
                for r in conn.execute(q):
                    if (r.canonical_url, r.payload_digest) in asked:
                        out[(r.canonical_url, r.payload_digest)] = Row(**r._mapping)
        return out

    def history(self, canonical_url: str, limit: int = 0) -> list[Row]:
        """Every capture of a URL over time, oldest first (the last `limit` when limit > 0)."""
        c = self.captures.c
        q = sa.select(self.captures).where(c.canonical_url == canonical_url).order_by(c.fetched_at.desc(), c.record_id.desc())
        if limit > 0:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            rows = [Row(**r._mapping) for r in conn.execute(q)]
        rows.reverse()
        return rows

    # -- reads -------------------------------------------------------------------------------
    def get(self, record_id: str) -> Row | None:
        with self.engine.connect() as conn:
            r = conn.execute(sa.select(self.captures).where(self.captures.c.record_id == record_id)).first()
        return Row(**r._mapping) if r else None

    def find(self, canonical_url: str, at: float | None = None) -> Row | None:
        c = self.captures.c
        q = sa.select(self.captures).where(c.canonical_url == canonical_url)
        q = q.order_by(c.fetched_at.desc()) if at is None else q.order_by(sa.func.abs(c.fetched_at - at), c.fetched_at.desc())
        with self.engine.connect() as conn:
            r = conn.execute(q.limit(1)).first()
        return Row(**r._mapping) if r else None

    def statuses(self, canonical_urls: Iterable[str]) -> dict[str, set[int]]:
        """canonical URL -> the HTTP statuses of its captures, for those that have any."""
        wanted = sorted(set(canonical_urls))
        out: dict[str, set[int]] = {}
        c = self.captures.c
        with self.engine.connect() as conn:
            for chunk in _chunks(wanted, 500):
                for url, status in conn.execute(sa.select(c.canonical_url, c.status).where(c.canonical_url.in_(chunk)).distinct()):
                    out.setdefault(url, set()).add(status)
        return out

    def iter_rows(self, order_by_url: bool = False, batch: int = 2000) -> Iterator[Row]:
        c = self.captures.c
        q = sa.select(self.captures).order_by(*( (c.canonical_url, c.fetched_at) if order_by_url else (c.warc_file, c.warc_offset)))
        with self.engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=batch).execute(q)
            for r in result:
                yield Row(**r._mapping)

    def file_rows(self) -> dict[str, tuple[float, int]]:
        with self.engine.connect() as conn:
            return {n: (t, w) for n, t, w in conn.execute(sa.select(self.files.c.name, self.files.c.created_at, self.files.c.warcinfo_length))}

    def object_parts(self, prefix: str) -> dict[tuple[str, str], list[tuple[int, str, int]]]:
        """(object, upload id) -> its indexed parts (number, etag, size), for objects under prefix."""
        p = self.parts.c
        out: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
        with self.engine.connect() as conn:
            for obj, uid, n, etag, size in conn.execute(sa.select(p.object, p.upload_id, p.part_number, p.etag, p.size)
                                                         .where(p.object.startswith(prefix, autoescape=True))):
                out.setdefault((obj, uid), []).append((int(n), etag, int(size)))
        return out

    def file_ends(self) -> dict[str, int]:
        """Per WARC file, where its last indexed capture ends (what recovery keeps)."""
        c = self.captures.c
        q = sa.select(c.warc_file, sa.func.max(c.warc_offset + c.group_length)).group_by(c.warc_file)
        with self.engine.connect() as conn:
            return {f: int(end) for f, end in conn.execute(q)}

    def stats(self, top: int = 20) -> dict[str, Any]:
        """The archive's totals and its busiest hosts and agents, from the running totals (a
        row per host and per agent), not from the captures: milliseconds at millions of rows."""
        h, a = self.host_totals.c, self.agent_totals.c
        with self.engine.connect() as conn:
            pages, revisits, raw, stored, agents = conn.execute(sa.select(
                sa.func.coalesce(sa.func.sum(a.captures), 0), sa.func.coalesce(sa.func.sum(a.revisits), 0),
                sa.func.coalesce(sa.func.sum(a.raw_bytes), 0), sa.func.coalesce(sa.func.sum(a.stored_bytes), 0),
                sa.func.count(),
            )).one()
            hosts = conn.execute(sa.select(sa.func.count()).select_from(self.host_totals)).scalar_one()

            def per(t: sa.Table, col: sa.Column) -> list[tuple[str, int, int]]:
                q = sa.select(col, t.c.captures, t.c.stored_bytes).order_by(t.c.captures.desc(), col).limit(top)
                return [(k, int(n), int(b)) for k, n, b in conn.execute(q)]

            per_host, per_agent = per(self.host_totals, h.host), per(self.agent_totals, a.agent_id)
            files = conn.execute(sa.select(sa.func.count()).select_from(self.files)).scalar_one()
        return {
            "pages": int(pages), "revisits": int(revisits), "responses": int(pages) - int(revisits),
            "raw_bytes": int(raw), "stored_bytes": int(stored),
            "compression_ratio": (int(raw) / int(stored)) if stored else 0.0,
            "warc_files": int(files), "hosts": int(hosts), "agents": int(agents),
            "per_host": per_host, "per_agent": per_agent,
        }


def _chunks(seq: list, n: int) -> Iterator[list]:
    for i in range(0, len(seq), n):
        yield seq[i:i + n]
