"""Static checks: no undefined names, unused imports or syntax errors (ruff's F and E9 rules)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or str(REPO / ".venv" / "bin" / "ruff")
    if not shutil.which(ruff):
        pytest.skip("ruff is not installed (it is in the dev extra: pip install -e .[dev])")
    p = subprocess.run([ruff, "check", "--select", "F,E9", "--output-format", "concise", "."], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
