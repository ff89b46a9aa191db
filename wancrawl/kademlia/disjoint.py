"""Lookups over disjoint paths (S/Kademlia, Baumgart and Mies 2007, §4.4; libp2p's
`ClosestDisjointPeersIter`, rust-libp2p protocols/kad/src/query/peers/closest/disjoint.rs) and the
rule that turns their answers into a placement, or into "not known yet". Pure: no I/O, no clock.

Why (issue 36): storage's placement check and the manager started one lookup at one agent and
kept "only nodes that answered". One lying agent first in their peers list (its FIND_NODE answered
itself alone) was then the only node found, and storage refused every other agent's pages. A
node's id is bound to its certificate (a contact is dialed by id, and its answer must name it),
so a liar cannot make up a live node: it can only hide the nodes it knows. Hiding is defeated when
some path avoids the liar; the union of what the paths found is then the truth.

* `DisjointLookup`: `paths` iterative lookups of one target, all started from the same seeds (as
  libp2p does; the seeds come from several starting peers, not one). Each contact is asked by one
  path only: the first that wants it. Another path that wants it later learns only whether it
  answered, never what it answered (libp2p: "do not pass the closer peers, in order to uphold the
  S/Kademlia disjoint paths guarantee"), so a liar's answer feeds one path at most.
* `merge`: the union of the paths' results, closest first, each node once (libp2p's ResultIter).
  Only nodes that answered are in any path's result.
* `judge`: the placement is the merged list's first `preference` nodes. It is *agreed* when every
  path that learnt anything itself (`votes`: some node it asked answered) ranks the same first
  `preference` nodes; otherwise the paths disagree
  and the placement is contested. A contested placement may still accept a node it lists (that
  node answered as itself and no path found `preference` nodes closer), but it never refuses
  one: a refusal on a contested placement is "not known yet" (hold, retry, alarm).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from wancrawl.kademlia.lookup import Lookup, LookupStats, drive
from wancrawl.kademlia.table import Contact

_WAITING, _ANSWERED, _FAILED = 0, 1, 2


class DisjointLookup:
    """`paths` Lookups of one target over disjoint paths; the same interface as `Lookup`
    (next_queries, answered, failed, done, result, queried), so `lookup_many` drives either.

    Invariants: `_owner[n]` is the one path that asked node n (every RPC goes to a node once);
    `_outcome[n]` is n's answer state once known; `_waiters[n]` are the other paths that want n,
    told its outcome (not its contacts) when it comes."""

    def __init__(self, target: int, seeds: Iterable[Contact], *, k: int, alpha: int, paths: int,
                 self_id: int | None = None):
        if paths < 1:
            raise ValueError("paths must be at least 1")
        seeds = list(seeds)
        self.target = target
        self.k = k
        self.paths = [Lookup(target, seeds, k=k, alpha=alpha, self_id=self_id) for _ in range(paths)]
        self._owner: dict[int, int] = {}
        self._outcome: dict[int, int] = {}
        self._waiters: dict[int, list[int]] = {}
        self._own = [0] * paths  # answers each path got from the nodes it asked itself
        self.queried = 0

    def next_queries(self) -> list[Contact]:
        """The contacts to ask now, each for the one path that asked for it first. A path that
        wants a contact another path asked already learns its outcome at once, or when it comes."""
        out: list[Contact] = []
        moved = True
        while moved:  # an outcome told to a waiting path frees its room: ask it again
            moved = False
            for i, lk in enumerate(self.paths):
                for c in lk.next_queries():
                    n = c.node_id
                    owner = self._owner.get(n)
                    if owner is None:
                        self._owner[n] = i
                        out.append(c)
                    elif self._outcome.get(n, _WAITING) == _WAITING:
                        self._waiters.setdefault(n, []).append(i)
                    else:
                        self._tell(i, c)
                        moved = True
        self.queried += len(out)
        return out

    def _tell(self, i: int, c: Contact) -> None:
        if self._outcome[c.node_id] == _ANSWERED:
            self.paths[i].answered(c, ())
        else:
            self.paths[i].failed(c)

    def answered(self, c: Contact, found: Iterable[Contact]) -> None:
        owner = self._owner.get(c.node_id)
        if owner is None or self._outcome.get(c.node_id, _WAITING) != _WAITING:
            return
        self._outcome[c.node_id] = _ANSWERED
        self._own[owner] += 1
        self.paths[owner].answered(c, found)
        for i in self._waiters.pop(c.node_id, ()):
            self._tell(i, c)

    def failed(self, c: Contact) -> None:
        owner = self._owner.get(c.node_id)
        if owner is None or self._outcome.get(c.node_id, _WAITING) != _WAITING:
            return
        self._outcome[c.node_id] = _FAILED
        self.paths[owner].failed(c)
        for i in self._waiters.pop(c.node_id, ()):
            self._tell(i, c)

    @property
    def done(self) -> bool:
        return all(lk.done for lk in self.paths)

    def path_results(self) -> list[list[Contact]]:
        """Each path's own result: the k closest contacts that answered, closest first."""
        return [lk.result() for lk in self.paths]

    def votes(self) -> list[list[Contact]]:
        """The results of the paths that learnt something themselves: at least one node they
        asked answered. A path every one of whose contacts another path asked first (fewer seeds
        than the paths' parallelism) only heard outcomes, never contacts: it has no view of its
        own to disagree with."""
        return [lk.result() for lk, n in zip(self.paths, self._own) if n]

    def result(self) -> list[Contact]:
        """The union of the paths' results, closest first (at most k)."""
        return merge(self.target, self.path_results())[: self.k]


def merge(target: int, results: Iterable[Sequence[Contact]]) -> list[Contact]:
    """The union of several results, closest to `target` first, each node once."""
    by_id: dict[int, Contact] = {}
    for r in results:
        for c in r:
            by_id.setdefault(c.node_id, c)
    return sorted(by_id.values(), key=lambda c: c.node_id ^ target)


@dataclass(frozen=True)
class Verdict:
    """One key's placement from disjoint paths: the merged list's first `preference` nodes, and
    how many of the paths that found anything rank the same ones (agreed: all of them)."""

    route: tuple[Contact, ...]
    paths: int      # paths that found any node
    agreeing: int   # of them, those whose own first `preference` nodes are `route`

    @property
    def agreed(self) -> bool:
        return self.paths > 0 and self.agreeing == self.paths

    def accepts(self, agent_id: str) -> bool:
        """Is the agent placed: one of the route's nodes (a node that answered as itself, with
        no `preference` nodes found closer on any path)."""
        return any(c.agent_id == agent_id for c in self.route)

    def refuses(self, agent_id: str) -> bool:
        """Refused only on an agreed placement; contested or empty: not known yet (neither)."""
        return self.agreed and not self.accepts(agent_id)


def judge(target: int, results: Sequence[Sequence[Contact]], preference: int) -> Verdict:
    """The disagreement rule (module docstring): merge, then count the paths that agree."""
    route = tuple(merge(target, results)[:preference])
    want = [c.node_id for c in route]
    found = [r for r in results if r]
    agreeing = sum(1 for r in found if [c.node_id for c in sorted(r, key=lambda c: c.node_id ^ target)[:preference]] == want)
    return Verdict(route, len(found), agreeing)


async def lookup_disjoint(
    targets: Sequence[int],
    seeds: Callable[[int], list[Contact]],
    find_nodes: Callable[[Contact, list[int]], Awaitable[dict[int, list[Contact]]]],
    *,
    k: int,
    alpha: int,
    paths: int,
    stats: LookupStats | None = None,
    self_id: int | None = None,
) -> dict[int, DisjointLookup]:
    """lookup_many over disjoint paths: target -> its finished DisjointLookup (its merged
    `result()`, its `path_results()` for `judge`). One batched call per contact per round, as
    lookup_many; a contact is asked at most once per target whatever the number of paths.
    `judge(target, lookup.votes(), preference)` is the placement."""
    lookups = {t: DisjointLookup(t, seeds(t), k=k, alpha=alpha, paths=paths, self_id=self_id)
               for t in dict.fromkeys(targets)}
    await drive(lookups, find_nodes, stats)
    return lookups
