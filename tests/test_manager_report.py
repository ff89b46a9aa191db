"""`manager report` against storage's real index and a real consultant with lab-style City/ASN DBs."""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid

import pytest

from conftest import free_port
from consultant_helpers import loc, running, settings_for
from geodata import ISP_GROUPS, write_asn_db, write_city_db, write_hosts
from manager import cli as manager_cli
from manager.report import choose_bin, run_report
from storage.index import Index
from wancrawl.errors import FailedPrecondition, InvalidArgument, Unavailable

T0 = 1_700_000_000.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
AGENTS = {  # id -> (city, lat, lon, asn)
    "telecom-beijing": ("Beijing", 39.9042, 116.4074, 4134),
    "unicom-harbin": ("Harbin", 45.8038, 126.5350, 4837),
    "cernet-guangzhou": ("Guangzhou", 23.1291, 113.2644, 4538),
}
# (agent, host, pages): telecom-beijing fetches 4 pages at home, 2 in its ISP elsewhere, 2 in its
# city in another ISP, 2 in neither; unicom-harbin 3 at home and 1 on a host no DB knows;
# cernet-guangzhou 2 at home; "ghost" is in the index but the consultant never heard of it.
FETCHES = [
    ("telecom-beijing", "s10.telecom-beijing.test", 4),
    ("telecom-beijing", "s10.telecom-harbin.test", 2),
    ("telecom-beijing", "s10.unicom-beijing.test", 2),
    ("telecom-beijing", "s10.cernet-guangzhou.test", 2),
    ("unicom-harbin", "s11.unicom-harbin.test", 3),
    ("unicom-harbin", "nowhere.example", 1),
    ("cernet-guangzhou", "s12.cernet-guangzhou.test", 2),
    ("ghost", "s10.telecom-beijing.test", 1),
]


def capture_row(i: int, agent: str, host: str, at: float) -> dict:
    url = f"http://{host}/page{i}"
    return {
        "record_id": f"<urn:uuid:00000000-0000-0000-0000-{i:012d}>", "url": url, "canonical_url": url, "host": host,
        "agent_id": agent, "fetched_at": at, "warc_date": "2023-11-14T22:13:20Z", "status": 200,
        "content_type": "text/html", "payload_digest": f"sha1:{i:032d}", "payload_length": 1000,
        "record_type": "response", "refers_to": None, "truncated": "", "ip": "", "warc_file": "a.warc.gz",
        "warc_offset": i * 3000, "warc_length": 2000, "group_length": 3000, "raw_length": 9000,
    }


def build_index(path, fetches=FETCHES, spacing=0.5) -> str:
    """Rows through storage's own Index; fetch i happens at T0 + i*spacing."""
    url = f"sqlite:///{path}"
    index = Index(url)
    rows, i = [], 0
    for agent, host, n in fetches:
        for _ in range(n):
            rows.append(capture_row(i, agent, host, T0 + i * spacing))
            i += 1
    index.commit(rows, [{"name": "a.warc.gz", "created_at": T0, "warcinfo_length": 300}])
    index.close()
    return url


@pytest.fixture
def geo(tmp_path):
    write_hosts(tmp_path / "hosts")
    return settings_for(
        tmp_path, strategy="asn", asn__isps=ISP_GROUPS, dns__hosts_file=str(tmp_path / "hosts"),
        databases__city_db=str(write_city_db(tmp_path / "city.mmdb")),
        databases__asn_db=str(write_asn_db(tmp_path / "asn.mmdb")),
    )


async def with_consultant(settings, fn, *, register=True, leave=("cernet-guangzhou",)):
    """Run fn(address) in a thread (it runs its own event loop) beside an in-process consultant."""
    async with running(settings) as (_server, client):
        if register:
            for n, (agent, (city, lat, lon, asn)) in enumerate(AGENTS.items()):
                await client.register(agent, f"127.0.0.{n + 2}:7000", location=loc(city, lat, lon, asn))
            for agent in leave:  # a departed agent's location still counts
                await client.deregister(agent)
        return await asyncio.to_thread(fn)


def namespace(out, consultant, index=None, storage_config=None):
    return argparse.Namespace(out=str(out), consultant=consultant, index=index, storage_config=storage_config)


def fixed_port(settings):
    from wancrawl.config import override

    port = free_port()
    return override(settings, "listen", f"127.0.0.1:{port}"), f"127.0.0.1:{port}"


def test_report_writes_pngs_and_locality_from_the_consultants_view(tmp_path, geo, run, capsys):
    url = build_index(tmp_path / "index.sqlite")
    settings, addr = fixed_port(geo)
    out = tmp_path / "report"
    assert run(with_consultant(settings, lambda: run_report(namespace(out, addr, index=url)))) == 0

    for name in ("pages_per_second.png", "pages_per_agent.png", "locality.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000, name
    s = json.loads((out / "summary.json").read_text())
    assert s["pages"] == 17 and s["agents"] == 4 and s["strategy"] == "asn"
    assert s["span_seconds"] == pytest.approx(16 * 0.5) and s["bin_seconds"] == 1.0
    assert s["pages_per_second"] == pytest.approx(17 / 8) and s["peak_pages_per_second"] == 2
    assert s["series"]["telecom-beijing"] == [2, 2, 2, 2, 2, 0, 0, 0, 0] and s["series"]["ghost"][-1] == 1
    per = s["per_agent"]
    assert {a: r["pages"] for a, r in per.items()} == {"telecom-beijing": 10, "unicom-harbin": 4, "cernet-guangzhou": 2, "ghost": 1}
    tb = per["telecom-beijing"]
    assert (tb["city"], tb["isp"], tb["asn"]) == ("Beijing", "telecom", 4134)
    assert (tb["same_isp"], tb["same_city"], tb["same_isp_and_city"]) == (6, 6, 4)
    assert tb["share"] == {"same_isp": 0.6, "same_city": 0.6, "same_isp_and_city": 0.4}
    uh = per["unicom-harbin"]
    assert (uh["same_isp"], uh["same_isp_and_city"], uh["site_isp_unknown"], uh["site_city_unknown"]) == (3, 3, 1, 1)
    assert per["cernet-guangzhou"]["share"]["same_isp_and_city"] == 1.0  # departed, still placed
    assert per["ghost"]["location_known"] is False and "share" not in per["ghost"]
    loc_ = s["locality"]
    assert loc_["pages_counted"] == 16 and (loc_["same_isp"], loc_["same_city"], loc_["same_isp_and_city"]) == (11, 11, 9)
    assert loc_["share"]["same_isp_and_city"] == pytest.approx(9 / 16)
    printed = capsys.readouterr().out
    assert "17 pages by 4 agents" in printed and str(out / "locality.png") in printed


def test_report_through_the_cli_with_a_storage_config_and_a_coarser_bin(tmp_path, geo, run):
    # 40 pages 20 s apart span 780 s: one-second bins would be 780 points; 5 s bins keep it under 300.
    storage_dir = tmp_path / "storage"
    storage_dir.mkdir()
    build_index(storage_dir / "index.sqlite", [("telecom-beijing", "s10.telecom-beijing.test", 40)], spacing=20)
    cfg = tmp_path / "storage.toml"
    cfg.write_text('data_dir = "storage"\n')
    settings, addr = fixed_port(geo)
    out = tmp_path / "r"
    argv = ["--consultant", addr, "report", "--out", str(out), "--storage-config", str(cfg)]
    assert run(with_consultant(settings, lambda: manager_cli.main(argv))) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["pages"] == 40 and s["bin_seconds"] == 5.0
    assert s["per_agent"]["telecom-beijing"]["share"]["same_isp_and_city"] == 1.0


def test_choose_bin_keeps_plots_readable():
    assert choose_bin(0) == 1 and choose_bin(300) == 1 and choose_bin(301) == 2
    assert choose_bin(3600) == 15 and choose_bin(86400) == 300


def test_index_password_stays_out_of_the_summary():
    from manager.report import _shown

    assert "secret" not in _shown("postgresql+psycopg://u:secret@db/wancrawl")


def test_missing_index_is_reported_and_not_created(tmp_path, capsys):
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(Unavailable, match="does not exist"):
        run_report(namespace(tmp_path / "o", "127.0.0.1:1", index=f"sqlite:///{missing}"))
    assert not missing.exists()
    assert manager_cli.main(["report", "--out", str(tmp_path / "o"), "--index", f"sqlite:///{missing}"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_empty_or_foreign_database_is_a_clear_error(tmp_path):
    empty = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    Index(empty).close()
    with pytest.raises(FailedPrecondition, match="no captures"):
        run_report(namespace(tmp_path / "o", "127.0.0.1:1", index=empty))
    import sqlite3

    sqlite3.connect(tmp_path / "other.sqlite").execute("create table t (x)").connection.close()
    with pytest.raises(Unavailable, match="no storage_captures table"):
        run_report(namespace(tmp_path / "o", "127.0.0.1:1", index=f"sqlite:///{tmp_path / 'other.sqlite'}"))


def test_index_source_must_be_given_once(tmp_path):
    with pytest.raises(InvalidArgument, match="--storage-config"):
        run_report(namespace(tmp_path, "127.0.0.1:1"))
    with pytest.raises(InvalidArgument, match="not both"):
        run_report(namespace(tmp_path, "127.0.0.1:1", index="sqlite:///x", storage_config="y.toml"))


def test_unreachable_consultant_is_a_clear_error_and_writes_nothing(tmp_path):
    url = build_index(tmp_path / "index.sqlite")
    addr = f"127.0.0.1:{free_port()}"
    with pytest.raises(Unavailable, match=f"consultant at {addr} is unreachable"):
        run_report(namespace(tmp_path / "o", addr, index=url))
    assert not (tmp_path / "o").exists()


@pytest.mark.postgres
def test_report_reads_a_postgresql_index_in_its_schema(tmp_path, geo, run, pg_url):
    # PostgreSQL bins with floor() (its integer cast rounds); fetches 0.6 s apart show whether it does.
    import sqlalchemy as sa

    schema = f"wc_report_test_{uuid.uuid4().hex[:12]}"  # like storage-compose.toml's own schema
    index = Index(pg_url, schema=schema)
    try:
        index.commit([capture_row(i, "telecom-beijing", "s10.telecom-beijing.test", T0 + i * 0.6) for i in range(5)])
        cfg = tmp_path / "storage.toml"
        cfg.write_text(f'data_dir = "{tmp_path / "st"}"\n[index]\nurl = "{pg_url}"\nschema = "{schema}"\n')
        settings, addr = fixed_port(geo)
        out = tmp_path / "pg"
        assert run(with_consultant(settings, lambda: run_report(namespace(out, addr, storage_config=str(cfg))))) == 0
    finally:
        with index.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        index.close()
    s = json.loads((out / "summary.json").read_text())
    assert s["pages"] == 5 and s["per_agent"]["telecom-beijing"]["same_isp_and_city"] == 5
    assert s["series"]["telecom-beijing"] == [2, 2, 1]  # 0, 0.6 | 1.2, 1.8 | 2.4
