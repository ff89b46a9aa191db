"""Stats from running totals (issue 24): equal to a recount of the captures, on SQLite and
PostgreSQL, with concurrent writers, after a failed commit, and for an index made before them."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
import sqlalchemy as sa

from storage.index import Index


def recount(index: Index, top: int) -> dict[str, Any]:
    """The reference: Stats as it was, every figure counted from the captures themselves."""
    c = index.captures.c
    with index.engine.connect() as conn:
        pages, raw, stored, revisits, hosts, agents = conn.execute(sa.select(
            sa.func.count(), sa.func.coalesce(sa.func.sum(c.raw_length), 0),
            sa.func.coalesce(sa.func.sum(c.group_length), 0),
            sa.func.coalesce(sa.func.sum(sa.case((c.record_type == "revisit", 1), else_=0)), 0),
            sa.func.count(sa.distinct(c.host)), sa.func.count(sa.distinct(c.agent_id)),
        )).one()

        def per(col):
            q = (sa.select(col, sa.func.count().label("n"), sa.func.sum(c.group_length))
                 .group_by(col).order_by(sa.desc("n"), col).limit(top))
            return [(k, int(n), int(b or 0)) for k, n, b in conn.execute(q)]

        per_host, per_agent = per(c.host), per(c.agent_id)
        files = conn.execute(sa.select(sa.func.count()).select_from(index.files)).scalar_one()
    return {
        "pages": int(pages), "revisits": int(revisits), "responses": int(pages) - int(revisits),
        "raw_bytes": int(raw), "stored_bytes": int(stored),
        "compression_ratio": (int(raw) / int(stored)) if stored else 0.0,
        "warc_files": int(files), "hosts": int(hosts), "agents": int(agents),
        "per_host": per_host, "per_agent": per_agent,
    }


def make_rows(rnd: random.Random, n: int, tag: str) -> list[dict]:
    rows = []
    for i in range(n):
        host = f"h{int(rnd.paretovariate(1.2)) % 60}.example"  # a few busy hosts, many quiet ones
        url = f"http://{host}/{tag}/{i}"
        rows.append({
            "record_id": f"<urn:uuid:{tag}-{i}-{rnd.getrandbits(64):x}>", "url": url, "canonical_url": url,
            "host": host, "agent_id": f"agent-{rnd.randrange(7)}", "fetched_at": rnd.uniform(0, 1e9),
            "warc_date": "2026-11-25T00:00:00Z", "status": 200, "content_type": "text/html",
            "payload_digest": f"sha1:{rnd.getrandbits(100):x}", "payload_length": rnd.randrange(10**6),
            "record_type": "revisit" if rnd.random() < 0.3 else "response", "refers_to": None, "truncated": "",
            "ip": "127.0.0.1", "warc_file": f"f{i % 3}.warc.gz", "warc_offset": rnd.randrange(10**9),
            "warc_length": rnd.randrange(10**5), "group_length": rnd.randrange(1, 10**5), "raw_length": rnd.randrange(1, 10**6),
        })
    return rows


@pytest.fixture(params=["sqlite", "postgres"])
def index_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/index.db"
    return request.getfixturevalue("pg_url")


def check(index: Index) -> None:
    for top in (0, 1, 3, 20, 100):
        assert index.stats(top) == recount(index, top)


def test_stats_equal_a_recount_with_concurrent_writers(index_url):
    index = Index(index_url, durable=False)
    assert index.stats() == recount(index, 20)  # empty
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        rnd = random.Random(w)
        try:
            mine = Index(index_url, durable=False)  # its own engine, as another storage writer
            for b in range(15):
                mine.commit(make_rows(rnd, rnd.randrange(1, 120), f"w{w}b{b}"),
                            [{"name": f"w{w}-{b}.warc.gz", "created_at": 0.0, "warcinfo_length": 1}] if b % 5 == 0 else [])
            mine.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    s = index.stats()
    assert s["pages"] > 1000 and s["revisits"] > 0 and s["hosts"] > 10 and s["agents"] == 7
    check(index)
    index.close()


def test_a_refused_commit_leaves_the_totals_alone(index_url):
    index = Index(index_url, durable=False)
    rnd = random.Random(1)
    first = make_rows(rnd, 50, "a")
    index.commit(first)
    before = index.stats()
    with pytest.raises(sa.exc.IntegrityError):  # one record id already stored: the whole commit refused
        index.commit(make_rows(rnd, 20, "b") + [first[0]])
    assert index.stats() == before == recount(index, 20)
    index.close()


def test_an_index_made_before_the_totals_gets_them_from_its_captures(index_url):
    index = Index(index_url, durable=False)
    rnd = random.Random(2)
    for b in range(5):
        index.commit(make_rows(rnd, 200, f"b{b}"))
    # As a version without the totals left it: no totals tables, no meta row.
    with index.engine.begin() as conn:
        for t in (index.host_totals, index.agent_totals, index.meta):
            t.drop(conn)
    index.close()
    again = Index(index_url, durable=False)
    check(again)
    again.commit(make_rows(rnd, 100, "after"))
    check(again)
    again.close()
    third = Index(index_url, durable=False)  # filled once: reopening counts nothing twice
    check(third)
    third.close()


def test_the_sqlite_cache_and_checkpoint_come_from_the_settings(tmp_path):
    from storage.config import IndexSettings, StorageSettings
    from storage.store import Store

    for cache, ckpt in ((None, None), (8, 500)):
        given = {} if cache is None else {"sqlite_cache_mb": cache, "sqlite_wal_autocheckpoint": ckpt}
        index = IndexSettings(**given)
        store = Store(StorageSettings(data_dir=str(tmp_path / f"d{cache}"), index=index))
        with store.index.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -1024 * index.sqlite_cache_mb
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == index.sqlite_wal_autocheckpoint
        store.close()
    assert (IndexSettings().sqlite_cache_mb, IndexSettings().sqlite_wal_autocheckpoint) == (64, 16_384)
    with pytest.raises(ValueError, match="sqlite_cache_mb"):
        IndexSettings(sqlite_cache_mb=0)
