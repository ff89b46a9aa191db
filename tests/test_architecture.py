"""The floor plan holds (docs/architecture.md): import directions by import-linter's contracts in
pyproject.toml, every agent module in a room, no package over 20 modules, and the architecture
document naming only modules that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import REPO

PACKAGES = ["agent", "consultant", "storage", "manager", "wancrawl", "lab", "bench"]
MAX_MODULES = 20
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {c["id"]: c for c in CONFIG["contracts"]}


def lint_imports(cwd: Path, *contracts: str) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (it is in the dev extra: pip install -e .[dev])")
    args = [exe, "--no-cache", *(a for c in contracts for a in ("--contract", c))]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_import_contracts_hold():
    p = lint_imports(REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in p.stdout


def test_contracts_cover_every_top_level_package():
    assert sorted(CONFIG["root_packages"]) == sorted(PACKAGES)
    floors = {p.strip() for layer in CONTRACTS["floors"]["layers"] for p in layer.split("|")}
    assert floors == set(PACKAGES)
    assert sorted(CONTRACTS["acyclic"]["ancestors"]) == sorted(PACKAGES)


def test_every_agent_module_is_in_a_room():
    """A module added to agent/ outside the rooms' contract would be free to import anything."""
    rooms = {r.strip() for layer in CONTRACTS["agent-rooms"]["layers"] for r in layer.split("|")}
    children = {p.stem for p in (REPO / "agent").glob("*.py") if p.stem != "__init__"}
    children |= {p.parent.name for p in (REPO / "agent").glob("*/__init__.py")}
    assert children == rooms, f"not in a room: {children - rooms}; rooms that do not exist: {rooms - children}"
    # The consultant may be reached from placement alone: every other room is a source of that ban.
    banned = {m.removeprefix("agent.") for m in CONTRACTS["placement-only"]["source_modules"]}
    assert banned == rooms - {"placement"}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_holds_more_than_20_modules(package):
    # Hidden folders are not the project's (bench/.venv-scrapy is the Scrapy bench's own venv).
    inits = [p for p in (REPO / package).rglob("__init__.py")
             if not any(part.startswith(".") for part in p.relative_to(REPO).parts)]
    for d in [REPO / package, *(p.parent for p in inits)]:
        modules = [p for p in d.glob("*.py") if p.name != "__init__.py" and not p.name.endswith("_pb2_grpc.py")]
        assert len(modules) <= MAX_MODULES, f"{d.relative_to(REPO)} holds {len(modules)} modules: group them by concern"


# Each case: a file of the tree, one import appended to it, the contract that must then break.
BACK_ARROWS = [
    ("agent/state/frontier/facade.py", "import agent.node", "agent-rooms"),            # a room imports the root
    ("agent/state/frontier/store.py", "import agent.state.frontier.queues", "frontier-parts"),  # a part calls up
    ("agent/crawl/links.py", "import agent.ownership.ledger", "agent-rooms"),          # crawl reaches up to ownership
    ("agent/crawl/hosts.py", "import agent.crawl.page", "crawl-room"),                 # a host's state reaches up to the page's steps
    ("agent/routing/router.py", "import agent.ownership.settle", "agent-rooms"),       # two independent rooms
    ("wancrawl/urls.py", "import agent.metrics", "floors"),                            # the bottom floor imports a service
    ("consultant/service.py", "import storage.index", "floors"),                       # a service in another's internals
    ("agent/node.py", "import consultant.server", "floors"),                           # only the client module is public
    ("agent/crawl/dispatcher.py", "import consultant.client", "placement-only"),       # only placement asks the consultant
    ("agent/state/frontier/__init__.py", "from agent.state.changes import ChangeLog", "acyclic"),  # the cycle issue 20 removed
    ("storage/index.py", "import storage.server", "acyclic"),
    ("storage/server.py", "import agent.settings", "floors"),                       # storage past the agent's faces
    ("agent/peers.py", "import agent.settings", "agent-rooms"),                     # a face pulls the settings (fetchers)
]


@pytest.mark.parametrize("path,line,contract", BACK_ARROWS, ids=[f"{c}:{p}" for p, _, c in BACK_ARROWS])
def test_a_forbidden_import_breaks_its_contract(tmp_path, path, line, contract):
    """The contracts can fail: the same tree with one back-arrow added breaks the named one."""
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    assert lint_imports(tmp_path, contract).returncode == 0, "the copy must hold before the change"
    target = tmp_path / path
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    p = lint_imports(tmp_path, contract)
    assert p.returncode != 0 and "BROKEN" in p.stdout, p.stdout + p.stderr
    importer = Path(path).parent.name if Path(path).stem == "__init__" else Path(path).stem  # a package by its name
    assert importer in p.stdout, "the report names the importer"


def test_architecture_doc_names_only_modules_that_exist():
    """docs/architecture.md's path of one URL names, at every step, a module of the tree."""
    text = (REPO / "docs" / "architecture.md").read_text()
    paths = set(re.findall(r"`((?:agent|consultant|storage|manager|wancrawl|lab|bench)/[\w/]+\.py)`", text))
    assert len(paths) >= 20, "the doc names the modules of the path"
    missing = sorted(p for p in paths if not (REPO / p).is_file())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
    steps = re.findall(r"^\| \d+ \| (\w[\w ]*?) \| `([\w/]+\.py)`", text, flags=re.M)
    names = [s for s, _ in steps]
    for step in ("extracted", "canonicalised", "scoped", "routed", "pushed", "taken in", "queued", "fetched", "recorded",
                 "shipped", "stored"):
        assert step in names, f"the path of one URL lacks the step {step!r}"


def test_every_room_says_what_it_owns():
    for init in sorted((REPO / "agent").glob("*/__init__.py")):
        doc = init.read_text().strip()
        assert doc.startswith('"""') and "Imports" in doc, f"{init.relative_to(REPO)}: say what it owns and may import"
