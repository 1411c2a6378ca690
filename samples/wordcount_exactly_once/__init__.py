"""The flagship sample: Kafka lines -> words -> UniqueCounter x4 -> PostgreSQL, exactly once.

    python -m samples.wordcount_exactly_once      # what `make run` runs

See :mod:`samples.wordcount_exactly_once.app` for the DAG and
:mod:`samples.wordcount_exactly_once.__main__` for the end-to-end run.
"""
