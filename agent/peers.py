"""PeerDirectory: what the manager and storage ask of the consultant, answered by the agents'
Kademlia overlay (`mode = "kademlia"`, docs/kademlia.md "The manager without a consultant").

The overlay's query client for processes that are not nodes, one of the agent's two client-side
faces beside agent/client.py: the manager (manager/peers.py) and storage (its Ingest check,
storage/server.py) use this one copy, and the import-linter floors let storage import it (and,
through it, agent/client.py) alone of the agent's modules. So it imports only the agent's client,
the pure Kademlia core (wancrawl/kademlia/) and the shared placement types
(wancrawl/placement.py): never the agent's settings, fetchers or rooms, which a storage process
has no use for (tests/test_storage_placement.py checks what `import storage.server` loads). The
overlay's defaults it needs are constants here, and agent/settings.py takes its [kademlia]
defaults from them, so the two cannot drift.

There is no consultant process in that mode, so the manager asks the agents, and no single
agent's answer decides (issue 36: one lying agent first in the list made storage refuse every
other agent's pages). `list_agents` is the union of the Members of up to `paths` (3) answering
agents of `addresses`; `resolve` is an iterative FIND_NODE of every host's key over `paths`
disjoint paths (S/Kademlia; wancrawl/kademlia/disjoint.py) seeded with those members, asked as
plain queries (no `sender`: the manager is not a node and enters no routing table). A node
counts only once it answered as itself (the answer's responder is the contact dialed; with TLS
the channel checked its id too), and one address answers for one node. The host's preference
list is the `preference` closest such nodes any path found, owner first, the same list the
agents compute (agent/placement/kademlia/placement.py `preference`); `contested` says when the
paths disagree, and then an agent it leaves out is not known to be unplaced (storage holds).

The answers are shaped like the consultant's (wancrawl.placement.HostRoute, a ListAgentsResponse)
so that manager/seed.py, manager/status.py and storage take either. Errors are translated at this
boundary (agent/client.py): callers see wancrawl.errors, never a raw grpc error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from agent.client import AgentClient, AgentPool
from wancrawl import checks, errors, grpcutil
from wancrawl.kademlia import xorspace
from wancrawl.kademlia.disjoint import judge, lookup_disjoint
from wancrawl.kademlia.table import Contact
from wancrawl.placement import HostRoute
from wancrawl.stats import Counters
from wancrawl.urls import canonical_host
from wancrawl.v1 import agent_pb2, consultant_pb2

# The overlay's defaults, one source for the agents' [kademlia] ones (agent/settings.py
# KademliaSettings reads them from here) and this client's: a query asks with the nodes' k and
# alpha, and its routes say the TTL the nodes' own do.
K = 20           # bucket size and contacts per FIND_NODE answer (Kademlia, libp2p: 20)
ALPHA = 3        # lookups' parallelism (Kademlia, libp2p: 3)
PATHS = 3        # disjoint lookup paths and starting peers (S/Kademlia d; libp2p: its parallelism)
ROUTE_TTL = 300  # seconds a host's preference list may be cached

FIND_BATCH = 1_000  # targets per FindNode (the agents' limit, agent/validate.py)
MAX_NAME = 253      # a DNS name
STRATEGY = "kademlia"

log = logging.getLogger(__name__)


# --- pure: the answers' shapes --------------------------------------------------------------------


def contact_of(c: agent_pb2.Contact) -> Contact:
    """A contact from an answer; Unavailable when malformed (an agent's answer is not trusted blindly)."""
    try:
        return Contact(xorspace.id_from_bytes(c.node_id), c.agent_id, c.address)
    except ValueError as exc:
        raise errors.Unavailable(f"a malformed contact in an agent's answer: {exc}") from None


def listing(members: Sequence[Contact], epoch: int) -> consultant_pb2.ListAgentsResponse:
    """The overlay's live members as the consultant's ListAgents would list them: alive, no
    location (the overlay knows none), strategy "kademlia"."""
    alive = consultant_pb2.AGENT_STATE_ALIVE
    seen: dict[str, None] = {}
    agents = []
    for c in members:
        if c.agent_id in seen:
            continue
        seen[c.agent_id] = None
        agents.append(consultant_pb2.AgentInfo(agent_id=c.agent_id, address=c.address, state=alive, weight=1.0))
    return consultant_pb2.ListAgentsResponse(epoch=epoch, strategy=STRATEGY, agents=agents)


@dataclass(frozen=True)
class Keyed:
    """The hosts of a resolve: each one's canonical name and key, or why it has none."""

    names: list[str | None]
    keys: dict[int, int]       # index in hosts -> host key
    errors: dict[int, str]     # index in hosts -> reason


def keyed(hosts: Sequence[str]) -> Keyed:
    """Canonical host names and their keys (wancrawl/kademlia/xorspace.py host_key), as the agents' placement does."""
    if not hosts:
        raise errors.InvalidArgument("resolve: no hosts")
    names: list[str | None] = []
    keys: dict[int, int] = {}
    errs: dict[int, str] = {}
    for i, h in enumerate(hosts):
        try:
            if len(h) > checks.MAX_HOST:
                raise errors.InvalidArgument(f"{len(h)} characters long; at most {checks.MAX_HOST}")
            name = canonical_host(h)
            if len(name) > MAX_NAME:
                raise errors.InvalidArgument(f"host name is {len(name)} characters long; at most {MAX_NAME}")
        except errors.InvalidArgument as exc:
            names.append(None)
            errs[i] = f"hosts[{i}]: {exc}"
            continue
        names.append(name)
        keys[i] = xorspace.host_key(name)
    return Keyed(names, keys, errs)


def routes(hosts: Sequence[str], k: Keyed, found: Mapping[int, Sequence[Sequence[Contact]]], *, preference: int, ttl: int,
           epoch: int) -> list[HostRoute]:
    """Each host's route from its key's disjoint paths' results (key -> one result per path):
    the `preference` closest nodes any path found, owner first (wancrawl/kademlia/disjoint.py
    judge); `contested` says so when the paths disagree."""
    out = []
    for i, h in enumerate(hosts):
        name = k.names[i]
        if name is None:
            out.append(HostRoute(h, (), 0, epoch, k.errors[i]))
            continue
        v = judge(k.keys[i], found.get(k.keys[i], ()), preference)
        if not v.route:
            out.append(HostRoute(name, (), 0, epoch, "no live agent answered a lookup of this host's key"))
            continue
        doubt = "" if v.agreed else f"{v.paths - v.agreeing} of {v.paths} disjoint lookup paths found other closest nodes"
        out.append(HostRoute(name, tuple((c.agent_id, c.address) for c in v.route), ttl, epoch, contested=doubt))
    return out


def responder_is(c: Contact, r: agent_pb2.Contact) -> None:
    """A node is admitted into an answer only if it answered as itself: the FindNode answer's
    responder must be the contact dialed (with TLS the channel checked its id as well; without,
    this is the only check). Unavailable (the contact failed) otherwise."""
    who = contact_of(r)
    if (who.node_id, who.agent_id) != (c.node_id, c.agent_id):
        raise errors.Unavailable(f"{c.address} answered as {who.agent_id} ({xorspace.id_hex(who.node_id)[:8]}), "
                                 f"not as {c.agent_id} ({xorspace.id_hex(c.node_id)[:8]})")


class AnsweredAt:
    """One node per address: once a node answered as itself at an address, another contact
    claiming that address fails without a call. A liar's made-up contacts name real addresses
    (its own, or others'): one call per contact per target otherwise, ten per target for the
    "ten contacts next to each target" lie (issue 36)."""

    def __init__(self) -> None:
        self._at: dict[str, int] = {}  # address -> node id that answered there as itself

    def check(self, c: Contact) -> None:
        n = self._at.get(c.address)
        if n is not None and n != c.node_id:
            raise errors.Unavailable(f"{c.address} answers as another node ({xorspace.id_hex(n)[:8]}), not {c.agent_id}")

    def answered(self, c: Contact) -> None:
        self._at[c.address] = c.node_id


@dataclass(slots=True)
class PeerCounters(Counters):
    """The directory's calls and what its lookups found, since start (storage's metrics)."""
    peer_members_calls: int = 0
    peer_find_node_calls: int = 0
    peer_find_node_failures: int = 0
    peer_contacts_skipped: int = 0
    peer_resolves: int = 0
    peer_hosts_contested: int = 0


# --- the client -----------------------------------------------------------------------------------


class PeerDirectory:
    """The overlay through its agents, for the manager and storage: `list_agents` and `resolve` as
    consultant.client.ConsultantClient answers them. Owns its agent clients.

    addresses: agents to ask, in order (any live member will do); preference: the length of a
    host's preference list, 1 + replication.backups (3 with the default r = 2); k and alpha: the
    lookup's (the agents' [kademlia] defaults); ttl: what a route's TTL says (the agents'
    kademlia.route_ttl default)."""

    def __init__(self, addresses: Iterable[str], *, tls: grpcutil.TlsSettings | None = None, timeout: float = 10.0,
                 preference: int = 3, k: int = K, alpha: int = ALPHA, ttl: int = ROUTE_TTL, paths: int = PATHS):
        self.addresses = [a.strip() for a in addresses if a.strip()]
        if not self.addresses:
            raise errors.ConfigError("--peers: give at least one agent address (host:port)")
        if not 1 <= preference <= k:
            raise errors.ConfigError(f"preference = {preference}: 1..k ({k})")
        self.tls = tls
        if paths < 1:
            raise errors.ConfigError(f"paths = {paths}: at least 1")
        self.preference, self.k, self.alpha, self.ttl, self.paths = preference, k, alpha, ttl, paths
        self.pool = AgentPool(timeout, tls=tls)
        self._first = 0  # the agent that answered last: asked first next time
        self.stats = PeerCounters()

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> PeerDirectory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _secure(self, address: str) -> bool:
        return not grpcutil.effective_tls(self.tls, address).insecure

    def _client(self, c: Contact) -> AgentClient:
        """A node dialed by its id: with TLS its certificate must carry the name its id gives, so
        an address that answers with another key fails (agent/placement/kademlia/wire.py)."""
        return self.pool.get(c.address, xorspace.id_san(c.node_id) if self._secure(c.address) else "")

    async def members(self) -> tuple[list[Contact], int]:
        """The live members as up to `paths` answering agents list them (no single agent's view:
        a liar's Members cannot hide the others), each answering agent first in its own list,
        and the highest view epoch among them. Members are hints: a lookup admits a node into
        an answer only once it answered as itself."""
        tried: list[str] = []
        views: list[list[Contact]] = []
        epoch = 0
        n = len(self.addresses)
        for j in range(n):
            if len(views) == self.paths:
                break
            i = (self._first + j) % n
            address = self.addresses[i]
            self.stats.peer_members_calls += 1
            try:
                r = await self.pool.get(address).members()
            except errors.Unavailable as exc:
                tried.append(str(exc))
                continue
            except errors.FailedPrecondition as exc:  # an agent in consultant mode has no overlay
                raise errors.FailedPrecondition(f"{exc}; use --consultant ADDR for such a cluster, not --peers") from None
            if not views:
                self._first = i
            views.append([contact_of(c) for c in r.members])
            epoch = max(epoch, r.epoch)
        if not views:
            raise errors.Unavailable("no agent of --peers answers: " + "; ".join(tried))
        return _union(views), epoch

    async def list_agents(self, include_dead: bool = False) -> consultant_pb2.ListAgentsResponse:
        """The overlay's live members as a ListAgentsResponse. include_dead is accepted for the
        consultant's signature: an overlay forgets dead and departed nodes, so there are none to add."""
        members, epoch = await self.members()
        return listing(members, epoch)

    async def resolve(self, hosts: list[str]) -> list[HostRoute]:
        """Each host's preference list by XOR distance among the nodes that answered as
        themselves a lookup of its key over `paths` disjoint paths, seeded with the members that
        up to `paths` agents list; `contested` where the paths disagree (issue 36)."""
        k = keyed(hosts)
        members, epoch = await self.members()
        if not members:
            raise errors.Unavailable("the agents asked list no member (they left the overlay)")
        epochs = [epoch]
        self.stats.peer_resolves += 1

        seen_at = AnsweredAt()

        async def find_nodes(c: Contact, targets: list[int]) -> dict[int, list[Contact]]:
            out: dict[int, list[Contact]] = {}
            for i in range(0, len(targets), FIND_BATCH):
                part = targets[i : i + FIND_BATCH]
                try:
                    seen_at.check(c)
                except errors.Unavailable:
                    self.stats.peer_contacts_skipped += 1
                    raise
                self.stats.peer_find_node_calls += 1
                try:
                    r = await self._client(c).find_node(None, [xorspace.id_bytes(t) for t in part], self.k, 0)
                    responder_is(c, r.responder)
                    seen_at.answered(c)
                    if len(r.closest) != len(part):
                        raise errors.Unavailable(f"FindNode from {c.agent_id}: {len(r.closest)} answers to {len(part)} targets")
                except errors.WancrawlError:
                    self.stats.peer_find_node_failures += 1
                    raise
                epochs.append(r.epoch)
                out.update({t: [contact_of(x) for x in cl.contacts] for t, cl in zip(part, r.closest)})
            return out

        near = {m.node_id: m for m in members}
        found = await lookup_disjoint(sorted(set(k.keys.values())), lambda t: list(near.values()), find_nodes,
                                      k=self.k, alpha=self.alpha, paths=self.paths)
        out = routes(hosts, k, {t: lk.votes() for t, lk in found.items()}, preference=self.preference,
                     ttl=self.ttl, epoch=max(epochs))
        contested = [r for r in out if r.contested]
        if contested:
            self.stats.peer_hosts_contested += len(contested)
            log.warning("overlay lookups disagree on %d of %d hosts (%s: %s; placed so far: %s): not known yet",
                        len(contested), len(out), contested[0].host, contested[0].contested,
                        ", ".join(contested[0].agent_ids))
        return out


def _union(views: Sequence[Sequence[Contact]]) -> list[Contact]:
    """The members of several views, each once (by node id), in the order first listed."""
    seen: dict[int, Contact] = {}
    for v in views:
        for c in v:
            seen.setdefault(c.node_id, c)
    return list(seen.values())
