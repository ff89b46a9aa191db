"""Validation at the edge of the agent (issue 13): one function per RPC, called by the servicer
before the request reaches the node. A bad field is INVALID_ARGUMENT naming it, with long values
cut (wancrawl/checks.py). Epochs are checked for range here; whether a newer epoch is believed
is HostDirectory's decision (agent/placement/directory.py: only the consultant's word moves it)."""

from __future__ import annotations

from wancrawl import checks
from wancrawl.errors import InvalidArgument
from wancrawl.v1 import agent_pb2

MAX_PUSH = 100_000          # URLs per PushUrls (routing.alpha is at most that)
MAX_CLAIM_HOSTS = 100_000   # hosts per Claim
MAX_PART_ITEMS = 1_000_000  # queue entries, fingerprints or seqs in one HandOver/Replicate message
MAX_ROBOTS_BYTES = 4 * 1024 * 1024
MAX_DRAIN_SECONDS = 86_400.0


def sender(field: str, value: str) -> str:
    return checks.text(field, value, checks.MAX_ID, required=True)


def address(field: str, value: str) -> str:
    checks.text(field, value, checks.MAX_ADDRESS, required=True)
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"{field} {checks.shown(value)} is not host:port")
    return value


def url_problem(u: agent_pb2.UrlItem) -> str | None:
    """Why one pushed URL is refused before parsing (reported in the answer's errors), or None."""
    if len(u.url) > checks.MAX_URL:
        return f"url is {len(u.url)} characters long; at most {checks.MAX_URL}"
    if len(u.via) > checks.MAX_URL:
        return f"via is {len(u.via)} characters long; at most {checks.MAX_URL}"
    return None


def push_urls(r: agent_pb2.PushUrlsRequest) -> None:
    sender("sender_id", r.sender_id)
    checks.epoch("epoch", r.epoch)
    checks.count("urls", r.urls, MAX_PUSH)


def host_state(field: str, st: agent_pb2.HostState) -> None:
    checks.text(f"{field}.host", st.host, checks.MAX_HOST, required=True)
    checks.count(f"{field}.queue", st.queue, MAX_PART_ITEMS)
    checks.count(f"{field}.seen", st.seen, MAX_PART_ITEMS)
    checks.finite(f"{field}.crawl_delay", st.crawl_delay, low=0.0)
    checks.finite(f"{field}.backoff_until", st.backoff_until, low=0.0)
    for i, q in enumerate(st.queue):
        f = checks.indexed(f"{field}.queue", i)
        checks.text(f"{f}.url", q.url, checks.MAX_URL, required=True)
        checks.text(f"{f}.via", q.via, checks.MAX_URL)
        checks.finite(f"{f}.not_before", q.not_before, low=0.0)
    for i, rb in enumerate(st.robots):
        f = checks.indexed(f"{field}.robots", i)
        checks.text(f"{f}.origin", rb.origin, checks.MAX_ADDRESS + 16)
        checks.size(f"{f}.body", rb.body, MAX_ROBOTS_BYTES)
        for name in ("expires", "fetched_ok", "failing_since"):
            checks.finite(f"{f}.{name}", getattr(rb, name), low=0.0)


def hand_over(m: agent_pb2.HandOverRequest) -> None:
    sender("sender_id", m.sender_id)
    checks.epoch("epoch", m.epoch)
    host_state("host", m.host)


def replicate(m: agent_pb2.ReplicateRequest) -> None:
    sender("sender_id", m.sender_id)
    checks.epoch("epoch", m.epoch)
    checks.text("host", m.host, checks.MAX_HOST, required=True)
    if m.HasField("state"):
        host_state("state", m.state)
    checks.count("done", m.done, MAX_PART_ITEMS)
    checks.count("unshipped", m.unshipped, MAX_PART_ITEMS)


def claim(r: agent_pb2.ClaimRequest) -> None:
    sender("claimer_id", r.claimer_id)
    address("claimer_address", r.claimer_address)
    checks.epoch("epoch", r.epoch)
    checks.count("hosts", r.hosts, MAX_CLAIM_HOSTS)
    for i, h in enumerate(r.hosts):
        checks.text(checks.indexed("hosts", i), h, checks.MAX_HOST, required=True)


def drain(r: agent_pb2.DrainRequest) -> None:
    checks.finite("timeout_seconds", r.timeout_seconds, low=0.0, high=MAX_DRAIN_SECONDS)
