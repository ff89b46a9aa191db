"""ReplicaStore: the hosts this agent backs up for their owners (seed 001's backup queue and
processed record; seed 000's URL history on the backup node), kept apart from what it owns.

Per host: the owner's queue entries keyed by the owner's own seq (so "done" names an entry
without its URL), the revisit schedule (one RevisitEntry message per URL, the latest sent), the seen fingerprints in a SeenSet of their own (8-14 bytes per URL in memory,
like the owner's), and the crawl state (page count, Crawl-delay, backoff, robots.txt) as the
HostState message it came in. On disk under data_dir/replicas, so a backup's restart keeps them.
Promotion exports one host as a HostState, the same thing a HandOver carries.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agent.crawl.dispatcher import HostCrawlState
from agent.ownership.ledger import HostState, revisit_of_proto
from agent.state.frontier import Item
from agent.state.seen import SeenSet
from wancrawl.stats import Counters
from wancrawl.v1 import agent_pb2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rq (
    host TEXT NOT NULL, seq INTEGER NOT NULL, depth INTEGER NOT NULL, url TEXT NOT NULL, via TEXT NOT NULL,
    not_before REAL NOT NULL, unshipped INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (host, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rhost (host TEXT PRIMARY KEY, owner TEXT NOT NULL, crawl BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rrevisit (host TEXT NOT NULL, url TEXT NOT NULL, entry BLOB NOT NULL, PRIMARY KEY (host, url)) WITHOUT ROWID;
"""


@dataclass(slots=True)
class ReplicaCounters(Counters):
    """Replicate messages applied here as a backup, and replicas dropped on request (the metric
    names: agent/metrics.py HELP)."""
    replica_messages: int = 0
    replica_drops: int = 0


class ReplicaStore:
    """Owns the replicas. Invariant: a host has rows in `rq` or fingerprints in the seen replica
    only if it has an `rhost` row (and an entry in `_owner`): dropping a host drops all three."""

    def __init__(self, directory: str | Path):
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(d / "replicas.sqlite"), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self.seen = SeenSet(d / "seen.sqlite")
        self._owner: dict[str, str] = dict(self._db.execute("SELECT host, owner FROM rhost"))
        self.stats = ReplicaCounters()

    # -- reading --------------------------------------------------------------------------------
    def hosts(self) -> dict[str, str]:
        """host -> the agent whose replica this is (a snapshot)."""
        return dict(self._owner)

    def owner(self, host: str) -> str | None:
        return self._owner.get(host)

    def __len__(self) -> int:
        return len(self._owner)

    def export(self, host: str, defer_unshipped: float = 0.0) -> HostState:
        """The replica of one host as a HostState (queue in BFS order, seen, crawl state).
        Entries the owner fetched but had not yet stored get not_before = defer_unshipped: if
        the owner comes back (a pause) it stores them and the handback drops them here."""
        queue = [Item(url, host, depth, via, max(nb, defer_unshipped) if unshipped else nb)
                 for depth, url, via, nb, unshipped in self._db.execute(
                     "SELECT depth, url, via, not_before, unshipped FROM rq WHERE host=? ORDER BY depth, seq", (host,))]
        row = self._db.execute("SELECT crawl FROM rhost WHERE host=?", (host,)).fetchone()
        crawl = None
        if row is not None:
            m = agent_pb2.HostState()
            m.ParseFromString(row[0])
            crawl = HostState.from_proto(m, first=True).crawl
        revisits = []
        for (blob,) in self._db.execute("SELECT entry FROM rrevisit WHERE host=?", (host,)):
            r = agent_pb2.RevisitEntry()
            r.ParseFromString(blob)
            revisits.append(revisit_of_proto(host, r))
        return HostState(host, queue, self.seen.export_host(host), crawl, revisits)

    # -- writing (one transaction per call) -------------------------------------------------------
    def apply(self, sender: str, msgs: Iterable[agent_pb2.ReplicateRequest]) -> int:
        """Apply an owner's replica messages in order; durable on return. A drop or reset from
        an agent that is not the recorded owner of the host replaces that owner (the newest
        owner's word wins: hosts move)."""
        db = self._db
        n = 0
        db.execute("BEGIN")
        try:
            for m in msgs:
                n += 1
                h = m.host
                if m.drop:
                    if self._owner.get(h) == sender:
                        self._forget(h)
                        self.stats.replica_drops += 1
                    continue
                if m.reset or self._owner.get(h) != sender:
                    self._forget(h)
                st = m.state
                crawl = self._crawl(h, st, replace_robots=m.reset)
                db.execute("INSERT OR REPLACE INTO rhost VALUES (?, ?, ?)", (h, sender, crawl))
                self._owner[h] = sender
                if st.queue:
                    db.executemany("INSERT OR REPLACE INTO rq (host, seq, depth, url, via, not_before) VALUES (?, ?, ?, ?, ?, ?)",
                                   [(h, q.seq, q.depth, q.url, q.via, q.not_before) for q in st.queue])
                    self.seen.add_new(h, [q.url for q in st.queue])
                if st.seen:
                    self.seen.import_host(h, st.seen)
                if st.revisits:  # the latest entry of each URL (issue 26)
                    db.executemany("INSERT OR REPLACE INTO rrevisit VALUES (?, ?, ?)",
                                   [(h, r.url, r.SerializeToString()) for r in st.revisits])
                if m.unshipped:
                    db.executemany("UPDATE rq SET unshipped=1 WHERE host=? AND seq=?", [(h, s) for s in m.unshipped])
                if m.done:
                    db.executemany("DELETE FROM rq WHERE host=? AND seq=?", [(h, s) for s in m.done])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.seen.flush()
        self.stats.replica_messages += n
        return n

    def _crawl(self, host: str, st: agent_pb2.HostState, replace_robots: bool) -> bytes:
        """The host's crawl state after this message: its fields, robots.txt kept from before
        unless the message carries robots entries (full copies do)."""
        m = agent_pb2.HostState(host=host, crawl_delay=st.crawl_delay, backoff_until=st.backoff_until,
                                backoff_level=st.backoff_level, pages=st.pages)
        if st.robots or replace_robots:
            m.robots.extend(st.robots)
        else:
            row = self._db.execute("SELECT crawl FROM rhost WHERE host=?", (host,)).fetchone()
            if row is not None:
                old = agent_pb2.HostState()
                old.ParseFromString(row[0])
                m.robots.extend(old.robots)
        return m.SerializeToString()

    def _forget(self, host: str) -> None:
        self._db.execute("DELETE FROM rq WHERE host=?", (host,))
        self._db.execute("DELETE FROM rhost WHERE host=?", (host,))
        self._db.execute("DELETE FROM rrevisit WHERE host=?", (host,))
        self.seen.drop_host(host)
        self._owner.pop(host, None)

    def drop(self, hosts: Iterable[str], owner: str | None = None) -> int:
        """Forget replicas (promoted, handed to the host's owner, or this agent is no longer
        their backup). With `owner`, only the replicas that are still that agent's: another
        owner may have replaced one meanwhile (a promoting backup replicating to this one)."""
        n = 0
        db = self._db
        db.execute("BEGIN")
        try:
            for h in hosts:
                if h in self._owner and (owner is None or self._owner[h] == owner):
                    self._forget(h)
                    n += 1
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return n

    def close(self) -> None:
        self.seen.close()
        self._db.close()


def crawl_of(st: HostCrawlState | None) -> dict:
    """HostState proto fields of a crawl state (robots.txt excluded): what a delta carries."""
    if st is None:
        return {}
    return {"crawl_delay": st.crawl_delay or 0.0, "backoff_until": st.backoff_until, "backoff_level": st.backoff_level,
            "pages": st.pages}
