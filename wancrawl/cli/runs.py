"""The operator credentials of the clusters this machine started, found by the address dialled.

`lab up` and `manager crawl` make a PKI per run directory (RUN/pki) and require mutual TLS. A new
user's first command after `lab up` is the one it prints, `manager --consultant ADDR seed ...`,
in a shell that has sourced nothing. So each run also writes RUN/pki/operator.json: the
addresses its services listen on and the operator certificate that may call them. A client with
no credentials of its own (no [tls] table, no --ca/--cert/--key, no WANCRAWL_TLS_*) looks for a
run that lists the very address it dials, under ./run/ (where `lab up`, `lab demo` and the
README put them) or $WANCRAWL_RUN_DIR, and uses that run's operator certificate.

Only an exact address match counts, so a lab's certificate is never offered to another service;
when several runs list the address (a port reused after `lab down`), the newest record wins and
a wrong pick fails with the wrong-CA message (wancrawl/grpcutil.py: explain_failure).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

RECORD = "operator.json"
ENV_RUN_DIR = "WANCRAWL_RUN_DIR"
RUNS_ROOT = Path("run")


@dataclass(frozen=True)
class Credentials:
    run: str   # the run directory
    ca: str
    cert: str
    key: str


def write(pki_dir: Path, run: Path, addresses: Iterable[str], ca: str, cert: str, key: str) -> None:
    """Record (or rewrite) the run's addresses and operator credentials in PKI_DIR/operator.json."""
    rec = {"run": str(run), "addresses": sorted({a for a in addresses if a}), "ca": ca, "cert": cert, "key": key}
    tmp = pki_dir / (RECORD + ".tmp")
    tmp.write_text(json.dumps(rec, indent=2) + "\n")
    tmp.replace(pki_dir / RECORD)


def _records(roots: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for root in roots:
        direct = root / "pki" / RECORD
        if direct.is_file():
            found.append(direct)
        elif root.is_dir():
            found.extend(p for p in root.glob(f"*/pki/{RECORD}") if p.is_file())
    return found


def default_roots() -> list[Path]:
    """$WANCRAWL_RUN_DIR first (a run directory, or a directory of them), then ./run."""
    env = os.environ.get(ENV_RUN_DIR, "")
    return ([Path(env)] if env else []) + [RUNS_ROOT]


def find(target: str, roots: Iterable[Path] | None = None) -> Credentials | None:
    """The credentials of the newest run that lists `target` among its addresses; None if none."""
    best: tuple[float, Credentials] | None = None
    for path in _records(default_roots() if roots is None else roots):
        try:
            rec = json.loads(path.read_text())
            if target not in rec.get("addresses", []):
                continue
            creds = Credentials(rec["run"], rec["ca"], rec["cert"], rec["key"])
            mtime = path.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a half-written or foreign file: not a run to use
        if all(Path(p).is_file() for p in (creds.ca, creds.cert, creds.key)) and (best is None or mtime > best[0]):
            best = (mtime, creds)
    return best[1] if best else None


def discoverable(run: Path) -> bool:
    """`find` looks in this run directory from the current one (so no operator.env is needed)."""
    run = run.resolve()
    return any(run == r.resolve() or run.parent == r.resolve() for r in default_roots())


def env_files(roots: Iterable[Path] | None = None) -> list[str]:
    """RUN/pki/operator.env of every run found, for an error message to name."""
    return sorted(str(p.with_name("operator.env")) for p in _records(default_roots() if roots is None else roots)
                  if p.with_name("operator.env").is_file())
