"""Local service processes: start, health, stop, and their certificates (lab up, manager crawl).

A process is started as `python -m MODULE ...` by this interpreter, in its own session (a
Ctrl-C in the terminal reaches only the command that started it, which then stops it), with its
output in a log file, and recorded as a `Proc` (name, pid, command, log, address). `alive`
checks that a pid still runs the recorded command (a reused pid is left alone); `stop` stops
agents first (they deregister and flush), then the rest in reverse order of start.

Tools-only: no service starts processes, so this lives at the lowest tool floor (the manager),
not in the services' base package; `manager crawl`, the lab (lab/cluster.py), the benches and
the tests import it from here, as the import-linter floors allow (bench > lab > manager).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wancrawl import pki
from wancrawl.grpcutil import TlsSettings

REPO = Path(__file__).resolve().parent.parent
AGENT_PREFIX = "agent-"  # process names of agents: stopped first


@dataclass
class Proc:
    name: str
    pid: int
    cmd: list[str]
    log: str
    address: str = ""


GIVEN_KEPT = 4096  # ports free_port remembers having handed out
_given: dict[int, None] = {}  # those ports, oldest first


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now and that this process has not handed out lately. The caller
    binds it later (a service it starts), and the kernel gives a port just closed out again at
    random: two agents of one `lab up` were given the same port (0.2% of 7-port batches), both
    bound it (grpc servers set SO_REUSEPORT), and one answered for both; its crawl never ended."""
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _given:
            break
    _given[port] = None
    if len(_given) > GIVEN_KEPT:
        del _given[next(iter(_given))]
    return port


def start(name: str, args: list[str], run: Path, *, cwd: Path | None = None) -> Proc:
    """Start `python -m ARGS` (this interpreter) in its own session, output to RUN/logs/NAME.log."""
    log = run / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(log, "ab") as fh:
        # Own session: a Ctrl-C in the starter's terminal does not reach the services; the
        # starter stops them (or, for `lab up`, they outlive it).
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             cwd=cwd or REPO, env=env, start_new_session=True)
    return Proc(name, p.pid, cmd, str(log))


async def healthy(address: str, timeout: float) -> bool:
    """True once the gRPC health service at `address` answers SERVING, False after `timeout`."""
    from wancrawl.grpcutil import check_health

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if await check_health(address, timeout=1.0):
            return True
        await asyncio.sleep(0.1)
    return False


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []
    return [c.decode(errors="replace") for c in raw if c]


def alive(p: Proc) -> bool:
    """The pid still runs the command we started (not a reused pid, not a zombie, not exiting)."""
    return _cmdline(p.pid) == p.cmd


def state(pid: int) -> str:
    """The process state letter of /proc/PID/stat (R, S, T stopped, Z zombie...), "" if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0]  # the command name in parentheses may hold spaces


def exited(p: Proc) -> bool:
    """The process is gone or a zombie: its files and sockets are closed. Not the same as
    `not alive(p)`: a dying process's cmdline empties at the start of its exit, while its
    listening sockets still accept connections (a restart on the same port would then be
    answered by the dead process)."""
    if state(p.pid) in ("", "Z"):
        return True
    cmd = _cmdline(p.pid)
    return bool(cmd) and cmd != p.cmd  # the pid runs another command now


def stop_one(p: Proc, timeout: float = 20.0) -> bool:
    """SIGTERM (SIGKILL after `timeout`); True if it was running."""
    if not alive(p):
        return False
    try:
        # A paused process (SIGSTOP) would hold SIGTERM pending until the timeout: continue it first.
        os.kill(p.pid, signal.SIGCONT)
        os.kill(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    end = time.monotonic() + timeout
    while not exited(p) and time.monotonic() < end:
        _reap(p.pid)
        time.sleep(0.05)
    if not exited(p):
        os.kill(p.pid, signal.SIGKILL)
        while not exited(p):
            _reap(p.pid)
            time.sleep(0.01)
    _reap(p.pid)
    return True


def _reap(pid: int) -> None:
    """Collect our own exited child (a zombie keeps its /proc entry, with an empty cmdline)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop_order(procs: Sequence[Proc]) -> list[Proc]:
    """Agents first (they deregister and flush to storage), then the rest in reverse start order."""
    return ([p for p in procs if p.name.startswith(AGENT_PREFIX)]
            + [p for p in procs if not p.name.startswith(AGENT_PREFIX)][::-1])


def stop(procs: Sequence[Proc], timeout: float = 20.0) -> list[str]:
    """Stop the processes in `stop_order`; the names of those that were running."""
    return [p.name for p in stop_order(procs) if stop_one(p, timeout)]


# --- certificates: one CA per run directory ------------------------------------------------------

PKI_DIR = "pki"


def operator_tls(run: Path, operator: str) -> TlsSettings:
    """The operator credentials of a run's PKI (RUN/pki): the starter's own clients use them."""
    d = run / PKI_DIR
    return TlsSettings(str(d / "ca.crt"), str(d / f"operator-{operator}.crt"), str(d / f"operator-{operator}.key"))


def record_addresses(run: Path, operator: str, addresses: Sequence[str]) -> None:
    """RUN/pki/operator.json: the run's service addresses and its operator certificate, so a
    `manager` or CLI in a shell that sourced nothing finds its credentials (wancrawl/cli/runs.py)."""
    from wancrawl.cli import runs as localruns

    d = run / PKI_DIR
    if (d / "ca.crt").is_file():
        t = operator_tls(run, operator)
        localruns.write(d, run, addresses, t.ca, t.cert, t.key)


def issue_tls(run: Path, role: str, name: str, *, operator: str, ca_name: str, source_ip: str = "") -> str:
    """Issue ROLE/NAME's certificate in RUN/pki (a CA and the operator's certificate made on
    first use, with RUN/pki/operator.env for other processes) and return its [tls] TOML table.
    `source_ip`: an agent's address, bound in its certificate (where the consultant places it)."""
    d = run / PKI_DIR
    if not (d / pki.CA_KEY).is_file():
        pki.init(d, name=ca_name)
        pki.issue(d, "operator", operator)
        t = operator_tls(run, operator)
        (d / "operator.env").write_text(f"# source this to run `manager` and the CLIs against the services of {run}\n"
                                        f"export WANCRAWL_TLS_CA={t.ca}\nexport WANCRAWL_TLS_CERT={t.cert}\n"
                                        f"export WANCRAWL_TLS_KEY={t.key}\n")
    pki.issue(d, role, name, source_ip=source_ip)
    return pki.tls_table(d, role, name)


# --- consultant replicas: one PostgreSQL state per run ---------------------------------------------

# The PostgreSQL of the tests, benches and `manager crawl --consultants 2` (trust auth).
PG_URL = os.environ.get("WANCRAWL_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def run_schema(run: Path, prefix: str) -> str:
    """A schema name of its own for a run directory: the same directory (a resumed run) gets
    the same schema, two directories never share one."""
    import hashlib

    return f"{prefix}_{hashlib.sha1(str(run.resolve()).encode()).hexdigest()[:16]}"


def pg_schema_url(base_url: str, schema: str, *, fresh: bool = False) -> str:
    """Make `schema` in the PostgreSQL database at `base_url` (dropped first when `fresh`) and
    return a URL whose search path is it, so that a service's tables land there. A database
    that does not answer is a ConfigError naming the URL."""
    import sqlalchemy as sa

    from wancrawl.errors import ConfigError

    if not schema.replace("_", "").isalnum():
        raise ConfigError(f"schema {schema!r}: letters, digits and _ only")
    try:
        eng = sa.create_engine(base_url, connect_args={"connect_timeout": 5})
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise ConfigError(f"{base_url}: not a usable SQLAlchemy URL ({exc})") from None
    try:
        with eng.begin() as c:
            if fresh:
                c.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            c.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    except sa.exc.SQLAlchemyError as exc:
        raise ConfigError(f"PostgreSQL at {base_url} does not answer: {str(exc).splitlines()[0]}") from None
    finally:
        eng.dispose()
    sep = "&" if "?" in base_url else "?"
    return f"{base_url}{sep}options=-csearch_path%3D{schema}"


def drop_schema(base_url: str, schema: str) -> None:
    """Drop a run's schema (pg_schema_url's) when the run's files go too; an unreachable database is left alone."""
    import sqlalchemy as sa

    eng = sa.create_engine(base_url, connect_args={"connect_timeout": 5})
    try:
        with eng.begin() as c:
            c.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    except sa.exc.SQLAlchemyError:
        pass
    finally:
        eng.dispose()
