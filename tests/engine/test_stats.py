"""Operator statistics: per partition and window, on the driver, to stats listeners."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from malhar import DAG, InputPort, Operator, OutputPort, run
from malhar import attributes as A
from malhar.stats import OperatorMetrics, OperatorStats, Response, WindowStats
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import Collector
from tests.engine.ops import Numbers, SumPerKey


class Recording:
    """A stats listener that keeps what it was given (it lives on the driver only)."""

    def __init__(self) -> None:
        self.calls: list[OperatorStats] = []
        self.lock = threading.Lock()  # does not pickle: proves it never leaves the driver

    def process_stats(self, stats: OperatorStats) -> Response:
        with self.lock:
            self.calls.append(stats)
        return Response(repartition_required=False)


class Counting(Operator):
    input = InputPort()
    output = OutputPort()

    def begin_window(self, window_id: int) -> None:
        self._n = 0

    def process(self, value: Any) -> None:
        self._n += 1
        self.output.emit(value)

    def metrics(self) -> dict[str, float]:
        return {"seen": self._n}


class Picky(Operator):
    """Sends every odd number to its error port."""

    input = InputPort()
    output = OutputPort()
    error = OutputPort(error=True)

    def process(self, value: Any) -> None:
        (self.error if value[1] % 2 else self.output).emit(value)


def test_the_metrics_table_shows_error_tuples() -> None:
    from rich.console import Console

    from malhar.metrics_view import table

    rows = {
        "parse": OperatorMetrics("parse", 1, 10.0, 8.0, 1.5, None, 4, errors=1234),
        "out": OperatorMetrics("out", 1, 8.0, 0.0, 1.0, None, 4),
    }
    console = Console(width=120, record=True)
    console.print(table(rows))
    text = console.export_text()
    assert "errors" in text and "1,234" in text


def test_window_stats_rates_and_json_round_trip() -> None:
    w = [
        WindowStats(
            window=i,
            partition=p,
            tuples_in={"input": 10},
            tuples_out={"output": 5},
            started=i * 1.0,
            ended=i * 1.0 + 0.5,
            metrics={"seen": 10},
        )
        for i in range(4)
        for p in range(2)
    ]
    stats = OperatorStats("op", 2, w)
    assert stats.tuples_in_per_second() == pytest.approx(80 / 3.5)
    assert stats.tuples_in_per_second(partition=1) == pytest.approx(40 / 3.5)
    assert WindowStats.from_json(w[3].to_json()) == w[3]
    row = OperatorMetrics.of("op", 2, w)
    assert row.window_ms == pytest.approx(500) and row.metrics == {"seen": 20.0}


def test_out_per_second_leaves_the_error_ports_out() -> None:
    # a parser sending every tuple to its error port showed them as output
    w = [
        WindowStats(i, 0, {"input": 10}, {"output": 4, "error": 6}, i * 1.0, i * 1.0 + 0.5)
        for i in range(3)
    ]
    assert OperatorStats("parse", 1, w).tuples_out_per_second() == pytest.approx(30 / 2.5)
    row = OperatorMetrics.of("parse", 1, w, errors=18, error_ports=["error"])
    assert row.tuples_out_per_second == pytest.approx(12 / 2.5) and row.errors == 18
    from malhar.engine.progress import ProgressListener

    listener = ProgressListener("q", ["parse.error"], {"parse": 1})
    listener.recent["parse"].extend(w)
    assert listener.metrics()["parse"].tuples_out_per_second == pytest.approx(12 / 2.5)
    # an operator name may hold dots: the port is after the last one (review)
    dotted = ProgressListener("q", ["parse.v2.error", "parse.error"], {"parse.v2": 1, "parse": 1})
    dotted.recent["parse.v2"].extend(w)
    dotted.add("q", {"window": 0, "parse.v2.error": 6, "parse.error": 1})
    row = dotted.metrics()["parse.v2"]
    assert row.tuples_out_per_second == pytest.approx(12 / 2.5) and row.errors == 6
    assert dotted.metrics()["parse"].errors == 1


def test_operator_metrics_hook_through_the_harness() -> None:
    h = OperatorHarness(Counting())
    h.run_window([("input", 1), ("input", 2)])
    assert h.operator.metrics() == {"seen": 2}


@pytest.mark.integration
def test_statistics_reach_listeners_and_the_metrics_view(spark, tmp_path: Path) -> None:
    listener = Recording()
    dag = DAG("stats")
    src = dag.add_operator("src", Numbers(per_window=20), PARTITIONS=2)
    # count runs src's 2 partitions through PARALLEL_PARTITION: the view said 1 (its own
    # unset PARTITIONS)
    count = dag.add_operator("count", Counting())
    count.input.set_attribute(A.PARALLEL_PARTITION, True)
    agg = dag.add_operator("sum", SumPerKey())
    out = dag.add_operator("out", Collector())
    count.set_attribute(A.STATS_LISTENERS, [listener])
    dag.add_stream("a", src.output, count.input)
    dag.add_stream("b", count.output, agg.input)
    dag.add_stream("c", agg.output, out.input)
    app = run(dag, windows=6, spark=spark, checkpoint=str(tmp_path), window_ms=100)
    app._stats.deliver()  # the last windows, without waiting for the next round
    windows = [w for stats in listener.calls for w in stats.windows]
    assert {s.operator for s in listener.calls} == {"count"}
    assert {(w.window, w.partition) for w in windows} == {(i, p) for i in range(6) for p in (0, 1)}
    assert sum(w.tuples_in["input"] for w in windows) == 6 * 20
    assert all(w.tuples_out["output"] == w.tuples_in["input"] == w.metrics["seen"] for w in windows)
    view = app.metrics()
    assert set(view) == {"src", "count", "sum", "out"}
    assert view["count"].partitions == 2 and view["count"].last_window == 5
    assert view["sum"].tuples_in_per_second > 0 and view["out"].window_ms >= 0


@pytest.mark.integration
def test_metrics_are_served_for_prometheus(spark, tmp_path: Path) -> None:
    import urllib.request

    from malhar import launch
    from malhar.metrics_view import serve_prometheus
    from malhar.testing.services.process import wait_until

    dag = DAG("prom")
    src = dag.add_operator("src", Numbers(per_window=20))
    count = dag.add_operator("count", Counting())
    picky = dag.add_operator("picky", Picky())
    out = dag.add_operator("out", Collector())
    dag.add_stream("a", src.output, count.input)
    dag.add_stream("b", count.output, picky.input)
    dag.add_stream("c", picky.output, out.input)
    app = launch(dag, spark=spark, checkpoint=str(tmp_path), window_ms=100)
    server, port = serve_prometheus(app, 0)
    try:
        wait_until(lambda: app.metrics()["count"].last_window >= 2, timeout=120, what="window 2")
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        text = page.decode()
        assert 'malhar_operator_partitions{application="prom",operator="count"} 1.0' in text
        assert 'malhar_operator_tuples_in_per_second{application="prom",operator="count"}' in text
        assert 'malhar_operator_metric{application="prom",metric="seen",operator="count"}' in text
        errors = app.metrics()["picky"].errors
        assert errors > 0 and app.metrics()["count"].errors == 0
        gauge = 'malhar_operator_error_tuples{application="prom",operator="picky"} '
        [shown] = [line[len(gauge) :] for line in text.splitlines() if line.startswith(gauge)]
        assert float(shown) > 0
    finally:
        server.shutdown()
        app.stop()


def test_error_totals_replace_a_window_reported_again_and_carry_over_a_restart() -> None:
    from malhar.engine.progress import ProgressListener

    first = ProgressListener("q", ["parse.error", "join.error"], {"parse": 1, "join": 2})
    first.add("q", {"window": 1, "parse.error": 3, "join.error": 1})
    first.add("q", {"window": 1, "parse.error": 4, "join.error": 1})  # reported again
    first.add("q", {"window": 2, "parse.error": 2, "join.error": 0})
    first.add("other", {"window": 3, "parse.error": 50})  # another query's progress
    assert first.error_totals == {"parse": 6, "join": 1}
    assert first.metrics()["parse"].errors == 6
    again = ProgressListener("q2", ["parse.error", "join.error"], {"parse": 1, "join": 2})
    again.seed_totals(first)  # a repartitioning restarted the query
    again.add("q2", {"window": 3, "parse.error": 1, "join.error": 0})
    assert again.metrics()["parse"].errors == 7 and again.metrics()["join"].errors == 1


def test_an_unread_error_port_logs_the_reason_or_only_the_field_names(caplog: Any) -> None:
    from malhar.engine.unread_errors import FirstErrorLogged

    with caplog.at_level("WARNING", logger="malhar.engine"):
        reasons = FirstErrorLogged("parse", "error", 0)
        reasons.tuple({"text": "card 4111-1111", "error": "not a number"})
        reasons.tuple({"text": "second", "error": "not said"})
        rows = FirstErrorLogged("picky", "rejected", 1)
        rows.tuple({"card": "4111-1111", "amount": 3})
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert said[0].endswith("the first: not a number")
    assert said[1].endswith("the first: a row with the fields ['amount', 'card']")
    assert "4111" not in said[1]


def test_an_unread_error_port_of_an_operator_logs_its_reason_once_per_process(
    caplog: Any,
) -> None:
    # the catalogue's and the windowed operators' error tuples carry "reason", not "error":
    # only their field names were logged, and a partition's emitters are built again for
    # every window, so the line came every window (walkthrough: 18 times, never the why)
    from malhar.engine.unread_errors import FirstErrorLogged

    with caplog.at_level("WARNING", logger="malhar.engine"):
        for _window in range(3):
            port = FirstErrorLogged("counts-once", "error", 1)
            port.tuple({"tuple": {"user": "u1"}, "reason": "no field 'tss' in the tuple"})
        FirstErrorLogged("counts-once", "error", 0).tuple({"tuple": 1, "reason": "other"})
        # another application (or checkpoint) in the same process says its own (review)
        FirstErrorLogged("counts-once", "error", 0, "b@/ck").tuple({"reason": "its own"})
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said
    assert said[2].endswith("the first: its own")
    assert said[0].endswith("the first: no field 'tss' in the tuple")
    assert "partition 0" in said[1] and said[1].endswith("the first: other")


class _Shown:
    """What ``Watch`` reads of a running application: its name, last window, metrics."""

    def __init__(self) -> None:
        self.dag = type("D", (), {"name": "clicks"})()
        self.last_window = 3

    def metrics(self) -> dict[str, OperatorMetrics]:
        return {"parse": OperatorMetrics("parse", 2, 1500.0, 1200.0, 3.25, 40, self.last_window)}


def test_progress_in_a_log_prints_the_figures_as_lines(monkeypatch: Any, capsys: Any) -> None:
    # rich's live table redraws only on a terminal: in a log it left just its last state
    import malhar.cli as cli

    monkeypatch.setattr(cli, "PROGRESS_EVERY", 0.0)
    app = _Shown()
    watch = cli.Watch(progress=True, terminal=False)
    watch.start(app)
    watch.update(app)  # no window complete since the start: nothing to say yet
    assert capsys.readouterr().out == ""
    app.last_window = 4
    watch.update(app)
    assert capsys.readouterr().out.splitlines() == [
        "clicks: window 4 complete",
        "clicks: parse: parts 2, in/s 1,500, out/s 1,200, errors 0, window ms 3.2, "
        "backlog 40, window 4",
    ]
    watch.stop(app)  # the last figures once more, as the table leaves them on a terminal
    assert "clicks: parse: parts 2" in capsys.readouterr().out


def test_without_progress_a_log_gets_a_line_per_new_window_only(
    monkeypatch: Any, capsys: Any
) -> None:
    import malhar.cli as cli

    monkeypatch.setattr(cli, "PROGRESS_EVERY", 0.0)
    app = _Shown()
    watch = cli.Watch(terminal=False)
    watch.start(app)
    app.last_window = 5
    watch.update(app)
    watch.stop(app)
    assert capsys.readouterr().out == "clicks: window 5 complete\n"


def test_a_dedups_unread_expired_port_says_what_it_drops(caplog: Any) -> None:
    # late tuples vanished without a word when nothing read `expired` (walkthrough)
    from malhar.algo import TimeBasedDedup
    from malhar.engine.unread_errors import FirstErrorLogged

    assert TimeBasedDedup.expired.warn_unread and not TimeBasedDedup.unique.warn_unread
    assert TimeBasedDedup.error.warn_unread  # every error port
    with caplog.at_level("WARNING", logger="malhar.engine"):
        FirstErrorLogged("dedup-late", "expired", 0, "x@/ck", error=False).tuple({"id": 7, "ts": 1})
    [said] = [r.getMessage() for r in caplog.records]
    assert "a tuple went to its port 'expired', which no stream reads (dropped; add" in said
    assert said.endswith("the first: a row with the fields ['id', 'ts']")
