"""Load balancing, phase 1 (docs/balance.md): which hosts move from heavy to light agents.

`plan` is pure: agents' load reports and locations in, moves out. `Balancer` owns what one
consultant remembers between rounds (hosts moved lately, agents whose report predates a move)
and turns a Snapshot into a plan; the service writes the plan as overrides (consultant/service.py)
and the agents move the hosts whole, as on a join (docs/replication.md).

The model, from the two seeds:
  * seed 000 (§1.4): an agent is heavy when its load level L = (Q - W)/H is > 0 and light when
    it is < 0 (agent/placement/load.py); the sign does not depend on H, so the plan works in URLs, on the
    excess E = Q - W = L*H. Heavy blocks go to light agents nearest region first, and a region
    takes a host only if it is light as a whole with that host (sum of E + the host's URLs < 0).
  * seed 003 (§2.2-2.3): what to equalise is the agents' predicted runtimes, t = Q / v (the
    queue over the agent's rate: a linear runtime model; `load_of` says which rate); a move is
    taken only if it
    lowers the larger of the two runtimes it touches, so the plan's own model never sees its
    maximum go up.
  * phase 2 (seed 003 §2.3-2.4): our allocator (consultant/capacity/allocate.py, `bisect`) gives
    each agent its share of all queued URLs, the count that minimises the makespan at the
    agents' rates (the capacity model's where it has enough samples of the agent, the load
    report's otherwise: `Balancer.round`'s `rate_of`). `allocate` writes it into each AgentLoad's
    `target`; a move is then taken only from an agent over its target to one under it, and only
    if it brings the pair nearer their targets (the host, whole, may overshoot a little).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from consultant.capacity import allocate as A
from consultant.membership import Snapshot
from consultant.partition.asn import isp_of
from wancrawl import loadmodel
from wancrawl.geo import great_circle_km
from wancrawl.stats import Counters

RateOf = Callable[[str, int], "float | None"]  # (agent id, URLs queued) -> the model's pages/s, None: unknown

# Region tiers, nearest first: same ISP and city, same ISP, same city, anywhere (by distance).
SAME_PLACE, SAME_ISP, SAME_CITY, ELSEWHERE = 0, 1, 2, 3


@dataclass(frozen=True)
class AgentLoad:
    agent_id: str
    queue: int                 # Q: URLs queued
    work_area: float           # W: URLs it fetches in one balance period at its peak rate
    rate: float                # v: pages/s the runtime model uses (0 = unknown: left out of the plan)
    hosts: dict[str, int] = field(default_factory=dict)  # its longest host queues (the movable hosts)
    isp: str = ""
    city: str = ""
    lat: float | None = None
    lon: float | None = None
    target: float | None = None  # URLs the allocator gives it (None: no allocation, phase 1's rules alone)

    @property
    def excess(self) -> float:
        """E = Q - W = L * H: > 0 heavy, < 0 light."""
        return self.queue - self.work_area

    @property
    def runtime(self) -> float:
        """Predicted seconds to empty the queue (seed 003's runtime, linear in the queue)."""
        return self.queue / self.rate


@dataclass(frozen=True)
class Move:
    host: str
    source: str
    target: str
    urls: int   # the host's queue as the source reported it
    tier: int   # region tier of the target seen from the source (0 nearest)


@dataclass(frozen=True)
class Policy:
    max_moves: int = 8            # hosts moved per round, at most
    min_gap_seconds: float = 5.0  # a move needs the source's runtime this far above the target's...
    min_ratio: float = 1.5        # ...and this many times the target's
    min_urls: int = 1             # hosts with fewer queued URLs are not worth a handover


def tier(a: AgentLoad, b: AgentLoad) -> int:
    same_isp = bool(a.isp) and a.isp == b.isp
    same_city = bool(a.city) and a.city == b.city
    if same_isp and same_city:
        return SAME_PLACE
    if same_isp:
        return SAME_ISP
    if same_city:
        return SAME_CITY
    return ELSEWHERE


def distance(a: AgentLoad, b: AgentLoad) -> float:
    if a.lat is None or a.lon is None or b.lat is None or b.lon is None:
        return math.inf
    return great_circle_km(a.lat, a.lon, b.lat, b.lon)


def worth(src: AgentLoad, dst: AgentLoad, policy: Policy) -> bool:
    """Hysteresis: the imbalance between the two is large enough to pay for a handover."""
    return loadmodel.worth(src.runtime, dst.runtime, policy.min_gap_seconds, policy.min_ratio)


def after(src: AgentLoad, dst: AgentLoad, host: str, urls: int) -> tuple[AgentLoad, AgentLoad]:
    """Both agents as the model sees them once `host` (with `urls` queued) moved."""
    src_hosts = {h: n for h, n in src.hosts.items() if h != host}
    return (replace(src, queue=src.queue - urls, hosts=src_hosts),
            replace(dst, queue=dst.queue + urls, hosts={**dst.hosts, host: urls}))


def improves(src: AgentLoad, dst: AgentLoad, urls: int) -> bool:
    """The larger runtime of the pair goes down: the model's maximum never goes up."""
    return loadmodel.improves(src.queue, src.rate, dst.queue, dst.rate, urls)


def nearer_targets(src: AgentLoad, dst: AgentLoad, urls: int) -> bool:
    """From over the allocator's target to under it, the pair nearer both (wancrawl/loadmodel.py);
    without targets, True (phase 1's rules alone)."""
    return loadmodel.nearer_targets(src.queue, src.target, dst.queue, dst.target, urls)


def allocate(loads: Iterable[AgentLoad]) -> list[AgentLoad]:
    """The loads with each agent's `target`: our allocator's counts (consultant/capacity/
    allocate.py `bisect`) of all queued URLs over the agents with a known rate, at runtimes
    f_i(n) = n / rate_i: the split that lets every agent finish at once (seed 003's objective).
    Agents with no rate get no target (they are left out of the plan anyway)."""
    loads = list(loads)
    known = [i for i, a in enumerate(loads) if a.rate > 0 and math.isfinite(a.rate)]
    total = sum(loads[i].queue for i in known)
    if len(known) < 2 or total <= 0:
        return loads
    counts = A.bisect(A.linear([1.0 / loads[i].rate for i in known]), len(known), total).counts
    out = list(loads)
    for i, n in zip(known, counts):
        out[i] = replace(loads[i], target=float(n))
    return out


def regions(src: AgentLoad, others: Iterable[AgentLoad]) -> list[list[AgentLoad]]:
    """The other agents grouped by tier, nearest tier first; each group nearest first."""
    groups: dict[int, list[AgentLoad]] = {}
    for o in others:
        groups.setdefault(tier(src, o), []).append(o)
    return [sorted(groups[t], key=lambda o: (distance(src, o), o.agent_id)) for t in sorted(groups)]


def best_move(src: AgentLoad, others: list[AgentLoad], policy: Policy, frozen: frozenset[str],
              no_targets: frozenset[str] = frozenset()) -> Move | None:
    """Seed 000's search: regions nearest first; a host goes to a region only if the region as a
    whole has room for it (its free work area, -sum E, exceeds the host's queue: seed 000's
    L_k + L < 0 for the one block that moves; the paper asks room for all of the heavy node's
    blocks, but it moves one block at a time and so do we, one host); in the first region that
    can help, the light agent and host whose move leaves the pair most even (smallest larger
    runtime; then the larger host: more per move)."""
    movable = sorted(((h, n) for h, n in src.hosts.items() if n >= policy.min_urls and h not in frozen),
                     key=lambda x: (-x[1], x[0]))
    if not movable:
        return None
    for region in regions(src, others):
        room = -sum(o.excess for o in region)
        best: tuple[float, int, str, str] | None = None
        for dst in region:
            if dst.agent_id in no_targets or dst.excess >= 0 or not worth(src, dst, policy):
                continue
            for host, urls in movable:
                if urls >= room or not improves(src, dst, urls) or not nearer_targets(src, dst, urls):
                    continue
                peak = loadmodel.peak_after(src.queue, src.rate, dst.queue, dst.rate, urls)
                key = (peak, -urls, dst.agent_id, host)
                if best is None or key < best:
                    best = key
        if best is not None:
            _peak, neg_urls, target, host = best
            return Move(host, src.agent_id, target, -neg_urls, tier(src, next(o for o in region if o.agent_id == target)))
    return None


def plan(loads: Iterable[AgentLoad], policy: Policy = Policy(), frozen: Iterable[str] = ()) -> list[Move]:
    """Moves for one round, at most `policy.max_moves`. Agents with no known rate are left out.
    Heaviest runtime first; an agent that received a host this round gives none, and one that
    gave one receives none (no host passes through, no pair swaps); a host moves once;
    `frozen` hosts (moved lately, pinned by an operator) stay."""
    model = {a.agent_id: a for a in loads if a.rate > 0 and math.isfinite(a.rate)}
    fixed = set(frozen)
    gave: set[str] = set()
    got: set[str] = set()
    moves: list[Move] = []
    while len(moves) < policy.max_moves:
        heavy = sorted((a for a in model.values() if a.excess > 0 and a.agent_id not in got),
                       key=lambda a: (-a.runtime, a.agent_id))
        move = None
        for src in heavy:
            others = [o for o in model.values() if o.agent_id != src.agent_id]
            move = best_move(src, others, policy, frozenset(fixed), frozenset(gave))
            if move is not None:
                break
        if move is None:
            return moves
        model[move.source], model[move.target] = after(model[move.source], model[move.target], move.host, move.urls)
        fixed.add(move.host)
        gave.add(move.source)
        got.add(move.target)
        moves.append(move)
    return moves


def load_of(record_load: dict, agent_id: str, *, isp: str, city: str, lat: float | None, lon: float | None) -> AgentLoad:
    """An AgentLoad from a heartbeat's LoadReport as the state keeps it (MessageToDict: 64-bit
    integers are strings, absent fields missing)."""
    hosts = {str(h.get("host", "")): int(h.get("queue_length", 0) or 0) for h in record_load.get("heavy_hosts", [])}
    queue = int(record_load.get("queue_length", 0) or 0)
    work_area = float(record_load.get("work_area", 0) or 0)
    now = float(record_load.get("pages_per_second", 0) or 0)
    peak = float(record_load.get("peak_pages_per_second", 0) or 0)
    rate = loadmodel.model_rate(queue, work_area, now, peak)
    return AgentLoad(agent_id, queue=queue, work_area=work_area, rate=rate, hosts={h: n for h, n in hosts.items() if h},
                     isp=isp, city=city, lat=lat, lon=lon)


@dataclass(slots=True)
class BalanceCounters(Counters):
    """Rounds planned and hosts moved since this balancer was made (a new policy starts a new one)."""
    balance_rounds: int = 0
    balance_moves: int = 0


class Balancer:
    """Owns one consultant's memory between rounds: when each host was last moved (a host moved
    within `cooldown` seconds stays: no ping-pong), when each agent last gave or got a host (its
    report must be newer than that before it counts again: a stale queue would move the same
    load twice), and counts. `round` is pure apart from that memory; the service writes."""

    def __init__(self, policy: Policy, cooldown: float, isps: dict[str, list[int]], max_silence: float = math.inf):
        self.policy = policy
        self.cooldown = cooldown
        self.isps = isps
        # An agent not heard from for longer than this is left out of the plan, as source and
        # as target: it may be dead, its lease not run out yet. A move off an agent in the
        # seconds after it died goes to a new owner that holds the host for a claim the dead
        # agent never answers (recovery waits for the lease), and it is the move the kill2 chaos
        # runs with balancing on stored pages twice after (docs/balance.md, "Stored twice after
        # a move at a death"). Its report is stale anyway.
        self.max_silence = max_silence
        self.moved_at: dict[str, float] = {}
        self.touched_at: dict[str, float] = {}
        self.stats = BalanceCounters()

    def loads(self, snap: Snapshot, rate_of: RateOf | None = None, now: float | None = None) -> list[AgentLoad]:
        """Each fresh agent's load; its rate from `rate_of` (the capacity model) when that knows
        one, else the load report's (seed 000's load level: `load_of`). With `now`, agents
        silent longer than `max_silence` are left out."""
        out = []
        for rec in snap.alive():
            if rec.last_heartbeat <= self.touched_at.get(rec.agent_id, -math.inf):
                continue  # its report predates its last move
            if now is not None and now - rec.last_heartbeat > self.max_silence:
                continue  # a heartbeat missed: it may be dead (see __init__)
            try:
                report = json.loads(rec.load_json or "{}")
            except ValueError:
                continue
            load = load_of(report, rec.agent_id, isp=isp_of(rec.asn, self.isps), city=rec.city, lat=rec.lat, lon=rec.lon)
            modelled = rate_of(rec.agent_id, load.queue) if rate_of is not None else None
            if modelled is not None and modelled > 0 and math.isfinite(modelled):
                load = replace(load, rate=modelled)
            out.append(load)
        return out

    def round(self, snap: Snapshot, now: float, pinned: Iterable[str] = (), rate_of: RateOf | None = None) -> list[Move]:
        """This round's moves. `pinned`: hosts an operator pinned (never moved by the balancer);
        `rate_of(agent_id, queued)`: the capacity model's pages/s for the agent, None when it has
        too few samples of it (consultant/capacity/book.py). The allocator's targets come from
        the rates so chosen (`allocate`)."""
        self.stats.balance_rounds += 1
        self.moved_at = {h: t for h, t in self.moved_at.items() if now - t < self.cooldown}
        # the state's times too: a host another consultant replica moved lately stays as well
        lately = [h for h, t in snap.balanced_at.items() if now - t < self.cooldown]
        return plan(allocate(self.loads(snap, rate_of, now)), self.policy, frozen=[*self.moved_at, *lately, *pinned])

    def applied(self, moves: list[Move], now: float) -> None:
        for m in moves:
            self.moved_at[m.host] = now
            self.touched_at[m.source] = self.touched_at[m.target] = now
        self.stats.balance_moves += len(moves)
