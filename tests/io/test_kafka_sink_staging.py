"""Where the Kafka Spark sink stages a partly committed batch (no broker needed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from malhar.io.kafka.commit_groups import _is_partition
from malhar.io.kafka.errors import KafkaOutputConfigError
from malhar.io.kafka.spark_sink import sink_writer

OPTIONS = {"bootstrap_servers": "127.0.0.1:9", "topic": "t"}


def _staging(name: str, **options: str) -> str | None:
    return sink_writer({**OPTIONS, "name": name, **options}).settings.staging_path


def test_the_staging_path_defaults_to_the_checkpoint_only_where_malhar_reads_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "offsets").mkdir(parents=True)  # Spark made it: the folder is on this machine
    assert _staging("q1", checkpointLocation=str(ckpt)) == f"{ckpt}/malhar-staged"
    assert _staging("q2", checkpointLocation=f"file://{ckpt}") == f"file://{ckpt}/malhar-staged"
    with caplog.at_level(logging.WARNING, logger="malhar.io.kafka.output"):
        # Spark's default filesystem (HDFS on a cluster), a relative path, object stores,
        # hdfs:// without a WebHDFS address: not staged, and said once per query
        assert _staging("q3", checkpointLocation=str(tmp_path / "not-made-by-spark")) is None
        assert _staging("q4", checkpointLocation="relative/ckpt") is None
        assert _staging("q5", checkpointLocation="s3a://bucket/ckpt") is None
        assert _staging("q5", checkpointLocation="s3a://bucket/ckpt") is None
        assert _staging("q6") is None
        assert _staging("q7", checkpointLocation=str(ckpt), delivery="at_least_once") is None
    warned = [r.getMessage() for r in caplog.records]
    assert [w.split(":")[0] for w in warned] == [f"malhar_kafka q{i}" for i in (3, 4, 5, 6)]
    assert "staging_path" in warned[0] and "Spark's default filesystem" in warned[0]
    assert "s3a" in warned[2]

    explicit = tmp_path / "staged"
    assert _staging("q8", staging_path=str(explicit), checkpointLocation="s3a://b/c") == str(
        explicit
    )
    with pytest.raises(KafkaOutputConfigError, match=r"option staging_path.*s3a"):
        _staging("q9", staging_path="s3a://bucket/staged")


def test_only_partition_numbers_as_written_end_a_commit_group_name() -> None:
    assert _is_partition("0") and _is_partition("17")
    for tail in ("", "01", "1.0", "²", "-1", "1a"):
        assert not _is_partition(tail), tail
