"""The iterative FIND_NODE (Kademlia §2.3; seed 001 §1.4 steps ①-⑤) as a pure state machine, and
a driver that runs many lookups at once with one batched RPC per contact per round.

The lookup keeps a shortlist of every contact it has heard of, ordered by XOR distance to the
target. It asks the closest ones it has not asked yet, at most alpha at a time (seed 001 §1.4 ②:
"α controls the speed of the lookup against the traffic between nodes"), merges what they answer,
and ends when the k closest contacts it knows of (leaving out those that failed) have all answered
(§1.4 ⑤: "x has the k nodes closest to y"). A contact that fails drops out of the shortlist, so
the next closest takes its place: that is how a lookup routes around crashed nodes.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from wancrawl.kademlia.table import Contact

_NEW, _IN_FLIGHT, _ANSWERED, _FAILED = 0, 1, 2, 3


class Lookup:
    """One iterative FIND_NODE (Kademlia §2.3) as a pure state machine.

    hops: the RPC round trips on the chain of answers that led to the closest result, counting
    that contact's own answer: a seed that is itself the closest result gives 1; a contact first
    reported by a seed, 2; and so on (when several answers report a contact, the shortest chain
    counts). It is the lookup's latency in sequential round trips with unlimited parallelism, the
    figure Kademlia bounds by log2(n) + c. 0 while there is no result.
    queried: RPCs sent (next_queries() marks each one sent).
    """

    def __init__(self, target: int, seeds: Iterable[Contact], *, k: int, alpha: int, self_id: int | None = None):
        if k < 1 or alpha < 1:
            raise ValueError("k and alpha must be at least 1")
        self.target = target
        # The node running the lookup: peers' answers name it too (it is in their tables), and it
        # must not ask itself; the caller adds itself to the result where it is closer.
        self.self_id = self_id
        self.k = k
        self.alpha = alpha
        self.queried = 0
        # Invariants: _order holds the XOR distance to target of every contact in _contacts that has
        # not failed, ascending (a distance names its contact: node_id = distance ^ target, so the
        # list is plain ints and bisect works on it); _state[id] is that contact's progress; _depth
        # its chain length (seeds 1, a contact reported by an answer of depth d: d + 1, minimum
        # over the reporters); _in_flight counts _IN_FLIGHT states.
        self._contacts: dict[int, Contact] = {}
        self._state: dict[int, int] = {}
        self._depth: dict[int, int] = {}
        self._order: list[int] = []
        self._in_flight = 0
        for c in seeds:
            self._add(c, 1)

    def _add(self, c: Contact, depth: int) -> None:
        nid = c.node_id
        if nid == self.self_id:
            return
        if nid in self._state:
            if depth < self._depth[nid] and self._state[nid] in (_NEW, _IN_FLIGHT):
                self._depth[nid] = depth
            return
        self._contacts[nid] = c
        self._state[nid] = _NEW
        self._depth[nid] = depth
        bisect.insort(self._order, nid ^ self.target)

    def _top(self) -> list[int]:
        """The node ids of the k closest contacts that have not failed."""
        t = self.target
        return [d ^ t for d in self._order[: self.k]]

    def next_queries(self) -> list[Contact]:
        """The closest not-yet-asked candidates among the k closest, keeping at most alpha in flight; marks them in flight.

        Only the k closest are asked: a contact beyond them cannot enter the result unless one of
        them fails, and then it moves into the k closest and is asked on the next call."""
        room = self.alpha - self._in_flight
        out: list[Contact] = []
        if room <= 0:
            return out
        for nid in self._top():
            if self._state[nid] == _NEW:
                self._state[nid] = _IN_FLIGHT
                out.append(self._contacts[nid])
                if len(out) == room:
                    break
        self._in_flight += len(out)
        self.queried += len(out)
        return out

    def _settle(self, c: Contact) -> bool:
        """c's RPC is over; False when it was not in flight (a late or duplicate reply, ignored)."""
        if self._state.get(c.node_id) != _IN_FLIGHT:
            return False
        self._in_flight -= 1
        return True

    def answered(self, c: Contact, found: Iterable[Contact]) -> None:
        if not self._settle(c):
            return
        self._state[c.node_id] = _ANSWERED
        depth = self._depth[c.node_id] + 1
        for f in found:
            if f.node_id != c.node_id:
                self._add(f, depth)

    def failed(self, c: Contact) -> None:
        if not self._settle(c):
            return
        self._state[c.node_id] = _FAILED
        d = c.node_id ^ self.target
        i = bisect.bisect_left(self._order, d)
        del self._order[i]

    @property
    def done(self) -> bool:
        """The k closest candidates have all answered (or failed), nothing in flight."""
        return self._in_flight == 0 and all(self._state[nid] == _ANSWERED for nid in self._top())

    def result(self) -> list[Contact]:
        """The k closest contacts that answered, closest first."""
        t = self.target
        out: list[Contact] = []
        for d in self._order:
            nid = d ^ t
            if self._state[nid] == _ANSWERED:
                out.append(self._contacts[nid])
                if len(out) == self.k:
                    break
        return out

    @property
    def hops(self) -> int:
        r = self.result()
        return self._depth[r[0].node_id] if r else 0


@dataclass
class LookupStats:
    rpcs: int = 0  # find_nodes calls made (one per contact per round, whatever its number of targets)
    failures: int = 0  # calls that raised
    rounds: int = 0  # rounds of calls (sequential round trips of the whole batch)


async def lookup_many(
    targets: Sequence[int],
    seeds: Callable[[int], list[Contact]],
    find_nodes: Callable[[Contact, list[int]], Awaitable[dict[int, list[Contact]]]],
    *,
    k: int,
    alpha: int,
    stats: LookupStats | None = None,
    self_id: int | None = None,
) -> dict[int, list[Contact]]:
    """Iterative lookups of several targets at once, batched: in each round every contact that several lookups want to ask
    gets ONE find_nodes call carrying all their targets (batch everything: grpc does ~14k unary calls/s here). find_nodes
    raising any Exception = that contact failed for all its targets. Returns target -> result().

    A round waits for all its calls, so a slow contact slows the whole batch by one round trip;
    the gRPC overlay bounds find_nodes with a deadline. A reply that leaves out a target counts as
    an answer with no contacts for it. self_id (the caller's node id) is left out of every lookup.""" 
    lookups = {t: Lookup(t, seeds(t), k=k, alpha=alpha, self_id=self_id) for t in dict.fromkeys(targets)}
    await drive(lookups, find_nodes, stats)
    return {t: lk.result() for t, lk in lookups.items()}


class Driven(Protocol):
    """What `drive` needs of a lookup: Lookup, or wancrawl/kademlia/disjoint.py DisjointLookup."""

    def next_queries(self) -> list[Contact]: ...
    def answered(self, c: Contact, found: Iterable[Contact]) -> None: ...
    def failed(self, c: Contact) -> None: ...


async def drive(
    lookups: Mapping[int, Driven],
    find_nodes: Callable[[Contact, list[int]], Awaitable[dict[int, list[Contact]]]],
    stats: LookupStats | None = None,
) -> None:
    """Run lookups (target -> lookup) to their end in rounds of one batched call per contact
    (lookup_many's loop, for any kind of lookup)."""
    st = stats if stats is not None else LookupStats()
    while True:
        wanted: dict[int, tuple[Contact, list[int]]] = {}
        for t, lk in lookups.items():
            for c in lk.next_queries():
                wanted.setdefault(c.node_id, (c, []))[1].append(t)
        if not wanted:
            break
        st.rounds += 1
        calls = list(wanted.values())
        replies = await asyncio.gather(*(_call(find_nodes, c, ts) for c, ts in calls))
        st.rpcs += len(calls)
        for (c, ts), reply in zip(calls, replies):
            if reply is None:
                st.failures += 1
                for t in ts:
                    lookups[t].failed(c)
            else:
                for t in ts:
                    lookups[t].answered(c, reply.get(t, ()))


async def _call(
    find_nodes: Callable[[Contact, list[int]], Awaitable[dict[int, list[Contact]]]], c: Contact, targets: list[int]
) -> dict[int, list[Contact]] | None:
    """One batched call; None when it raised (any Exception: the contact failed for all its targets)."""
    try:
        return await find_nodes(c, list(targets))
    except Exception:  # noqa: BLE001 - any failure of the peer is a failed RPC, by contract
        return None
