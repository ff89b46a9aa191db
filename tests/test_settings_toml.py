"""Settings write their own TOML (issue 34, item 5): for every settings class of the agent, the
consultant and storage, what `to_toml()` writes loads back to an equal object, for the shipped
configs in configs/ and for settings with random keys changed (hypothesis)."""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import agent.settings as agent_settings
import consultant.settings as consultant_settings
import storage.config as storage_config
from conftest import REPO
from wancrawl.config import TomlWritable, build
from wancrawl.errors import ConfigError

CLASSES = sorted({c for mod in (agent_settings, consultant_settings, storage_config) for c in vars(mod).values()
                  if isinstance(c, type) and issubclass(c, TomlWritable) and c is not TomlWritable and dataclasses.is_dataclass(c)
                  and not c.__name__.startswith("_")}, key=lambda c: f"{c.__module__}.{c.__name__}")


def test_every_settings_class_of_the_three_services_writes_toml():
    names = {c.__name__ for c in CLASSES}
    assert {"AgentSettings", "ScopeSettings", "KademliaSettings", "RevisitSettings", "ConsultantSettings", "BalanceSettings",
            "AgentLocation", "StorageSettings", "ObjectStoreSettings", "IndexSettings"} <= names
    assert len(CLASSES) == 25  # with wancrawl.hostres.ResolverSettings (agent [dns], the consultant's DnsSettings base)


def _reload(s):
    """What the class's loader makes of `s.to_toml()` (the consultant: its file layout)."""
    data = tomllib.loads(s.to_toml())
    if isinstance(s, consultant_settings.ConsultantSettings):
        return consultant_settings.from_data(data)
    return build(type(s), data)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_defaults_write_an_empty_file(cls):
    if cls is consultant_settings.AgentLocation:
        cls = lambda: consultant_settings.AgentLocation(city="Harbin")  # noqa: E731 (one key is required)
    s = cls()
    assert _reload(s) == s
    if not isinstance(s, consultant_settings.AgentLocation):
        assert s.to_toml() == ""  # a key at its default is left out


SHIPPED = {
    "agent": ([REPO / "configs" / "agent-lab.toml"] + sorted(REPO.glob("configs/agents/*.toml")), agent_settings.load_settings),
    "consultant": (sorted(REPO.glob("configs/consultant-*.toml")), consultant_settings.load_settings),
    "storage": (sorted(REPO.glob("configs/storage*.toml")), storage_config.load),
}


@pytest.mark.parametrize("path, load", [(p, load) for paths, load in SHIPPED.values() for p in paths],
                         ids=lambda x: x.name if isinstance(x, Path) else "")
def test_shipped_configs_round_trip_through_their_loader(tmp_path, path, load):
    try:
        s = load(path)
    except ConfigError as exc:  # an agent config without agent_id is a template: give it one
        assert "agent_id is required" in str(exc)
        s = load(path, {"agent_id": "a1"})
    again = tmp_path / "again.toml"
    again.write_text(s.to_toml())
    assert load(again) == s
    assert s.to_toml() != ""  # every shipped config says something


def test_a_budget_without_limit_is_written_as_minus_one():
    s = agent_settings.ScopeSettings(max_depth=None, max_pages_per_host=-1, allowed_domains=["Example.COM"])
    assert tomllib.loads(s.to_toml()) == {"max_depth": -1, "max_pages_per_host": -1, "allowed_domains": ["example.com"]}
    assert _reload(s) == s


def test_the_consultant_writes_strategy_tables_at_top_level_and_leaves_filed_agents_to_their_file(tmp_path):
    filed = tmp_path / "locations.toml"
    filed.write_text('[a1]\ncity = "Harbin"\n')
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'strategy = "xor"\nagent_locations = "{filed}"\n[agents.a2]\nasn = 4134\n[xor]\nvirtual_ids = 64\n'
                   '[asn.isps]\ntelecom = [4134]\n')
    s = consultant_settings.load_settings(cfg)
    assert set(s.agents) == {"a1", "a2"}
    data = tomllib.loads(s.to_toml())
    assert data["xor"] == {"virtual_ids": 64} and data["asn"] == {"isps": {"telecom": [4134]}}
    assert set(data["agents"]) == {"a2"} and "strategies" not in data
    again = tmp_path / "again.toml"
    again.write_text(s.to_toml())
    assert consultant_settings.load_settings(again) == s


# --- random settings ---------------------------------------------------------------------------

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def _values(tp) -> st.SearchStrategy:
    """Values of a field's type, valid or not (the class's own checks decide)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[st.none() if a is type(None) else _values(a) for a in args])
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _instances(tp)
    if origin in (list, tuple):
        items = st.lists(_values(args[0]), max_size=3)
        return items.map(tuple) if origin is tuple else items
    if origin is dict:
        return st.dictionaries(st.text("abc-_1", min_size=1, max_size=4), _values(args[1]), max_size=2)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-2, 2**40)
    if tp is float:
        return st.floats(-1.0, 1e9, allow_nan=False) | st.sampled_from([0.0, 0.5, 1.0, 2.5, 3600.0])
    if tp is str:
        return TEXT | st.sampled_from(["", "asyncio", "127.0.0.1:7", "example.com", "s3", "os", "full", "kademlia"])
    return st.nothing()


def _instances(cls) -> st.SearchStrategy:
    """`cls` with one to three of its keys changed from their defaults (strategy tables kept, and
    the consultant's agent_locations: a file its writer reads)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init and f.compare and f.name != "agent_locations"
             and typing.get_args(hints[f.name])[-1:] != (typing.Any,)]

    @st.composite
    def build_one(draw):
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        kwargs = {n: draw(_values(hints[n])) for n in chosen}
        try:
            return cls(**kwargs)
        except (ValueError, TypeError, ConfigError):
            assume(False)

    return build_one()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_random_settings_round_trip(cls, data):
    s = data.draw(_instances(cls))
    assert _reload(s) == s
