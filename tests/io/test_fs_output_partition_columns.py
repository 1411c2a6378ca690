"""``partition_by`` naming several columns: nested Hive directories in the given order (as
Spark's ``partitionBy("user", "d")``), one column exactly as before, the list form from
Python, JSON and ``-c`` text, its checks, a crash in the middle of a nested publication,
and Spark reading both columns back."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from malhar import DAG
from malhar.app.config import apply_config
from malhar.errors import ConfigError
from malhar.io.fs import FileOutputConfigError, ParquetFileOutput
from malhar.io.fs.settings import FileOutputSettings, FileSinkSettings
from malhar.io.fs.store import FileStore
from tests.io.fs_support import Place, place_fixture  # noqa: F401
from tests.io.test_fs_output import DDL, _raise_once, out_harness

DDL_USERS = "user string, d date, n bigint"
NAME = "part-fs-tests-out-00000-000000000000-000000000001.parquet"


def user_rows() -> list[tuple[str, dict[str, Any]]]:
    day = dt.date(2026, 11, 29)
    values = [("ann", day), ("ann", dt.date(2026, 11, 30)), ("b/o", None), ("", day), ("ann", day)]
    return [("input", {"user": u, "d": d, "n": i}) for i, (u, d) in enumerate(values)]


def published(root: Path) -> list[str]:
    """The visible files below ``root`` (no hidden or staging name on the way)."""
    out = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if p.is_file() and not any(part[0] in "._" for part in rel.parts):
            out.append(rel.as_posix())
    return sorted(out)


def write_users(root: Path, partition_by: Any, **settings: Any) -> None:
    h = out_harness(
        ParquetFileOutput(
            str(root), schema=DDL_USERS, partition_by=partition_by, roll_windows=2, **settings
        )
    )
    h.run_window(user_rows()[:3], window=0)
    h.run_window(user_rows()[3:], window=1)
    h.committed(1)
    assert h.sink("error").tuples == []


# -- layout ----------------------------------------------------------------------------------------
def test_several_columns_nest_in_the_given_order(tmp_path: Path) -> None:
    write_users(tmp_path, ["user", "d"])
    assert published(tmp_path) == [
        f"user=__HIVE_DEFAULT_PARTITION__/d=2026-11-29/{NAME}",  # "" is Hive's null
        f"user=ann/d=2026-11-29/{NAME}",
        f"user=ann/d=2026-11-30/{NAME}",
        f"user=b%2Fo/d=__HIVE_DEFAULT_PARTITION__/{NAME}",  # escaped as for one column
    ]
    both = pq.read_table(tmp_path / f"user=ann/d=2026-11-29/{NAME}")
    assert both.column_names == ["n"]  # neither partition column is stored in the files
    assert sorted(both.column("n").to_pylist()) == [0, 4]

    write_users(tmp_path / "rev", ("d", "user"))  # a tuple, the other order: other nesting
    assert published(tmp_path / "rev")[0] == f"d=2026-11-29/user=__HIVE_DEFAULT_PARTITION__/{NAME}"


def test_one_column_keeps_its_layout_byte_for_byte(tmp_path: Path) -> None:
    # a restart of an application written before lists were accepted writes the same paths
    expected = [
        f"d=2026-11-29/{NAME}",
        f"d=2026-11-30/{NAME}",
        f"d=__HIVE_DEFAULT_PARTITION__/{NAME}",
    ]
    for folder, value in [("str", "d"), ("list", ["d"]), ("tuple", ("d",))]:
        write_users(tmp_path / folder, value)
        assert published(tmp_path / folder) == expected, value
        for name in expected:
            assert (tmp_path / folder / name).read_bytes() == (tmp_path / "str" / name).read_bytes()


# -- configuration ---------------------------------------------------------------------------------
def test_a_column_not_in_the_schema_names_the_columns_and_the_closest(tmp_path: Path) -> None:
    for value in ("usr", ["usr", "d"]):
        h = out_harness(ParquetFileOutput(str(tmp_path), schema=DDL_USERS, partition_by=value))
        with pytest.raises(FileOutputConfigError) as caught:
            h.setup()
        assert (
            "partition_by 'usr' is not a column of the schema (columns: ['user', 'd', 'n']); "
            "did you mean 'user'?"
        ) in str(caught.value)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (["user", "d", "user"], "['user', 'd', 'user'] names 'user' more than once"),
        ([], "an empty list names no column"),
        (["user", 3], "['user', 3] holds 3: each item must be a column name"),
        (["user", ""], "['user', ''] holds '': each item must be a column name"),
    ],
)
def test_a_list_that_names_no_columns_once_each_is_refused(value: Any, why: str) -> None:
    with pytest.raises(ConfigError, match=r"partition_by: " + why.replace("[", r"\[")):
        ParquetFileOutput("/unused", schema=DDL_USERS, partition_by=value)


def test_every_column_is_checked_against_the_schema(tmp_path: Path) -> None:
    for schema, value, why in [
        (DDL_USERS, ["user", "d", "n"], "at least one other column to write"),
        (f"{DDL_USERS}, tags array<int>", ["user", "tags"], "'tags' is of type list"),
    ]:
        h = out_harness(ParquetFileOutput(str(tmp_path), schema=schema, partition_by=value))
        with pytest.raises(FileOutputConfigError, match=why):
            h.setup()


def test_the_list_form_as_text_json_config_and_spark_options() -> None:
    prop = FileOutputSettings.partition_by
    assert prop.parse("user,d") == ["user", "d"]  # -c dt.operator.out.prop.partition_by=user,d
    assert prop.parse('["user", "d"]') == ["user", "d"]
    assert prop.parse("day") == "day"  # one column stays a str: the recorded settings alike

    dag = DAG("cfg")
    dag.add_operator("out", ParquetFileOutput("/unused", schema=DDL_USERS))
    apply_config(dag, {"dt.operator.out.prop.partition_by": ["user", "d"]})  # JSON config
    assert dag.operators["out"].operator.partition_columns == ("user", "d")
    apply_config(dag, {"dt.operator.out.prop.partition_by": "d, user"})
    assert dag.operators["out"].operator.partition_columns == ("d", "user")

    options = {"schema": DDL_USERS, "partition_by": "user,d", "name": "q"}
    sink = FileSinkSettings().from_options(options)
    sink.path = "/unused"  # Spark keeps the path option for itself (see FileSink)
    assert sink.partition_columns == ("user", "d") and sink.settings_problems() == []


def test_the_spark_sink_checks_partition_by_against_the_querys_schema() -> None:
    # without a schema option the query's schema is used: a typo failed the first
    # publication with a KeyError instead of the query's start
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from malhar.io.fs.spark_sink import FileSink

    schema = StructType([StructField("user", StringType()), StructField("n", LongType())])
    sink = FileSink({"path": "/unused", "name": "q", "partition_by": "usr"})
    with pytest.raises(FileOutputConfigError, match="did you mean 'user'"):
        sink.streamWriter(schema, False)


# -- exactly once ----------------------------------------------------------------------------------
def test_a_nested_publication_killed_midway_is_finished_as_it_began(tmp_path: Path) -> None:
    # killed after one directory's file: a restart with one column must not publish the
    # rows again under user=... alone, nor leave the in-progress file of the other
    write = out_harness(
        ParquetFileOutput(
            str(tmp_path), schema=DDL_USERS, partition_by=["user", "d"], roll_windows=2
        )
    )
    write.run_window(user_rows()[:3], window=0)
    write.run_window(user_rows()[3:], window=1)
    store: FileStore = write.operator._store
    fs = store.fs  # the process's filesystem object: patched, then restored
    try:
        fs.rename = _raise_once(type(fs).rename.__get__(fs), 3)  # intent, a file, the next
        with pytest.raises(RuntimeError, match="killed"):
            write.committed(1)
    finally:
        del fs.rename
    assert len(published(tmp_path)) == 1

    again = out_harness(
        ParquetFileOutput(str(tmp_path), schema=DDL_USERS, partition_by="user", roll_windows=2)
    )
    again.setup()
    again.committed(1)
    files = published(tmp_path)
    assert len(files) == 4 and all(f.count("/") == 2 for f in files)
    counts = [n for f in files for n in pq.read_table(tmp_path / f).column("n").to_pylist()]
    assert sorted(counts) == [0, 1, 2, 3, 4]
    assert not [p for p in tmp_path.rglob("*.inprogress")]


def test_rolling_closes_one_file_per_nested_directory_and_group(tmp_path: Path) -> None:
    # a group of windows rolls as a whole: each directory its rows reach gets a file of it
    h = out_harness(
        ParquetFileOutput(str(tmp_path), schema=DDL, partition_by=["day", "word"], roll_records=4)
    )
    for w in range(4):
        day = dt.date(2026, 11, 20 + w % 2)
        batch = [{"day": day, "word": word, "count": w} for word in ("a", "b")]
        h.run_window([("input", r) for r in batch], window=w)
    h.committed(3)
    files = published(tmp_path)
    folders = sorted({f.rsplit("/", 1)[0] for f in files})
    assert folders == [f"day=2026-11-{d}/word={x}" for d in (20, 21) for x in "ab"]
    assert len(files) == 8  # windows 0-1 and 2-3: two files in each folder
    for f in files:
        (w,) = pq.read_table(tmp_path / f).column("count").to_pylist()
        first = w - w % 2  # the group's first window names the file
        assert f.endswith(f"-{first:012d}-{first + 1:012d}.parquet"), f


# -- read back by Spark ----------------------------------------------------------------------------
@pytest.mark.integration
def test_spark_reads_both_partition_columns_back(spark, tmp_path: Path) -> None:
    from malhar.io.fs import register

    register(spark)
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "0.csv").write_text("ann,2026-11-29,1\nann,2026-11-30,2\nbob,2026-11-29,3\nbob,,4\n")
    q = (
        spark.readStream.schema(DDL_USERS)
        .csv(str(src))
        .writeStream.format("malhar_files")
        .option("path", str(out))
        .option("name", "nested")
        .option("partition_by", "user,d")
        .option("roll_windows", 1)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert q.exception() is None
    assert "user=ann/d=2026-11-29" in "\n".join(published(out))
    back = spark.read.parquet(str(out))
    assert dict(back.dtypes) == {"n": "bigint", "user": "string", "d": "date"}
    got = sorted((r.user, str(r.d), r.n) for r in back.collect())
    assert got == [
        ("ann", "2026-11-29", 1),
        ("ann", "2026-11-30", 2),
        ("bob", "2026-11-29", 3),
        ("bob", "None", 4),
    ]


@pytest.mark.integration
def test_nested_directories_on_every_filesystem(place: Place) -> None:
    # WebHDFS creates the missing parents of a file: two levels as one
    h = out_harness(
        ParquetFileOutput(
            place.url("n"), schema=DDL_USERS, partition_by=["user", "d"], roll_windows=1
        )
    )
    h.run_window(user_rows(), window=0)
    h.committed(0)
    got = sorted((r["user"], r["d"], r["n"]) for r in place.parquet_rows("n"))
    assert got == [
        ("__HIVE_DEFAULT_PARTITION__", "2026-11-29", 3),
        ("ann", "2026-11-29", 0),
        ("ann", "2026-11-29", 4),
        ("ann", "2026-11-30", 1),
        ("b%2Fo", "__HIVE_DEFAULT_PARTITION__", 2),
    ]
