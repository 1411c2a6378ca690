"""Managed state: spillable, incrementally checkpointed key-value state per operator partition.

>>> import tempfile
>>> from malhar.util.state import ManagedState, STR, INT_VALUE
>>> ms = ManagedState(tempfile.mkdtemp(), "counter", 0, budget_bytes=64 << 20)
>>> counts = ms.map("counts", key_codec=STR, value_codec=INT_VALUE)
>>> ms.restore(-1); counts["a"] = 1; ms.checkpoint(0); ms.committed(0)
>>> counts["a"], len(counts)
(1, 1)
>>> ms.close()

See ``docs/state.md`` for the model, the file layout and the recovery semantics.
This package never imports pyspark.
"""

from malhar.util.state.codecs import (
    AUTO_KEY,
    AUTO_VALUE,
    BYTES,
    FLOAT,
    INT,
    INT_VALUE,
    PICKLE,
    STR,
    Codec,
    KeyCodec,
    TupleCodec,
)
from malhar.util.state.errors import CorruptCheckpointError, StateCodecError, StateError
from malhar.util.state.key_set_kinds import (
    TimeBucketedBytesSets,
    TimeBucketedIntSets,
    TimeBucketedStrSets,
)
from malhar.util.state.manager import ManagedState
from malhar.util.state.spillable import SpillableList, SpillableMap, SpillableSetMultimap
from malhar.util.state.time_buckets import TimeBucketedState

__all__ = [
    "AUTO_KEY",
    "AUTO_VALUE",
    "BYTES",
    "FLOAT",
    "INT",
    "INT_VALUE",
    "PICKLE",
    "STR",
    "Codec",
    "CorruptCheckpointError",
    "KeyCodec",
    "ManagedState",
    "SpillableList",
    "SpillableMap",
    "SpillableSetMultimap",
    "StateCodecError",
    "StateError",
    "TimeBucketedBytesSets",
    "TimeBucketedIntSets",
    "TimeBucketedState",
    "TimeBucketedStrSets",
    "TupleCodec",
]
