"""Every example config in configs/ loads, and each strategy's example names its strategy."""

from __future__ import annotations

import pytest

from consultant.settings import load_settings

from conftest import REPO

CONFIGS = sorted((REPO / "configs").glob("consultant-*.toml"))


def test_one_example_per_strategy():
    from consultant.partition import PARTITIONERS

    assert {p.stem.removeprefix("consultant-") for p in CONFIGS} >= set(PARTITIONERS)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_loads_with_paths_relative_to_it(path):
    s = load_settings(path)
    assert path.stem.endswith(s.strategy)
    for f in (s.databases.city_db, s.databases.asn_db, s.dns.hosts_file):
        assert not f or f.startswith(str(REPO))
    assert s.state_url.startswith(f"sqlite:///{REPO}")
