"""Prometheus metrics for any service: typed counters and gauges, labelled families, one schema per service.

Each service declares one `Schema` in its own `metrics.py` (agent/metrics.py,
consultant/metrics.py, storage/metrics.py): the names of its numbers that are levels (gauges),
the families that carry one extra label, and a line of meaning per name. Every other name is a
count that only grows and is exposed as a counter, `<prefix>_<name>_total`. docs/metrics.md is
generated from the schemas by scripts/metrics_doc.py (a test fails when it is stale).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# What a service's collect() returns: name -> number, or, for a labelled family, label value -> number.
Sample = Mapping[str, float | Mapping[str, float]]

# Every gRPC server's own numbers (wancrawl.grpcutil.Security.metrics): the same in each schema.
SERVER_HELP = {
    "rpc_errors": "RPCs answered with an error status, by gRPC status code (invalid_argument, unavailable, ...)",
    "auth_refused_unauthenticated": "calls refused: no client certificate with a wancrawl identity (TLS only)",
    "auth_refused_permission_denied": "calls refused: the caller's role or name may not call the method (TLS only)",
}
SERVER_LABELLED = {"rpc_errors": "code"}


@dataclass(frozen=True)
class Schema:
    """One service's metrics. `gauges`: the names that are levels (they go down as well as up);
    every other name is a monotonically growing count, a counter. `labelled`: family name -> its
    label, for numbers collect() gives as {label value: number}. `help`: name -> meaning."""

    prefix: str                      # e.g. "wancrawl_agent"
    identity: str                    # the label naming the instance ("agent", "listen")
    help: Mapping[str, str]
    gauges: frozenset[str] = frozenset()
    labelled: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = (set(self.gauges) | set(self.labelled)) - set(self.help)
        if unknown:
            raise ValueError(f"{self.prefix}: gauges or labelled families without help: {sorted(unknown)}")

    def kind(self, name: str) -> str:
        return "gauge" if name in self.gauges else "counter"

    def exposed(self, name: str) -> str:
        """The name Prometheus sees (counters end in _total)."""
        return f"{self.prefix}_{name}" + ("" if name in self.gauges else "_total")


class _Collector:
    def __init__(self, schema: Schema, instance: str, collect: Callable[[], Sample]):
        self.schema = schema
        self.instance = instance
        self.collect_fn = collect

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self.schema
        for name, value in sorted(self.collect_fn().items()):
            label = s.labelled.get(name)
            labels = [s.identity] if label is None else [s.identity, label]
            cls = GaugeMetricFamily if name in s.gauges else CounterMetricFamily
            fam = cls(f"{s.prefix}_{name}", s.help.get(name, name.replace("_", " ")), labels=labels)
            if isinstance(value, Mapping):
                for lv, v in sorted(value.items()):
                    fam.add_metric([self.instance, lv], float(v))
            else:
                fam.add_metric([self.instance], float(value))
            yield fam


def serve_metrics(listen: str, schema: Schema, instance: str, collect: Callable[[], Sample]) -> Any:
    """Serve `collect()`'s numbers at http://LISTEN/metrics as typed `<prefix>_<name>` families
    labelled `<identity>=instance` (read at scrape time, in prometheus_client's thread: `collect`
    must be cheap and thread-safe for reads). Returns the HTTP server; `.shutdown()` stops it."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(_Collector(schema, instance, collect))
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    return server


# -- docs/metrics.md ------------------------------------------------------------------------------

BEGIN, END = "<!-- metrics:{} begin (generated: python scripts/metrics_doc.py docs/metrics.md) -->", "<!-- metrics:{} end -->"


def markdown(schema: Schema) -> str:
    """The schema as a table: exposed name, type, labels, meaning."""
    rows = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for name in sorted(schema.help):
        labels = ", ".join([schema.identity, *([schema.labelled[name]] if name in schema.labelled else [])])
        rows.append(f"| `{schema.exposed(name)}` | {schema.kind(name)} | {labels} | {schema.help[name]} |")
    return "\n".join(rows)


def render(text: str, schemas: dict[str, Schema]) -> str:
    """`text` with every generated table (one per service in `schemas`) replaced by the current one.
    The services' schemas are gathered by scripts/metrics_doc.py: this package is below them."""
    for key, schema in schemas.items():
        begin, end = BEGIN.format(key), END.format(key)
        head, sep, rest = text.partition(begin)
        if not sep:
            raise ValueError(f"no {begin!r} marker")
        _, sep, tail = rest.partition(end)
        if not sep:
            raise ValueError(f"no {end!r} marker")
        text = f"{head}{begin}\n{markdown(schema)}\n{end}{tail}"
    return text
