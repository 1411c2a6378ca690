"""The flagship word count whose per-window counts are also published, as JSON, to a Kafka
topic exactly once (``python -m samples.counts_to_kafka``)."""
