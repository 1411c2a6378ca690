"""Ad clicks attributed to their impressions: the join, dedup, parse, filter/transform/project
and stream plumbing families of the operator catalogue end to end, exactly once."""
