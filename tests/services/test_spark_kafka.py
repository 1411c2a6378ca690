"""Spark's own Kafka connector (the benchmark baseline) reads the fixture's broker.

Runs in a subprocess: connector jars must be on the JVM's classpath from its start.
"""

from __future__ import annotations

import textwrap

import pytest
from confluent_kafka import Producer

from tests.spark_subprocess import run_spark_script

pytestmark = pytest.mark.integration


def test_spark_kafka_source_reads_the_broker(kafka_service, new_topic) -> None:
    topic = new_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_service.bootstrap_servers})
    for i in range(20):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    script = textwrap.dedent(
        f"""
        import json
        from malhar import build_session
        from malhar.testing.services.maven import jars
        spark = build_session("local[2]", jars=jars("spark-kafka"))
        reader = (spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", "{kafka_service.bootstrap_servers}")
                  .option("subscribe", "{topic}").option("startingOffsets", "earliest"))
        q = reader.load().writeStream.format("memory").queryName("rows").start()
        q.processAllAvailable()
        rows = spark.sql("select cast(value as string) v, partition, offset from rows").collect()
        q.stop()
        print(json.dumps(sorted([r.v, r.partition, r.offset] for r in rows)))
        """
    )
    rows = run_spark_script(script)
    expected = sorted([f"v{i}", i % 2, i // 2] for i in range(20))
    assert rows == expected
