"""The agent's config: the example loads, unknown keys are named, flags override the file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent.settings import load_settings
from wancrawl.errors import ConfigError

from conftest import REPO


def test_example_config_loads_with_paths_relative_to_it():
    s = load_settings(REPO / "configs" / "agent-lab.toml")
    assert s.agent_id == "telecom-beijing" and s.fetch.allow_networks == ["127.0.0.0/8"]
    assert s.hosts_file == str(REPO / "run" / "lab" / "geo" / "hosts")
    assert s.routing.alpha == 1000 and s.scope.max_depth == 8


def test_one_source_address_for_registration_and_fetching(tmp_path):
    from agent.settings import bind_ip, fetch_settings

    s = load_settings(REPO / "configs" / "agent-lab.toml")
    assert bind_ip(s) == "127.1.1.2" and fetch_settings(s).source_ip == "127.1.1.2"
    cfg = tmp_path / "a.toml"
    cfg.write_text('agent_id = "x"\nsource_ip = "127.1.1.2"\n[fetch]\nsource_ip = "127.1.1.3"\n')
    with pytest.raises(ConfigError, match="differ"):
        load_settings(cfg)


def test_bad_keys_and_values_are_named(tmp_path):
    cfg = tmp_path / "a.toml"
    cfg.write_text('agent_id = "x"\n[routing]\nalfa = 3\n')
    with pytest.raises(ConfigError, match=r"unknown key 'routing\.alfa'"):
        load_settings(cfg)
    cfg.write_text('agent_id = "x"\n[routing]\nbeta = 20000\n')
    with pytest.raises(ConfigError, match="routing.beta"):
        load_settings(cfg)
    cfg.write_text('[fetch]\nmax_body_bytes = 10\n')
    with pytest.raises(ConfigError, match="agent_id is required"):
        load_settings(cfg)
    s = load_settings(REPO / "configs" / "agent-lab.toml", {"agent_id": "other", "politeness.delay": 0.5})
    assert s.agent_id == "other" and s.politeness.delay == 0.5


def test_cli_reports_config_errors_and_exits_2(tmp_path):
    cfg = tmp_path / "a.toml"
    cfg.write_text('agent_id = "x"\nfetcher = "curl"\nlisten = "127.0.0.1:0"\n')
    p = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--config", str(cfg), "--data-dir", str(tmp_path / "d")],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2 and "unknown fetcher 'curl'" in p.stderr


def test_consultant_replicas_as_a_list_a_comma_string_or_one_address(tmp_path):
    from agent.settings import consultant_addresses

    cfg = tmp_path / "a.toml"
    cases = [('consultant = "c:1"', ("c:1",)), ('consultant = "c:1, d:2"', ("c:1", "d:2")),
             ('consultants = ["c:1", "d:2"]', ("c:1", "d:2")), ("", ("127.0.0.1:50051",)),
             ('consultants = ["c:1", "d:2"]\nconsultant = "c:1,d:2"', ("c:1", "d:2"))]
    for line, want in cases:
        cfg.write_text(f'agent_id = "x"\n{line}\n')
        assert consultant_addresses(load_settings(cfg)) == want, line
    for line, says in [('consultants = ["c:1"]\nconsultant = "e:5"', "differ: set one"),
                       ('consultants = ["c:1", "c:1"]', "'c:1' is listed twice"), ('consultants = "c:1"', "must be a list")]:
        cfg.write_text(f'agent_id = "x"\n{line}\n')
        with pytest.raises(ConfigError, match=says):
            load_settings(cfg)
    # The CLI flag replaces both keys of the file.
    cfg.write_text('agent_id = "x"\nconsultants = ["c:1", "d:2"]\n')
    s = load_settings(cfg, {"consultants": [], "consultant": "e:5,f:6"})
    assert consultant_addresses(s) == ("e:5", "f:6")
