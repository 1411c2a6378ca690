"""The restart scan of the Kafka output store (:mod:`malhar.io.kafka.producer`) in
``delivery="scan"`` mode (brokers without transactions; Malhar's
``KafkaSinglePortExactlyOnceOutputOperator`` recovery).

Every record carries its window id and writer in headers. At a restart
:meth:`ScanRecovery.scan` reads the topic from where the partition's last completed window
ended (the operator's checkpoint keeps that position; without it, ``scan_back_records`` per
partition) and finds the largest window this writer had written, with the (key, value)
counts of its records; when that window is replayed, :meth:`ScanRecovery.already_written`
names the rows whose records are already there. A retry in the same process (a window
whose flush timed out) first waits for the records still in flight
(:meth:`ScanRecovery.aborted`), and skips those that landed.

The writer header also names the writer's checkpoint (``<application>/<operator>/<partition>
#<12 hex digits of its identity>``; :func:`writer_header`): a newest window written by
another checkpoint under the same name is not this writer's to complete, and the store
takes it for committed by that checkpoint (a window of this one at or below it is then a
``WindowRegressionError``, as in the other stores). Records written before the header named
checkpoints count as this writer's.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from malhar.io.base.output import NO_WINDOW, WindowKey, is_checkpoint_run
from malhar.io.kafka.client import KafkaClient
from malhar.io.kafka.config import RetryPolicy
from malhar.io.kafka.encoding import WINDOW_HEADER, WRITER_HEADER, EncodedRecords
from malhar.io.kafka.output_settings import KafkaOutputSettings

if TYPE_CHECKING:
    from malhar.io.kafka.producer import KafkaTxn

__all__ = ["ScanRecovery", "writer_header"]

#: how much of a checkpoint's identity the writer header carries (13 bytes per record)
_TAG_CHARS = 12


def writer_header(writer: str, run: str | None) -> bytes:
    """The writer header's value: ``writer``, and the tag of the checkpoint ``run`` names
    (:func:`~malhar.io.base.output.checkpoint_run`; other runs are not written)."""
    tag = checkpoint_tag(run)
    return (writer if tag is None else f"{writer}#{tag}").encode()


def checkpoint_tag(run: str | None) -> str | None:
    """What of a checkpoint run the writer header carries (None: not a checkpoint's)."""
    if not is_checkpoint_run(run):
        return None
    assert run is not None
    return run.split(":", 1)[1][:_TAG_CHARS]


# the output store's logger: the scan's messages are the store's
log = logging.getLogger("malhar.io.kafka.output")


class ScanRecovery:
    """What of a window one writer already has in the topic (scan mode).

    Args:
        settings: the output's settings (the topic, the scan's reach).
        key: the partition's identity (in log messages).
        writer: the writer header's value of this partition's records.
        timeout: how long to wait for the records in flight after an abort, in seconds.
    """

    def __init__(
        self, settings: KafkaOutputSettings, key: WindowKey, writer: str, timeout: float
    ) -> None:
        self.settings = settings
        self.key = key
        self.writer = writer
        #: the checkpoint tag of the newest window found (None: none, or written before
        #: the header named checkpoints)
        self.newest_tag: str | None = None
        self.timeout = timeout
        #: the newest window found written and (key, value) counts of its records
        self.partial: tuple[int, Counter] | None = None

    def scan(self, partitions: int, positions: dict[int, int]) -> tuple[int, dict[int, int]]:
        """Find the newest window this writer wrote, and its records' (key, value).

        Args:
            partitions: the topic's partition count.
            positions: per partition, the offset after this writer's last completed window
                (where the scan starts; a partition without one is scanned back
                ``scan_back_records``).

        Returns:
            the newest window found (``NO_WINDOW``: none), and per partition the offset
            where the records of later windows will start (its high watermark).
        """
        s = self.settings
        client = KafkaClient(
            s.bootstrap_servers,
            f"malhar-scan-{uuid.uuid4().hex[:12]}",
            s.consumer_settings("unused"),
            RetryPolicy(request_timeout_ms=s.request_timeout_ms),
            label=f"Kafka output {self.key} (restart scan)",
        )
        try:
            tps = [(s.topic, p) for p in range(partitions)]
            marks = client.watermarks(tps)
            ranges = {}
            for tp, (low, high) in marks.items():
                known = positions.get(tp[1])
                start = known if known is not None else high - s.scan_back_records
                ranges[tp] = (min(max(low, start), high), high)
            newest, found, scanned, tag = NO_WINDOW, Counter(), 0, None
            writer, tagged = self.writer.encode(), f"{self.writer}#".encode()
            for chunk in client.iter_ranges(ranges, 10_000):
                scanned += len(chunk)
                for msg in chunk:
                    headers = msg.headers()
                    if not headers:
                        continue
                    h = dict(headers)
                    value = h.get(WRITER_HEADER)
                    if value == writer:
                        own = None  # written before the header named checkpoints
                    elif value is not None and value.startswith(tagged):
                        own = value[len(tagged) :].decode()
                    else:
                        continue
                    try:
                        w = int(h.get(WINDOW_HEADER) or b"")
                    except ValueError:
                        continue
                    if w > newest:
                        newest, found, tag = w, Counter(), own
                    if w == newest:
                        found[(msg.key(), msg.value())] += 1
        finally:
            client.close()
        ends = {p: high for (_, p), (_, high) in marks.items()}
        if newest != NO_WINDOW:
            self.partial = (newest, found)
            self.newest_tag = tag
        log.info(
            "%s: scanned %d record(s) of %s: newest window written %s",
            self.key,
            scanned,
            s.target,
            newest if newest != NO_WINDOW else "none",
        )
        return newest, ends

    def already_written(
        self, window: int, records: EncodedRecords, rejected: dict[int, str]
    ) -> set[int]:
        """The rows of a replayed window whose records are in the topic already."""
        if self.partial is None or self.partial[0] != window:
            return set()
        left = Counter(self.partial[1])
        skip = set()
        for i in range(len(records.values)):
            if i in rejected:
                continue
            kv = (records.keys[i], records.values[i])
            if left[kv] > 0:
                left[kv] -= 1
                skip.add(i)
        if skip:
            log.info(
                "%s: window %d: %d record(s) already in %s (written before the restart)",
                self.key,
                window,
                len(skip),
                self.settings.target,
            )
        return skip

    def completed(self, window: int) -> None:
        """``window`` is complete: what was found of it (or of an earlier one) is done with."""
        if self.partial is not None and self.partial[0] <= window:
            self.partial = None

    def aborted(self, txn: KafkaTxn) -> None:
        """An attempt at a window failed (its queued records purged): learn which of its
        records got through, so that a retry in this process writes only the others."""
        self._learn_in_flight(txn)
        if txn.delivered:
            # a retry in this process writes only what did not get through
            found = Counter(txn.delivered)
            if self.partial is not None and self.partial[0] == txn.window:
                found.update(self.partial[1])
            self.partial = (txn.window, found)

    def _learn_in_flight(self, txn: KafkaTxn) -> None:
        """Wait for the reports of records already sent (a flush that timed out left them
        in flight; they may land), so that the retry knows them and does not write them
        again. The queued ones were purged and report at once."""
        try:
            left = txn.producer.flush(self.timeout)
        except (KafkaException, RuntimeError):
            left = len(txn.producer)
        if left:
            log.warning(
                "%s: window %d: %d record(s) still in flight after %.0f s; if they land, "
                "the retry writes them again",
                self.key,
                txn.window,
                left,
                self.timeout,
            )
