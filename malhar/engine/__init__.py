"""The Spark runtime: planning a DAG into fused stages and running windows as micro-batches."""
