"""The ``malhar`` command line: list, info, validate and run, with a third-party pack installed.

``list``/``info``/``validate`` run in-process (click's CliRunner); ``run`` starts
the real ``malhar`` script in a subprocess, on Spark, and asserts what the
application's Collector received.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from malhar import DAG, ProcessingMode
from malhar.app import ApplicationError, load_application, parse_config
from malhar.cli import cli, failure_summary
from malhar.errors import ConfigWarning
from malhar.testing.operators import collected
from tests.fixtures import ACME, BROKEN, PACKS, FakeSite, forget_packs

SECRET = "Hunter2-Secret"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSite]:
    """acme-pack "installed"; sys.path and PYTHONPATH restored afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    fake = FakeSite(tmp_path / "site")
    fake.install(ACME)
    monkeypatch.syspath_prepend(str(PACKS))
    monkeypatch.syspath_prepend(str(fake.path))
    yield fake
    forget_packs()


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def write_app(path: Path, **overrides: Any) -> Path:
    """ListInput -> Doubler (from acme-pack) -> Collector, as a JSON application."""
    doc: dict[str, Any] = {
        "name": "doubling",
        "attributes": {"STREAMING_WINDOW_MS": 100},
        "operators": {
            "src": {
                "class": "ListInput",
                "args": {"windows": [[1, 2], [3], [4, 5, 6]]},
                "attributes": {"PARTITIONS": 2},
            },
            "double": {"class": "Doubler", "properties": {"factor": 10}},
            "out": {"class": "Collector"},
        },
        "streams": {
            "numbers": {"from": "src.output", "to": "double.input"},
            "doubled": {"from": "double.output", "to": ["out.input"]},
        },
    }
    doc.update(overrides)
    path.write_text(json.dumps(doc))
    return path


# -- list / info ---------------------------------------------------------------------------------
def test_list_shows_builtins_and_the_pack(site: FakeSite) -> None:
    result = invoke("list")
    assert result.exit_code == 0
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    assert "input" in lines["ListInput"] and "malhar 0.1.0" in lines["ListInput"]
    assert "unifier" in lines["PassThroughUnifier"]
    assert "operator" in lines["Doubler"] and "acme-pack 1.2.3" in lines["Doubler"]
    assert "Multiplies every number by ``factor``." in lines["Doubler"]
    assert "connector" in lines["LineOutput"]
    assert "application" in lines["acme-doubling"]
    assert "cannot be loaded" not in result.output


def test_list_reports_broken_entry_points_with_their_errors(site: FakeSite) -> None:
    site.install(BROKEN, name="broken-pack", version="0.0.1")
    result = invoke("list")
    assert result.exit_code == 0
    assert "4 entry point(s) cannot be loaded:" in result.output
    assert (
        "Missing = acme_missing.ops:Missing [malhar.operators] from broken-pack 0.0.1: "
        "ModuleNotFoundError: No module named 'acme_missing'"
    ) in result.output
    assert "Explodes = acme_pack.explodes:Boom" in result.output
    assert "RuntimeError: acme explodes: the pack is misconfigured" in result.output
    assert "Doubler" in result.output  # the healthy entries are still listed


def test_list_json_and_kind_filter(site: FakeSite) -> None:
    listed = json.loads(invoke("list", "--json").output)
    by_name = {e["name"]: e for e in listed}
    assert by_name["Doubler"] == {
        "name": "Doubler",
        "kind": "operator",
        "target": "acme_pack.ops:Doubler",
        "group": "malhar.operators",
        "distribution": "acme-pack",
        "version": "1.2.3",
        "doc": "Multiplies every number by ``factor``.",
        "inputs": ["input"],
        "outputs": ["output"],
        "error": None,
    }
    only = json.loads(invoke("list", "--json", "--kind", "connector", "--kind", "input").output)
    builtin_connectors = {
        "JdbcOutput",
        "JdbcPollInput",
        "KafkaInputOperator",
        "KafkaJsonInputOperator",
        "KafkaOutputOperator",
        "KafkaTextInputOperator",
        "LinesFileInput",
        "CsvFileInput",
        "JsonLinesFileInput",
        "ParquetFileInput",
        "FileOutput",
        "ParquetFileOutput",
        "CsvFileOutput",
        "JsonLinesFileOutput",
        "LinesFileOutput",
    }
    test_inputs = {"ListInput", "EventTimeInput"}
    assert {e["name"] for e in only} == {"LineOutput", *test_inputs, *builtin_connectors}
    assert {e["kind"] for e in only} == {"connector", "input"}
    assert invoke("list", "--kind", "nonsense").exit_code == 2


def test_info_shows_ports_and_properties(site: FakeSite) -> None:
    result = invoke("info", "Doubler")
    assert result.exit_code == 0
    assert "Doubler  (operator, acme_pack.ops:Doubler, pack: acme-pack 1.2.3)" in result.output
    assert "factor: int = 2 (>= 1): the multiplier" in result.output
    assert "input (input port, required): Python objects" in result.output
    assert "output (output port, optional): Python objects" in result.output
    missing = invoke("info", "Dobler")
    assert missing.exit_code == 2
    assert "did you mean 'Doubler'" in missing.output


# -- validate ------------------------------------------------------------------------------------
def test_validate_a_json_app_naming_a_pack_operator_prints_the_plan(
    site: FakeSite, tmp_path: Path
) -> None:
    app = write_app(tmp_path / "doubling.json")
    result = invoke("validate", str(app))
    assert result.exit_code == 0, result.output
    assert "application 'doubling' is valid: 3 operator(s), 2 stream(s)" in result.output
    assert "level 0: 2 task(s)\n  [src] x2\nlevel 1: 1 task(s)\n  [double -> out] x1" in (
        result.output
    )
    assert "route src.output -> double.input: round robin" in result.output
    dag = load_application(str(app))
    assert dag.operators["double"].operator.factor == 10
    assert type(dag.operators["double"].operator).__module__ == "acme_pack.ops"


def test_validate_an_invalid_app_lists_every_problem_and_exits_2(
    site: FakeSite, tmp_path: Path
) -> None:
    app = write_app(
        tmp_path / "invalid.json",
        operators={
            "src": {"class": "ListInput", "args": {"windows": []}, "attributes": {"PARTITIONS": 0}},
            "out": {"class": "Collector"},
        },
        streams={},
    )
    result = invoke("validate", str(app))
    assert result.exit_code == 2
    assert f"{app}: the application is not valid:" in result.output
    assert "  - operator 'src': attribute PARTITIONS must be an int >= 1, got 0" in result.output
    assert "  - input port out.input is required but not connected" in result.output
    assert "level 0" not in result.output


def test_validate_reports_every_problem_of_an_application_file(
    site: FakeSite, tmp_path: Path
) -> None:
    app = write_app(
        tmp_path / "typos.json",
        operators={
            "src": {"class": "ListInpt", "args": {"windows": []}},
            "double": {"class": "Doubler", "properties": {"factor": 0, "facter": 3}},
            "out": {"class": "Collector", "attributes": {"PARTITION": 2}},
        },
        streems={},
    )
    result = invoke("validate", str(app))
    assert result.exit_code == 2
    problems = [line for line in result.output.splitlines() if line.startswith("  - ")]
    expected = [
        "unknown key 'streems'; did you mean 'streams'?",
        # the closest name first ('LinesFileInput' is close too)
        "operator 'src': unknown operator or connector 'ListInpt'; did you mean 'ListInput'",
        "operator 'double': property 'factor': 0 is below the minimum 1",
        "operator 'double': Doubler has no property 'facter'; did you mean 'factor'?",
        "operator 'out': unknown operator attribute 'PARTITION'; did you mean 'PARTITIONS'",
        "stream 'numbers': operator 'src' could not be created (see above)",
    ]
    assert len(problems) == len(expected)
    for problem, text in zip(problems, expected, strict=True):
        assert text in problem


def write_windowed_app(path: Path, counts: dict[str, Any] | None = None) -> Path:
    """ListInput -> WatermarkGenerator -> KeyedWindowedOperator -> Collector: clicks per user
    per 10 s window, every windowed setting a JSON value."""
    doc = {
        "name": "clicks",
        "attributes": {"STREAMING_WINDOW_MS": 100},
        "operators": {
            "src": {
                "class": "ListInput",
                "args": {
                    "windows": [
                        [{"user": "ann", "ts": 1000}, {"user": "bob", "ts": 2000}],
                        [{"user": "ann", "ts": 9000}, {"user": "ann", "ts": 12000}],
                        [{"user": "bob", "ts": 25000}],
                    ]
                },
            },
            "watermarks": {"class": "WatermarkGenerator", "args": {"timestamp": "ts"}},
            "counts": counts
            or {
                "class": "KeyedWindowedOperator",
                "args": {"accumulation": "Count", "window_option": {"TimeWindows": 10000}},
                "properties": {"key": "user", "timestamp": "ts", "output_format": "row"},
            },
            "out": {"class": "Collector"},
        },
        "streams": {
            "clicks": {"from": "src.output", "to": "watermarks.input"},
            "timed": {"from": "watermarks.output", "to": "counts.input"},
            "panes": {"from": "counts.output", "to": "out.input"},
        },
    }
    path.write_text(json.dumps(doc))
    return path


def test_validate_a_json_app_with_a_windowed_operator(site: FakeSite, tmp_path: Path) -> None:
    # the accumulation, window option and trigger are Python objects: a JSON application
    # could not create a windowed operator ("expected an Accumulation (Count(), Sum(), ...)")
    # nor set an ``object`` property such as key ("cannot read 'user' as object")
    app = write_windowed_app(tmp_path / "clicks.json")
    result = invoke(
        "validate", str(app), "-c",
        'dt.operator.counts.prop.trigger={"AfterWatermark": {"early": {"AfterCount": 2}}}',
        "-c", "dt.operator.counts.prop.accumulation_mode=ACCUMULATING",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "application 'clicks' is valid: 4 operator(s), 3 stream(s)" in result.output
    op = load_application(str(app)).operators["counts"].operator
    assert type(op.accumulation).__name__ == "Count"
    assert repr(op.window_option) == "TimeWindows(10000)"
    assert (op.key, op.timestamp) == ("user", "ts")
    as_properties = write_windowed_app(
        tmp_path / "props.json",
        {
            "class": "WindowedOperator",
            "properties": {
                "accumulation": {"TopN": {"n": 2}},
                "window_option": {"TimeWindows": {"duration": 10000, "slide": 5000}},
                "trigger": {"AfterAny": [{"AfterCount": 3}, "AfterWatermark"]},
                "storage": {"SpillableWindowedStorage": {"budget_bytes": 16777216}},
                "timestamp": "ts",
                "value": "user",
            },
        },
    )
    result = invoke("validate", str(as_properties))
    assert result.exit_code == 0, result.output
    op = load_application(str(as_properties)).operators["counts"].operator
    assert (type(op.accumulation).__name__, op.accumulation.n) == ("TopN", 2)
    assert repr(op.trigger) == "AfterAny(AfterCount(3), AfterWatermark())"


def test_bad_windowed_settings_name_the_property_the_value_and_the_known_names(
    site: FakeSite, tmp_path: Path
) -> None:
    app = write_windowed_app(
        tmp_path / "bad.json",
        {
            "class": "KeyedWindowedOperator",
            "args": {"accumulation": "Cont"},
            "properties": {"window_option": "Tumbling", "trigger": {"AfterCount": {"n": 2}}},
        },
    )
    result = invoke("validate", str(app))
    assert result.exit_code == 2
    assert (
        "operator 'counts': cannot create KeyedWindowedOperator with its 'args': PropertyError: "
        "KeyedWindowedOperator.accumulation: unknown accumulation 'Cont'; did you mean "
        "'Count'? (known: Average, Cogroup, Count, FullOuterJoin, InnerJoin, LeftOuterJoin, "
        "Max, Min, RemoveDuplicates, RightOuterJoin, SequenceCount, Sum, ToList, TopN, "
        "TopNByKey)"
    ) in result.output
    fixed = json.loads(app.read_text())
    fixed["operators"]["counts"]["args"] = {"accumulation": "Fold"}
    app.write_text(json.dumps(fixed))
    problems = [line for line in invoke("validate", str(app)).output.splitlines() if "  - " in line]
    assert (
        "accumulation 'Fold' cannot be given as a JSON value: it takes Python functions"
        in (problems[0])
    )
    fixed["operators"]["counts"]["args"] = {}
    app.write_text(json.dumps(fixed))
    problems = [line for line in invoke("validate", str(app)).output.splitlines() if "  - " in line]
    assert problems == [
        f"  - {app}: operator 'counts': property 'window_option': unknown window option "
        "'Tumbling' (known: GlobalWindow, SessionWindows, TimeWindows)",
        f"  - {app}: operator 'counts': property 'trigger': trigger AfterCount: unknown "
        "parameter 'n' (AfterCount takes count)",
    ]
    # no accumulation at all: found by validate, not by setup on Spark's executors
    fixed["operators"]["counts"]["properties"] = {"key": "user"}
    app.write_text(json.dumps(fixed))
    result = invoke("validate", str(app))
    assert result.exit_code == 2
    assert "  - operator 'counts': accumulation is not set: give one" in result.output


def test_an_operators_own_checks_come_with_the_files_other_problems(
    site: FakeSite, tmp_path: Path
) -> None:
    # partition_by is checked against schema by DAG.validate(), which only ran once the
    # file loaded: a file with a typo elsewhere hid it until the typo was fixed
    app = write_app(
        tmp_path / "files.json",
        operators={
            "src": {"class": "ListInput", "args": {"windows": []}},
            "out": {
                "class": "FileOutput",
                "properties": {
                    "path": str(tmp_path / "out"),
                    "format": "jsonl",
                    "schema": "a int, b string",
                    "partition_by": "c",
                },
                "atributes": {"PARTITIONS": 1},
            },
        },
        streams={"s": {"from": "src.output", "to": "out.input"}},
    )
    result = invoke("validate", str(app))
    assert result.exit_code == 2
    problems = [line for line in result.output.splitlines() if line.startswith("  - ")]
    assert len(problems) == 2, result.output
    assert "operator 'out': unknown key 'atributes'; did you mean 'attributes'?" in problems[0]
    assert "operator 'out': partition_by 'c' is not a column of the schema" in problems[1]


def test_config_overrides_attributes_and_properties(site: FakeSite, tmp_path: Path) -> None:
    app = write_app(tmp_path / "doubling.json")
    result = invoke(
        "validate",
        str(app),
        "-c",
        "dt.operator.out.attr.PARTITIONS=3",
        "-c",
        "dt.operator.*.attr.PROCESSING_MODE=exactly_once",
        "--name",
        "renamed",
    )
    assert result.exit_code == 0, result.output
    assert "application 'renamed' is valid" in result.output
    assert "[out] x3" in result.output
    dag = load_application(
        str(app),
        {
            "dt.operator.double.prop.factor": 7,
            "dt.attr.STREAMING_WINDOW_MS": 250,
            "dt.operator.*.attr.PROCESSING_MODE": "EXACTLY_ONCE",
            "dt.operator.out.port.input.attr.PARALLEL_PARTITION": True,
        },
    )
    assert dag.operators["double"].operator.factor == 7
    assert dag.attributes["STREAMING_WINDOW_MS"] == 250
    modes = {m.attributes["PROCESSING_MODE"] for m in dag.operators.values()}
    assert modes == {ProcessingMode.EXACTLY_ONCE}
    assert dag.operators["out"].port_attributes == {"input": {"PARALLEL_PARTITION": True}}
    bad = invoke("validate", str(app), "-c", "dt.operator.dbl.prop.factor=3", "-c", "dt.nope=1")
    assert bad.exit_code == 2
    assert "config dt.operator.dbl.prop.factor: no operator 'dbl'" in bad.output
    assert "config dt.nope: not understood" in bad.output
    assert invoke("validate", str(app), "-c", "novalue").exit_code == 2


def test_secrets_are_never_printed(site: FakeSite, tmp_path: Path) -> None:
    app = write_app(
        tmp_path / "sink.json",
        operators={
            "src": {"class": "ListInput", "args": {"windows": []}},
            "sink": {"class": "LineOutput", "properties": {"path": "/tmp/x"}},
        },
        streams={"s": {"from": "src.output", "to": "sink.input"}},
    )
    bad = invoke("validate", str(app), "-c", f"dt.operator.sink.prop.password={SECRET}")
    assert bad.exit_code == 2
    assert "property 'password'" in bad.output and "does not match the pattern" in bad.output
    assert SECRET not in bad.output and "***" in bad.output
    ok = invoke(
        "validate",
        str(app),
        "-c",
        "dt.operator.sink.prop.password=lowercaseonly",
        "-c",
        f"kafka.sasl.password={SECRET}",
        "-c",
        f"db=postgresql://me:{SECRET}@localhost/db",
    )
    assert ok.exit_code == 0, ok.output
    assert SECRET not in ok.output and "lowercaseonly" not in ok.output
    assert '"kafka.sasl.password": "***"' in ok.output
    assert "postgresql://me:***@localhost/db" in ok.output


def test_nested_secrets_are_never_printed(site: FakeSite, tmp_path: Path) -> None:
    app = write_app(
        tmp_path / "sink.json",
        operators={
            "src": {"class": "ListInput", "args": {"windows": []}},
            "sink": {"class": "LineOutput", "properties": {"path": "/tmp/x"}},
        },
        streams={"s": {"from": "src.output", "to": "sink.input"}},
    )
    nested = {
        "sasl.oauthbearer.config": f"clientSecret={SECRET}",
        "auth": {"api_key": SECRET + "1", "apikey": SECRET + "2"},
        "more": [{"sasl.password": SECRET + "3"}],
    }
    bad = invoke(  # a property value that breaks its check is shown in the error, masked
        "validate", str(app), "-c", f"dt.operator.sink.prop.client_config={json.dumps(nested)}"
    )
    assert bad.exit_code == 2 and "too many keys" in bad.output, bad.output
    assert SECRET not in bad.output and "***" in bad.output
    ok = invoke("validate", str(app), "-c", f"kafka={json.dumps(nested)}")
    assert ok.exit_code == 0, ok.output
    assert SECRET not in ok.output
    assert '"sasl.oauthbearer.config": "***"' in ok.output and '"api_key": "***"' in ok.output


# -- naming applications ---------------------------------------------------------------------------
FILE_APP = """
from malhar import DAG, InputPort, Operator, OutputPort, Property
from malhar.testing.operators import Collector, ListInput


class AddN(Operator):
    \"\"\"Adds ``n`` (defined in the application file itself).\"\"\"

    input = InputPort()
    output = OutputPort()
    n = Property(int, default=1)

    def process(self, value):
        self.output.emit(value + self.n)


def app(dag: DAG, config: dict) -> None:
    count = int(config.get("count", 1000))
    src = dag.add_operator("src", ListInput(windows=[[w] for w in range(count)]))
    add = dag.add_operator("add", AddN())
    out = dag.add_operator("out", Collector())
    dag.add_stream("numbers", src.output, add.input)
    dag.add_stream("sums", add.output, out.input)


def broken(dag):
    dag.add_operator("src", ListInput(windows=[])).outptu


class Boom(Operator):
    input = InputPort()

    def process(self, value):
        raise ValueError(f"cannot handle {value}")


def failing(dag, config):
    src = dag.add_operator("src", ListInput(windows=[[1], [2]]))
    dag.add_stream("numbers", src.output, dag.add_operator("boom", Boom()).input)


class Picky(Operator):
    input = InputPort()
    error = OutputPort(error=True)

    def process(self, value):
        self.error.emit({"value": value, "error": f"{value} is odd"})


def erring(dag, config):
    src = dag.add_operator("src", ListInput(windows=[[1], [3]]))
    dag.add_stream("numbers", src.output, dag.add_operator("picky", Picky()).input)
"""


def test_config_keys_nothing_reads_are_said(site: FakeSite, tmp_path: Path) -> None:
    # "-c double.factor=3" on a JSON application was printed, applied to nothing, and the
    # run went on with factor 10: the key was meant as dt.operator.double.prop.factor
    app = write_app(tmp_path / "app.json")
    said = CliRunner().invoke(
        cli, ["validate", str(app), "-c", "double.factor=3", "-c", "db=x"], catch_exceptions=False
    )
    assert said.exit_code == 0
    assert said.stderr.splitlines() == [
        "warning: config double.factor: the application reads no config while building its "
        "DAG; to set the property, use dt.operator.double.prop.factor",
        "warning: config db: the application reads no config while building its DAG; "
        "dt.operator.OP.prop.NAME sets a property, dt.attr.NAME an attribute",
    ]
    quiet = invoke("validate", str(app), "-c", "dt.operator.double.prop.factor=3")
    assert "warning" not in quiet.output
    # an application given the config: the keys it did not read (it read "windows")
    with pytest.warns(ConfigWarning, match=r"config windos: the application did not read it"):
        load_application("acme_pack.apps:doubling", {"windows": 5, "windos": 4})
    # a misspelling of a key it reads and was not given: named (walkthrough: -c bse=...)
    with pytest.warns(
        ConfigWarning, match=r"config windos: .*did you mean 'windows'\? \(a key the applica"
    ):
        load_application("acme_pack.apps:doubling", {"windos": 4})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_application(
            "acme_pack.apps:doubling", {"windows": 5, "dt.attr.STREAMING_WINDOW_MS": 200}
        )


def test_applications_are_named_every_way(site: FakeSite, tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(FILE_APP)
    by_function = load_application("acme_pack.apps:doubling", {"windows": 5})
    assert by_function.name == "doubling"
    assert len(by_function.operators["src"].operator.windows) == 5
    by_class = load_application("acme_pack.apps:DoublingApplication")
    assert by_class.name == "DoublingApplication"
    assert sorted(by_class.operators) == ["double", "out", "src"]
    registered = load_application("acme-doubling", name="stable")
    assert (registered.name, registered.attributes["APPLICATION_NAME"]) == ("stable", "stable")
    assert load_application("AcmeDoubling").name == "AcmeDoubling"
    by_file = load_application(f"{tmp_path}/myapp.py", {"dt.operator.add.prop.n": 5})
    assert by_file.name == "myapp"
    assert by_file.operators["add"].operator.n == 5
    assert load_application(f"{tmp_path}/myapp.py:app").name == "myapp"
    assert str(tmp_path) in os.environ["PYTHONPATH"].split(os.pathsep)

    ready = DAG("ready")
    sys.modules["acme_pack"].ready = ready  # type: ignore[attr-defined]
    assert load_application("acme_pack:ready") is ready


def _line_of(text: str, part: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if part in line)


def test_application_naming_errors_are_clear(site: FakeSite, tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(FILE_APP)
    cases = {
        "acme-doublin": "file.py[:attr] or file.json; did you mean 'acme-doubling'",
        "acme_pack.apps:dubling": "has no attribute 'dubling'; did you mean 'doubling'?",
        "acme_nowhere.apps:app": "no module named 'acme_nowhere.apps'",
        f"{tmp_path}/missing.json": "no application file",
        # the line of the application's code that raised, without --debug (walkthrough)
        f"{tmp_path}/myapp.py:broken": f"building the DAG failed (at {tmp_path}/myapp.py:"
        f"{_line_of(FILE_APP, '.outptu')}): AttributeError: operator 'src'",
        "acme_pack.ops:Doubler.factor": "is not an application",
    }
    for spec, message in cases.items():
        with pytest.raises(ApplicationError) as info:
            load_application(spec)
        assert message in str(info.value), (spec, str(info.value))
        result = invoke("validate", spec)
        assert result.exit_code == 2
        assert message in result.output


def test_failure_summary_finds_the_python_error_in_a_spark_failure() -> None:
    text = (
        "[STREAM_FAILED] Query [id = 7d2b] terminated with exception: [PYTHON_EXCEPTION] An "
        "exception was thrown from the Python worker: Traceback (most recent call last):\n"
        '  File "/x/task.py", line 310, in _call\n'
        "    raise OperatorError(\n"
        "malhar.engine.task.OperatorError: operator 'boom' partition 0 failed in process of "
        "window 0: ValueError: cannot handle 1\n"
        " SQLSTATE: 38000\n"
        "\tat org.apache.spark.Something(Something.scala:1)"
    )
    assert failure_summary(text) == (
        "OperatorError: operator 'boom' partition 0 failed in process of window 0: "
        "ValueError: cannot handle 1"
    )
    assert failure_summary("something odd\nhappened") == "something odd\n    happened"


def test_parse_config_values_are_json_when_they_parse() -> None:
    assert parse_config(["a=3", "b=true", "c=[1, 2]", "d=localhost:9092", "e=", "f=x=y"]) == {
        "a": 3,
        "b": True,
        "c": [1, 2],
        "d": "localhost:9092",
        "e": "",
        "f": "x=y",
    }


# -- run (real Spark, in a subprocess) -----------------------------------------------------------
def malhar_command() -> list[str]:
    script = Path(sys.executable).with_name("malhar")
    return [str(script)] if script.exists() else [sys.executable, "-m", "malhar.cli"]


@pytest.mark.integration
def test_run_a_json_app_for_three_windows(site: FakeSite, tmp_path: Path) -> None:
    app = write_app(tmp_path / "doubling.json")
    checkpoint = tmp_path / "ckpt"
    command = [
        *malhar_command(),
        "run",
        str(app),
        "--windows",
        "3",
        "--master",
        "local[1]",
        "--checkpoint",
        str(checkpoint),
        "--progress",
    ]
    done = subprocess.run(
        command, env=site.env(), capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "doubling: running 3 window(s) on local[1]" in done.stdout
    assert "last window 2" in done.stdout
    # --progress: the live per-operator table (its last state once the run ended)
    assert "in/s" in done.stdout and "window ms" in done.stdout, done.stdout
    assert all(op in done.stdout for op in ("src", "double", "out"))
    got = {w: sorted(v) for w, v in collected(str(checkpoint), "out").items()}
    assert got == {0: [10, 20], 1: [30], 2: [40, 50, 60]}
    assert "resuming" not in done.stdout
    # a restart says where it resumes (it printed what a fresh run prints: walkthrough)
    command[command.index("--windows") + 1] = "1"
    again = subprocess.run(
        command, env=site.env(), capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "doubling: resuming from the checkpoint after window 2" in again.stdout


@pytest.mark.integration
def test_run_a_json_app_with_a_windowed_operator(site: FakeSite, tmp_path: Path) -> None:
    app = write_windowed_app(tmp_path / "clicks.json")
    checkpoint = tmp_path / "ckpt"
    command = [*malhar_command(), "run", str(app), "--windows", "3", "--master", "local[1]"]
    command += ["--checkpoint", str(checkpoint)]
    done = subprocess.run(
        command, env=site.env(), capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    panes = [
        (p["user"], p["window_start"], p["value"], p["timing"])
        for window in collected(str(checkpoint), "out").values()
        for p in window
    ]
    # the watermark passes 10 s in window 1 (ts 12000) and 20 s in window 2 (ts 25000)
    assert sorted(panes) == [
        ("ann", 0, 2, "ON_TIME"),
        ("ann", 10000, 1, "ON_TIME"),
        ("bob", 0, 1, "ON_TIME"),
    ]


@pytest.mark.integration
def test_run_until_interrupted_stops_after_a_window(site: FakeSite, tmp_path: Path) -> None:
    app_dir = tmp_path / "project"
    app_dir.mkdir()
    (app_dir / "myapp.py").write_text(FILE_APP)
    checkpoint = tmp_path / "ckpt"
    command = [
        *malhar_command(),
        "run",
        "myapp:app",
        "--master",
        "local[1]",
        "--checkpoint",
        str(checkpoint),
        "--window-ms",
        "200",
        "-c",
        "dt.operator.add.prop.n=100",
    ]
    proc = subprocess.Popen(
        command, env=site.env(), cwd=app_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 300
        while not collected(str(checkpoint), "out"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no window completed"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out + err).decode()
    text = out.decode()
    assert "myapp: running until Ctrl-C on local[1]" in text
    assert "myapp: stopping after the current window ..." in text
    assert "myapp: stopped after running " in text
    got = collected(str(checkpoint), "out")
    windows = sorted(got)
    assert windows == list(range(len(windows)))
    assert got == {w: [w + 100] for w in windows}
    assert "Traceback" not in err.decode()
    assert "Failed to cancel job group" not in err.decode()  # a clean stop is no failure
    shutil.rmtree(checkpoint, ignore_errors=True)


@pytest.mark.integration
def test_run_of_a_failing_app_exits_1_with_the_operator_error(
    site: FakeSite, tmp_path: Path
) -> None:
    (tmp_path / "myapp.py").write_text(FILE_APP)
    command = [*malhar_command(), "run", "myapp.py:failing", "--windows", "2"]
    command += ["--master", "local[1]", "--checkpoint", str(tmp_path / "ckpt")]
    done = subprocess.run(
        command, env=site.env(), capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "failing: the application failed:\n"
        "  - OperatorError: operator 'boom' partition 0 failed in process of window 0: "
        "ValueError: cannot handle 1\n"
    ) in done.stderr
    # Spark's task loggers printed the Python traceback four times above it (~300 lines)
    assert done.stderr.count("ValueError: cannot handle 1") == 1, done.stderr
    assert " ERROR Executor" not in done.stderr and "ResolveWriteToStream" not in done.stderr
    debug = [*malhar_command(), "--debug", *command[len(malhar_command()) :]]
    shutil.rmtree(tmp_path / "ckpt")
    loud = subprocess.run(
        debug, env=site.env(), capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert loud.returncode == 1 and " ERROR Executor" in loud.stderr, loud.stderr


BOUNDED_APP = """
from malhar import DAG
from malhar.io.fs import LinesFileInput
from malhar.testing.operators import Collector


def app(dag: DAG, config: dict) -> None:
    src = dag.add_operator("in", LinesFileInput({folder!r}, end_marker="_SUCCESS"))
    dag.add_stream("lines", src.output, dag.add_operator("out", Collector()).input)
"""


@pytest.mark.integration
def test_run_of_an_app_whose_input_ends_stops_by_itself(site: FakeSite, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("a\nb\n")
    (folder / "_SUCCESS").write_text("")
    (tmp_path / "myapp.py").write_text(BOUNDED_APP.format(folder=str(folder)))
    command = [*malhar_command(), "run", "myapp.py", "--name", "lines", "--master", "local[1]"]
    command += ["--checkpoint", str(tmp_path / "ckpt")]
    done = subprocess.run(
        command, env=site.env(), capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lines: running until its input ends or Ctrl-C" in done.stdout, done.stdout
    ended = re.search(r"lines: every input ended at window (-?\d+)", done.stdout)
    assert ended and int(ended[1]) >= 0, done.stdout  # it said -1: the window log's, one late
    got = collected(str(tmp_path / "ckpt"), "out")
    assert sorted(t["line"] for rows in got.values() for t in rows) == ["a", "b"]


@pytest.mark.integration
def test_the_first_tuple_of_an_error_port_no_stream_reads_is_logged_with_its_reason(
    site: FakeSite, tmp_path: Path
) -> None:
    (tmp_path / "myapp.py").write_text(FILE_APP)
    command = [*malhar_command(), "run", "myapp.py:erring", "--windows", "2"]
    command += ["--master", "local[1]", "--checkpoint", str(tmp_path / "ckpt")]
    done = subprocess.run(
        command, env=site.env(), capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = (
        "operator 'picky' partition 0: a tuple went to its error port 'error', which no "
        "stream reads (dropped, counted in the metrics; add a stream from picky.error "
        "to keep them); the first: 1 is odd"
    )
    assert done.stderr.count(said) == 1, done.stderr  # once: not "3 is odd" too
    assert "tuples on error ports: picky.error=2" in done.stdout + done.stderr


def test_a_property_value_error_names_the_property_once(site: FakeSite, tmp_path: Path) -> None:
    app = write_app(
        tmp_path / "parse.json",
        operators={
            "src": {"class": "ListInput", "args": {"windows": []}},
            "parse": {"class": "CsvParser", "properties": {"schema": "a string"}},
            "top": {"class": "TopN", "properties": {"n": 1}},
        },
        streams={
            "s": {"from": "src.output", "to": "parse.input"},
            "t": {"from": "src.output", "to": "top.data"},
        },
    )
    bad = invoke(
        "validate", str(app), "-c", "dt.operator.top.prop.n=abc", "-c",
        "dt.operator.parse.prop.schema=id bigint,, name string",
    )  # fmt: skip
    assert bad.exit_code == 2
    # it said "property 'schema': CsvParser.schema: schema: cannot parse ..." and, for a
    # value not read as its type, "property 'x': property 'x': cannot read ..."
    assert (
        "config dt.operator.parse.prop.schema: property 'schema': cannot parse DDL "
        "'id bigint,, name string': expected a field name but found ','" in bad.output
    )
    assert "config dt.operator.top.prop.n: property 'n': cannot read 'abc' as int" in bad.output


def test_run_refuses_a_master_spark_does_not_know_before_starting_it(
    site: FakeSite, tmp_path: Path
) -> None:
    # the JVM refused it with 50 lines ending in JAVA_GATEWAY_EXITED and exit code 1
    app = write_app(tmp_path / "app.json")
    for master in ("lokal[2]", "local[0]", "local-cluster[0,1,1024]"):  # Spark: 0 threads
        bad = invoke("run", str(app), "--master", master, "--windows", "1")
        assert bad.exit_code == 2, master
        assert f"'{master}' is not a Spark master URL: use local[N]" in bad.output
    # a standalone master nobody answers at: Spark retried for a minute, 200 lines, exit 1
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    gone = invoke("run", str(app), "--master", f"spark://127.0.0.1:{port}", "--windows", "1")
    assert gone.exit_code == 2
    assert f"cannot reach the Spark master spark://127.0.0.1:{port} (127.0.0.1:{port}: " in (
        gone.output
    )


def test_run_refuses_a_checkpoint_that_is_a_file_before_starting_spark(
    site: FakeSite, tmp_path: Path
) -> None:
    # it failed after Spark started, exit 1: "list failed: Not a directory ... wal/__app__"
    app = write_app(tmp_path / "app.json")
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    bad = invoke("run", str(app), "--checkpoint", str(afile), "--windows", "1")
    assert bad.exit_code == 2, bad.output
    assert f"--checkpoint {afile} is a file: give a directory" in bad.output


def _dedup_app(path: Path, dedup: dict[str, Any], out_class: str = "Collector") -> Path:
    doc = {
        "name": "dd",
        "operators": {
            "src": {"class": "ListInput", "args": {"windows": [[{"id": 1, "t": 5}]]}},
            "dedup": {"class": "TimeBasedDedup", **dedup},
            "out": {"class": out_class},
        },
        "streams": {
            "a": {"from": "src.output", "to": "dedup.input"},
            "b": {"from": "dedup.unique", "to": "out.input"},
        },
    }
    path.write_text(json.dumps(doc))
    return path


def test_a_required_property_set_in_properties_or_config_builds_the_operator(
    tmp_path: Path,
) -> None:
    """TimeBasedDedup's constructor refuses to build without ``time``: given in
    "properties" or with -c it is handed to the constructor (it said "must be set")."""
    by_props = _dedup_app(tmp_path / "p.json", {"args": {"key": "id"}, "properties": {"time": "t"}})
    assert invoke("validate", str(by_props)).exit_code == 0
    bare = _dedup_app(tmp_path / "b.json", {"args": {"key": "id"}})
    result = invoke("validate", str(bare), "-c", "dt.operator.dedup.prop.time=t")
    assert result.exit_code == 0, result.output
    missing = invoke("validate", str(bare))
    assert missing.exit_code != 0
    assert "time: must be set (it is required) (give it in the operator's" in missing.output
    assert "-c dt.operator.dedup.prop.NAME=..." in missing.output
    # another operator's error: a required property the config sets is not reported unset
    doc = json.loads(by_props.read_text())
    doc["operators"]["out"] = {"class": "KafkaOutputOperator", "args": {"topic": "t"}}
    doc["operators"]["dedup"]["class"] = "TimeBasedDedupp"
    both = tmp_path / "k.json"
    both.write_text(json.dumps(doc))
    unset = invoke("validate", str(both))
    assert "property 'bootstrap_servers' must be set" in unset.output  # the check is real
    result = invoke("validate", str(both), "-c", "dt.operator.out.prop.bootstrap_servers=h:9")
    assert "did you mean 'TimeBasedDedup'" in result.output
    assert "bootstrap_servers" not in result.output
