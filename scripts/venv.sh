# Sourced by scripts/demo.sh and scripts/test.sh: create or reuse .venv and install the project.
# Re-installs only when pyproject.toml changed (a stamp holds its hash), so repeat runs are quick.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${WANCRAWL_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.wancrawl-installed"
WANT="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip 2> >(grep -v "is ignored" >&2)
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[dev]" 2> >(grep -v -e "is ignored" >&2)
    echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
