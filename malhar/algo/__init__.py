"""malhar.algo: algorithmic operators (Malhar's ``lib/algo``)."""

from malhar.algo.unique_counter import UniqueCounter, UniqueCountUnifier

__all__ = ["UniqueCountUnifier", "UniqueCounter"]
