"""The live per-operator metrics, as a terminal table and as Prometheus metrics.

- :func:`table` renders ``RunningApplication.metrics()`` with rich (what
  ``malhar run --progress`` shows on a terminal, refreshed twice a second), :func:`lines`
  as one line per operator (what it prints into a log);
- :func:`serve_prometheus` exposes the same figures on an HTTP endpoint for
  Prometheus (needs the ``metrics`` extra, i.e. ``prometheus-client``):
  ``malhar_operator_tuples_in_per_second{application,operator}`` and friends, read
  from the application at every scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from malhar.stats import OperatorMetrics

__all__ = ["lines", "serve_prometheus", "table"]


def table(metrics: Mapping[str, OperatorMetrics], title: str = "") -> Any:
    """A ``rich.table.Table`` of per-operator metrics."""
    from rich.table import Table

    out = Table(title=title or None, title_justify="left")
    out.add_column("operator")
    for column in ("parts", "in/s", "out/s", "errors", "window ms", "backlog", "window"):
        out.add_column(column, justify="right")
    for name, m in metrics.items():
        out.add_row(
            name,
            str(m.partitions),
            f"{m.tuples_in_per_second:,.0f}",
            f"{m.tuples_out_per_second:,.0f}",
            f"[red]{m.errors:,}[/red]" if m.errors else "0",
            f"{m.window_ms:,.1f}",
            "-" if m.backlog is None else f"{m.backlog:,}",
            str(m.last_window),
        )
    return out


def lines(metrics: Mapping[str, OperatorMetrics]) -> list[str]:
    """The figures of :func:`table` as one plain line per operator (for logs)."""
    out = []
    for name, m in metrics.items():
        backlog = "-" if m.backlog is None else f"{m.backlog:,}"
        out.append(
            f"{name}: parts {m.partitions}, in/s {m.tuples_in_per_second:,.0f}, "
            f"out/s {m.tuples_out_per_second:,.0f}, errors {m.errors:,}, "
            f"window ms {m.window_ms:,.1f}, backlog {backlog}, window {m.last_window}"
        )
    return out


#: (metric name, help, how to read it from an OperatorMetrics)
_GAUGES: list[tuple[str, str, Callable[[OperatorMetrics], float | None]]] = [
    ("malhar_operator_partitions", "partitions of the operator", lambda m: m.partitions),
    (
        "malhar_operator_tuples_in_per_second",
        "tuples in per second",
        lambda m: m.tuples_in_per_second,
    ),
    (
        "malhar_operator_tuples_out_per_second",
        "tuples out per second",
        lambda m: m.tuples_out_per_second,
    ),
    (
        "malhar_operator_error_tuples",
        "tuples sent to the operator's error ports since the run started",
        lambda m: m.errors,
    ),
    ("malhar_operator_window_ms", "mean processing time of a window (ms)", lambda m: m.window_ms),
    ("malhar_operator_backlog", "what inputs still have to read", lambda m: m.backlog),
    ("malhar_operator_last_window", "the newest window reported", lambda m: m.last_window),
]


class _Collector:
    """A prometheus-client collector reading the application's metrics at each scrape."""

    def __init__(self, application: str, metrics: Callable[[], Mapping[str, OperatorMetrics]]):
        self.application = application
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        current = self.metrics()
        for name, doc, read in _GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["application", "operator"])
            for op, m in current.items():
                value = read(m)
                if value is not None:
                    family.add_metric([self.application, op], float(value))
            yield family
        custom = GaugeMetricFamily(
            "malhar_operator_metric",
            "the operators' own metrics (Operator.metrics()), summed over partitions",
            labels=["application", "operator", "metric"],
        )
        for op, m in current.items():
            for key, value in m.metrics.items():
                custom.add_metric([self.application, op, key], float(value))
        yield custom


def serve_prometheus(app: Any, port: int = 0, addr: str = "127.0.0.1") -> tuple[Any, int]:
    """Serve ``app``'s metrics for Prometheus on ``addr:port`` (0: a free port).

    Returns ``(server, port)``; ``server.shutdown()`` stops it.
    """
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:  # pragma: no cover - depends on the extra
        from malhar.errors import ConfigError

        raise ConfigError(
            "the Prometheus endpoint needs prometheus-client: pip install prometheus-client "
            "(malhar's 'metrics' extra)"
        ) from exc
    registry = CollectorRegistry()
    registry.register(_Collector(app.dag.name, app.metrics))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server, server.server_address[1]
