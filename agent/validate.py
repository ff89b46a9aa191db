"""Validation at the edge of the agent (issues 13 and 21): one function per RPC, called by the
servicer before the request reaches the node. A bad field is INVALID_ARGUMENT naming it, with
long values cut (wancrawl/checks.py). Every field of every request message has its bound here
(docs/security.md, "Validation at the edge"; tests/test_field_bounds.py sends each one's worst
value). Epochs are checked for range here; whether a newer epoch is believed is HostDirectory's
decision (agent/placement/directory.py: only the consultant's word moves it)."""

from __future__ import annotations

from wancrawl import checks
from wancrawl.errors import InvalidArgument
from wancrawl.v1 import agent_pb2

MAX_PUSH = 100_000          # URLs per PushUrls (routing.alpha is at most that)
MAX_CLAIM_HOSTS = 100_000   # hosts per Claim
# Queue entries, fingerprints or seqs in one HandOver/Replicate message, and messages in one
# ReplicateBatch: senders cut parts at 20,000 entries or 200,000 fingerprints
# (agent/ownership/ledger.py) and batches at 1 MB (agent/ownership/replicator.py).
MAX_PART_ITEMS = 1_000_000
MAX_ROBOTS_BYTES = 4 * 1024 * 1024  # the robots cache keeps 500,000 characters of a file
# robots.txt entries per host: one per origin, and a host has at most two schemes x 65,536 ports.
MAX_ROBOTS = 2 * 65_536
MAX_DRAIN_SECONDS = 86_400.0
# Link hops from a seed: scope.max_depth is 20 by default; a million is beyond any crawl, even
# one without a depth limit (a trap is stopped by the page budget first).
MAX_DEPTH = 1_000_000
# Consecutive failures of a host (Politeness uses min(level, 62)): at the longest backoff, an
# hour, a million failures take 114 years.
MAX_BACKOFF_LEVEL = 1_000_000
MAX_STATUS = 999  # an HTTP status; 0 = no answer
# FindNode: targets per call (a lookup batch is at most routing.beta = 10,000 hosts; callers cut
# at 1,000) and contacts per target (k is at most 100: agent/settings.py KademliaSettings).
MAX_FIND_TARGETS = 1_000
MAX_FIND_COUNT = 100
MAX_DELEGATIONS = 256  # per Ping (kademlia.balance_max_delegations is at most this)
MAX_RATE = 1e9         # pages per second in a node's load


def sender(field: str, value: str) -> str:
    return checks.text(field, value, checks.MAX_ID, required=True)


def address(field: str, value: str) -> str:
    checks.text(field, value, checks.MAX_ADDRESS, required=True)
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"{field} {checks.shown(value)} is not host:port")
    return value


def url_problem(u: agent_pb2.UrlItem) -> str | None:
    """Why one pushed URL is refused before parsing (reported in the answer's errors as
    "index: reason", the rest of the push is taken), or None."""
    if len(u.url) > checks.MAX_URL:
        return f"url is {len(u.url)} characters long; at most {checks.MAX_URL}"
    if len(u.via) > checks.MAX_URL:
        return f"via is {len(u.via)} characters long; at most {checks.MAX_URL}"
    if u.depth > MAX_DEPTH:
        return f"depth = {u.depth} is out of range (0..{MAX_DEPTH})"
    return None


def push_urls(r: agent_pb2.PushUrlsRequest) -> None:
    sender("sender_id", r.sender_id)
    checks.epoch("epoch", r.epoch)
    checks.count("urls", r.urls, MAX_PUSH)


def host_state(field: str, st: agent_pb2.HostState) -> None:
    checks.text(f"{field}.host", st.host, checks.MAX_HOST, required=True)
    checks.count(f"{field}.queue", st.queue, MAX_PART_ITEMS)
    checks.count(f"{field}.seen", st.seen, MAX_PART_ITEMS)  # fingerprints: any 64-bit value is one
    checks.count(f"{field}.robots", st.robots, MAX_ROBOTS)
    # Any finite Crawl-delay passes: it is the site's robots.txt value, and the receiver applies
    # at most its own politeness.max_crawl_delay (Politeness.set_delay).
    checks.finite(f"{field}.crawl_delay", st.crawl_delay, low=0.0)
    checks.unix_time(f"{field}.backoff_until", st.backoff_until)
    checks.integer(f"{field}.backoff_level", st.backoff_level, high=MAX_BACKOFF_LEVEL)
    # Added to the receiver's count (Frontier.add_pages) and kept as an SQLite INTEGER.
    checks.integer(f"{field}.pages", st.pages)
    for i, q in enumerate(st.queue):
        f = checks.indexed(f"{field}.queue", i)
        checks.text(f"{f}.url", q.url, checks.MAX_URL, required=True)
        checks.text(f"{f}.via", q.via, checks.MAX_URL)
        checks.integer(f"{f}.depth", q.depth, high=MAX_DEPTH)
        checks.unix_time(f"{f}.not_before", q.not_before)
        checks.integer(f"{f}.seq", q.seq)  # the owner's queue key: counts up from 0
    checks.count(f"{field}.revisits", st.revisits, MAX_PART_ITEMS)
    for i, r in enumerate(st.revisits):
        f = checks.indexed(f"{field}.revisits", i)
        checks.text(f"{f}.url", r.url, checks.MAX_URL, required=True)
        for name in ("due", "last", "lastmod"):
            checks.unix_time(f"{f}.{name}", getattr(r, name))
        for name in ("interval", "span", "changefreq"):  # seconds: at most a few centuries
            checks.finite(f"{f}.{name}", getattr(r, name), low=0.0, high=checks.MAX_TIME)
        for name in ("digest", "etag", "modified"):
            checks.text(f"{f}.{name}", getattr(r, name), checks.MAX_TEXT)
        for name in ("length", "visits", "changes"):
            checks.integer(f"{f}.{name}", getattr(r, name))
        checks.integer(f"{f}.depth", r.depth, high=MAX_DEPTH)
    for i, rb in enumerate(st.robots):
        f = checks.indexed(f"{field}.robots", i)
        checks.text(f"{f}.origin", rb.origin, checks.MAX_ADDRESS + 16)
        checks.integer(f"{f}.status", rb.status, high=MAX_STATUS)
        checks.size(f"{f}.body", rb.body, MAX_ROBOTS_BYTES)
        for name in ("expires", "fetched_ok", "failing_since"):
            checks.unix_time(f"{f}.{name}", getattr(rb, name))


def hand_over(m: agent_pb2.HandOverRequest) -> None:
    sender("sender_id", m.sender_id)
    checks.epoch("epoch", m.epoch)
    host_state("host", m.host)
    if m.replica_of:
        sender("replica_of", m.replica_of)


def replicate(m: agent_pb2.ReplicateRequest, prefix: str = "") -> None:
    sender(f"{prefix}sender_id", m.sender_id)
    checks.epoch(f"{prefix}epoch", m.epoch)
    checks.text(f"{prefix}host", m.host, checks.MAX_HOST, required=True)
    if m.HasField("state"):
        host_state(f"{prefix}state", m.state)
    for name in ("done", "unshipped"):  # seqs of the owner's queue entries
        values = getattr(m, name)
        checks.count(f"{prefix}{name}", values, MAX_PART_ITEMS)
        checks.integers(f"{prefix}{name}", values)


def replicate_batch(b: agent_pb2.ReplicateBatch) -> None:
    checks.count("items", b.items, MAX_PART_ITEMS)
    for i, m in enumerate(b.items):
        replicate(m, checks.indexed("items", i) + ".")


def claim(r: agent_pb2.ClaimRequest) -> None:
    sender("claimer_id", r.claimer_id)
    address("claimer_address", r.claimer_address)
    checks.epoch("epoch", r.epoch)
    checks.count("hosts", r.hosts, MAX_CLAIM_HOSTS)
    for i, h in enumerate(r.hosts):
        checks.text(checks.indexed("hosts", i), h, checks.MAX_HOST, required=True)


def contact(field: str, c: agent_pb2.Contact) -> None:
    """A node's contact: a 20-byte id, an agent id and a host:port."""
    if len(c.node_id) != 20:
        raise InvalidArgument(f"{field}.node_id is {len(c.node_id)} bytes; a node id is 20")
    sender(field + ".agent_id", c.agent_id)
    address(field + ".address", c.address)


def ping(r: agent_pb2.PingRequest) -> None:
    contact("sender", r.sender)
    checks.epoch("epoch", r.epoch)
    ping_announce(r)


def ping_announce(m: agent_pb2.PingRequest | agent_pb2.PingResponse) -> None:
    """A Ping's load and delegations (a request's, and a peer's answer: agent/placement/kademlia/wire.py)."""
    if m.HasField("load"):
        checks.finite("load.load_level", m.load.load_level, low=-float(checks.MAX_COUNT), high=float(checks.MAX_COUNT))
        checks.finite("load.work_area", m.load.work_area, low=0.0, high=float(checks.MAX_COUNT))
        checks.integer("load.queue_length", m.load.queue_length)
        checks.finite("load.rate", m.load.rate, low=0.0, high=MAX_RATE)
    checks.count("delegations", m.delegations, MAX_DELEGATIONS)
    for i, d in enumerate(m.delegations):
        f = checks.indexed("delegations", i)
        if len(d.key) != 20:
            raise InvalidArgument(f"{f}.key is {len(d.key)} bytes; a key is 20")
        contact(f + ".delegate", d.delegate)


def find_node(r: agent_pb2.FindNodeRequest) -> None:
    if r.HasField("sender"):
        contact("sender", r.sender)
    checks.count("targets", r.targets, MAX_FIND_TARGETS)
    for i, t in enumerate(r.targets):
        if len(t) != 20:
            raise InvalidArgument(f"{checks.indexed('targets', i)} is {len(t)} bytes; a key is 20")
    if not 1 <= r.count <= MAX_FIND_COUNT:
        raise InvalidArgument(f"count = {r.count} is out of range (1..{MAX_FIND_COUNT})")
    checks.epoch("epoch", r.epoch)


def leave(r: agent_pb2.LeaveRequest) -> None:
    contact("sender", r.sender)


def members(r: agent_pb2.MembersRequest) -> None:
    """No fields."""


def drain(r: agent_pb2.DrainRequest) -> None:
    checks.finite("timeout_seconds", r.timeout_seconds, low=0.0, high=MAX_DRAIN_SECONDS)


def status(r: agent_pb2.StatusRequest) -> None:
    """No fields."""
