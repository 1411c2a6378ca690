"""A driver process for the JDBC poll crash test: a PostgreSQL table polled by key ranges
(2 partitions) -> each row as JSON to a Kafka topic, exactly once (2 output partitions).

    JDBC_POLL_APP='{"url": ..., "table": ..., "bootstrap_servers": ..., "topic": ...}' \\
        python -m tests.io.jdbc_poll_app CHECKPOINT --master local-cluster[2,1,1024]

With ``"bounded": true`` in the settings the input reads the rows present when its plan was
made and the driver stops the application by itself once every partition has ended (exit
0), as ``malhar run`` does; ``"window_rows"`` sets ``max_records_per_window`` (default 150).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from malhar import DAG, build_session, launch
from malhar.io.jdbc import JdbcPollInputOperator
from malhar.io.kafka import KafkaOutputOperator
from samples.driver import serve

SETTINGS_ENV = "JDBC_POLL_APP"


def build(name: str, s: dict) -> DAG:
    dag = DAG(name)
    # bounded: read what is there at launch, then end (it never polls: no poll interval)
    reading = {"bounded": True} if s.get("bounded") else {"poll_interval_ms": 100}
    rows = dag.add_operator(
        "rows",
        JdbcPollInputOperator(
            s["url"],
            table=s["table"],
            key_column="id",
            fetch_size=50,
            max_records_per_window=int(s.get("window_rows", 150)),
            **reading,
        ),
        PARTITIONS=2,
    )
    out = dag.add_operator(
        "publish",
        KafkaOutputOperator(s["bootstrap_servers"], s["topic"], key_column="id"),
        PARTITIONS=2,
    )
    dag.add_stream("rows", rows.output, out.input)
    return dag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.io.jdbc_poll_app")
    parser.add_argument("checkpoint")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--name", default="jdbc-poll-app")
    args = parser.parse_args(argv)
    settings = json.loads(os.environ[SETTINGS_ENV])
    spark = build_session(args.master, app_name=args.name, shuffle_partitions=2)
    app = launch(build(args.name, settings), spark=spark, checkpoint=args.checkpoint, window_ms=200)
    return serve(app)  # a bounded input ends it by itself


if __name__ == "__main__":
    sys.exit(main())
