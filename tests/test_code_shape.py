"""The agent stays easy to change (issue 34): no class in agent/ over 400 lines and no function
over 60; no component counts under a string key (typed counters, wancrawl/stats.py); and the
composition root wires without forward references (docs/architecture.md "Wiring")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 60


def _agent_modules() -> list[Path]:
    return sorted(p for p in (REPO / "agent").rglob("*.py") if not any(part.startswith(".") for part in p.parts))


def _spans(tree: ast.AST, kinds: tuple[type, ...]) -> list[tuple[str, int]]:
    return [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree) if isinstance(n, kinds)]  # type: ignore[attr-defined]


def test_no_class_over_400_lines_and_no_function_over_60():
    over: list[str] = []
    for path in _agent_modules():
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(REPO)
        over += [f"{rel}: class {name} {n} lines" for name, n in _spans(tree, (ast.ClassDef,)) if n > MAX_CLASS_LINES]
        over += [f"{rel}: {name}() {n} lines" for name, n in _spans(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
                 if n > MAX_FUNCTION_LINES]
    assert not over, "\n".join(over)


def test_no_counter_is_kept_under_a_string_key():
    hits = [f"{p.relative_to(REPO)}:{i}" for p in _agent_modules()
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r'counters\["', line)]
    assert not hits, hits


def _self_attrs(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}


def _build_phases(node_cls: ast.ClassDef) -> list[ast.FunctionDef]:
    """AgentNode's construction: __init__, every _build_* step and _attach (not _stats_registry,
    which runs once everything is built and registers gauges read at a snapshot)."""
    return [n for n in node_cls.body if isinstance(n, ast.FunctionDef)
            and (n.name == "__init__" or n.name.startswith("_build") or n.name == "_attach")]


def test_the_composition_root_has_no_forward_lambda():
    """Phase one of AgentNode (`__init__` and its `_build_*` steps) builds components in order;
    a lambda (or nested function) there that reads `self.X` hides a construction-order cycle: the
    component it is handed calls up into one built later. Phase two (`_attach`) makes those few
    links by named calls, with bound methods."""
    tree = ast.parse((REPO / "agent" / "node.py").read_text())
    node_cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AgentNode")
    phases = _build_phases(node_cls)
    assert {p.name for p in phases} >= {"__init__", "_attach"} and len(phases) > 2
    found = []
    for phase in phases:
        for n in ast.walk(phase):
            if isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)) and n is not phase:
                attrs = _self_attrs(n)
                if attrs:
                    found.append(f"{phase.name}, line {n.lineno}: reads self.{', self.'.join(sorted(attrs))}")
    assert not found, "forward references in AgentNode's build (attach them in phase two):\n" + "\n".join(found)


def test_the_forward_lambda_check_can_fail():
    """The check above on a node that hands a lambda reaching a later component (today's code
    before the two phases): it must find it."""
    src = """
class AgentNode:
    def __init__(self):
        self._build_crawl()
    def _build_crawl(self):
        self.load = Gauge(lambda: self.dispatcher.rate())
        self.dispatcher = Dispatcher()
    def _attach(self):
        pass
"""
    node_cls = ast.parse(src).body[0]
    assert isinstance(node_cls, ast.ClassDef)
    hits = [n for p in _build_phases(node_cls) for n in ast.walk(p) if isinstance(n, ast.Lambda) and _self_attrs(n)]
    assert len(hits) == 1
