"""Replicator: each owned host's committed state, streamed to the host's first r backups
(STORE_BACKUP, DELETE_BACKUP; seed 001 §2.2, seed 000 §1.2). Off the fetch path: a slow or dead
backup makes a replica lag (counted), never the crawl wait.

The backups of a host are the agents after the owner in its preference list (the consultant's
answer, cached by HostDirectory), the first r of them (`replication.backups`): the first owns
the host if this one disappears, the second if both do, and so on, so r agents of a host's
list may die at once and its state survives. A host is synced to a backup once that backup
acknowledged a full copy; after that only the changes of each group commit go (URLs queued with
their seq, seqs done, the crawl state without robots.txt). When a backup changes or a send to it
fails, that backup gets the host whole again (the others go on with deltas); when the host's
queue was cleared, every backup does; a backup no longer in the first r is told to drop it.

One rule keeps a dead owner's pages from being lost: a URL's "done" goes to the backup only
after storage acknowledged its capture (the spool shipped the batch). Until then the backup
still has it queued, so if this agent dies with pages in its spool, the backup fetches them again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from agent.client import AgentPool
from agent.ownership.ledger import HostLedger, revisit_to_proto
from agent.ownership.replica import crawl_of
from agent.placement.directory import HostDirectory
from agent.placement.port import HostRoute
from agent.state.changes import ChangeLog
from agent.state.frontier import AddRow, Item
from agent.state.revisit import Entry
from agent.waker import Waker
from wancrawl import errors
from wancrawl.stats import Counters
from wancrawl.v1 import agent_pb2

log = logging.getLogger("agent")

Backup = tuple[str, str]  # (agent id, address)
Waiter = tuple["asyncio.Future[None]", frozenset[str] | None]  # a barrier and the hosts it waits for (None: all)

# Bytes of host messages per stream message: a few writes per round, well under gRPC's 4 MB limit
# (a full copy's parts are bounded by agent.ledger's PART_ITEMS / PART_FINGERPRINTS).
BATCH_BYTES = 1 << 20
SHIP_POLL = 0.02  # seconds between looks at the spool's acknowledged mark (a cheap read)


class Wire(NamedTuple):
    """One host's ReplicateRequest as it goes out: serialized once when the round builds it, and
    the same bytes go to each backup it is for (r = 2 sends them twice); never parsed again here.
    host and drop are what the round's bookkeeping reads of it."""
    host: str
    drop: bool
    data: bytes


# ReplicateBatch's `items` (field 1, length-delimited): the tag byte before each item's length.
_ITEMS_TAG = b"\x0a"


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def batches(msgs: list[Wire], limit: int = BATCH_BYTES) -> Iterator[bytes]:
    """The serialized ReplicateBatch messages carrying msgs in order, each about `limit` bytes at
    most (one bigger item goes alone): the encoding of `ReplicateBatch(items=[...])`, made by
    joining the items' bytes (a repeated field's encoding is its items' encodings one after the
    other), without a message object per batch or a copy of each item into one."""
    parts: list[bytes] = []
    size = 0
    for m in msgs:
        framed = len(m.data) + 6  # tag + up to 5 bytes of length (an item is under 4 MB)
        if parts and size + framed > limit:
            yield b"".join(parts)
            parts, size = [], 0
        parts += (_ITEMS_TAG, _varint(len(m.data)), m.data)
        size += framed
    if parts:
        yield b"".join(parts)


@dataclass
class _Pending:
    adds: list[AddRow] = field(default_factory=list)
    done: list[int] = field(default_factory=list)       # seqs whose captures storage has
    unshipped: list[int] = field(default_factory=list)  # seqs done here, captures not at storage yet
    revisits: dict[str, Entry] = field(default_factory=dict)  # url -> its latest schedule entry


@dataclass
class _Round:
    """What one round sends (Replicator._round_of), built host by host before any send."""
    by_backup: dict[Backup, list[Wire]] = field(default_factory=dict)
    fulls: dict[Backup, list[str]] = field(default_factory=dict)
    sent: set[str] = field(default_factory=set)      # hosts sent to a backup this round (not drops)
    waiting: set[str] = field(default_factory=set)   # refused lately by a backup they are not sent to now


@dataclass(slots=True)
class ReplicatorCounters(Counters):
    """Replicate rounds sent to backups, their bytes, failures and refusals (the metric names:
    agent/metrics.py HELP)."""
    replica_sends: int = 0
    replica_send_failures: int = 0
    replica_full_copies: int = 0
    replica_bytes_out: int = 0
    replica_drops_sent: int = 0
    replica_overflows: int = 0
    replica_hosts_refused: int = 0


class Replicator:
    """Owns what each backup has of this agent's hosts. Invariants: a backup is in
    `_synced[host]` only if it acknowledged a full copy and every change since is in
    `_pending[host]` or was acknowledged by it (a delta goes to every synced backup of the host
    in the same round; a backup that misses one leaves `_synced[host]`); `_held_done[host]` are
    done items whose capture is not yet at storage, as (spool batch seq, the dones of one flush)
    in flush order, which a full copy still sends as queued. A host in `_refused` was refused by
    a backup at its last send (the backup's view of its placement is not this agent's: a move
    one of them has not seen): what was pushed for it is not at that backup, so no barrier on it
    is answered until a later send of it is taken, or the host left this agent (`forget`, or
    routes that no longer name this agent once it no longer holds it)."""

    def __init__(self, self_id: str, changes: ChangeLog, ledger: HostLedger, directory: HostDirectory, peers: AgentPool,
                 *, spooled: Callable[[], int], shipped: Callable[[], int], interval: float, retry_seconds: float,
                 max_pending: int, clock: Callable[[], float], backups: int = 1):
        self.self_id = self_id
        self.backups = backups    # r
        self.changes = changes
        self.ledger = ledger
        self.directory = directory
        self.peers = peers
        self.spooled = spooled    # seq of the newest spool batch written
        self.shipped = shipped    # every spool batch up to this seq is at storage
        self.interval = interval
        self.retry_seconds = retry_seconds
        self.max_pending = max_pending
        self.clock = clock
        self._synced: dict[str, set[Backup]] = {}
        self._pending: dict[str, _Pending] = {}
        # Per flush, not per item: a tuple per done page only to be looked at once (issue 24).
        self._held_done: dict[str, list[tuple[int, list[Item]]]] = {}
        self._need_full: set[str] = set(ledger.owned_hosts())  # a restart does not know what its backups have
        self._dirty: set[str] = set(self._need_full)
        self._backoff: dict[str, float] = {}  # backup id -> no sends before
        self._epoch = directory.epoch
        self._lock = asyncio.Lock()  # one round at a time: a backup gets each host's changes in order
        self._stopped = False         # a leaving agent replicates no more (see stop)
        self._waiters: list[Waiter] = []  # answered at the end of the next round
        self._held: list[Waiter] = []     # waiting on a refused host: looked at again by the next round
        self._refused: set[str] = set()
        # host -> backup id -> no send of the host to that backup before (it refused the host):
        # a view that stays apart from the backup's costs a full copy per retry_seconds, not per round.
        self._refusals: dict[str, dict[str, float]] = {}
        self.waker = Waker()
        self.stats = ReplicatorCounters()

    # -- state -----------------------------------------------------------------------------------
    def gauges(self) -> dict[str, float]:
        """replica_unsynced: hosts whose backup has no full copy yet (new, moved, or after a
        failed send); replica_lag_items: committed changes not yet at a backup (dones of pages
        still on their way to storage excluded: the backup must keep those queued)."""
        shipped = self.shipped()
        sendable = sum(len(items) for held in self._held_done.values() for m, items in held if m <= shipped)
        return {"replica_unsynced": len(self._need_full), "replica_synced_hosts": len(self._synced),
                "replica_lag_items": sum(len(p.adds) + len(p.done) + len(p.revisits) for p in self._pending.values())
                + self.changes.items + sendable}

    def forget(self, host: str) -> None:
        """The host left this agent (handed over): nothing more to replicate of it here. The
        next round tells its backup to drop it (the route no longer names this agent). Its URLs
        went with it (or to its owner as pushes): no barrier waits on it here any more."""
        self._dirty.add(host)
        self._refused.discard(host)
        self._refusals.pop(host, None)

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """A round every `interval`, when asked (a push waits for one), and as soon as storage
        acknowledged pages: until their "done" is at the backup, a crash of this agent makes the
        backup fetch them again, so that window is kept to one round trip."""
        last_round = float("-inf")
        last_shipped = self.shipped()
        try:
            while True:
                await self.waker.wait(SHIP_POLL)
                shipped = self.shipped()
                if not (self._waiters or shipped != last_shipped or self.clock() - last_round >= self.interval):
                    continue
                last_round, last_shipped = self.clock(), shipped
                try:
                    await self.round()
                except Exception:
                    log.exception("replication round failed")
        except asyncio.CancelledError:
            # The loop stops: no round will answer the pushes waiting for one (an explicit
            # round() still answers those that wait after this).
            waiters, self._waiters, self._held = self._held + self._waiters, [], []
            for w, _ in waiters:
                if not w.done():
                    w.set_exception(errors.Unavailable("replication stopped before this push reached the backups"))
            raise

    def _collect(self) -> None:
        """Take the committed changes; move dones whose captures are at storage to pending."""
        mark = self.spooled()
        for h, c in self.changes.take().items():
            if c.cleared:
                self._need_full.add(h)
                self._pending.pop(h, None)
            if c.done:  # the ChangeLog handed its lists over with take(): kept, not copied
                self._held_done.setdefault(h, []).append((mark, c.done))
            if self._synced.get(h) and h not in self._need_full:
                if c.adds or c.done or c.revisits:
                    p = self._pending.setdefault(h, _Pending())
                    p.adds += c.adds
                    p.unshipped += [it.seq for it in c.done]
                    p.revisits.update(c.revisits)
            else:
                self._need_full.add(h)
            self._dirty.add(h)
        shipped = self.shipped()
        for h in list(self._held_done):
            held = self._held_done[h]
            ready = [items for m, items in held if m <= shipped]
            if not ready:
                continue
            rest = [(m, items) for m, items in held if m > shipped]
            if rest:
                self._held_done[h] = rest
            else:
                del self._held_done[h]
            if self._synced.get(h) and h not in self._need_full:
                self._pending.setdefault(h, _Pending()).done.extend([it.seq for items in ready for it in items])
            self._dirty.add(h)
        if sum(len(p.adds) + len(p.done) + len(p.revisits) for p in self._pending.values()) > self.max_pending:
            # A backup that cannot keep up: its hosts go whole later instead of piling up here.
            self.stats.replica_overflows += 1
            self._need_full.update(self._pending)
            self._pending.clear()

    async def round(self) -> None:
        """One round; answers the barriers waiting on it only if it ran to its end. A round cut
        short has not sent what they wait for: cancelled (the loop stops: a stop, a crash's last
        moments), they fail with Unavailable, so a push waiting on it fails and its sender keeps
        the URLs; an error in the round leaves them to the next round. A CancelledError while
        this task is not being cancelled is such an error (raised as Unavailable). A barrier on
        a host a backup refused (`_refused`) is not answered either: it waits for a later round
        (the host goes whole to that backup, or leaves this agent), without waking the loop
        before its next interval."""
        async with self._lock:
            waiters, self._waiters, self._held = self._held + self._waiters, [], []
            try:
                await self._round()
            except asyncio.CancelledError:
                if not _cancelling():
                    # Not this task's cancellation: an awaited call was cancelled under the round
                    # (grpc.aio raises CancelledError for a call it cancelled itself). An error of
                    # the round: its waiters wait for the next one. Raised as CancelledError it
                    # would end the loop (run catches Exception), and no push would be answered again.
                    self._waiters[:0] = waiters
                    raise errors.Unavailable("a call of the replication round was cancelled") from None
                for w, _ in waiters:
                    if not w.done():
                        w.set_exception(errors.Unavailable("replication stopped before this push reached the backups"))
                raise
            except BaseException:
                self._waiters[:0] = waiters
                raise
            for w, hosts in waiters:
                if w.done():
                    continue
                if self._refused and (hosts is None or not self._refused.isdisjoint(hosts)):
                    self._held.append((w, hosts))
                else:
                    w.set_result(None)

    async def barrier(self, hosts: Collection[str] | None = None) -> None:
        """Return after a round that started after this call: what was committed before it of
        `hosts` (None: of every host) is at their backups (or a backup failed: the replica lags,
        counted), and none of them was refused by a backup (see round). A peer's push is
        acknowledged only then, so a URL it handed over survives this agent's crash. Raises
        Unavailable if the round is cancelled instead (see round)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, None if hosts is None else frozenset(hosts)))
        self.waker.set()
        await fut

    def stop(self) -> None:
        """No more rounds: this agent is leaving (a drain, after its last rounds). Its backups
        keep the replicas they have: the new owner promotes its own, and takes the leaver's
        handover on the strength of it (agent/ownership/guard.py). A round after the leave would
        send them DELETE_BACKUP (the routes no longer name this agent) and take that away."""
        self._stopped = True

    async def _round(self) -> None:
        if self._stopped:
            return
        self._collect()
        if self.directory.epoch != self._epoch:
            # Backups may have changed for any host: look at all of them again.
            self._epoch = self.directory.epoch
            self._dirty.update(self.ledger.owned_hosts())
            self._dirty.update(self._synced)
        if not self._dirty:
            return
        hosts, self._dirty = sorted(self._dirty), set()
        try:
            await self._round_of(hosts)
        except BaseException:
            # Cut short (cancelled, or an error): their deltas were taken from _pending and what a
            # backup got of them is unknown. Left as they were, a backup would count as current
            # without a delta it never received, and the next round would not send it again (a
            # URL acknowledged to its pusher, then missing from the replica a backup promotes).
            # Every backup gets these hosts whole at the next round.
            self._unsure(hosts)
            raise

    def _unsure(self, hosts: list[str]) -> None:
        for h in hosts:
            self._synced.pop(h, None)
            self._need_full.add(h)
        self._dirty.update(hosts)

    async def _round_of(self, hosts: list[str]) -> None:
        routes = await self.directory.routes(hosts)
        self._collect()  # what committed during the look-up: a full copy below must not miss a done
        now = self.clock()
        rnd = _Round()
        epoch = self.directory.epoch
        for h in hosts:
            r = routes.get(h)
            if r is None:
                self._dirty.add(h)  # placement cannot answer now: next round
                continue
            self._plan(h, r, now, epoch, rnd)
        refused: set[str] = set()
        if rnd.by_backup:
            for answer in await asyncio.gather(*(self._send(b, msgs, rnd.fulls.get(b, [])) for b, msgs in rnd.by_backup.items())):
                refused |= answer or set()
        # A host is confirmed once a round sends it to each backup it waits for and none refuses
        # it (a failed send counts as sent, as before: the replica lags, this agent holds the URLs).
        self._refused -= rnd.sent - refused - rnd.waiting
        self._refused |= refused

    def _plan(self, h: str, r: HostRoute, now: float, epoch: int, rnd: _Round) -> None:
        """One host's part of the round: drops to the backups that left, a full copy to those
        without one, the delta to the synced ones; `_synced` keeps only those still current."""
        mine = r.agents[0][0] == self.self_id
        if not mine and h in self._synced and self.ledger.holds(h):
            # Not this agent's any more but not handed out yet (its handover waits for the
            # fetches in flight and a commit): its backups keep their copies, untouched,
            # until it is handed (`forget` then drops them). Dropped now, a crash of this
            # agent before its handover would leave the new owner no replica (issue 23).
            return
        want = set(r.agents[1:1 + self.backups]) if mine else set()
        synced = self._synced.pop(h, set())
        for old in synced - want:
            # DELETE_BACKUP: that copy is stale (the host moved, or that backup left the first r).
            drop = agent_pb2.ReplicateRequest(sender_id=self.self_id, epoch=epoch, host=h, drop=True)
            rnd.by_backup.setdefault(old, []).append(Wire(h, True, drop.SerializeToString()))
            self.stats.replica_drops_sent += 1
        synced &= want
        if not want:
            self._pending.pop(h, None)
            self._need_full.discard(h)
            if not mine:
                self._held_done.pop(h, None)
            if mine or not self.ledger.holds(h):
                self._refused.discard(h)  # no backup to wait for, or its URLs left with it
                self._refusals.pop(h, None)
            return
        refusals = self._refusals.get(h, {})
        if refusals and max(refusals.values()) <= now:
            del self._refusals[h]  # every pause over: the host goes to those backups now
            refusals = {}
        for b in [b for b in want if self._backoff.get(b[0], 0.0) > now or refusals.get(b[0], 0.0) > now]:
            want.discard(b)  # failed lately: it gets the host whole once it answers again
            synced.discard(b)
            self._dirty.add(h)
            if refusals.get(b[0], 0.0) > now:
                rnd.waiting.add(h)
        if h in self._need_full:
            synced = set()
        if synced:
            self._synced[h] = synced
        p = self._pending.pop(h, None)
        full = want - synced
        if full:
            msgs = self._full_copy(h, epoch)
            for b in full:
                rnd.by_backup.setdefault(b, []).extend(msgs)
                rnd.fulls.setdefault(b, []).append(h)
            rnd.sent.add(h)
        self._need_full.discard(h)
        if synced and p is not None and (p.adds or p.done or p.unshipped or p.revisits):
            delta = self._delta(h, p, epoch)
            for b in synced:
                rnd.by_backup.setdefault(b, []).append(delta)
            rnd.sent.add(h)

    def _full_copy(self, host: str, epoch: int) -> list[Wire]:
        st = self.ledger.export(host)
        queued = {i.seq for i in st.queue}
        held = [it for _, items in self._held_done.get(host, []) for it in items if it.seq not in queued]
        st.queue += held
        out = []
        for i, part in enumerate(st.parts()):
            out.append(agent_pb2.ReplicateRequest(sender_id=self.self_id, epoch=epoch, host=host, reset=i == 0,
                                                  state=part.to_proto()))
        out[-1].unshipped.extend(it.seq for it in held)  # after every queue part is in
        self.stats.replica_full_copies += 1
        return [Wire(host, False, m.SerializeToString()) for m in out]

    def _delta(self, host: str, p: _Pending, epoch: int) -> Wire:
        m = agent_pb2.ReplicateRequest(sender_id=self.self_id, epoch=epoch, host=host, done=p.done, unshipped=p.unshipped,
                                       state=agent_pb2.HostState(host=host, **crawl_of(self.ledger.crawl(host))))
        # Filled in place (add, extend): a QueuedUrl object per URL, then copied into the
        # repeated field, cost half again as much (issue 24).
        st = m.state
        q = st.queue
        for _, depth, seq, url, via, nb in p.adds:
            q.add(url=url, depth=depth, via=via, not_before=nb, seq=seq)
        if p.revisits:
            st.revisits.extend(revisit_to_proto(e) for e in p.revisits.values())
        return Wire(host, False, m.SerializeToString())

    async def _send(self, backup: Backup, msgs: list[Wire], fulls: list[str]) -> set[str]:
        """Send one backup its messages; returns the hosts it refused (their drops aside)."""
        try:
            resp = await self.peers.get(backup[1]).replicate(batches(msgs))
        except errors.WancrawlError as exc:
            self.stats.replica_send_failures += 1
            self._backoff[backup[0]] = self.clock() + self.retry_seconds
            hosts = {m.host for m in msgs if not m.drop}
            # What that backup has of these hosts is unknown now: it gets them whole later.
            self._unsynced(backup, hosts)
            log.warning("replication to %s failed (%s): %d hosts lag", backup[0], exc, len(hosts))
            return set()
        self._backoff.pop(backup[0], None)
        # Hosts the backup's peer guard refused (its placement differs from this agent's view:
        # usually a move this agent has not seen yet). The rest was applied: only these lag,
        # and only at this backup. They go whole to it once it takes them (if it is still
        # their backup), after a fresh look at their placement; a refused drop needs nothing
        # (the replica there is not this agent's).
        drops = {m.host for m in msgs if m.drop}
        refused = {n.host: n.reason for n in resp.refused if n.host not in drops}
        if refused:
            self.stats.replica_hosts_refused += len(refused)
            self._unsynced(backup, refused)
            until = self.clock() + self.retry_seconds
            for h in refused:
                self._refusals.setdefault(h, {})[backup[0]] = until
                self.directory.forget(h)
            host, why = next(iter(refused.items()))
            log.info("%s refused %d hosts of a replication round (%s: %s): asking their placement again",
                     backup[0], len(refused), host, why)
        if self._refusals:
            for h in {m.host for m in msgs} - refused.keys():  # taken now: no pause for it here
                paused = self._refusals.get(h)
                if paused is not None and paused.pop(backup[0], None) is not None and not paused:
                    del self._refusals[h]
        for h in fulls:
            if h not in refused:
                self._synced.setdefault(h, set()).add(backup)
        self.stats.replica_sends += 1
        self.stats.replica_bytes_out += sum(len(m.data) for m in msgs)
        return set(refused)

    def _unsynced(self, backup: Backup, hosts: Collection[str]) -> None:
        """That backup has no known copy of these hosts any more: it gets them whole later."""
        for h in hosts:
            synced = self._synced.get(h)
            if synced is not None:
                synced.discard(backup)
                if not synced:
                    del self._synced[h]
        self._dirty.update(hosts)

    def sync(self, hosts: list[str]) -> None:
        """Replicate these hosts now (a promotion or handover just made them ours)."""
        self._need_full.update(hosts)
        self._dirty.update(hosts)
        self.waker.set()


def _cancelling() -> bool:
    """Is the running task being cancelled (a CancelledError it sees is its own)?"""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
