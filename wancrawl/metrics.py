"""Prometheus metrics for any service: its counters as gauges on an HTTP endpoint."""

from __future__ import annotations

from collections.abc import Callable


class _Collector:
    def __init__(self, prefix: str, labels: dict[str, str], collect: Callable[[], dict[str, float]]):
        self.prefix = prefix
        self.labels = labels
        self.collect_fn = collect

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        names, values = list(self.labels), list(self.labels.values())
        for name, value in sorted(self.collect_fn().items()):
            g = GaugeMetricFamily(f"{self.prefix}_{name}", f"{self.prefix.replace('_', ' ')} {name}", labels=names)
            g.add_metric(values, float(value))
            yield g


def serve_metrics(listen: str, prefix: str, labels: dict[str, str], collect: Callable[[], dict[str, float]]):
    """Serve `collect()`'s numbers at http://LISTEN/metrics as `<prefix>_<name>{labels}`
    gauges (read at scrape time, in prometheus_client's thread: `collect` must be cheap and
    thread-safe for reads). Returns the HTTP server; call `.shutdown()` to stop it."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(_Collector(prefix, labels, collect))
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    return server
