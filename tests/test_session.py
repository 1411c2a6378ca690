"""The session builder: defaults that work, any master URL, real executor processes."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from malhar import session_conf
from malhar.errors import ConfigError
from malhar.session import ROCKSDB_PROVIDER, MasterUnreachable, check_master_reachable
from tests.spark_subprocess import run_spark_script

ROOT = Path(__file__).resolve().parents[1]


def test_defaults() -> None:
    conf = session_conf()
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.ui.enabled"] == "false"
    assert int(conf["spark.sql.shuffle.partitions"]) == max(2, os.cpu_count() or 2)
    assert session_conf(conf={"spark.ui.enabled": "true"})["spark.ui.enabled"] == "true"
    assert session_conf(jars=["/a.jar", "/b.jar"])["spark.jars"] == "/a.jar,/b.jar"


def test_executors_get_the_drivers_state_dir_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # managed state's local stores: an executor's working directory is not the driver's
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MALHAR_STATE_DIR", "state")
    assert session_conf()["spark.executorEnv.MALHAR_STATE_DIR"] == str(tmp_path / "state")
    monkeypatch.delenv("MALHAR_STATE_DIR")
    assert "spark.executorEnv.MALHAR_STATE_DIR" not in session_conf()


def test_an_unreachable_standalone_master_is_named_before_the_jvm_starts() -> None:
    # Spark retried for about a minute and printed some 200 lines, then exit 1
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # closed once the with ends: nothing listens there
    started = time.monotonic()
    with pytest.raises(MasterUnreachable, match=rf"127\.0\.0\.1:{port}: Connection refused"):
        check_master_reachable(f"spark://127.0.0.1:{port}")
    with pytest.raises(MasterUnreachable, match=r"no-such-host\.invalid:7077: .*; 127"):
        check_master_reachable(f"spark://no-such-host.invalid:7077,127.0.0.1:{port}")
    assert time.monotonic() - started < 10
    with pytest.raises(ConfigError, match="'x' is not HOST:PORT"):
        check_master_reachable("spark://x")
    with socket.socket() as listening:  # a master that accepts, in the second place
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        here = listening.getsockname()[1]
        check_master_reachable(f"spark://127.0.0.1:{port},127.0.0.1:{here}")
    check_master_reachable("local[2]")  # only spark:// is checked
    # build_session checks before it starts anything (a fresh process: no session yet)
    script = textwrap.dedent(
        f"""
        import json
        from malhar import build_session
        from malhar.session import MasterUnreachable
        from pyspark import SparkContext
        try:
            build_session("spark://127.0.0.1:{port}")
        except MasterUnreachable as exc:
            print(json.dumps([str(exc), SparkContext._gateway is None]))
        """
    )
    message, no_jvm = run_spark_script(script, timeout=60)
    assert message.startswith(f"cannot reach the Spark master spark://127.0.0.1:{port} (")
    assert no_jvm


def test_session_runs_python_workers_with_this_interpreter(spark) -> None:
    executables = set(
        spark.sparkContext.parallelize(range(4), 2)
        .map(lambda _: __import__("sys").executable)
        .collect()
    )
    assert executables == {sys.executable}
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass") == ROCKSDB_PROVIDER


@pytest.mark.integration
def test_local_cluster_runs_on_two_executor_processes(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import json, os
        from malhar import build_session
        spark = build_session("local-cluster[2,1,1024]", app_name="two-executors")
        sc = spark.sparkContext
        def where(_):
            from pyspark import TaskContext
            return (os.getppid(), TaskContext.get().partitionId())
        rows = sc.parallelize(range(8), 8).map(where).collect()
        executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
        print(json.dumps({"jvms": sorted({r[0] for r in rows}), "executors": executors,
                          "driver": os.getpid()}))
        spark.stop()
        """
    )
    info = run_spark_script(script)
    assert info["executors"] == 2
    # Python workers are forked by a daemon per executor: two distinct parent processes.
    assert len(info["jvms"]) == 2
    assert info["driver"] not in info["jvms"]


@pytest.mark.integration
def test_local_cluster_executors_keep_their_local_stores_under_the_drivers_state_dir(
    tmp_path: Path,
) -> None:
    # relative, as a user may set it: the executors run in the worker's directory
    script = textwrap.dedent(
        f"""
        import json, os
        os.chdir({str(tmp_path)!r})
        from malhar import build_session
        spark = build_session("local-cluster[1,1,1024]", app_name="state-dir")
        def where(_):
            from malhar.util.state.manager import default_local_dir
            return default_local_dir("/ckpt", "op", 0)
        print(json.dumps(spark.sparkContext.parallelize([0], 1).map(where).collect()))
        spark.stop()
        """
    )
    (path,) = run_spark_script(script, env={"MALHAR_STATE_DIR": "state"})
    assert path.startswith(f"{tmp_path}/state/"), path


@pytest.mark.integration
def test_the_default_master_retries_a_failed_task() -> None:
    script = textwrap.dedent(
        """
        import json
        from malhar import build_session
        spark = build_session(app_name="retries")
        def fail_first_attempt(i):
            from pyspark import TaskContext
            attempt = TaskContext.get().attemptNumber()
            if i == 3 and attempt == 0:
                raise RuntimeError("the first attempt of this task fails")
            return (i, attempt)
        rows = spark.sparkContext.parallelize(range(4), 4).map(fail_first_attempt).collect()
        print(json.dumps({"master": spark.sparkContext.master, "rows": rows}))
        spark.stop()
        """
    )
    info = run_spark_script(script)
    assert info["master"] == "local[*,4]"
    assert info["rows"] == [[0, 0], [1, 0], [2, 0], [3, 1]]  # task 3 retried once


WORKER_IMPORTS = textwrap.dedent(
    """
    import json, os
    from malhar import build_session
    spark = build_session("{master}", app_name="overlay")
    def origin(_):
        import pyspark, py4j
        return (pyspark.__file__, py4j.__file__)
    files = spark.sparkContext.parallelize(range(2), 2).map(origin).collect()
    print(json.dumps({{"files": sorted(set(files)), "home": os.environ.get("SPARK_HOME")}}))
    spark.stop()
    """
)


@pytest.mark.integration
@pytest.mark.parametrize("master", ["local[2]", "local-cluster[1,1,1024]"])
def test_python_workers_import_pyspark_from_the_installed_package(master: str) -> None:
    import py4j
    import pyspark

    info = run_spark_script(WORKER_IMPORTS.format(master=master))
    installed = (pyspark.__file__, py4j.__file__)
    # not from $SPARK_HOME/python/lib/*.zip, which Python must compile again in every process
    assert info["files"] == [list(installed)], info
    home = Path(info["home"])
    assert (home / "jars").resolve() == Path(pyspark.__file__).parent / "jars"
    assert not (home / "python" / "lib" / "pyspark.zip").exists()


@pytest.mark.integration
def test_spark_home_overlay_can_be_turned_off() -> None:
    import pyspark

    package = str(Path(pyspark.__file__).parent)  # this process may use the overlay already
    info = run_spark_script(
        WORKER_IMPORTS.format(master="local[1]"),
        env={"MALHAR_SPARK_HOME_OVERLAY": "0", "SPARK_HOME": package},
    )
    (pyspark_file, _), *_ = info["files"]
    assert pyspark_file.endswith("python/lib/pyspark.zip/pyspark/__init__.py"), info
    assert info["home"] == package


def test_no_overlay_for_remote_masters_or_a_users_spark_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from malhar.spark_home import bytecode_spark_home

    assert bytecode_spark_home("spark://somewhere:7077") is None
    assert bytecode_spark_home("yarn") is None
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))  # a Spark distribution of the user's
    assert bytecode_spark_home("local[2]") is None


@pytest.mark.integration
def test_launches_in_one_session_print_no_adaptive_execution_warning(tmp_path: Path) -> None:
    # every query warned that adaptive execution does not apply to streaming
    import subprocess

    script = textwrap.dedent(
        f"""
        from malhar import DAG, build_session, run
        from malhar.testing.operators import Collector, ListInput

        spark = build_session("local[1]")
        for i in range(2):
            dag = DAG(f"quiet{{i}}")
            src = dag.add_operator("src", ListInput([[1, 2]]))
            dag.add_stream("s", src.output, dag.add_operator("out", Collector()).input)
            run(dag, windows=1, spark=spark, checkpoint={str(tmp_path)!r} + f"/{{i}}")
        spark.stop()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ResolveWriteToStream" not in done.stderr, done.stderr[-3000:]
