"""Static types: mypy over the project's packages reports no errors."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO

PACKAGES = ["agent", "wancrawl", "consultant", "storage", "manager"]


def test_mypy_finds_no_errors():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it is in the dev extra: pip install -e .[dev])")
    p = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", *PACKAGES], cwd=REPO,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, f"mypy exited {p.returncode}:\n{p.stdout}{p.stderr}"
