"""What launch does so that nothing is shared, leaked or left behind by accident."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from malhar import DAG, InputPort, Operator, Property, ValidationError, run
from malhar.engine.launcher import derived_name
from malhar.engine.secret_shipping import ship_secrets
from malhar.testing.operators import Collector, ListInput
from tests.spark_subprocess import run_spark_script


class Sink(Operator):
    input = InputPort()
    password = Property(str, default=None)  # a secret by its name: references implied
    client_config = Property(dict, default=None)  # its operator reads no references
    consumer_config = Property(dict, default=None, references=True)

    def process(self, value: object) -> None:
        pass


def test_derived_names_are_stable_per_checkpoint_and_differ_between_checkpoints(
    tmp_path: Path,
) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert derived_name(a) == derived_name(a + "/") == derived_name(a)
    assert derived_name(a) != derived_name(b)
    assert derived_name("hdfs://nn:8020/ck").startswith("app-")


@pytest.mark.parametrize("name", ["__app__", "__x", "", "  ", "a\nb"])
def test_reserved_or_unprintable_operator_names_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="operator name"):
        DAG("x").add_operator(name, Collector())


def test_literal_secrets_ship_as_references_through_the_executors_environment() -> None:
    dag = DAG("x")
    dag.add_operator("a", Sink().configure(password="hunter22"))
    dag.add_operator("b", Sink().configure(password="${env:PW}"))
    dag.add_operator("c", Sink().configure(client_config={"sasl": {"sasl.password": "pw"}}))
    dag.add_operator("d", Sink().configure(client_config={"sasl.password": "${file:/run/pw}"}))
    dag.add_operator(
        "e", Sink().configure(consumer_config={"sasl.password": "s3cret", "acks": "all"})
    )
    env: dict[str, str] = {}
    shipped, left = ship_secrets(dag, env)
    assert left == ["c.client_config"]  # its operator would not read a reference: warned
    a, e = shipped.operators["a"].operator, shipped.operators["e"].operator
    assert a.password.startswith("${env:MALHAR_SECRET_") and env[a.password[6:-1]] == "hunter22"
    ref = e.consumer_config["sasl.password"]
    assert env[ref[6:-1]] == "s3cret" and e.consumer_config["acks"] == "all"
    assert shipped.operators["b"].operator.password == "${env:PW}"
    assert dag.operators["a"].operator.password == "hunter22"  # the caller's DAG is untouched
    assert sorted(env.values()) == ["hunter22", "s3cret"]


@pytest.mark.integration
def test_an_unnamed_application_gets_a_name_of_its_own_and_a_warning(
    spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dag = DAG()  # no name
    src = dag.add_operator("src", ListInput([[1]]))
    out = dag.add_operator("out", Collector())
    dag.add_stream("s", src.output, out.input)
    checkpoint = str(tmp_path / "ck")
    with caplog.at_level(logging.WARNING, logger="malhar"):
        app = run(dag, windows=1, spark=spark, checkpoint=checkpoint, window_ms=50)
    assert app.plan.app == derived_name(checkpoint) != "app"
    assert any("the application has no name" in r.getMessage() for r in caplog.records)
    assert not dag.named  # the caller's DAG is left as it was


@pytest.mark.integration
def test_a_temporary_checkpoint_is_removed_when_the_process_exits() -> None:
    script = textwrap.dedent(
        """
        import json
        from malhar import DAG, build_session, run
        from malhar.testing.operators import Collector, ListInput

        dag = DAG("tmp")
        src = dag.add_operator("src", ListInput([[1]]))
        out = dag.add_operator("out", Collector())
        dag.add_stream("s", src.output, out.input)
        app = run(dag, windows=1, spark=build_session("local[1]"), window_ms=50)
        print(json.dumps(app.checkpoint))
        """
    )
    checkpoint = run_spark_script(script, env={"PYTHONPATH": str(Path.cwd())})
    assert "malhar-tmp-" in checkpoint and not Path(checkpoint).exists()


@pytest.mark.integration
def test_launches_in_one_session_read_their_own_secrets_and_warn_of_no_replacement() -> None:
    # malhar's data source is registered again only when what it carries (the executors'
    # environment, where shipped secrets travel) changed: registered on every launch,
    # Spark warned "replaced a previously registered data source" from the second on;
    # registered once, a launch with a new secret found it missing on the executors
    script = textwrap.dedent(
        """
        import json, sys, tempfile
        from malhar import DAG, InputOperator, OutputPort, Property, build_session, run
        from malhar.secrets import resolve
        from malhar.testing.operators import Collector, collected

        class SaysSecret(InputOperator):
            output = OutputPort()
            password = Property(str, default=None, secret=True)

            def setup(self, context):
                self._password = resolve(self.password, "password")
                self._said = False

            def emit_tuples(self):
                if not self._said:
                    self._said = True
                    self.output.emit(self._password)

        spark = build_session("local[1]")
        said = []
        for i, password in enumerate(["first-pw", "first-pw", "second-pw"]):
            dag = DAG(f"secrets{i}")
            src = dag.add_operator("src", SaysSecret().configure(password=password))
            dag.add_stream("s", src.output, dag.add_operator("out", Collector()).input)
            checkpoint = tempfile.mkdtemp()
            run(dag, windows=1, spark=spark, checkpoint=checkpoint, window_ms=50)
            said += [t for ts in collected(checkpoint, "out").values() for t in ts]
            print("launch", i, "done", file=sys.stderr, flush=True)
        spark.stop()
        print(json.dumps(said))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(Path.cwd())},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [
        "first-pw",
        "first-pw",
        "second-pw",
    ]
    second = done.stderr.split("launch 0 done")[1].split("launch 1 done")[0]
    assert "replaced a previously registered data source" not in second, second[-3000:]
    assert "ResolveWriteToStream" not in done.stderr, done.stderr[-3000:]
