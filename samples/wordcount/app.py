"""Lines -> words -> per-window counts in 4 key-partitions -> unifier -> collector.

    python -m samples.main            # what `make run` runs

Everything is local: Spark ``local[2]``, a temporary checkpoint. The sample
checks its result against a ground truth computed straight from the input.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from malhar import DAG, InputPort, KeyCodec, Operator, OutputPort, Unifier
from malhar.testing.operators import Collector, ListInput
from samples.wordcount_exactly_once.data import VOCABULARY

WORDS = VOCABULARY[:13]  # apex malhar spark stream ... exactly once


def corpus(windows: int, lines: int, seed: int = 11) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(lines)]
        for _ in range(windows)
    ]


class LineSplitter(Operator):
    """Splits text lines into word rows (typed output, so the shuffle moves Arrow chunks)."""

    input = InputPort()
    output = OutputPort("word string")

    def process(self, line: str) -> None:
        for word in line.split():
            self.output.emit({"word": word})


class CountUnifier(Unifier):
    """Adds the partial counts of every counter partition for the window."""

    def begin_window(self, window_id: int) -> None:
        self.counts: Counter = Counter()

    def process(self, pair: tuple[str, int]) -> None:
        self.counts[pair[0]] += pair[1]

    def end_window(self) -> None:
        for word, n in sorted(self.counts.items()):
            self.output.emit((word, n))


class WordCounter(Operator):
    """Counts words per window (the UniqueCounter of the flagship, reduced to its core)."""

    input = InputPort("word string")
    output = OutputPort(unifier=CountUnifier)

    def begin_window(self, window_id: int) -> None:
        self.counts: Counter = Counter()

    def process_batch(self, batch: Any) -> None:
        self.counts.update(batch.column("word").to_pylist())

    def end_window(self) -> None:
        for word, n in self.counts.items():
            self.output.emit((word, n))


def build(windows: int = 6, lines: int = 200, partitions: int = 4) -> DAG:
    dag = DAG("wordcount")
    lines_in = dag.add_operator("lines", ListInput(corpus(windows, lines)), PARTITIONS=2)
    split = dag.add_operator("split", LineSplitter(), PARTITIONS=2)
    count = dag.add_operator("count", WordCounter(), PARTITIONS=partitions)
    out = dag.add_operator("out", Collector())
    dag.add_stream("lines", lines_in.output, split.input)
    dag.add_stream("words", split.output, count.input)
    dag.add_stream("counts", count.output, out.input)
    count.input.set_attribute("STREAM_CODEC", KeyCodec("word"))
    return dag
