"""docker-compose.yml checked statically (no Docker engine here): commands parse, configs load."""

from __future__ import annotations

import yaml

from conftest import REPO


def test_compose_commands_parse_and_their_configs_load():
    from consultant.cli import parser as consultant_parser
    from consultant.settings import load_settings

    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    checked = 0
    for name, svc in compose["services"].items():
        cmd = svc.get("command")
        if not cmd or cmd[0] != "consultant":
            continue
        args = consultant_parser().parse_args(cmd[1:])
        assert args.cmd == "serve"
        cfg = REPO / args.config.removeprefix("/app/")
        assert cfg.is_file(), f"{name}: {args.config} is not in the image"
        load_settings(cfg, {"state_url": args.state_url, "listen": args.listen})
        checked += 1
    assert checked >= 1
    docker = (REPO / "Dockerfile").read_text()
    assert "COPY configs" in docker and "pip install" in docker
