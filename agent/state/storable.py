"""What the agent's SQLite files can store, and how a write that fails because of one row's
values (a poison row) is isolated instead of failing every commit after it (issue 21).

Two lines of defence, both here for the frontier and the seen set to use:
1. at entry: a value SQLite cannot bind (an int outside its signed 64 bits, text that is not
   UTF-8, a NaN in a NOT NULL REAL column) is refused by the call that would buffer it, before
   anything of that call is buffered, with `Unstorable` (INVALID_ARGUMENT to an RPC);
2. at flush, for whatever entry checks miss (a bug, a value nobody foresaw): `write_each`
   writes the rows one by one in one transaction and leaves out those whose own values fail.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from wancrawl.errors import InvalidArgument

INT64_MAX = (1 << 63) - 1

# Errors a row's own values cause, the same every time it is written: an int beyond 64 bits
# (OverflowError), text with lone surrogates (UnicodeEncodeError, a ValueError), a type SQLite
# cannot bind, a NULL (NaN) in a NOT NULL column, a wrong number of bindings. Anything else (disk
# full, I/O error, a locked, read-only or corrupt database: sqlite3.OperationalError and
# DatabaseError) is the environment's, and never makes a row be left out.
ROW_ERRORS: tuple[type[BaseException], ...] = (
    OverflowError, ValueError, TypeError, sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError,
    sqlite3.DataError,
)


class Unstorable(InvalidArgument, ValueError):
    """A value the agent's disk cannot hold was refused where it entered (INVALID_ARGUMENT at
    the RPC that brought it); nothing of the refused call was taken in."""


def text_ok(s: str) -> bool:
    """Can SQLite store s as TEXT? (UTF-8: a Python str with a lone surrogate cannot be encoded.)"""
    if s.isascii():  # canonical URLs and hosts are ASCII: the check costs nothing on the hot path
        return True
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


def write_all(db: sqlite3.Connection,
              statements: Sequence[tuple[str, Sequence[tuple]]]) -> list[list[tuple[int, BaseException]]]:
    """Write every (sql, rows) in one transaction; when that fails because of a row's own values
    (a ROW_ERROR), roll back and write them row by row (write_each), leaving those rows out.
    Returns what write_each left out, per statement (all empty when the batch went through).
    Any other error rolls back and is raised: the caller keeps its buffers for the next try."""
    try:
        db.execute("BEGIN")
        for sql, rows in statements:
            if rows:
                db.executemany(sql, rows)
        db.execute("COMMIT")
        return [[] for _ in statements]
    except BaseException as exc:
        if db.in_transaction:
            db.execute("ROLLBACK")
        if not isinstance(exc, ROW_ERRORS):
            raise
    return write_each(db, statements)


def write_each(db: sqlite3.Connection,
               statements: Sequence[tuple[str, Sequence[tuple]]]) -> list[list[tuple[int, BaseException]]]:
    """Write every row of every (sql, rows) on its own, all in ONE transaction, leaving out the
    rows whose statement fails with a ROW_ERROR; returns, per statement, (index, error) of the
    rows left out. One transaction keeps what the caller's single transaction promised (the rest is
    written together or not at all). Any other error rolls everything back and is raised.

    SQLite undoes a failed statement alone and keeps the transaction (a constraint error), and a
    binding error fails before the statement runs; an error that ended the transaction is not
    the row's own and is raised."""
    bad: list[list[tuple[int, BaseException]]] = [[] for _ in statements]
    db.execute("BEGIN")
    try:
        for k, (sql, rows) in enumerate(statements):
            for i, row in enumerate(rows):
                try:
                    db.execute(sql, row)
                except ROW_ERRORS as exc:
                    if not db.in_transaction:
                        raise
                    bad[k].append((i, exc))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return bad
