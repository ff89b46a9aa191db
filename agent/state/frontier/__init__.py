"""The frontier: what this agent will fetch, per host (persistent per-host BFS queues: SQLite in
WAL mode on disk, only each host's head in memory, group commit), with the page counts the
budgets read, the host-key index rows and the revisit schedule (docs/agent-frontier.md).

`Frontier` (facade.py) is the one face every caller uses; behind it each part owns its state:
the SQLite file (store.py), the host queues with hot/cold paging (queues.py), the in-flight rows
(inflight.py), the page and domain budgets (budgets.py), the host-key index rows (hostkeys.py)
and the revisit schedule (schedule.py). item.py is the vocabulary they share with the callers."""

from __future__ import annotations

from agent.state.frontier.facade import Frontier
from agent.state.frontier.item import MAX_PAGES, AddRow, FlushListener, Item, item_problem, origin_of
from agent.state.frontier.store import SCHEMA_VERSION

__all__ = ["MAX_PAGES", "SCHEMA_VERSION", "AddRow", "FlushListener", "Frontier", "Item", "item_problem", "origin_of"]
