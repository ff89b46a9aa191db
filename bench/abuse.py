"""Abuse harness: one agent's own certificate against a live lab crawl (issue 21, attacks 1-7).

    python bench/abuse.py                      # a baseline crawl, then the attacked crawl; the table
    python bench/abuse.py --skip-baseline      # the attacked crawl only
    python bench/abuse.py --json               # the results as JSON

A compromised agent (a leaked key, a buggy build) holds a valid certificate of its own: mutual
TLS lets it in, as itself. This harness plays one: it dials the other agents, the consultant and
storage with the certificate and key `lab up` issued to one of the crawling agents (--attacker,
RUN_DIR/pki/agent-ID.crt), sends every attack of issue 21 once while the crawl is under way, and
records each RPC's answer. The crawl then runs to its end and is counted against the lab's truth
as bench/chaos.py counts (truth, stored, lost, stored twice, fetched twice: lab/faults/measure.py's compare), and
compared with a baseline crawl without attacks (same cluster, same seed; run first, or skipped).

The cluster is chaos.py's: `lab up` with four agents (--groups), the asn strategy, lab seed 9
(1,831 truth URLs over 72 sites), per-host politeness 0.05 s, lease 15 s, mutual TLS.

Two moments. Right after the seeds are injected ("early"), the owners hold nothing yet of the
hosts the crawl has not reached (every host but the seeds'): the one moment the HandOver rule
admits a handover from an agent in the host's list below its owner. Attack 1's HandOvers and the
residual (below) come then, on non-seed hosts, smallest first. The other attacks come once
--attack-at (30%) of the truth URLs were requested (the lab's request log, polled every 0.2 s),
with hosts mid-crawl, on the hosts with the most work left (truth URLs not requested yet).

Targets (pure function `pick_targets`) come from the consultant's Resolve, asked as the attacker
(an agent may resolve), for the truth hosts; each attack on hosts of its own (a host is reused,
and marked so, only when no fresh host fits). Roles, by the attacker's place in the host's list:
  outsider      the attacker is not in the host's preference list (it never owned it); the RPC
                goes to the owner.
  third         the host's owner is not the attacker; the RPC goes to an agent that neither owns
                the host nor is the attacker (one outside the list first).
  backup        neither the owner nor the first backup is the attacker; the RPC goes to the first
                backup (which holds the owner's replica).
  other-owned   the owner is not the attacker; the RPC goes to the owner.
  below         the attacker is in the list below the owner: the position from which the
                HandOver rule lets an agent hand a host to an owner still taking it over.
  own           the attacker owns the host (it may replicate it); the RPC goes to its first backup.
  first-backup  the attacker is the first backup (the residual).

Attacks (numbers as in issue 21):
  1  early, to the owner of a `below` host: a HandOver carrying only `pages = 2^64-1`; one with
     `pages = 2^63`; one with a queued URL whose `not_before` is NaN. Later: a Replicate of the
     attacker's own host to its backup with `pages = 2^64-1` (the owner may replicate its host:
     only a field bound stops the value).
  2  HandOver to the owner of an `outsider` host carrying all its truth URLs as `seen`; two
     outsider hosts with `backoff_until = 1e300`; two with `crawl_delay = 1e6` (one HandOver per
     owner); the queue of a `third` host (its truth URLs not requested yet) to the third agent.
  3  Replicate to the first backup of a `backup` host: a reset carrying a forged replica (its
     requested URLs queued again, all its URLs seen); a drop (DELETE_BACKUP).
  4  PushUrls with `force = true` of an `other-owned` host's requested URLs (at most 50), to its
     owner; PushUrls with `route = true` of two other-owned hosts' URLs, to another agent.
  5  Register as the attacker with another agent's `source_ip` (an agent in another city); with
     that city as `location.city` and its own source_ip (only the location lies). Its own address
     both times: an accepted Register would move hosts, not make the attacker unreachable, and a
     refused one leaves its registration and lease as they were.
  6  Storage Ingest of a forged page for a requested truth URL of an `outsider` host.
  7  A string that is not UTF-8 (raw bytes on the wire: the message serialized with a placeholder,
     the placeholder's bytes replaced, `not_utf8`) to each service: Agent.PushUrls (a URL),
     Agent.HandOver (the host), Consultant.Resolve (a host), Storage.Ingest (a capture's URL).
  C  Claim, by the attacker, of an `other-owned` host from its owner (not in the issue's list;
     the fourth state-moving RPC of docs/security.md's ownership table).
  W  Issue 36 item 4, after the others: an operator's override of a finished host (the lab's
     operator certificate) opens a settle window, as any epoch change does; WINDOW_WAIT_S later,
     as the agent `below` the owner, HandOvers of hosts the owners crawl steadily: their queued
     URLs as seen (W1), backoff_until = 9e10 (W2), crawl_delay = 1e6 (W3). Before, each was taken
     (every host of a receiver was "settling" for 2 x lease) and erased, parked or held its host.

Residual (documented): docs/security.md says what a compromised agent can still do: as the first
backup of a host whose owner holds nothing of it yet, hand that host's history to its owner.
The harness does it, early, on the smallest `first-backup` host that is not a seed: a HandOver
carrying all its truth URLs as seen. Its own line ("R", marked "residual (documented)"); its host
is left out of the "beyond the baseline" verdict, and its own loss is printed. --no-residual
skips it.

Columns of the attack table:
  at s           seconds from seeding to the attack.
  answer         the gRPC status and a short message; for an OK answer the per-host `refused`
                 notes of a HandOver or Claim, storage's per-capture rejections, or what was taken.
  refused?       yes: every RPC of the line answered with a refusal (INVALID_ARGUMENT,
                 PERMISSION_DENIED, FAILED_PRECONDITION, UNAUTHENTICATED; attack 7: only
                 INVALID_ARGUMENT) or OK with every target refused and nothing taken. NO: anything
                 else (taken, or UNKNOWN/INTERNAL/a timeout).
  lost, twice    lost and stored-twice truth URLs of the line's target hosts in the attacked run
                 (the baseline's on the same hosts in brackets when not 0); "-" for attacks
                 without target hosts (5, 7).
Then one line per run: truth, stored, lost, stored twice, fetched twice, end s, agents answering
SERVING at the end; and the verdict: attacks refused, lost and stored twice beyond the baseline.
Exit status 0 when every crawl ended (whatever the attacks' answers), 1 when a run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab import cluster  # noqa: E402
from lab.faults import measure, observe, scenarios  # noqa: E402
from wancrawl.urls import host_of_canonical  # noqa: E402

DEFAULT_ATTACKER = "telecom-guangzhou"
# Refusals: a deliberate "no" with a reason. UNKNOWN, INTERNAL, UNAVAILABLE or a deadline are not.
REFUSAL_CODES = frozenset({"INVALID_ARGUMENT", "PERMISSION_DENIED", "FAILED_PRECONDITION", "UNAUTHENTICATED"})
MARK = "QQNOTUTF8QQ"  # placeholder replaced on the wire by bytes that are not UTF-8 (same length)
RPC_TIMEOUT = 15.0


# --- pure: targets, raw bytes, verdicts ---------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    host: str
    receiver: str          # the agent the attack's RPC goes to
    preference: tuple[str, ...]  # the host's list at the attack, owner first
    reused: bool = False   # no fresh host fitted: one another attack also targets


def _receiver(role: str, ids: Sequence[str], attacker: str, agents: Sequence[str]) -> str | None:
    """The agent an attack of `role` on a host with preference list `ids` goes to, or None when
    the host does not fit the role."""
    if not ids:
        return None
    owner = ids[0]
    if role == "outsider":
        return owner if attacker not in ids else None
    if role == "other-owned":
        return owner if owner != attacker else None
    if role == "third":
        if owner == attacker:
            return None
        # Prefer an agent outside the list (it has no replica either), then a backup.
        others = [a for a in agents if a not in (owner, attacker)]
        others.sort(key=lambda a: a in ids)
        return others[0] if others else None
    if role == "backup":
        return ids[1] if len(ids) > 1 and attacker not in ids[:2] else None
    if role == "below":
        return owner if attacker in ids[1:] else None
    if role == "own":
        return ids[1] if owner == attacker and len(ids) > 1 else None
    if role == "first-backup":
        return owner if len(ids) > 1 and ids[1] == attacker else None
    raise ValueError(f"unknown role {role!r}")


@dataclass(frozen=True)
class Need:
    label: str                 # the attack it is for
    role: str                  # see _receiver
    count: int                 # hosts wanted
    order: Sequence[str]       # candidate hosts, most wanted first


def pick_targets(attacker: str, routes: Mapping[str, Sequence[str]], agents: Sequence[str],
                 needs: Iterable[Need]) -> dict[str, list[Target]]:
    """label -> targets, for each need in turn: the first hosts of its `order` that fit its role
    and no earlier need took; when too few fresh hosts fit, hosts an earlier need took (marked
    reused); fewer than `count` when fewer fit at all. `routes`: host -> preference list (agent
    ids, owner first); `agents`: the live agents."""
    taken: set[str] = set()
    out: dict[str, list[Target]] = {}
    for n in needs:
        fits = [(h, r) for h in n.order if (r := _receiver(n.role, routes.get(h, ()), attacker, agents)) is not None]
        fresh = [(h, r) for h, r in fits if h not in taken]
        chosen = [Target(h, r, tuple(routes[h])) for h, r in fresh[:n.count]]
        if len(chosen) < n.count:
            picked = {t.host for t in chosen}
            chosen += [Target(h, r, tuple(routes[h]), reused=True) for h, r in fits if h not in picked][:n.count - len(chosen)]
        taken.update(t.host for t in chosen)
        out[n.label] = chosen
    return out


def by_work_left(total: Mapping[str, int], left: Mapping[str, int]) -> list[str]:
    """Hosts with the most truth URLs not requested yet first (ties by name)."""
    return sorted(total, key=lambda h: (-left.get(h, 0), h))


def smallest_first(total: Mapping[str, int], avoid: Collection[str] = ()) -> list[str]:
    """Hosts by their number of truth URLs, smallest first, without `avoid` (the seeds' hosts)."""
    return sorted((h for h in total if h not in avoid), key=lambda h: (total[h], h))


def not_utf8(payload: bytes, mark: str = MARK) -> bytes:
    """A serialized message with every occurrence of `mark` (an ASCII placeholder set in a string
    field) replaced by as many bytes that are not UTF-8: lengths, and so the framing, unchanged."""
    m = mark.encode()
    if m not in payload:
        raise ValueError("the placeholder is not in the message")
    return payload.replace(m, b"\xff" + m[1:])


@dataclass
class Answer:
    """One RPC's answer. `taken`: what an OK answer says was accepted (hosts imported, URLs
    queued, captures stored, messages applied, 1 for a Register); `refused`: the targets an OK
    answer names as refused (HandOver/Claim notes, storage's rejections)."""
    rpc: str
    code: str                  # "OK" or the gRPC status name
    detail: str = ""
    taken: int = 0
    refused: list[str] = field(default_factory=list)


def verdict(answers: Sequence[Answer], want: Collection[str] = REFUSAL_CODES) -> tuple[bool, str]:
    """(refused, why not). Refused when every answer is a status of `want`, or OK with refusal
    notes and nothing taken."""
    if not answers:
        return False, "not sent"
    for a in answers:
        if a.code == "OK":
            if a.taken:
                return False, f"{a.rpc}: accepted ({a.taken} taken)"
            if not a.refused:
                return False, f"{a.rpc}: answered OK without refusing"
        elif a.code not in want:
            return False, f"{a.rpc}: {a.code}, not {' / '.join(sorted(want))}"
    return True, ""


def clip(s: str, n: int = 110) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[:n - 3] + "..."


# --- the attacks: I/O ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    key: str                   # "1a", "2b", ...
    attack: str                # what was sent
    targets: list[Target] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    want: frozenset[str] = REFUSAL_CODES
    residual: bool = False
    note: str = ""
    at_s: float | None = None  # seconds after seeding
    refused: bool = False
    why: str = ""
    lost: int | None = None            # on the target hosts, attacked run
    twice: int | None = None
    base_lost: int | None = None       # on the same hosts, baseline
    base_twice: int | None = None

    def decide(self) -> None:
        self.refused, self.why = verdict(self.answers, self.want)
        if not self.answers and not self.note:
            self.note = "no host fits"


class Attacker:
    """An agent's own certificate, used against the others. Every call returns an Answer, never
    raises for an RPC's failure (the raw status is the finding)."""

    def __init__(self, cl: cluster.Cluster, agent_id: str):
        from wancrawl import grpcutil

        d = Path(cl.run_dir) / cluster.PKI_DIR
        self.id = agent_id
        self.cl = cl
        self.tls = grpcutil.TlsSettings(str(d / "ca.crt"), str(d / f"agent-{agent_id}.crt"), str(d / f"agent-{agent_id}.key"))
        self._channels: dict[str, object] = {}
        self.epoch = 0

    def channel(self, address: str):
        from wancrawl import grpcutil

        if address not in self._channels:
            self._channels[address] = grpcutil.channel(address, self.tls)
        return self._channels[address]

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()  # type: ignore[attr-defined]

    def agent_stub(self, agent: str):
        from wancrawl.v1 import agent_pb2_grpc

        return agent_pb2_grpc.AgentStub(self.channel(self.cl.agents[agent]))

    async def call(self, rpc: str, fn: Callable[[], Awaitable[object]], read: Callable[[object], Answer]) -> Answer:
        import grpc

        try:
            resp = await fn()
        except grpc.aio.AioRpcError as exc:
            return Answer(rpc, exc.code().name, clip(exc.details() or ""))
        return read(resp)

    # -- consultant ----------------------------------------------------------------------------------

    async def routes(self, hosts: list[str]) -> dict[str, tuple[str, ...]]:
        """host -> preference list (agent ids, owner first), asked as the attacker."""
        from consultant.client import ConsultantClient

        async with ConsultantClient(self.cl.consultant, tls=self.tls) as c:
            answers = await c.resolve(hosts)
        if answers:
            self.epoch = answers[0].epoch
        return {r.host: tuple(a for a, _ in r.agents) for r in answers if not r.error}

    async def register(self, source_ip: str, city: str = "") -> Answer:
        from wancrawl.v1 import common_pb2, consultant_pb2 as cpb, consultant_pb2_grpc

        stub = consultant_pb2_grpc.ConsultantStub(self.channel(self.cl.consultant))
        loc = common_pb2.Location(city=city) if city else None
        req = cpb.RegisterRequest(agent_id=self.id, address=self.cl.agents[self.id], source_ip=source_ip, location=loc)

        def read(r) -> Answer:
            return Answer("Register", "OK", f"registered at epoch {r.epoch}, location {r.location.city or '?'}", taken=1)
        return await self.call("Register", lambda: stub.Register(req, timeout=RPC_TIMEOUT), read)

    # -- agents ----------------------------------------------------------------------------------------

    async def hand_over(self, to: str, states: list) -> Answer:
        from wancrawl.v1 import agent_pb2

        msgs = [agent_pb2.HandOverRequest(sender_id=self.id, epoch=self.epoch, host=st) for st in states]

        def read(r) -> Answer:
            notes = "; ".join(f"{n.host}: {n.reason}" for n in r.refused)
            return Answer(f"HandOver to {to}", "OK", clip(f"refused {notes}" if notes else f"took {r.hosts} hosts, {r.queued} URLs, {r.seen} seen"),
                          taken=r.hosts, refused=[n.host for n in r.refused])
        return await self.call(f"HandOver to {to}", lambda: self.agent_stub(to).HandOver(iter(msgs), timeout=RPC_TIMEOUT), read)

    async def replicate(self, to: str, items: list) -> Answer:
        from wancrawl.v1 import agent_pb2

        batch = agent_pb2.ReplicateBatch(items=items)

        def read(r) -> Answer:
            notes = "; ".join(f"{n.host}: {n.reason}" for n in r.refused)
            return Answer(f"Replicate to {to}", "OK", clip(f"refused {notes}" if notes else f"applied {r.applied}"),
                          taken=r.applied, refused=[n.host for n in r.refused])
        return await self.call(f"Replicate to {to}", lambda: self.agent_stub(to).Replicate(iter([batch]), timeout=RPC_TIMEOUT), read)

    async def push(self, to: str, urls: list[str], *, force: bool = False, route: bool = False) -> Answer:
        from wancrawl.v1 import agent_pb2

        req = agent_pb2.PushUrlsRequest(sender_id=self.id, epoch=self.epoch, route=route,
                                        urls=[agent_pb2.UrlItem(url=u, depth=1, force=force) for u in urls])

        def read(r) -> Answer:
            return Answer(f"PushUrls to {to}", "OK", f"accepted {r.accepted}, not mine {len(r.not_mine)}", taken=r.accepted)
        return await self.call(f"PushUrls to {to}", lambda: self.agent_stub(to).PushUrls(req, timeout=RPC_TIMEOUT), read)

    async def claim(self, to: str, hosts: list[str]) -> Answer:
        from wancrawl.v1 import agent_pb2

        req = agent_pb2.ClaimRequest(claimer_id=self.id, claimer_address=self.cl.agents[self.id], epoch=self.epoch, hosts=hosts)

        def read(r) -> Answer:
            return Answer(f"Claim from {to}", "OK", f"handed {list(r.handed)}, not held {list(r.not_held)}, refused {list(r.refused)}",
                          taken=len(r.handed), refused=list(r.refused))
        return await self.call(f"Claim from {to}", lambda: self.agent_stub(to).Claim(req, timeout=RPC_TIMEOUT), read)

    # -- storage ---------------------------------------------------------------------------------------

    async def ingest(self, urls: list[str]) -> Answer:
        from storage.client import make_batch
        from wancrawl.v1 import storage_pb2, storage_pb2_grpc

        batch = make_batch([forged_capture(u, self.id) for u in urls])
        stub = storage_pb2_grpc.StorageStub(self.channel(self.cl.storage))

        def read(r) -> Answer:
            kinds = {storage_pb2.REJECTION_KIND_NOT_PLACED: "NOT_PLACED", storage_pb2.REJECTION_KIND_INVALID: "INVALID"}
            rej = "; ".join(f"{kinds.get(x.kind, x.kind)}: {x.reason}" for x in r.rejected)
            return Answer("Ingest", "OK", clip(f"stored {r.stored}" + (f", rejected {rej}" if rej else "")),
                          taken=r.stored + r.duplicates, refused=[x.record_id for x in r.rejected])
        return await self.call("Ingest", lambda: stub.Ingest(iter([batch]), timeout=RPC_TIMEOUT), read)

    # -- raw bytes -------------------------------------------------------------------------------------

    async def raw(self, address: str, method: str, payload: bytes, response, stream: bool) -> Answer:
        ch = self.channel(address)
        name = method.rsplit(".", 1)[-1]

        def read(r) -> Answer:
            return Answer(name, "OK", clip(str(r).replace("\n", " ")) or "(empty answer)", taken=1)
        if stream:
            call = ch.stream_unary(method, request_serializer=None, response_deserializer=response.FromString)  # type: ignore[attr-defined]
            return await self.call(name, lambda: call(iter([payload]), timeout=RPC_TIMEOUT), read)
        call = ch.unary_unary(method, request_serializer=None, response_deserializer=response.FromString)  # type: ignore[attr-defined]
        return await self.call(name, lambda: call(payload, timeout=RPC_TIMEOUT), read)


def forged_capture(url: str, agent_id: str):
    """A well-formed capture of `url` by `agent_id` whose page the attacker made up."""
    from wancrawl.warcrecords import FetchResult, build_capture

    now = time.time()
    body = b"<html><body>forged by a compromised agent</body></html>"
    return build_capture(FetchResult(url=url, status=200, response_headers=[("Content-Type", "text/html")], body=body,
                                     agent_id=agent_id, started_at=now, ended_at=now, ip="127.0.0.1"))


def host_state(host: str, **kw):
    from wancrawl.v1 import agent_pb2

    return agent_pb2.HostState(host=host, **kw)


def fingerprints(urls: Iterable[str]) -> list[int]:
    from agent.state.seen import fingerprint

    return [fingerprint(u) for u in urls]


@dataclass
class World:
    """What the attacks know: the truth per host, what was requested so far, the live agents."""
    truth_by_host: dict[str, list[str]]
    requested: set[str]
    agents: list[str]
    other: str            # an agent other than the attacker, in another city (attack 5)

    def left(self) -> dict[str, int]:
        return {h: sum(1 for u in us if u not in self.requested) for h, us in self.truth_by_host.items()}

    def total(self) -> dict[str, int]:
        return {h: len(us) for h, us in self.truth_by_host.items()}


async def early(att: Attacker, world: World, seeds: Collection[str], residual: bool) -> list[Outcome]:
    """Right after seeding, while the owners hold nothing of the hosts the crawl has not reached
    (every host but the seeds'): the moment the HandOver rule admits a handover from an agent in
    the host's list below its owner. Attack 1's HandOvers come then, so that a poison value gets
    past the ownership rule and meets what stands behind it (the field bounds at the edge, the
    frontier's storable checks); and the documented residual: as the first backup, hand such a
    host to its owner with all its URLs as seen."""
    from wancrawl.v1 import agent_pb2

    routes = await att.routes(sorted(world.truth_by_host))
    order = smallest_first(world.total(), seeds)
    needs = ([Need("R", "first-backup", 1, order)] if residual else []) + [Need(k, "below", 1, order) for k in ("1a", "1b", "1c")]
    tg = pick_targets(att.id, routes, world.agents, needs)
    truth = world.truth_by_host
    outs: list[Outcome] = []
    if residual:
        o = Outcome("R", "HandOver as the FIRST BACKUP to the owner, before it holds the host: its URLs as seen", tg["R"],
                    residual=True)
        for x in o.targets:
            o.answers.append(await att.hand_over(x.receiver, [host_state(x.host, seen=fingerprints(truth[x.host]))]))
        outs.append(o)
    cases: list[tuple[str, str, Callable[[str], object]]] = [
        ("1a", "HandOver, host.pages = 2^64-1", lambda h: host_state(h, pages=2**64 - 1)),
        ("1b", "HandOver, host.pages = 2^63", lambda h: host_state(h, pages=2**63)),
        ("1c", "HandOver, a queued URL with not_before = NaN",
         lambda h: host_state(h, queue=[agent_pb2.QueuedUrl(url=truth[h][0], depth=1, not_before=math.nan)])),
    ]
    for key, what, state in cases:
        o = Outcome(key, what, tg[key])
        for x in o.targets:
            o.answers.append(await att.hand_over(x.receiver, [state(x.host)]))
        outs.append(o)
    return outs


async def attacks(att: Attacker, world: World) -> list[Outcome]:
    """Every attack once, in order; returns their outcomes (answers recorded, not yet judged)."""
    from wancrawl.v1 import agent_pb2, consultant_pb2, storage_pb2

    routes = await att.routes(sorted(world.truth_by_host))
    total, left = world.total(), world.left()
    work = by_work_left(total, left)
    needs = [
        Need("1d", "own", 1, work),
        Need("2a", "outsider", 1, work), Need("2b", "outsider", 2, work), Need("2c", "outsider", 2, work),
        Need("2d", "third", 1, work),
        Need("3a", "backup", 1, work), Need("3b", "backup", 1, work),
        Need("4a", "other-owned", 1, [h for h in work if left[h] < total[h]] or work),
        Need("4b", "other-owned", 2, work),
        Need("6", "outsider", 1, work),
        Need("C", "other-owned", 1, work),
    ]
    tg = pick_targets(att.id, routes, world.agents, needs)
    # Pushed with route=true to one other agent; ingested at storage: the receiver the table names.
    push_to = next(a for a in world.agents if a != att.id)
    tg["4b"] = [replace(t, receiver=push_to) for t in tg["4b"]]
    tg["6"] = [replace(t, receiver="storage") for t in tg["6"]]
    truth = world.truth_by_host
    done = lambda h: [u for u in truth[h] if u in world.requested]  # noqa: E731
    todo = lambda h: [u for u in truth[h] if u not in world.requested]  # noqa: E731
    outs: list[Outcome] = []

    async def each(key: str, what: str, send: Callable[[Target], Awaitable[Answer]], want: frozenset[str] = REFUSAL_CODES) -> None:
        o = Outcome(key, what, tg.get(key, []), want=want)
        for x in o.targets:
            o.answers.append(await send(x))
        outs.append(o)

    async def grouped(key: str, what: str, state: Callable[[Target], object]) -> None:
        """One HandOver per receiver, carrying every target host it owns."""
        o = Outcome(key, what, tg.get(key, []))
        by: dict[str, list] = {}
        for x in o.targets:
            by.setdefault(x.receiver, []).append(state(x))
        for to, states in by.items():
            o.answers.append(await att.hand_over(to, states))
        outs.append(o)

    # 1 (its HandOvers came right after seeding: early()): the owner's right to replicate its own host.
    await each("1d", "Replicate of its OWN host to its backup, pages = 2^64-1", lambda x: att.replicate(x.receiver, [
        agent_pb2.ReplicateRequest(sender_id=att.id, epoch=att.epoch, host=x.host, state=host_state(x.host, pages=2**64 - 1))]))
    # 2: handovers from an agent that never owned the host, or to one that does not own it.
    await grouped("2a", "HandOver from a non-holder to the owner, the host's URLs as seen",
                  lambda x: host_state(x.host, seen=fingerprints(truth[x.host])))
    await grouped("2b", "HandOver from a non-holder, backoff_until = 1e300 (2 hosts)",
                  lambda x: host_state(x.host, backoff_until=1e300, backoff_level=1))
    await grouped("2c", "HandOver from a non-holder, crawl_delay = 1e6 (2 hosts)", lambda x: host_state(x.host, crawl_delay=1e6))
    await each("2d", "HandOver of a host's queue to a third agent that does not own it", lambda x: att.hand_over(x.receiver, [host_state(
        x.host, queue=[agent_pb2.QueuedUrl(url=u, depth=1) for u in (todo(x.host) or truth[x.host])])]))
    # 3: replicas of others' hosts.
    await each("3a", "Replicate (reset, a forged replica) from a non-owner to the host's backup", lambda x: att.replicate(x.receiver, [
        agent_pb2.ReplicateRequest(sender_id=att.id, epoch=att.epoch, host=x.host, reset=True, state=host_state(
            x.host, queue=[agent_pb2.QueuedUrl(url=u, depth=1, seq=i + 1) for i, u in enumerate(done(x.host) or truth[x.host])],
            seen=fingerprints(truth[x.host])))]))
    await each("3b", "Replicate drop (DELETE_BACKUP) from a non-owner to the host's backup", lambda x: att.replicate(x.receiver, [
        agent_pb2.ReplicateRequest(sender_id=att.id, epoch=att.epoch, host=x.host, drop=True)]))
    # 4: operator flags.
    await each("4a", "PushUrls force=true of stored pages, to the owner",
               lambda x: att.push(x.receiver, (done(x.host) or truth[x.host])[:50], force=True))
    o = Outcome("4b", "PushUrls route=true (others' hosts' URLs), to another agent", tg.get("4b", []))
    if o.targets:
        o.answers.append(await att.push(push_to, [u for x in o.targets for u in truth[x.host][:25]], route=True))
    outs.append(o)
    # 5: where the attacker stands.
    src = att.cl.agent_sources[world.other]
    o = Outcome("5a", f"Register with another agent's source_ip ({world.other}'s {src})")
    o.answers.append(await att.register(src))
    outs.append(o)
    city = world.other.split("-", 1)[-1].split("-")[0].capitalize()
    o = Outcome("5b", f"Register with a lying location (city {city}, own source_ip)")
    o.answers.append(await att.register(att.cl.agent_sources[att.id], city=city))
    outs.append(o)
    # 6: storage.
    await each("6", "Ingest a forged page of a host it neither owns nor backs up",
               lambda x: att.ingest([(done(x.host) or truth[x.host])[0]]))
    # 7: strings that are not UTF-8, one request per service.
    seven = frozenset({"INVALID_ARGUMENT"})
    anyone = next(a for a in world.agents if a != att.id)
    host0 = sorted(truth)[0]
    raw_cases = [
        ("7a", "Agent.PushUrls, a URL not UTF-8", att.cl.agents[anyone], "/wancrawl.v1.Agent/PushUrls", False,
         agent_pb2.PushUrlsRequest(sender_id=att.id, epoch=att.epoch, urls=[agent_pb2.UrlItem(url=f"http://{host0}/{MARK}", depth=1)]),
         agent_pb2.PushUrlsResponse),
        ("7b", "Agent.HandOver, a host name not UTF-8", att.cl.agents[anyone], "/wancrawl.v1.Agent/HandOver", True,
         agent_pb2.HandOverRequest(sender_id=att.id, epoch=att.epoch, host=host_state(f"{MARK}.example")),
         agent_pb2.HandOverResponse),
        ("7c", "Consultant.Resolve, a host not UTF-8", att.cl.consultant, "/wancrawl.v1.Consultant/Resolve", False,
         consultant_pb2.ResolveRequest(hosts=[f"{MARK}.example"]), consultant_pb2.ResolveResponse),
        ("7d", "Storage.Ingest, a capture URL not UTF-8", att.cl.storage, "/wancrawl.v1.Storage/Ingest", True,
         storage_pb2.PageBatch(batch_id="abuse", captures=[_proto_capture(f"http://{host0}/{MARK}", att.id)]),
         storage_pb2.IngestAck),
    ]
    for key, what, address, method, stream, msg, resp in raw_cases:
        o = Outcome(key, what, want=seven)
        o.answers.append(await att.raw(address, method, not_utf8(msg.SerializeToString()), resp, stream))
        outs.append(o)
    # +: Claim of another's host by the attacker.
    await each("C", "Claim of another's host (not in the issue's list)", lambda x: att.claim(x.receiver, [x.host]))
    outs += await window(att, world, routes, [h for h in work if not any(h == t.host for ts in tg.values() for t in ts)])
    return outs


WINDOW_WAIT_S = 7.0  # after the override: the agents learn the epoch at a heartbeat (lease / 3) and settle it


async def window(att: Attacker, world: World, routes: Mapping[str, Sequence[str]], work: list[str]) -> list[Outcome]:
    """Issue 36 item 4: a settle window opened by an operator's override of a finished host (any
    epoch change opens one), then, as the agent below the owner in their lists, HandOvers of hosts
    the owners crawl steadily: their queued URLs as seen (W1), backoff_until = 9e10 (W2),
    crawl_delay = 1e6 (W3). Before, every host of a receiver took them for 2 x lease after any
    epoch change: the host erased, parked, held past the end."""
    from consultant.client import ConsultantClient

    needs = [Need("W1", "below", 1, work), Need("W2", "below", 1, work), Need("W3", "below", 1, work)]
    tg = pick_targets(att.id, routes, world.agents, needs)
    done_hosts = [h for h, n in world.left().items() if n == 0 and h in routes and len(routes[h]) > 1]
    outs: list[Outcome] = []
    if not done_hosts:
        return [Outcome("W", "settle window: no finished host to move (no epoch change made)", note="no host fits")]
    moved = done_hosts[0]
    async with ConsultantClient(att.cl.consultant) as op:  # the lab's operator certificate (registered by lab up)
        await op.set_override(moved, routes[moved][1])
    await asyncio.sleep(WINDOW_WAIT_S)
    truth = world.truth_by_host
    todo = lambda h: [u for u in truth[h] if u not in world.requested]  # noqa: E731
    cases = [
        ("W1", "in a settle window, HandOver as the agent below the owner: its queued URLs as seen",
         lambda h: host_state(h, seen=fingerprints(todo(h) or truth[h]))),
        ("W2", "in a settle window, HandOver as the agent below the owner: backoff_until = 9e10",
         lambda h: host_state(h, backoff_until=9e10, backoff_level=1)),
        ("W3", "in a settle window, HandOver as the agent below the owner: crawl_delay = 1e6",
         lambda h: host_state(h, crawl_delay=1e6)),
    ]
    for key, what, state in cases:
        o = Outcome(key, what, tg.get(key, []), note=f"window: {moved} pinned to {routes[moved][1]}")
        for x in o.targets:
            o.answers.append(await att.hand_over(x.receiver, [state(x.host)]))
        outs.append(o)
    return outs


def _proto_capture(url: str, agent_id: str):
    from storage.client import to_proto

    return to_proto(forged_capture(url, agent_id))


# --- one run ------------------------------------------------------------------------------------------


@dataclass
class Run:
    name: str                          # "baseline" or "attacked"
    metrics: measure.Comparison | None = None
    finished: bool = False
    crawl_s: float | None = None       # seeding to the end (idle) or the timeout
    serving: str = "-"                 # agents answering SERVING at the end, "n/m"
    notes: list[str] = field(default_factory=list)
    attack_at: float | None = None     # share of truth requested at the attacks
    attack_after_s: float | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    truth: set[str] = field(default_factory=set)                    # this run's truth URLs (with its web port)
    captures: list[tuple[str, str]] = field(default_factory=list)   # (canonical URL, record type), for per-host counts
    requested: list[str] = field(default_factory=list)


async def _serving(cl: cluster.Cluster) -> tuple[int, int]:
    from wancrawl.grpcutil import check_health

    ok = await asyncio.gather(*(check_health(addr, timeout=3) for addr in cl.agents.values()))
    return sum(ok), len(ok)


def _pick_other(attacker: str, agents: Sequence[str]) -> str:
    """Attack 5's victim: an agent in another city than the attacker's (the last part of the
    group name), else any other."""
    city = lambda a: a.split("-", 1)[-1]  # noqa: E731
    others = [a for a in agents if a != attacker]
    return next((a for a in others if city(a) != city(attacker)), others[0])


def run_crawl(name: str, base: Path, args: argparse.Namespace) -> Run:
    run = observe.fresh_run_dir(base / name)
    res = Run(name)
    try:
        cl = cluster.up(run, strategy=args.strategy, groups=args.groups, seed=args.seed, time_scale=args.time_scale,
                        delay=args.delay, concurrency=args.concurrency, lease=args.lease)
    except Exception as exc:  # noqa: BLE001 - the table says what failed
        res.notes.append(f"ERROR: lab up: {type(exc).__name__}: {exc}")
        return res
    t_end = time.time()
    truth: set[str] = set()
    try:
        # Each run's own: truth URLs carry the run's web port (the hosts are the same in both runs).
        truth = res.truth = observe.compute_truth(cl)
        if name == "attacked" and args.attacker not in cl.agents:
            raise ValueError(f"attacker {args.attacker!r} is not one of the agents {sorted(cl.agents)}")
        by_host: dict[str, list[str]] = {}
        for u in sorted(truth):
            by_host.setdefault(host_of_canonical(u), []).append(u)
        from manager.seed import parse_seeds
        seeds = {host_of_canonical(u) for u in parse_seeds(Path(cl.seeds_file).read_text()).urls}
        tail = observe.LogTail(cl.web_log)
        t0, seeded_at = time.monotonic(), time.time()
        deadline = t0 + args.timeout
        asyncio.run(observe.inject_seeds(cl))
        if name == "attacked":
            res.outcomes = asyncio.run(_attack_run(cl, args, by_host, seeds, tail, truth, deadline, seeded_at, res))
        res.finished = asyncio.run(observe.wait_crawl_idle(cl, deadline - time.monotonic(), args.stable))
        res.crawl_s = time.monotonic() - t0
        if not res.finished:
            res.notes.append(f"TIMEOUT: not idle {args.timeout:.0f}s after seeding")
        up_, n = asyncio.run(_serving(cl))
        res.serving = f"{up_}/{n}"
    except Exception as exc:  # noqa: BLE001
        res.notes.append(f"ERROR: {type(exc).__name__}: {exc}")
    finally:
        t_end = time.time()
        stopped = cluster.down(run)
    for p in cluster.Cluster.load(run).procs:
        if p.name not in stopped:
            res.notes.append(f"ERROR: {p.name} was not running at the end (see {p.log})")
    if truth:
        entries = observe.LogTail(cl.web_log).poll()
        res.requested = [u for e in entries if e.t <= t_end and (u := observe.log_url(e, cl.web_port)) is not None]
        res.captures = [(u, t) for u, t, fetched in observe.read_captures(run) if fetched <= t_end]
        res.metrics = measure.compare(truth, res.captures, res.requested)
    return res


async def _attack_run(cl: cluster.Cluster, args: argparse.Namespace, by_host: dict[str, list[str]], seeds: set[str],
                      tail: observe.LogTail, truth: set[str], deadline: float, seeded_at: float, res: Run) -> list[Outcome]:
    att = Attacker(cl, args.attacker)
    requested: set[str] = set()
    world = World(by_host, requested, sorted(cl.agents), _pick_other(args.attacker, sorted(cl.agents)))
    outs: list[Outcome] = []
    try:
        outs += await early(att, world, seeds, not args.no_residual)
        for o in outs:
            o.at_s = time.time() - seeded_at
        goal = args.attack_at * len(truth)
        while time.monotonic() < deadline:
            requested.update(u for e in tail.poll() if (u := observe.log_url(e, cl.web_port)) in truth)
            if len(requested) >= goal:
                break
            await asyncio.sleep(0.2)
        else:
            res.notes.append(f"TIMEOUT before {args.attack_at:.0%} of truth was requested: attacks not sent")
            return outs
        res.attack_at = len(requested) / len(truth)
        res.attack_after_s = time.time() - seeded_at
        later = await attacks(att, world)
        for o in later:
            o.at_s = res.attack_after_s
        outs += later
    finally:
        await att.close()
    return outs


# --- counting and output ------------------------------------------------------------------------------


def on_hosts(hosts: Collection[str], r: Run) -> tuple[int, int] | None:
    """(lost, stored twice) among the truth URLs of `hosts` in run `r` (None: not counted)."""
    if r.metrics is None or not hosts:
        return None
    hs = set(hosts)
    sub = {u for u in r.truth if host_of_canonical(u) in hs}
    m = measure.compare(sub, r.captures, r.requested)
    return m.lost, m.stored_twice


def count_outcomes(attacked: Run, baseline: Run | None) -> None:
    for o in attacked.outcomes:
        o.decide()
        hosts = {t.host for t in o.targets}
        got = on_hosts(hosts, attacked)
        if got is not None:
            o.lost, o.twice = got
        base = on_hosts(hosts, baseline) if baseline is not None else None
        if base is not None:
            o.base_lost, o.base_twice = base


def beyond_baseline(attacked: Run, baseline: Run | None, exclude: Collection[str]) -> tuple[int, int] | None:
    """(lost, stored twice) of the attacked run beyond the baseline's, on truth hosts not in
    `exclude` (the residual's); None without both counts."""
    if attacked.metrics is None or baseline is None or baseline.metrics is None:
        return None
    ex = set(exclude)
    a = measure.compare({u for u in attacked.truth if host_of_canonical(u) not in ex}, attacked.captures, attacked.requested)
    b = measure.compare({u for u in baseline.truth if host_of_canonical(u) not in ex}, baseline.captures, baseline.requested)
    return a.lost - b.lost, a.stored_twice - b.stored_twice


ATTACK_HEADERS = ["#", "at s", "attack", "target (host->receiver)", "refused?", "lost", "twice", "answer"]
RUN_HEADERS = ["run", "truth", "stored", "lost", "stored twice", "fetched twice", "end s", "agents SERVING", "notes"]


def _cell(v: int | None, base: int | None) -> str:
    if v is None:
        return "-"
    return f"{v} [{base}]" if base else str(v)


def attack_rows(outs: Sequence[Outcome]) -> list[list[str]]:
    rows = []
    for o in outs:
        target = ", ".join(f"{t.host}->{t.receiver}" + (" (reused)" if t.reused else "") for t in o.targets) or "-"
        answer = " | ".join(f"{a.code}: {a.detail}" if a.detail else a.code for a in o.answers) or o.note
        if not o.answers:
            ref = "not sent"
        elif o.residual:
            ref = "yes (residual closed?)" if o.refused else "no: residual (documented)"
        else:
            ref = "yes" if o.refused else "NO"
        rows.append([o.key, "-" if o.at_s is None else f"{o.at_s:.1f}", o.attack, target, ref,
                     _cell(o.lost, o.base_lost), _cell(o.twice, o.base_twice), clip(answer, 200)])
    return rows


def run_rows(runs: Sequence[Run]) -> list[list[str]]:
    out = []
    for r in runs:
        m = r.metrics
        cells = [str(m.truth), str(m.stored), str(m.lost), str(m.stored_twice), str(m.fetched_twice)] if m else ["-"] * 5
        notes = list(r.notes)
        if r.attack_at is not None:
            notes.insert(0, f"attacks at {r.attack_at:.0%} of truth requested ({r.attack_after_s:.1f}s)")
        out.append([r.name, *cells, "-" if r.crawl_s is None else f"{r.crawl_s:.1f}", r.serving, "; ".join(notes)])
    return out


def verdict_lines(attacked: Run, baseline: Run | None) -> list[str]:
    outs = [o for o in attacked.outcomes if not o.residual]
    res = [o for o in attacked.outcomes if o.residual]
    lines = [f"attacks refused: {sum(o.refused for o in outs)} of {len(outs)}"]
    lines += [f"  NOT refused: {o.key} {o.attack}: {o.why}" for o in outs if not o.refused]
    ex = {t.host for o in res for t in o.targets}
    got = beyond_baseline(attacked, baseline, ex)
    if got is None:
        lines.append("beyond the baseline: n/a (no baseline run)")
    else:
        lines.append(f"beyond the baseline{' (the residual host ' + ', '.join(sorted(ex)) + ' left out)' if ex else ''}: "
                     f"lost {got[0]:+d}, stored twice {got[1]:+d}")
    for o in res:
        lines.append(f"residual (documented): {'refused' if o.refused else 'taken'}; lost {_cell(o.lost, o.base_lost)}, "
                     f"stored twice {_cell(o.twice, o.base_twice)} on {', '.join(t.host for t in o.targets) or 'no host'}")
    return lines


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """Plain columns two spaces apart, one line per row (no wrapping: the last column runs long)."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        out = [str(c).rjust(w) if h in right else str(c).ljust(w) for h, c, w in zip(headers, cells, widths)]
        return "  ".join(out).rstrip()
    return [line(headers), *(line(r) for r in rows)]


def print_report(header: list[str], attacked: Run, runs: list[Run], lines: list[str]) -> None:
    out = list(header)
    out += format_table(ATTACK_HEADERS, attack_rows(attacked.outcomes), right={"at s", "lost", "twice"})
    out.append("")
    out += format_table(RUN_HEADERS, run_rows(runs), right=set(RUN_HEADERS) - {"run", "notes"})
    out += lines
    print("\n".join(out))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attacker", default=DEFAULT_ATTACKER, help=f"the agent whose certificate attacks (default {DEFAULT_ATTACKER})")
    p.add_argument("--skip-baseline", action="store_true", help="no baseline crawl (nothing to compare lost and stored twice with)")
    p.add_argument("--no-residual", action="store_true", help="do not play the documented residual")
    p.add_argument("--attack-at", type=float, default=0.3, help="share of truth requested when the attacks come (default 0.3)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of the tables")
    p.add_argument("--run-dir", help="base directory for the runs (kept); default: a temporary one, removed")
    p.add_argument("--seed", type=int, default=scenarios.DEFAULT_SEED)
    p.add_argument("--strategy", default="asn")
    p.add_argument("--groups", default=",".join(scenarios.DEFAULT_GROUPS), help="the agents' ISP-city groups")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds from seeding to the end of a crawl")
    p.add_argument("--stable", type=float, default=2.0)
    p.add_argument("--time-scale", type=float, default=60.0)
    p.add_argument("--delay", type=float, default=0.05)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--lease", type=float, default=15.0)
    args = p.parse_args(argv)
    args.groups = [g.strip() for g in args.groups.split(",") if g.strip()]

    base = Path(args.run_dir).resolve() if args.run_dir else Path(tempfile.mkdtemp(prefix="wancrawl-abuse-"))
    base.mkdir(parents=True, exist_ok=True)
    header = [
        "$ python bench/abuse.py " + " ".join(sys.argv[1:] if argv is None else argv),
        f"lab seed {args.seed}, strategy {args.strategy}, agents {', '.join(args.groups)}, politeness {args.delay:g}s, "
        f"lease {args.lease:g}s, mutual TLS; attacker {args.attacker} (its own certificate), attacks at {args.attack_at:.0%} "
        f"of truth requested{'' if args.no_residual else ', residual right after seeding'}",
        f"runs under {base}",
    ]
    runs: list[Run] = []
    try:
        for name in (["attacked"] if args.skip_baseline else ["baseline", "attacked"]):
            if not args.json:
                print(f"abuse: {name} ...", file=sys.stderr, flush=True)
            runs.append(run_crawl(name, base, args))
    except KeyboardInterrupt:
        print("abuse: interrupted (the running cluster was stopped)", file=sys.stderr)
        return 130
    finally:
        if not args.run_dir:
            shutil.rmtree(base, ignore_errors=True)
    baseline = next((r for r in runs if r.name == "baseline"), None)
    attacked = runs[-1]
    count_outcomes(attacked, baseline)
    lines = verdict_lines(attacked, baseline)
    if args.json:
        def run_json(r: Run) -> dict:
            d = asdict(r)
            for k in ("truth", "captures", "requested"):
                d.pop(k)
            if d["metrics"] is not None:
                d["metrics"]["lost_urls"] = d["metrics"]["lost_urls"][:50]
            return d
        print(json.dumps({"command": header[0].removeprefix("$ "), "runs": [run_json(r) for r in runs],
                          "attacks": [dict(zip(ATTACK_HEADERS, row)) for row in attack_rows(attacked.outcomes)],
                          "verdict": lines}, indent=2, default=str))
    else:
        print_report(header, attacked, runs, lines)
    return 0 if all(r.finished for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
