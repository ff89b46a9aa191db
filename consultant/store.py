"""The consultant's persistent state through SQLAlchemy: SQLite by default, PostgreSQL for replicas."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import sqlalchemy as sa
from sqlalchemy.exc import OperationalError, ArgumentError, NoSuchModuleError

from consultant.membership import ALIVE, DEAD, LEFT, AgentRecord, Snapshot, merged_registration, register_bumps, weight_changed
from wancrawl.errors import ConfigError, NotFound, Unavailable

metadata = sa.MetaData()
OPERATOR, BALANCE = "operator", "balance"

agents_t = sa.Table(
    "consultant_agents",
    metadata,
    sa.Column("agent_id", sa.String(200), primary_key=True),
    sa.Column("address", sa.String(300), nullable=False),
    sa.Column("city", sa.String(200), nullable=False, default=""),
    sa.Column("country", sa.String(8), nullable=False, default=""),
    sa.Column("lat", sa.Float, nullable=True),
    sa.Column("lon", sa.Float, nullable=True),
    sa.Column("asn", sa.BigInteger, nullable=False, default=0),
    sa.Column("source_ip", sa.String(64), nullable=False, default=""),
    sa.Column("capacity", sa.Float, nullable=False, default=0.0),
    sa.Column("weight", sa.Float, nullable=False, default=1.0),
    sa.Column("state", sa.String(8), nullable=False, index=True),
    sa.Column("registered_at", sa.Float, nullable=False),
    sa.Column("last_heartbeat", sa.Float, nullable=False),
    sa.Column("lease_expires", sa.Float, nullable=False),
    sa.Column("load_json", sa.Text, nullable=False, default="{}"),
)

overrides_t = sa.Table(
    "consultant_overrides",
    metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("agent_id", sa.String(200), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    # "operator" (SetOverride) or "balance" (the balancer: cleared when its agent dies or leaves).
    sa.Column("origin", sa.String(16), nullable=False, default=OPERATOR),
)

# One row (id = 1). Every change of membership or assignment increments it in the same
# transaction as the change, so replicas that see a new epoch also see the change.
epoch_t = sa.Table(
    "consultant_epoch",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

meta_t = sa.Table(
    "consultant_meta",
    metadata,
    sa.Column("key", sa.String(100), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

_COLUMNS = [c.name for c in agents_t.columns]


def _record(row) -> AgentRecord:
    return AgentRecord(**{k: row._mapping[k] for k in _COLUMNS})


class Store:
    """Blocking; the server calls it from one worker thread. Each method is one transaction."""

    def __init__(self, url: str):
        try:
            kwargs = {}
            if url.startswith("sqlite"):
                kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
            self.engine = sa.create_engine(url, pool_pre_ping=True, **kwargs)
            if url.startswith("sqlite"):
                @sa.event.listens_for(self.engine, "connect")
                def _wal(dbapi_conn, _rec):  # WAL: readers (a replica, the CLI) never block writers
                    dbapi_conn.execute("PRAGMA journal_mode=WAL")
                    dbapi_conn.execute("PRAGMA synchronous=NORMAL")
            metadata.create_all(self.engine)
            self._add_origin_column()
            with self.engine.begin() as conn:
                if conn.execute(sa.select(epoch_t.c.value).where(epoch_t.c.id == 1)).first() is None:
                    conn.execute(epoch_t.insert().values(id=1, value=1))
        except (ArgumentError, NoSuchModuleError) as exc:
            raise ConfigError(f"state_url: {url!r} is not a usable SQLAlchemy URL ({exc})") from None
        except OperationalError as exc:
            raise Unavailable(f"state_url: cannot open {url!r}: {exc.orig}") from None
        except sa.exc.IntegrityError:
            pass  # another replica created the epoch row first

    def _add_origin_column(self) -> None:
        # A state written before the balancer has no `origin` column: every override in it was
        # an operator's.
        if "origin" in {c["name"] for c in sa.inspect(self.engine).get_columns("consultant_overrides")}:
            return
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.text(f"ALTER TABLE consultant_overrides ADD COLUMN origin VARCHAR(16) NOT NULL DEFAULT '{OPERATOR}'"))
        except (OperationalError, sa.exc.ProgrammingError):
            pass  # another replica added it first

    def close(self) -> None:
        self.engine.dispose()

    # -- reads ------------------------------------------------------------------------------
    def epoch(self) -> int:
        with self.engine.connect() as conn:
            return self._current(conn)

    def snapshot(self) -> Snapshot:
        with self.engine.connect() as conn:
            epoch = self._current(conn)
            agents = {r.agent_id: _record(r) for r in conn.execute(sa.select(agents_t))}
            rows = list(conn.execute(sa.select(overrides_t)))
        overrides = {r.host: r.agent_id for r in rows}
        balanced = {r.host: float(r.created_at) for r in rows if r.origin == BALANCE}
        return Snapshot(epoch, agents, overrides, frozenset(balanced), balanced)

    def get_meta(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(meta_t.c.value).where(meta_t.c.key == key)).scalar_one_or_none()

    # -- writes -----------------------------------------------------------------------------
    @staticmethod
    def _bump(conn) -> int:
        conn.execute(epoch_t.update().where(epoch_t.c.id == 1).values(value=epoch_t.c.value + 1))
        return Store._current(conn)

    @staticmethod
    def _current(conn) -> int:
        return int(conn.execute(sa.select(epoch_t.c.value).where(epoch_t.c.id == 1)).scalar_one())

    @staticmethod
    def _lock_epoch(conn) -> None:
        # Serialise writers on the epoch row (PostgreSQL); SQLite locks the file on write.
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(epoch_t.c.value).where(epoch_t.c.id == 1).with_for_update())

    def _get(self, conn, agent_id: str) -> AgentRecord | None:
        row = conn.execute(sa.select(agents_t).where(agents_t.c.agent_id == agent_id)).first()
        return _record(row) if row is not None else None

    def _put(self, conn, rec: AgentRecord, exists: bool) -> None:
        values = asdict(rec)
        if exists:
            conn.execute(agents_t.update().where(agents_t.c.agent_id == rec.agent_id).values(**values))
        else:
            conn.execute(agents_t.insert().values(**values))

    def register(self, new: AgentRecord, now: float, lease: float) -> tuple[int, bool]:
        with self.engine.begin() as conn:
            self._lock_epoch(conn)
            old = self._get(conn, new.agent_id)
            bump = register_bumps(old, new)
            self._put(conn, merged_registration(old, new, now, lease), old is not None)
            return (self._bump(conn) if bump else self._current(conn)), bump

    def heartbeat(
        self, agent_id: str, load: dict, now: float, lease: float, capacity: float | None, threshold: float | None
    ) -> tuple[int, bool]:
        """Renew the lease. A dead agent comes back (epoch bump); a left or unknown one must
        register again (NotFound). With `threshold`, a capacity change beyond it re-weights."""
        with self.engine.begin() as conn:
            self._lock_epoch(conn)
            rec = self._get(conn, agent_id)
            if rec is None or rec.state == LEFT:
                raise NotFound(f"agent {agent_id!r} is not registered; call Register first")
            bump = rec.state == DEAD
            updated = replace(rec, state=ALIVE, last_heartbeat=now, lease_expires=now + lease, load_json=json.dumps(load))
            if capacity is not None and capacity > 0:
                updated = replace(updated, capacity=capacity)
                if threshold is not None and weight_changed(rec.weight, capacity, threshold):
                    updated = replace(updated, weight=capacity)
                    bump = True
            self._put(conn, updated, True)
            return (self._bump(conn) if bump else self._current(conn)), bump

    def deregister(self, agent_id: str, now: float) -> int:
        with self.engine.begin() as conn:
            self._lock_epoch(conn)
            rec = self._get(conn, agent_id)
            if rec is None:
                raise NotFound(f"agent {agent_id!r} is not registered")
            if rec.state == LEFT:
                return self._current(conn)
            self._put(conn, replace(rec, state=LEFT, lease_expires=now), True)
            self._clear_balanced(conn, [agent_id])
            return self._bump(conn) if rec.state == ALIVE else self._current(conn)

    def expire(self, now: float) -> tuple[list[str], int]:
        """Mark alive agents whose lease ran out as dead; one epoch bump for all of them."""
        with self.engine.begin() as conn:
            self._lock_epoch(conn)
            ids = [
                r.agent_id
                for r in conn.execute(
                    sa.select(agents_t.c.agent_id).where(agents_t.c.state == ALIVE, agents_t.c.lease_expires < now)
                )
            ]
            if not ids:
                return [], self._current(conn)
            conn.execute(
                agents_t.update()
                .where(agents_t.c.agent_id.in_(ids), agents_t.c.state == ALIVE, agents_t.c.lease_expires < now)
                .values(state=DEAD)
            )
            self._clear_balanced(conn, ids)
            return ids, self._bump(conn)

    def extend_leases(self, until: float) -> None:
        """Give every alive agent a lease until at least `until` (after a consultant restart,
        agents get one lease period to heartbeat before they are declared dead)."""
        with self.engine.begin() as conn:
            conn.execute(
                agents_t.update()
                .where(agents_t.c.state == ALIVE, agents_t.c.lease_expires < until)
                .values(lease_expires=until)
            )

    @staticmethod
    def _clear_balanced(conn, agent_ids: list[str]) -> int:
        """The balancer's overrides to agents that died or left: they were set for a load that
        is gone, and would pull the hosts back to the agent if it returned (an operator's stay,
        ignored while the agent is away, as before)."""
        return conn.execute(
            overrides_t.delete().where(overrides_t.c.agent_id.in_(agent_ids), overrides_t.c.origin == BALANCE)
        ).rowcount

    def set_override(self, host: str, agent_id: str, now: float) -> int:
        with self.engine.begin() as conn:
            self._lock_epoch(conn)
            if self._get(conn, agent_id) is None:
                raise NotFound(f"agent {agent_id!r} is not registered")
            conn.execute(overrides_t.delete().where(overrides_t.c.host == host))
            conn.execute(overrides_t.insert().values(host=host, agent_id=agent_id, created_at=now, origin=OPERATOR))
            return self._bump(conn)

    def set_balance_overrides(self, pins: list[tuple[str, str]], now: float, spacing: float = 0.0) -> tuple[int, int]:
        """The balancer's moves, (host, agent) each, in one transaction and one epoch bump. A
        host an operator pinned meanwhile, or an agent no longer alive, is skipped. With
        `spacing`, nothing is written when a balancer (any replica's) wrote less than `spacing`
        seconds ago: consultant replicas over one state each plan, and the first round's moves
        must show in the agents' reports before another round plans on them.
        Returns (epoch, overrides written)."""
        with self.engine.begin() as conn:
            self._lock_epoch(conn)
            if spacing > 0:
                last = conn.execute(sa.select(sa.func.max(overrides_t.c.created_at)).where(overrides_t.c.origin == BALANCE)).scalar()
                if last is not None and now - float(last) < spacing:
                    return self._current(conn), 0
            alive = {r.agent_id for r in conn.execute(sa.select(agents_t.c.agent_id).where(agents_t.c.state == ALIVE))}
            hosts = [h for h, _ in pins]
            operator = {r.host for r in conn.execute(
                sa.select(overrides_t.c.host).where(overrides_t.c.host.in_(hosts), overrides_t.c.origin != BALANCE))}
            todo = [(h, a) for h, a in pins if a in alive and h not in operator]
            if not todo:
                return self._current(conn), 0
            conn.execute(overrides_t.delete().where(overrides_t.c.host.in_([h for h, _ in todo])))
            conn.execute(overrides_t.insert(), [dict(host=h, agent_id=a, created_at=now, origin=BALANCE) for h, a in todo])
            return self._bump(conn), len(todo)

    def clear_override(self, host: str) -> int:
        with self.engine.begin() as conn:
            self._lock_epoch(conn)
            n = conn.execute(overrides_t.delete().where(overrides_t.c.host == host)).rowcount
            if not n:
                raise NotFound(f"no override for host {host!r}")
            return self._bump(conn)

    def set_meta_bump_if_changed(self, key: str, value: str) -> tuple[int, bool]:
        """Store `value` under `key`; bump the epoch when it differs from what was stored
        (the strategy fingerprint: a new strategy is an assignment change)."""
        with self.engine.begin() as conn:
            self._lock_epoch(conn)
            old = conn.execute(sa.select(meta_t.c.value).where(meta_t.c.key == key)).scalar_one_or_none()
            if old == value:
                return self._current(conn), False
            if old is None:
                conn.execute(meta_t.insert().values(key=key, value=value))
            else:
                conn.execute(meta_t.update().where(meta_t.c.key == key).values(value=value))
            return self._bump(conn), True
