"""Typed output ports: what an operator emits must fit the port's schema.

A route between partitions converts a typed port's tuples to its Arrow schema: a row
that does not convert fails the application with an OperatorError naming operator,
port and schema. The operator harness checks every emitted tuple and batch the same
way, so a unit test finds the bad row first. Also: the harness's errors for a missing
output port and for ``run_window`` inputs that are not (port, tuple) pairs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from malhar import DAG, ApplicationFailed, InputOperator, InputPort, Operator, OutputPort, run
from malhar.engine.typed_rows import cast_batch, rows_to_batch
from malhar.errors import OperatorError
from malhar.testing.harness import OperatorHarness
from malhar.testing.operators import Collector, collected

BAD_ROW = {"word": "b", "n": "not-a-number"}
UNFIT = (
    "failed in emit of window 0: output port 'output' emitted a tuple that does not fit "
    "its schema 'word string, n bigint': field 'n' (int64): ArrowInvalid: Could not convert "
    "'not-a-number' with type str: tried to convert to int64"
)


class BadRows(InputOperator):
    """Emits one good row and one whose ``n`` is not a number (importable by workers)."""

    output = OutputPort("word string, n bigint")

    def begin_window(self, window_id: int) -> None:
        self._done = False

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            self.output.emit({"word": "a", "n": 1})
            self.output.emit(dict(BAD_ROW))


class Counts(Operator):
    input = InputPort("word string, n bigint")

    def process(self, value: Any) -> None:
        pass


class Emits(Operator):
    """Emits on its typed output port whatever it receives (a tuple or a batch)."""

    input = InputPort()
    output = OutputPort("word string, n bigint")

    def process(self, value: Any) -> None:
        self.output.emit(value)

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.output.emit_batch(batch)


@pytest.mark.integration
def test_a_row_that_does_not_fit_a_route_names_operator_port_and_schema(
    spark, tmp_path: Path
) -> None:
    dag = DAG("unfit")
    src = dag.add_operator("src", BadRows())
    counts = dag.add_operator("counts", Counts(), PARTITIONS=2)
    dag.add_stream("rows", src.output, counts.input)
    with pytest.raises(ApplicationFailed) as info:
        run(dag, windows=1, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    assert info.value.reason == f"OperatorError: operator 'src' partition 0 {UNFIT}", (
        info.value.reason
    )
    assert info.value.reason in str(info.value)


def test_harness_checks_emitted_tuples_against_the_port_schema() -> None:
    h = OperatorHarness(BadRows())
    with pytest.raises(OperatorError) as info:
        h.run_window()
    assert str(info.value) == f"operator 'BadRows' partition 0 {UNFIT}"
    assert h.sink("output").tuples == [{"word": "a", "n": 1}]  # the bad row is not kept


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "a",
            "emitted a tuple of type str that does not fit its schema 'word string, n bigint': "
            "a typed port emits dicts of the schema's fields (or instances of its dataclass)",
        ),
        (
            {"word": "a", "n": 1.5},
            "emitted a tuple that does not fit its schema 'word string, n bigint': field 'n' "
            "(int64): 1.5 is not an integer (Arrow would store 1): round it, or declare the "
            "field double or decimal",
        ),
        (
            # Arrow dropped the undeclared field on a route without a word
            {"word": "a", "n": 1, "extra": 2},
            "emitted a tuple that does not fit its schema 'word string, n bigint': field(s) "
            "'extra' not in the schema (it would be dropped): declare them in the port's "
            "schema or leave them out of the tuple",
        ),
        (
            pa.RecordBatch.from_pylist([{"w": "a"}]),
            "emitted a batch that does not fit its schema 'word string, n bigint': its columns "
            "are (w string): ValueError: Target schema's field names are not matching",
        ),
        (
            pa.RecordBatch.from_pylist([{"word": "a", "n": "x"}]),
            "emitted a batch that does not fit its schema 'word string, n bigint': column 'n' "
            "(string, not int64): ArrowInvalid: Failed to parse string: 'x'",
        ),
        (
            pa.RecordBatch.from_pylist(
                [{"word": "a", "n": 1}],
                schema=pa.schema([("word", pa.string()), ("n", pa.int32())]),
            ),
            "emitted a batch that does not fit its schema 'word string, n bigint': its columns "
            "are (word string, n int32), not (word string, n int64): cast it",
        ),
    ],
)
def test_harness_checks_emitted_batches_and_non_dicts(value: Any, message: str) -> None:
    h = OperatorHarness(Emits())
    with pytest.raises(
        OperatorError, match=r"^operator 'Emits' partition 0 failed in emit"
    ) as info:
        h.run_window([("input", value)])
    assert f"output port 'output' {message}" in str(info.value), str(info.value)


def test_harness_passes_rows_and_batches_that_fit() -> None:
    schema = pa.schema([("word", pa.string()), ("n", pa.int64())])
    h = OperatorHarness(Emits())
    h.run_window(
        [
            ("input", {"word": "a", "n": 1}),
            ("input", {"word": "b", "n": None}),
            ("input", {"word": "b2", "n": 2.0}),  # whole: Arrow's safe cast keeps it too
            ("input", pa.RecordBatch.from_pylist([{"word": "c", "n": 3}], schema=schema)),
        ]
    )
    assert [r["word"] for r in h.sink("output").tuples] == ["a", "b", "b2", "c"]


def test_a_route_refuses_a_fraction_in_an_integer_field_among_many_rows() -> None:
    schema = pa.schema([("word", pa.string()), ("n", pa.int16())])
    rows: list[Any] = [{"word": "a", "n": i} for i in range(1000)]
    rows[500] = {"word": "b", "n": Decimal("2.5")}

    def fail(what: str, reason: str) -> OperatorError:
        return OperatorError(f"{what}: {reason}")

    with pytest.raises(OperatorError) as info:
        rows_to_batch(rows, schema, fail)
    assert str(info.value).startswith(
        "a tuple: field 'n' (int16): Decimal('2.5') is not an integer (Arrow would store 2)"
    )
    rows[500] = {"word": "b", "n": 7.0}
    assert rows_to_batch(rows, schema, fail).column("n")[500].as_py() == 7


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            pa.field("ts", pa.timestamp("us")),
            1_795_000_000.5,
            "field 'ts' (timestamp[us]): 1795000000.5 is a number, which Arrow would take as "
            "microseconds since 1970 (epoch seconds or milliseconds become wrong times): emit "
            "a datetime (datetime.fromtimestamp(seconds, timezone.utc)), or declare the field "
            "bigint",
        ),
        (
            pa.field("ts", pa.timestamp("us")),
            1_795_000_000_000,
            "field 'ts' (timestamp[us]): 1795000000000 is a number, which Arrow would take as "
            "microseconds since 1970",
        ),
        (
            pa.field("day", pa.date32()),
            20_000,
            "field 'day' (date32[day]): 20000 is a number, which Arrow would take as days since "
            "1970 (epoch seconds or milliseconds become wrong times): emit a datetime.date",
        ),
    ],
)
def test_a_route_refuses_a_number_in_a_time_field(
    field: pa.Field, value: Any, message: str
) -> None:
    # Arrow took time.time() as microseconds: a time in January 1970, without a word
    def fail(what: str, reason: str) -> OperatorError:
        return OperatorError(f"{what}: {reason}")

    schema = pa.schema([field])
    with pytest.raises(OperatorError) as info:
        rows_to_batch([{field.name: None}, {field.name: value}], schema, fail)
    assert str(info.value).startswith(f"a tuple: {message}"), str(info.value)


def test_a_route_takes_datetimes_dates_and_their_subclasses_in_time_fields() -> None:
    import pandas as pd

    schema = pa.schema([("ts", pa.timestamp("us")), ("day", pa.date32())])
    when = dt.datetime(2026, 11, 29, 12, 30)
    rows = [
        {"ts": when, "day": when.date()},
        {"ts": pd.Timestamp(when), "day": dt.datetime(2026, 11, 29)},  # midnight: no time lost
        {"ts": None, "day": None},
    ]
    got = rows_to_batch(rows, schema, lambda w, r: OperatorError(r)).to_pylist()
    assert got[0] == got[1] == {"ts": when, "day": when.date()}


def test_harness_sink_of_a_missing_port_lists_the_output_ports() -> None:
    h = OperatorHarness(Emits())
    with pytest.raises(KeyError) as info:
        h.sink("out")
    assert info.value.args[0] == "Emits has no output port 'out'; its output ports: ['output']"


def test_run_window_wants_port_tuple_pairs() -> None:
    h = OperatorHarness(Counts())
    with pytest.raises(TypeError) as info:
        h.run_window([{"word": "a", "n": 1}])
    assert str(info.value) == (
        "run_window takes (input port, tuple or batch) pairs, got {'word': 'a', 'n': 1}; "
        "Counts's input ports: ['input']"
    )


@dataclasses.dataclass
class Word:
    word: str
    n: int


class EmitsWords(Operator):
    input = InputPort()
    output = OutputPort(Word)

    def process(self, value: Any) -> None:
        self.output.emit(value)


class WordsInput(InputOperator):
    """Emits dataclass instances (and a tuple that is neither a dict nor one if ``BAD``)."""

    output = OutputPort(Word)
    BAD = False

    def begin_window(self, window_id: int) -> None:
        self._done = False

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            self.output.emit(Word("a", 1))
            self.output.emit(("b", 2) if self.BAD else Word("b", 2))


class BadWordsInput(WordsInput):
    BAD = True


def test_a_dataclass_ports_instances_fit_and_other_objects_do_not() -> None:
    h = OperatorHarness(EmitsWords())
    h.run_window([("input", Word("a", 1))])
    with pytest.raises(OperatorError, match="emitted a tuple of type tuple that does not fit"):
        h.run_window([("input", ("b", 2))])


@pytest.mark.integration
def test_a_route_refuses_a_tuple_that_is_no_row_and_carries_dataclass_instances(
    spark, tmp_path: Path
) -> None:
    # across a route Arrow read a tuple (or a dataclass instance) as a row of nulls
    from malhar.testing.operators import Collector, collected

    def dag(source: InputOperator) -> DAG:
        dag = DAG("rows")
        src = dag.add_operator("src", source)
        out = dag.add_operator("out", Collector(), PARTITIONS=2)
        dag.add_stream("rows", src.output, out.input)
        return dag

    run(dag(WordsInput()), windows=1, spark=spark, checkpoint=str(tmp_path / "a"), window_ms=50)
    got = collected(str(tmp_path / "a"), "out")
    assert sorted(r["word"] for rows in got.values() for r in rows) == ["a", "b"]
    with pytest.raises(ApplicationFailed) as info:
        run(dag(BadWordsInput()), windows=1, spark=spark, checkpoint=str(tmp_path / "b"))
    assert "emitted a tuple of type tuple that does not fit its schema" in info.value.reason


def test_a_route_refuses_a_batch_of_numbers_for_a_timestamp_column() -> None:
    # Arrow casts int64 to a timestamp as microseconds since 1970, without a word
    batch = pa.RecordBatch.from_pylist([{"ts": 1_795_000_000}])
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC"))])
    with pytest.raises(OperatorError) as info:
        cast_batch(batch, schema, lambda what, reason: OperatorError(f"{what}: {reason}"))
    assert str(info.value).startswith(
        "a batch: column 'ts' (int64, not timestamp[us, tz=UTC]): its values are numbers, "
        "which Arrow would take as microseconds since 1970"
    ), str(info.value)


class EmitsABatch(InputOperator):
    """Emits one Arrow batch of two columns on an untyped port (importable by workers)."""

    output = OutputPort()

    def begin_window(self, window_id: int) -> None:
        self._done = False

    def emit_tuples(self) -> None:
        if not self._done:
            self._done = True
            self.output.emit_batch(pa.RecordBatch.from_pylist([{"w": "a", "n": 1}]))


@pytest.mark.integration
def test_a_batch_on_an_untyped_port_crosses_a_route_as_whole_rows(spark, tmp_path: Path) -> None:
    # it crossed as its first column's values: {"w": "a", "n": 1} arrived as "a", silently
    dag = DAG("untyped-batch")
    src = dag.add_operator("src", EmitsABatch(), PARTITIONS=2)
    out = dag.add_operator("out", Collector())
    dag.add_stream("rows", src.output, out.input)
    run(dag, windows=1, spark=spark, checkpoint=str(tmp_path), window_ms=50)
    got = [t for ts in collected(str(tmp_path), "out").values() for t in ts]
    assert got == [{"w": "a", "n": 1}] * 2  # one per input partition, as a fused edge gives
