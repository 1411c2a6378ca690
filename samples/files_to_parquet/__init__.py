"""Files to Parquet: a directory of CSV files -> parse and filter -> Parquet partitioned by
date (Hive style), exactly once. ``python -m samples.files_to_parquet`` runs it."""
