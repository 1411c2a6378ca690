"""A SparkSession with defaults that work out of the box for malhar applications."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from malhar.errors import ConfigError
from malhar.spark_home import use_bytecode_spark_home

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

#: All cores, and up to 4 attempts per task like a cluster's ``spark.task.maxFailures``:
#: plain ``local[*]`` gives every task one attempt, so one failed task fails the query
#: where a cluster would retry it inside the window.
DEFAULT_MASTER = "local[*,4]"
#: seconds a standalone master has to accept a connection before build_session gives up
MASTER_CONNECT_TIMEOUT_S = 5.0


class MasterUnreachable(ConfigError):
    """No master of a ``spark://`` URL accepts a connection."""


def check_master_reachable(master: str, timeout: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`MasterUnreachable` when ``master`` is ``spark://HOST:PORT[,HOST:PORT]``
    and none of its hosts accepts a TCP connection within ``timeout`` seconds.

    Spark itself retries for about a minute and prints some 200 lines before it gives up.
    Other master URLs are not checked."""
    if not master.startswith("spark://"):
        return
    problems = []
    for hostport in master[len("spark://") :].split(","):
        host, sep, port = hostport.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(f"master {master!r}: {hostport!r} is not HOST:PORT")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
            return
        except OSError as exc:
            problems.append(f"{hostport}: {exc.strerror or exc}")
    raise MasterUnreachable(
        f"cannot reach the Spark master {master} ({'; '.join(problems)}): check the host and "
        "port (a standalone master listens on 7077 by default) and that the master runs"
    )


def default_shuffle_partitions() -> int:
    """One shuffle partition per core, at least 2: Spark's 200 is far too many for small windows."""
    return max(2, os.cpu_count() or 2)


def session_conf(
    *,
    shuffle_partitions: int | None = None,
    ui: bool = False,
    jars: Iterable[Path | str] = (),
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The Spark settings :func:`build_session` applies, as a plain dict.

    Exposed so that ``spark-submit`` users can copy them into their own
    configuration.
    """
    settings = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.shuffle.partitions": str(shuffle_partitions or default_shuffle_partitions()),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.sql.streaming.stopTimeout": "30s",
        # Spark's default ("(?i)url") plus malhar's source options: the pickled plan carries
        # operators' configuration, so it is masked wherever Spark prints plans (UI, logs)
        "spark.sql.redaction.options.regex": "(?i)url|^plan$|integrity",
    }
    from malhar.util.state.local_dirs import STATE_DIR_ENV  # not at import: a big package

    state_dir = os.environ.get(STATE_DIR_ENV)
    if state_dir:
        # executors of a cluster do not inherit the driver's environment (local and
        # local-cluster ones do); absolute, since an executor's working directory is another
        settings[f"spark.executorEnv.{STATE_DIR_ENV}"] = os.path.abspath(
            os.path.expanduser(state_dir)
        )
    jar_list = [str(j) for j in jars]
    if jar_list:
        settings["spark.jars"] = ",".join(jar_list)
    settings.update(conf or {})
    return settings


def build_session(
    master: str = DEFAULT_MASTER,
    app_name: str = "malhar",
    *,
    shuffle_partitions: int | None = None,
    ui: bool = False,
    jars: Iterable[Path | str] = (),
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """Get or create a SparkSession configured for malhar.

    Args:
        master: any Spark master URL: ``local[*,4]`` (default: all cores, 4 attempts per
            task), ``local[2]``, ``local-cluster[2,1,1024]``, ``spark://host:7077`` ...
        app_name: the Spark application name.
        shuffle_partitions: ``spark.sql.shuffle.partitions``; one per core by default.
        ui: start the Spark UI (off by default: tests and CI do not need it).
        jars: extra jars for the JVM (only honoured when the JVM starts here).
        conf: further Spark settings; they win over the defaults.
        log_level: the JVM's log level after start.

    Raises:
        MasterUnreachable: a ``spark://`` master that accepts no connection (checked in
            5 s, before the JVM starts).

    Python workers are started with the running interpreter, so workers find
    the same packages as the driver (Spark would otherwise run ``python3`` from PATH).
    With a local master and pip's pyspark, ``SPARK_HOME`` is pointed at an overlay of the
    installed pyspark without its source zip, so every Python process Spark starts imports
    pyspark from bytecode: about 0.5 s less per process, among them the driver-side process
    each streaming query starts for its source (:mod:`malhar.spark_home`;
    ``MALHAR_SPARK_HOME_OVERLAY=0`` turns it off).

    Example (Not run: it starts a Spark JVM; ``tests/test_session.py`` covers it):
        >>> from malhar import build_session
        >>> spark = build_session("local[2]")          # doctest: +SKIP
        >>> spark.range(3).count()                     # doctest: +SKIP
        3
    """
    if SparkSession.getActiveSession() is None:  # getOrCreate ignores master otherwise
        check_master_reachable(master)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    use_bytecode_spark_home(master)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = session_conf(shuffle_partitions=shuffle_partitions, ui=ui, jars=jars, conf=conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    # every streaming query warns that adaptive execution does not apply to it; batch
    # queries of the same session keep it
    set_logger_levels(
        spark, {"org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream": "ERROR"}
    )
    return spark


#: Spark's loggers that repeat a failed task's error (its Python traceback, four times in
#: local mode) before the query's own exception says it once more
TASK_FAILURE_LOGGERS = (
    "org.apache.spark.util.Utils",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
)
#: Spark's loggers that warn of what is normal for malhar, which new users read as a
#: failure: a clean stop ("Failed to cancel job group ... Cannot find active jobs": the query
#: stopped between its batches), a window longer than WINDOW_MS ("Current batch is falling
#: behind": the window length is a cadence, not a deadline)
NOISE_LOGGERS = (
    "org.apache.spark.scheduler.DAGScheduler",
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
)


def set_logger_levels(spark: SparkSession, levels: Mapping[str, str]) -> None:
    """Set the levels of named loggers of the driver's JVM (log4j 2), e.g. ``{"org.apache.
    spark.executor.Executor": "OFF"}``; in local mode the executors log there too."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a session built here has its JVM
    log4j = jvm.org.apache.logging.log4j
    for name, level in levels.items():
        log4j.core.config.Configurator.setLevel(name, log4j.Level.getLevel(level))
