"""Validation at the edge of the consultant (issues 13 and 21): one function per RPC, called by
the servicer before anything else looks at the request. A bad field is INVALID_ARGUMENT naming
it (values cut, see wancrawl/checks.py), never a database error. Every field of every request
message has its bound here (docs/security.md, "Validation at the edge")."""

from __future__ import annotations

from consultant.service import validate_address, validate_agent_id
from wancrawl import checks
from wancrawl.errors import InvalidArgument
from wancrawl.urls import ip_literal
from wancrawl.v1 import common_pb2, consultant_pb2 as pb

MAX_CAPACITY = 1e9     # relative capacity; anything above is a mistake or an attack on the weights
MAX_RATE = 1e9         # pages per second in a load report
MAX_HEAVY_HOSTS = 1000  # hosts in a load report's heavy_hosts (agents send balance.report_hosts, 32)


def agent_id(field: str, value: str) -> str:
    checks.text(field, value, checks.MAX_ID, required=True)
    return validate_agent_id(value)


def location(loc: common_pb2.Location) -> None:
    checks.text("location.city", loc.city, checks.MAX_TEXT)
    checks.text("location.country", loc.country, checks.MAX_TEXT)
    checks.text("location.isp", loc.isp, checks.MAX_TEXT)
    checks.finite("location.lat", loc.lat, low=-90.0, high=90.0)
    checks.finite("location.lon", loc.lon, low=-180.0, high=180.0)
    # location.asn: any 32-bit value is an AS number (RFC 6793), used only as a lookup key.


# Load report counters (URLs, fetches, errors, hosts, pages) are kept as JSON and used in float
# arithmetic by the balancer: at most checks.MAX_COUNT (2^53, exact as a float).
_LOAD_COUNTS = ("queue_length", "in_flight", "errors", "hosts_owned", "pages_fetched", "spool_pages")


def load(report: common_pb2.LoadReport) -> None:
    for name in _LOAD_COUNTS:
        checks.integer(f"load.{name}", getattr(report, name))
    checks.finite("load.pages_per_second", report.pages_per_second, low=0.0, high=MAX_RATE)
    checks.finite("load.capacity", report.capacity, low=0.0, high=MAX_CAPACITY)
    # L = (Q - W) / H (docs/balance.md): a queue and a work area of at most 2^53 URLs each.
    checks.finite("load.load_level", report.load_level, low=-float(checks.MAX_COUNT), high=float(checks.MAX_COUNT))
    checks.finite("load.work_area", report.work_area, low=0.0, high=float(checks.MAX_COUNT))
    checks.finite("load.peak_pages_per_second", report.peak_pages_per_second, low=0.0, high=MAX_RATE)
    r = report.resources
    for name, high in (("cores", 1e6), ("cpu_ghz", 1e3), ("memory_gb", 1e9), ("bandwidth_mbps", 1e9), ("disk_mbps", 1e9)):
        checks.finite(f"load.resources.{name}", getattr(r, name), low=0.0, high=high)
    checks.integer("load.interval_pages", report.interval_pages)
    # a sample of up to a day: the agent reports one per heartbeat
    checks.finite("load.interval_seconds", report.interval_seconds, low=0.0, high=86400.0)
    checks.count("load.heavy_hosts", report.heavy_hosts, MAX_HEAVY_HOSTS)
    for i, h in enumerate(report.heavy_hosts):
        f = checks.indexed("load.heavy_hosts", i)
        host(f + ".host", h.host)
        checks.integer(f + ".queue_length", h.queue_length)


def host(field: str, value: str) -> str:
    # The form is canonical_host's to check (per host in Resolve); here only the size.
    return checks.text(field, value, checks.MAX_HOST, required=True)


def register(r: pb.RegisterRequest) -> None:
    agent_id("agent_id", r.agent_id)
    checks.text("address", r.address, checks.MAX_ADDRESS, required=True)
    validate_address(r.address)
    checks.text("source_ip", r.source_ip, 64)
    if r.source_ip and ip_literal(r.source_ip) is None:
        raise InvalidArgument(f"source_ip {checks.shown(r.source_ip)} is not an IP address")
    location(r.location)
    checks.finite("capacity", r.capacity, low=0.0, high=MAX_CAPACITY)


def heartbeat(r: pb.HeartbeatRequest) -> None:
    agent_id("agent_id", r.agent_id)
    load(r.load)


def deregister(r: pb.DeregisterRequest) -> None:
    agent_id("agent_id", r.agent_id)


def resolve(r: pb.ResolveRequest, max_batch: int) -> None:
    checks.count("hosts", r.hosts, max_batch, required=True)
    for i, h in enumerate(r.hosts):
        # A malformed host gets its error in its answer; one too long to be a host name is
        # refused whole (its answer would echo it).
        checks.text(checks.indexed("hosts", i), h, checks.MAX_HOST)


def explain(r: pb.ExplainRequest) -> None:
    host("host", r.host)


def list_agents(r: pb.ListAgentsRequest) -> None:
    """include_dead only: a bool."""


def live_agents(r: pb.LiveAgentsRequest) -> None:
    """No fields."""


def set_override(r: pb.SetOverrideRequest) -> None:
    host("host", r.host)
    agent_id("agent_id", r.agent_id)


def clear_override(r: pb.ClearOverrideRequest) -> None:
    host("host", r.host)
