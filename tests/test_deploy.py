"""docker-compose.yml and the Dockerfile checked statically (no Docker engine here) against the real CLIs and loaders."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tomllib

import yaml

from conftest import REPO, free_port

COMPOSE_TEXT = (REPO / "docker-compose.yml").read_text()
DOCKERFILE = (REPO / "Dockerfile").read_text()
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR:-default} substitution, enough for this file ($$ is a literal $)."""
    text = text.replace("$$", "\0")
    text = _VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), text)
    return text.replace("\0", "$")


def compose(env: dict[str, str] | None = None) -> dict:
    return yaml.safe_load(interpolate(COMPOSE_TEXT, env or {}))


SERVICES = compose()["services"]


def in_repo(path: str):
    """The repo file an image path names (the Dockerfile copies configs/ to /app/configs)."""
    assert path.startswith("/app/configs/"), f"{path} is not under /app/configs, where the image has the configs"
    return REPO / path.removeprefix("/app/")


def lab_world():
    from lab.topology import default_spec

    spec = default_spec()
    return spec, {f"{i.slug}-{c.slug}" for i in spec.isps for c in spec.cities}


def ours(name: str) -> bool:
    """Built from this repo's Dockerfile (not postgres, prometheus, grafana: third-party images)."""
    return "build" in SERVICES[name]


def role(name: str) -> str:
    cmd = SERVICES[name].get("command") or []
    return cmd[0] if cmd else ""


def services_of(kind: str) -> list[str]:
    return [n for n in SERVICES if role(n) == kind]


def container_ports(name: str) -> set[int]:
    return {int(str(p).rsplit(":", 1)[-1]) for p in SERVICES[name].get("ports", [])}


def mount_targets(name: str) -> set[str]:
    return {v.split(":")[1] for v in SERVICES[name].get("volumes", [])}


def postgres_url() -> str:
    env = SERVICES["postgres"]["environment"]
    return f"postgresql+psycopg://{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}@postgres:5432/{env['POSTGRES_DB']}"


def test_every_service_command_parses_with_its_real_cli():
    from agent.cli import parser as agent_parser
    from consultant.cli import parser as consultant_parser
    from manager.cli import parser as manager_parser
    from storage.cli import build_parser as storage_parser

    from wancrawl.pki import wancrawl_parser

    parsers = {"consultant": consultant_parser, "agent": agent_parser, "storage": storage_parser, "manager": manager_parser,
               "wancrawl": wancrawl_parser}
    for name, svc in SERVICES.items():
        if not ours(name):
            continue
        cmd = svc.get("command")
        assert cmd and cmd[0] in parsers, f"{name}: command {cmd!r} does not start with a wancrawl CLI"
        parsers[cmd[0]]().parse_args(cmd[1:])  # argparse exits (SystemExit) on a bad flag
    assert {role(n) for n in SERVICES} >= {"consultant", "storage", "agent", "manager"}
    assert {n for n in SERVICES if not ours(n)} == {"postgres", "prometheus", "grafana", "seaweedfs"}


def replicas() -> list[str]:
    """The consultant services, best first as every client lists them."""
    return services_of("consultant")


def replica_addresses() -> tuple[str, ...]:
    return tuple(f"{n}:{min(container_ports('consultant'))}" for n in replicas())


def test_consultant_serves_on_its_published_port_with_state_in_the_compose_postgres():
    from consultant.cli import parser
    from consultant.settings import load_settings

    name = "consultant"
    args = parser().parse_args(SERVICES[name]["command"][1:])
    assert args.cmd == "serve"
    cfg = in_repo(args.config)
    assert cfg.is_file(), f"{name}: {args.config} is not in the repo"
    s = load_settings(cfg, {"state_url": args.state_url, "listen": args.listen, "strategy": args.strategy})
    assert s.state_url == postgres_url()
    host, port = s.listen.rsplit(":", 1)
    assert host == "0.0.0.0" and int(port) in container_ports(name)
    assert "postgres" in SERVICES[name]["depends_on"]
    # The default strategy must run on the real web as it is: no lab DB or hosts file named.
    assert not (s.databases.city_db or s.databases.asn_db or s.databases.pyasn_file or s.dns.hosts_file)
    assert s.dns.system_dns


def test_swapping_the_strategy_is_one_variable_and_every_strategy_has_a_config():
    from consultant.cli import parser
    from consultant.partition import PARTITIONERS
    from consultant.settings import load_settings

    for strategy in PARTITIONERS:
        assert (REPO / "configs" / f"consultant-{strategy}.toml").is_file()
        svc = compose({"WANCRAWL_STRATEGY": strategy})["services"]["consultant"]
        args = parser().parse_args(svc["command"][1:])
        assert load_settings(in_repo(args.config)).strategy == strategy


def test_storage_keeps_warcs_on_its_volume_and_its_index_in_the_compose_postgres():
    from storage import config as storage_config
    from storage.cli import build_parser

    assert sorted(services_of("storage")) == ["storage", "storage-2"]
    name = "storage"
    args = build_parser().parse_args(SERVICES[name]["command"][1:])
    assert args.cmd == "serve"
    cfg = in_repo(args.config)
    assert cfg.is_file()
    s = storage_config.load(cfg)
    assert s.index_url() == postgres_url() and s.index.schema
    assert int(s.listen.rsplit(":", 1)[1]) in container_ports(name)
    assert s.data_dir in mount_targets(name)
    # The example for local processes loads too.
    assert storage_config.load(REPO / "configs" / "storage.toml").index_url().startswith("sqlite:///")


def test_the_object_store_profile_runs_two_writers_over_one_index_and_one_bucket():
    """WANCRAWL_STORAGE_CONFIG=storage-compose-s3.toml with --profile object-store: storage is
    writer w1 and storage-2 writer w2, both into SeaweedFS's bucket and the compose PostgreSQL."""
    from storage import config as storage_config
    from storage.cli import build_parser

    swapped = compose({"WANCRAWL_STORAGE_CONFIG": "storage-compose-s3.toml"})["services"]
    loaded = {}
    for name, svc in (("storage", swapped["storage"]), ("storage-2", SERVICES["storage-2"])):
        args = build_parser().parse_args(svc["command"][1:])
        s = storage_config.load(in_repo(args.config))
        assert s.warc.sink == "s3" and s.index_url() == postgres_url() and s.index.schema == "storage"
        assert int(s.listen.rsplit(":", 1)[1]) in container_ports(name) and s.data_dir in mount_targets(name)
        loaded[name] = s
    a, b = loaded["storage"].object_store, loaded["storage-2"].object_store
    assert loaded["storage"].consultant == loaded["storage-2"].consultant == ",".join(replica_addresses())
    # Agents dial storage-2 by its name: its certificate carries that name (pki --service storage-2).
    assert SERVICES["storage-2"]["environment"]["WANCRAWL_TLS_CERT"] == "/pki/service-storage-2.crt"
    pki_cmd = SERVICES["pki"]["command"]
    assert {"storage", "storage-2"} <= {pki_cmd[k + 1] for k in range(len(pki_cmd) - 1) if pki_cmd[k] == "--service"}
    assert (a.writer_id, b.writer_id) == ("w1", "w2"), "each writer owns its objects"
    assert a.endpoint == b.endpoint == "http://seaweedfs:8333" and a.bucket == b.bucket
    sw = SERVICES["seaweedfs"]
    assert sw["profiles"] == ["object-store"] and SERVICES["storage-2"]["profiles"] == ["object-store"]
    assert "-s3" in sw["command"] and "-s3.port=8333" in sw["command"] and ":" in sw["image"]
    assert SERVICES["storage-2"]["depends_on"]["seaweedfs"]["condition"] == "service_healthy"
    # Without the variable, storage keeps its WARCs on its volume, as before.
    default = build_parser().parse_args(SERVICES["storage"]["command"][1:])
    assert storage_config.load(in_repo(default.config)).warc.sink == "local"


def test_one_agent_service_per_lab_isp_city_group_each_in_its_profile():
    spec, groups = lab_world()
    extra = {i.slug for i in spec.isps} | {c.slug for c in spec.cities} | {"all-agents"}
    agents = services_of("agent")
    by_group: dict[str, list[str]] = {}
    for name in agents:
        profiles = SERVICES[name].get("profiles")
        assert profiles, f"{name}: an agent without a profile would start with every `up`"
        own = [p for p in profiles if p in groups]
        assert len(own) == 1, f"{name}: profiles {profiles} name {len(own)} ISP/city groups"
        assert set(profiles) <= groups | extra, f"{name}: unknown profile in {profiles}"
        isp, city = own[0].split("-")
        assert {isp, city, "all-agents"} <= set(profiles)
        by_group.setdefault(own[0], []).append(name)
    assert set(by_group) == groups
    assert all(len(v) == 1 for v in by_group.values()), by_group
    for name, svc in SERVICES.items():
        if role(name) != "agent":
            assert set(svc.get("profiles", [])) & groups == set(), f"{name} is not an agent but sits in an agent profile"


def test_every_agent_config_loads_and_places_the_agent_where_its_profile_says():
    from agent.cli import parser
    from agent.settings import consultant_addresses, load_settings

    spec, groups = lab_world()
    isps = {i.slug: i for i in spec.isps}
    cities = {c.slug: c for c in spec.cities}
    consultant_port = min(container_ports("consultant"))
    writers = {"storage": f"storage:{min(container_ports('storage'))}",
               "storage-2": f"storage-2:{min(container_ports('storage-2'))}"}
    ids = set()
    used = set()
    for name in services_of("agent"):
        svc = SERVICES[name]
        args = parser().parse_args(svc["command"][1:])
        assert args.cmd == "run"
        cfg = in_repo(args.config)
        assert cfg.is_file(), f"{name}: {args.config} is not in the repo"
        used.add(cfg)
        s = load_settings(cfg, {"agent_id": args.agent_id, "listen": args.listen, "advertise": args.advertise})
        group = next(p for p in svc["profiles"] if p in groups)
        isp_slug, city_slug = group.split("-")
        isp, city = isps[isp_slug], cities[city_slug]
        loc = s.location
        assert (loc.city, loc.lat, loc.lon, loc.asn) == (city.name, city.lat, city.lon, isp.asn), f"{name}: {loc}"
        assert s.agent_id not in ids
        ids.add(s.agent_id)
        port = s.listen.rsplit(":", 1)[1]
        assert s.listen.startswith("0.0.0.0:")
        assert s.advertise == f"{name}:{port}", f"{name}: peers dial {s.advertise}, the service is {name}"
        assert consultant_addresses(s) == replica_addresses() and consultant_port == 50051
        # Both writers, its region's first (north: storage; south: storage-2): docs/storage.md.
        first = "storage-2" if city_slug == "guangzhou" else "storage"
        assert s.storage == ",".join([writers[first]] + [w for n, w in writers.items() if n != first]), name
        assert s.data_dir in mount_targets(name), f"{name}: data_dir {s.data_dir} is not on a volume"
        # Containers crawl the real web: no private range may be opened for them.
        assert not s.fetch.allow_networks and not s.source_ip and s.system_dns
        assert {"consultant", "storage"} <= set(svc["depends_on"])
    assert used == set((REPO / "configs" / "agents").glob("*.toml")), "an agent config no service uses"


def test_the_consultant_states_where_every_compose_agent_stands():
    """A container's address says nothing about the ISP and city it stands for, and under
    mutual TLS the consultant refuses a location it cannot verify (docs/security.md): so its
    --agent-locations file lists every compose agent, and each agent's own [location] agrees
    with it (else its Register would be refused)."""
    from agent.cli import parser as agent_parser
    from agent.settings import load_settings as agent_settings
    from consultant.cli import parser
    from consultant.settings import load_settings
    from consultant.whereabouts import Evidence, Place, settle

    args = parser().parse_args(SERVICES["consultant"]["command"][1:])
    assert args.agent_locations, "the compose consultant is given no agent locations"
    s = load_settings(in_repo(args.config), {"agent_locations": str(in_repo(args.agent_locations))})
    ids = set()
    for agent in services_of("agent"):
        a = agent_settings(in_repo(agent_parser().parse_args(SERVICES[agent]["command"][1:]).config))
        ids.add(a.agent_id)
        loc = a.location
        claim = Place(loc.city, loc.country, loc.lat, loc.lon, loc.asn)
        # Its Register as the consultant sees it: a compose-network address, no DB entry for it.
        got = settle(a.agent_id, a.source_ip, claim, Evidence(True, connection_ip="172.18.0.5"), s.agents.get(a.agent_id),
                     lambda ip: Place())
        assert got.place == claim, f"{agent}: the consultant places it at {got.place}, its config says {claim}"
    assert set(s.agents) == ids


def test_volumes_dependencies_and_healthchecks_are_consistent():
    doc = compose()
    declared = set(doc.get("volumes") or {})
    for name, svc in SERVICES.items():
        for v in svc.get("volumes", []):
            src = v.split(":")[0]
            if not src.startswith((".", "/")):
                assert src in declared, f"{name}: volume {src} is not declared"
        for dep, how in (svc.get("depends_on") or {}).items():
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
            if how.get("condition") == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep} to be healthy; it has no healthcheck"
    # Read-only mounts (the pki volume) are shared on purpose; data volumes never.
    data_volumes = [v.split(":")[0] for n in services_of("agent") for v in SERVICES[n]["volumes"] if not v.endswith(":ro")]
    assert len(data_volumes) == len(set(data_volumes)), "two agents share a data volume"


def _healthcheck_argv(name: str, port: int) -> list[str]:
    test = SERVICES[name]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    # podman's Docker API (4.3) splits a health check's arguments at spaces (issue 35): none may have one
    assert not any(" " in a for a in test), f"{name}: {test}"
    return [sys.executable, *(a.replace(f"127.0.0.1:{min(container_ports(name))}", f"127.0.0.1:{port}") for a in test[2:])]


def test_the_grpc_healthcheck_command_tells_serving_from_down(tmp_path, run):
    from consultant_helpers import running, settings_for
    from wancrawl.config import override

    async def check(argv: list[str]) -> int:
        p = await asyncio.create_subprocess_exec(*argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        return await asyncio.wait_for(p.wait(), 30)

    port = free_port()

    async def go():
        assert await check(_healthcheck_argv("consultant", port)) == 1  # nothing listens yet
        async with running(override(settings_for(tmp_path), "listen", f"127.0.0.1:{port}")):
            assert await check(_healthcheck_argv("consultant", port)) == 0
            assert await check(_healthcheck_argv("storage", port)) == 0  # the same probe

    run(go())


def test_dockerfile_builds_one_image_with_what_the_services_need():
    # Users get python:3.11-slim; scripts/compose-e2e.sh passes a Debian base of its own (--build-arg BASE).
    assert re.search(r"^ARG BASE=python:3\.11-slim$", DOCKERFILE, re.M)
    assert re.findall(r"^FROM (\S+)", DOCKERFILE, re.M) == ["${BASE}", "${BASE}"]
    copies = re.findall(r"^COPY (?!--from)(.+?) (\S+)$", DOCKERFILE, re.M)
    copied = {src for srcs, _dst in copies for src in srcs.split()}
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied, f"packages not copied: {packages - copied}"
    assert {"pyproject.toml", pyproject["project"]["readme"], "configs"} <= copied
    for src in copied:
        assert (REPO / src).exists(), f"Dockerfile copies {src}, which is not in the repo"
    # configs land where the services name them (/app/configs/...).
    assert re.search(r"^WORKDIR /app$", DOCKERFILE, re.M) and ("configs", "./configs") in copies
    assert re.search(r"pip (install|wheel)[^\n]* \.$", DOCKERFILE, re.M)
    user = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)
    assert user and user[-1] not in ("root", "0"), "the image must run as a non-root user"
    assert re.search(r'^VOLUME \["?/data"?\]', DOCKERFILE, re.M)
    # A fresh named volume starts out as the image's directory, owner included: every one a service
    # of this image writes into must be a directory the image gives its user (issue 35: /pki was not).
    owned = {d for line in re.findall(r"chown wancrawl:wancrawl (.+)$", DOCKERFILE, re.M) for d in line.split()}
    for name in SERVICES:
        if ours(name):
            for v in SERVICES[name].get("volumes", []):
                src, target, *mode = v.split(":")
                if not src.startswith((".", "/")) and "ro" not in mode:
                    assert target in owned, f"{name} writes into the volume {src} at {target}, which the image does not give to wancrawl"
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", DOCKERFILE, re.M) for p in line.split()}
    for name in SERVICES:
        if ours(name):
            assert container_ports(name) <= exposed
    for name in services_of("agent"):
        # Every agent's build and image are the one image.
        assert SERVICES[name]["image"] == SERVICES["consultant"]["image"]


def test_deployment_doc_names_every_profile_and_the_strategy_switch():
    text = (REPO / "docs" / "deployment.md").read_text()
    _spec, groups = lab_world()
    assert sorted(g for g in groups if g not in text) == []
    assert "WANCRAWL_STRATEGY" in text and "lab up" in text


def test_two_consultant_replicas_share_one_state_and_every_client_lists_both():
    """`consultant` always, `consultant-2` in profile `replicas`: the same command (config,
    PostgreSQL state, agent locations), each with its own certificate and host port; agents,
    storage and the manager list both, consultant first."""
    from storage import config as storage_config
    from storage.cli import build_parser

    assert replicas() == ["consultant", "consultant-2"]
    one, two = (SERVICES[n] for n in replicas())
    assert one["command"] == two["command"] and "profiles" not in one and two["profiles"] == ["replicas"]
    assert two["depends_on"] == one["depends_on"] and "postgres" in two["depends_on"]
    assert two["environment"]["WANCRAWL_TLS_CERT"] == "/pki/service-consultant-2.crt"
    pki_cmd = SERVICES["pki"]["command"]
    assert {"consultant", "consultant-2"} <= {pki_cmd[k + 1] for k in range(len(pki_cmd) - 1) if pki_cmd[k] == "--service"}
    assert container_ports("consultant-2") == container_ports("consultant")
    assert SERVICES["consultant"]["ports"] != SERVICES["consultant-2"]["ports"]
    want = ",".join(replica_addresses())
    assert SERVICES["manager"]["environment"]["WANCRAWL_CONSULTANT"] == want
    args = build_parser().parse_args(SERVICES["storage"]["command"][1:])
    assert storage_config.load(in_repo(args.config)).consultant == want


def test_compose_agents_must_say_who_runs_them(monkeypatch):
    """Issue 35: the contact is WANCRAWL_CONTACT, not a value baked into nine configs; an agent
    without one exits at once (before anything starts), as `manager crawl` does without --contact."""
    import pytest

    from agent.cli import _run, parser
    from agent.settings import load_settings
    from wancrawl.contact import required
    from wancrawl.errors import ConfigError

    monkeypatch.delenv("WANCRAWL_CONTACT", raising=False)
    for name in services_of("agent"):
        cmd = SERVICES[name]["command"]
        assert cmd[-2:] == ["--contact", ""], f"{name}: the contact is not passed from WANCRAWL_CONTACT"
        # `agent run` prints the error and exits 2 (agent.cli.main); it is raised before anything starts
        with pytest.raises(ConfigError, match="WANCRAWL_CONTACT"):
            _run(parser().parse_args(cmd[1:]))
        with pytest.raises(ConfigError, match="URL or an e-mail"):  # neither a URL nor an address
            _run(parser().parse_args([*cmd[1:-1], "example.org"]))
    contact = "mailto:crawl-operator@example.org"
    for name, svc in compose({"WANCRAWL_CONTACT": contact})["services"].items():
        if role(name) == "agent":
            args = parser().parse_args(svc["command"][1:])
            s = load_settings(in_repo(args.config), {"fetch.user_agent": required(args.contact)})
            assert s.fetch.user_agent == f"wancrawl/0.1 (+{contact})"
    assert "WANCRAWL_CONTACT" in (REPO / "docs" / "deployment.md").read_text()
