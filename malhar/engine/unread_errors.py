"""An error port that no stream reads (or a port that says ``warn_unread``, such as a
dedup's ``expired``): its tuples are counted (metrics, the CLI's last line; error ports)
and dropped, and the first one of each operator partition is logged, once per worker
process, with its reason (the row's ``error`` field, as connectors emit it, or ``reason``,
as the catalogue's and the windowed operators do; else only its field names, never the
data), so that a wrong column name does not turn into empty output without a word."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from malhar.control import ControlSender, ControlTuple
from malhar.ports import Emitter

__all__ = ["FirstErrorLogged"]

log = logging.getLogger("malhar.engine")

#: characters of a reason shown in the log line
SHOWN = 300
#: the fields a reason is read from: connectors' rejected rows, then operators' error tuples
REASON_FIELDS = ("error", "reason")
#: (run, operator, port, partition) already logged by this process: a partition's emitters
#: are built again for every task (window), and a worker process runs many of them
_SAID: set[tuple[str, str, str, int]] = set()


class FirstErrorLogged(Emitter):
    """Drops what an unconnected error port emits; logs the first tuple (WARNING)."""

    def __init__(
        self, operator: str, port: str, partition: int, run: str = "", *, error: bool = True
    ) -> None:
        """``run``: what tells this application's run from others in the same process
        (its name and checkpoint); ``error``: an error port (its tuples are counted),
        else a port that says ``warn_unread``."""
        self.operator, self.port, self.partition = operator, port, partition
        self.error = error
        self._key = (run, operator, port, partition)
        self.said = self._key in _SAID

    def tuple(self, value: Any) -> None:
        if not self.said:
            self._say(value)

    def batch(self, batch: pa.RecordBatch) -> None:
        if not self.said and batch.num_rows:
            self._say(batch.slice(0, 1).to_pylist()[0])

    def control(self, ctl: ControlTuple, sender: ControlSender | None = None) -> None:
        pass

    def _say(self, value: Any) -> None:
        self.said = True
        _SAID.add(self._key)
        reason = None
        if isinstance(value, dict):
            reason = next((value[f] for f in REASON_FIELDS if value.get(f) is not None), None)
        if reason is not None:
            shown = str(reason)
        elif isinstance(value, dict):  # the data itself stays out of the logs
            shown = f"a row with the fields {sorted(map(str, value))}"
        else:
            shown = f"a {type(value).__name__}"
        if len(shown) > SHOWN:
            shown = shown[:SHOWN] + "..."
        log.warning(
            "operator %r partition %d: a tuple went to its %s %r, which no stream "
            "reads (dropped%s; add a stream from %s.%s to keep them); the first: %s",
            self.operator,
            self.partition,
            "error port" if self.error else "port",
            self.port,
            ", counted in the metrics" if self.error else "",
            self.operator,
            self.port,
            shown,
        )
