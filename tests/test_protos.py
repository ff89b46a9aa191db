"""The generated code in wancrawl/v1 matches protos/ (run `python -m wancrawl.genproto` if not)."""

from __future__ import annotations

from wancrawl.genproto import generate, proto_files

from conftest import REPO


def test_generated_code_is_fresh(tmp_path):
    fresh = generate(tmp_path)
    committed = REPO / "wancrawl" / "v1"
    assert fresh, "protoc produced nothing"
    names = {p.name for p in fresh}
    assert names == {p.name for p in committed.glob("*_pb2*.py*")}, "generated file set differs: run python -m wancrawl.genproto"
    for f in fresh:
        assert f.read_bytes() == (committed / f.name).read_bytes(), f"{f.name} is stale: run python -m wancrawl.genproto"


def test_every_service_is_in_one_package():
    text = "".join(p.read_text() for p in proto_files())
    for service in ("service Consultant", "service Agent", "service Storage"):
        assert service in text
    assert all("package wancrawl.v1;" in p.read_text() for p in proto_files())
