"""One confluent-kafka consumer with manual assignment, bounded retries and exact range reads.

Shared by the input operator and the Spark data source. Everything that talks to the
cluster goes through :meth:`KafkaClient._call`, which retries transient failures (no
broker, timeouts, leader changes) with exponential backoff and then raises
:class:`~malhar.io.kafka.errors.KafkaUnavailableError` naming the brokers, the topic
partitions and the group, never a secret.

While reading, librdkafka reports a lost broker through its error callback, not as an
exception: :meth:`fetch` turns such reports into a health probe (a metadata request under
the same retry policy), so an outage either heals within the retries or fails clearly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from malhar.io.kafka.config import RetryPolicy, consumer_config, describe
from malhar.io.kafka.errors import (
    DataLossError,
    KafkaReadError,
    KafkaUnavailableError,
    KafkaUnreachableError,
    ReplayError,
    TopicNotFoundError,
)

log = logging.getLogger("malhar.io.kafka")

T = TypeVar("T")
TP = tuple[str, int]

#: errors that heal by themselves: the broker comes back, a leader is elected ...
TRANSIENT_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._RESOLVE,
        KafkaError._WAIT_COORD,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.UNSTABLE_OFFSET_COMMIT,  # offsets of a transaction still open
    }
)
#: a partition or topic that the client does not know (yet): the probe decides
UNKNOWN_CODES = frozenset(
    {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}
)
#: credentials or permissions: retrying does not help
AUTH_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._SSL,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
    }
)
DATA_LOSS_CODES = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})

#: no offset (librdkafka's RD_KAFKA_OFFSET_INVALID)
OFFSET_INVALID = -1001

#: seconds a first contact waits in a retried Spark task attempt (one request): the first
#: attempt already waited out the retry policy, and Spark's task retries (4 attempts with
#: ``malhar run``'s ``local[*,4]``, ``spark.task.maxFailures`` on a cluster) must not
#: multiply that wait for a cluster that was never reached
RECHECK_TIMEOUT_S = 2.0


def task_attempt() -> int:
    """The attempt number of the Spark task running this code: 0 in its first attempt
    and outside Spark."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return 0
    ctx = TaskContext.get()
    return ctx.attemptNumber() if ctx is not None else 0


def unreachable_advice(bootstrap_servers: str, wait_settings: str) -> str:
    """What to check when the Kafka cluster ``bootstrap_servers`` was never reached."""
    return (
        f"check that a Kafka broker is running at {bootstrap_servers} and that "
        "bootstrap_servers names one of its listeners (host:port as in the broker's "
        "listeners / advertised.listeners, e.g. 9092 for PLAINTEXT), reachable from the "
        "Spark executors, with the security.protocol of that listener; how long a first "
        f"contact waits is set by {wait_settings}"
    )


def is_transient(err: KafkaError) -> bool:
    return not err.fatal() and (err.code() in TRANSIENT_CODES or bool(err.retriable()))


def format_tps(tps: Iterable[TP]) -> str:
    """``events[0,2], other[1]``."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return ", ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in by_topic.items()) or "-"


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` inside a confluent-kafka exception (None for other errors)."""
    if isinstance(exc, KafkaError):
        return exc
    arg = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return arg if isinstance(arg, KafkaError) else None


class KafkaClient:
    """A consumer for one group on one cluster; created lazily, closed by :meth:`close`.

    Args:
        bootstrap_servers: ``host:port[,host:port]``.
        group_id: the consumer group offsets are committed to (and read from).
        config: any further librdkafka settings (SASL, SSL, fetch sizes ...).
        retry: bounded retries for a cluster that does not answer.
        label: who is reading, for messages (``operator 'in' partition 0``).
        first_contact: nothing says that this cluster was ever reached (an operator
            without a checkpointed position): when the first request gets no answer under
            the retry policy, a :class:`KafkaUnreachableError` says what to check, and a
            retried Spark task attempt makes a single request (:data:`RECHECK_TIMEOUT_S`)
            instead of waiting out the policy again. False: a cluster that was reached
            and may be restarting; every request is retried under the policy.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        config: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        *,
        label: str = "kafka",
        first_contact: bool = False,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.first_contact = first_contact
        #: some request of this client was answered
        self.reached = False
        self.group_id = group_id
        self.retry = retry or RetryPolicy()
        self.label = label
        self.config = consumer_config(bootstrap_servers, group_id, config, error_cb=self._on_error)
        self.config["on_commit"] = self._on_commit
        self._consumer: Consumer | None = None
        self._errors: list[KafkaError] = []
        #: (topic, partition) -> offset at which librdkafka reported the end of the partition
        self.eof: dict[TP, int] = {}
        #: partitions whose fetch reported an error that a probe must clear
        self._suspect: set[TP] = set()
        self.commit_failures = 0
        #: the newest offsets asked to be committed, and how many commits await an answer
        self._newest_commit: dict[TP, int] = {}
        self._commits_in_flight = 0
        self._commit_failed = False
        self._recommit_at = 0.0
        self._recommit_delay = 0.0

    # -- plumbing ------------------------------------------------------------------------
    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            try:
                self._consumer = Consumer(self.config)
            except KafkaException as exc:
                raise KafkaReadError(
                    f"{self.label}: cannot create a Kafka consumer ({describe(self.config)}): {exc}"
                ) from None
        return self._consumer

    def describe(self) -> str:
        """The consumer configuration with secrets masked."""
        return describe(self.config)

    def where(self, tps: Iterable[TP] | None = None, topics: Iterable[str] | None = None) -> str:
        if tps is not None:
            what = f"partition(s) {format_tps(tps)}"
        else:
            what = f"topic(s) {', '.join(topics or []) or '-'}"
        return (
            f"{self.label}: {what} on Kafka cluster {self.bootstrap_servers} "
            f"(group {self.group_id})"
        )

    def _on_error(self, err: KafkaError) -> None:
        if len(self._errors) < 100:
            self._errors.append(err)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self._commits_in_flight = max(0, self._commits_in_flight - 1)
        if err is None:
            bad = [tp for tp in partitions if tp.error is not None]
            if not bad:
                self._recommit_delay = 0.0
                return
            err = bad[0].error
        self.commit_failures += 1
        self._commit_failed = True
        log.warning(
            "%s: committing offsets to group %s failed (the next commit retries): %s",
            self.label,
            self.group_id,
            err,
        )

    def _call(
        self,
        what: str,
        fn: Callable[[], T],
        *,
        tps: Iterable[TP] | None = None,
        topics: Iterable[str] | None = None,
    ) -> T:
        """``fn()`` with bounded retries of transient failures."""
        if self.first_contact and not self.reached:
            return self._first_call(what, fn, tps=tps, topics=topics)
        return self._retrying(what, fn, tps=tps, topics=topics)

    def _first_call(
        self,
        what: str,
        fn: Callable[[], T],
        *,
        tps: Iterable[TP] | None = None,
        topics: Iterable[str] | None = None,
    ) -> T:
        """:meth:`_call` of a cluster never reached: under the retry policy in a task's
        first attempt, one request in a retried one; no answer is a KafkaUnreachableError."""
        policy = self.retry
        retried = task_attempt()
        if retried:
            self.retry = RetryPolicy(
                attempts=1,
                backoff_ms=policy.backoff_ms,
                max_backoff_ms=policy.max_backoff_ms,
                request_timeout_ms=min(policy.request_timeout_ms, int(RECHECK_TIMEOUT_S * 1000)),
            )
        try:
            return self._retrying(what, fn, tps=tps, topics=topics)
        except KafkaUnavailableError as exc:
            waited = f"{exc.attempts} attempt(s) in {exc.seconds:.1f}s"
            if retried:
                waited = (
                    f"one request of {exc.seconds:.1f}s in Spark's attempt {retried + 1} of the "
                    f"task, after {policy.attempts} attempts under the retry policy in its first"
                )
            raise KafkaUnreachableError(
                f"{self.label}: Kafka cluster {self.bootstrap_servers} was never reached: "
                f"{what} got no answer ({waited}; last error: {exc.last}); "
                + unreachable_advice(
                    self.bootstrap_servers,
                    f"retry_attempts={policy.attempts}, retry_backoff_ms={policy.backoff_ms} "
                    f"and request_timeout_ms={policy.request_timeout_ms}",
                ),
                attempts=exc.attempts,
                seconds=exc.seconds,
                last=exc.last,
            ) from None
        finally:
            self.retry = policy

    def _retrying(
        self,
        what: str,
        fn: Callable[[], T],
        *,
        tps: Iterable[TP] | None = None,
        topics: Iterable[str] | None = None,
    ) -> T:
        began = time.monotonic()
        delays = list(self.retry.delays())
        last: KafkaError | None = None
        for attempt in range(self.retry.attempts):
            try:
                result = fn()
                self.reached = True
                return result
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is None or not (is_transient(err) or err.code() in UNKNOWN_CODES):
                    raise self._error(what, err, exc, tps, topics) from None
                last = err
            if attempt < len(delays):
                log.warning(
                    "%s: %s failed (%s), retry %d/%d in %.1fs",
                    self.label,
                    what,
                    last.str() if last else "?",
                    attempt + 1,
                    self.retry.attempts - 1,
                    delays[attempt],
                )
                time.sleep(delays[attempt])
        seconds = time.monotonic() - began
        detail = f"{last.name()}: {last.str()}" if last else "no answer"
        raise KafkaUnavailableError(
            f"{self.where(tps, topics)}: {what} failed: no answer after "
            f"{self.retry.attempts} attempts in {seconds:.1f}s (last error: {detail})",
            attempts=self.retry.attempts,
            seconds=seconds,
            last=detail,
        )

    def _error(
        self,
        what: str,
        err: KafkaError | None,
        exc: BaseException,
        tps: Iterable[TP] | None,
        topics: Iterable[str] | None,
    ) -> Exception:
        text = f"{err.name()}: {err.str()}" if err else str(exc)
        where = self.where(tps, topics)
        if err is not None and err.code() in AUTH_CODES:
            return KafkaReadError(
                f"{where}: {what} failed: authentication or authorization error ({text}); "
                "check security.protocol, sasl.* and ssl.* settings and the ACLs"
            )
        return KafkaReadError(f"{where}: {what} failed: {text}")

    # -- metadata and offsets ------------------------------------------------------------
    def partitions(
        self, topics: Iterable[str], what: str = "reading the topics' metadata"
    ) -> list[TP]:
        """Every ``(topic, partition)`` of ``topics``; a missing topic is a TopicNotFoundError."""
        topics = list(topics)

        def ask() -> list[TP]:
            md = self.consumer.list_topics(timeout=self.retry.timeout)
            if not md.brokers:
                raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))
            out: list[TP] = []
            for t in topics:
                meta = md.topics.get(t)
                err = meta.error if meta is not None else None
                if meta is None or (err is not None and err.code() in UNKNOWN_CODES):
                    raise TopicNotFoundError(
                        f"{self.label}: topic {t!r} does not exist on Kafka cluster "
                        f"{self.bootstrap_servers}; create it first (auto-creation is not used)"
                    )
                if err is not None:
                    raise KafkaException(err)
                if not meta.partitions:
                    raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
                out.extend((t, p) for p in meta.partitions)
            return sorted(out)

        return self._call(what, ask, topics=topics)

    def watermarks(self, tps: Iterable[TP]) -> dict[TP, tuple[int, int]]:
        """``(low, high)`` offsets of each partition, asked from the leader."""
        out = {}
        for t, p in tps:
            out[(t, p)] = self._call(
                "reading watermark offsets",
                lambda t=t, p=p: self.consumer.get_watermark_offsets(
                    TopicPartition(t, p), timeout=self.retry.timeout, cached=False
                ),
                tps=[(t, p)],
            )
        return out

    def fetched_high_watermark(self, tp: TP) -> int | None:
        """The partition's end as of the last fetch response this consumer received (no
        request: librdkafka caches it per fetch); None before the first response."""
        try:
            _, high = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
        except KafkaException:
            return None
        return high if high >= 0 else None

    def consumed_position(self, tp: TP) -> int | None:
        """librdkafka's next offset to hand out for ``tp`` (no request), None before the
        first record since the last assignment. Unlike the operator's own position (the
        last record read + 1) it steps over control records, such as the commit marker that
        follows each transaction of a transactional producer."""
        try:
            (found,) = self.consumer.position([TopicPartition(*tp)])
        except KafkaException:
            return None
        return found.offset if found.offset >= 0 else None

    def committed_offsets(self, tps: Iterable[TP]) -> dict[TP, int | None]:
        """The group's committed offset of each partition, None where it has none."""
        tps = list(tps)
        if not tps:
            return {}
        found = self._call(
            "reading the group's committed offsets",
            lambda: self.consumer.committed(
                [TopicPartition(t, p) for t, p in tps], timeout=self.retry.timeout
            ),
            tps=tps,
        )
        out: dict[TP, int | None] = {}
        for tp in found:
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return out

    def start_offsets(self, tps: Iterable[TP], earliest: bool, use_group: bool) -> dict[TP, int]:
        """Concrete start offsets: the group's committed ones (``use_group``), else earliest/latest."""
        tps = list(tps)
        out: dict[TP, int] = {}
        if use_group:
            for tp, off in self.committed_offsets(tps).items():
                if off is not None:
                    out[tp] = off
        rest = [tp for tp in tps if tp not in out]
        for tp, (low, high) in self.watermarks(rest).items():
            out[tp] = low if earliest else high
        return out

    # -- reading -------------------------------------------------------------------------
    def assign(self, positions: Mapping[TP, int]) -> None:
        """Read exactly these partitions from these offsets (replaces the assignment)."""
        self.eof.clear()
        self._suspect.clear()
        self.consumer.assign([TopicPartition(t, p, int(o)) for (t, p), o in positions.items()])

    def fetch(self, max_records: int, timeout: float) -> list[Any]:
        """Up to ``max_records`` records (waiting at most ``timeout`` s); errors handled.

        End-of-partition events go to :attr:`eof`; lost brokers and leader changes are
        probed under the retry policy; lost data raises :class:`DataLossError`; other
        errors raise :class:`KafkaReadError`.
        """
        msgs = self.consumer.consume(num_messages=max_records, timeout=timeout)
        # one C-level pass; events (end of partition, errors) are rare
        if any(map(Message.error, msgs)):
            self._message_errors([m for m in msgs if m.error() is not None])
            msgs = [m for m in msgs if m.error() is None]
        if self._errors or self._suspect:
            self._handle_errors()
        return msgs

    def _message_errors(self, msgs: list[Any]) -> None:
        for m in msgs:
            err = m.error()
            code = err.code()
            tp = (m.topic(), m.partition())
            if code == KafkaError._PARTITION_EOF:
                self.eof[tp] = m.offset()
            elif code in DATA_LOSS_CODES:
                raise DataLossError(
                    f"{self.where([tp])}: the position to read is not in the partition's log "
                    f"any more (records deleted by retention or a truncated log): {err.str()}"
                )
            elif is_transient(err) or code in UNKNOWN_CODES:
                self._suspect.add(tp)
            else:
                raise self._error("reading", err, KafkaException(err), [tp], None)

    def _handle_errors(self) -> None:
        errors, self._errors = self._errors, []
        for err in errors:
            if err.fatal():
                raise KafkaReadError(
                    f"{self.where()}: fatal Kafka client error: {err.name()}: {err.str()}"
                )
            if err.code() in AUTH_CODES:
                raise self._error("connecting", err, KafkaException(err), None, None)
        if self._suspect or any(is_transient(e) for e in errors):
            self.probe()
        for err in errors:
            if not is_transient(err):
                log.warning("%s: Kafka client reported %s: %s", self.label, err.name(), err.str())

    def probe(self) -> None:
        """A metadata request under the retry policy: passes when the cluster answers again."""
        assigned = [(tp.topic, tp.partition) for tp in self.consumer.assignment()]
        topics = sorted({t for t, _ in assigned})
        if topics:
            self.partitions(topics, "reading (the cluster stopped answering)")
        else:
            self._call(
                "reaching the cluster",
                lambda: self.consumer.list_topics(timeout=self.retry.timeout),
            )
        self._suspect.clear()
        self._errors.clear()

    def iter_ranges(self, ranges: Mapping[TP, tuple[int, int]], batch: int) -> Iterator[list[Any]]:
        """The records with ``start <= offset < end`` of each partition, chunk by chunk.

        Stops when every partition reached its end; a partition whose log ends before
        ``end`` is a :class:`DataLossError`. A cluster that stops answering fails under the
        retry policy.
        """
        todo = {tp: (int(s), int(e)) for tp, (s, e) in ranges.items() if int(e) > int(s)}
        if not todo:
            return
        self.assign({tp: s for tp, (s, _) in todo.items()})
        done: set[TP] = set()
        idle_since = time.monotonic()
        idle_rounds = 0
        # offsets still to cover: asking for no more lets consume() return at once
        left = {tp: e - s for tp, (s, e) in todo.items()}
        while len(done) < len(todo):
            wanted = sum(n for tp, n in left.items() if tp not in done)
            msgs = self.fetch(max(1, min(batch, wanted)), timeout=0.1)
            chunk = []
            for m in msgs:
                tp = (m.topic(), m.partition())
                bounds = todo.get(tp)
                if bounds is None or tp in done:
                    continue
                off = m.offset()
                if bounds[0] <= off < bounds[1]:
                    chunk.append(m)
                left[tp] = bounds[1] - 1 - off
                if off >= bounds[1] - 1:
                    done.add(tp)
            for tp, at in self.eof.items():
                if tp in todo and tp not in done:
                    if at >= todo[tp][1]:
                        done.add(tp)
                    else:
                        raise DataLossError(
                            f"{self.where([tp])}: the partition ends at offset {at} but records "
                            f"up to {todo[tp][1] - 1} must be read (log truncated?)"
                        )
            self.eof.clear()
            if chunk:
                idle_since = time.monotonic()
                idle_rounds = 0
                yield chunk
            elif msgs:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > self.retry.timeout:
                # nothing for a whole request timeout: is the cluster there?
                self.probe()
                idle_rounds += 1
                idle_since = time.monotonic()
                if idle_rounds >= self.retry.attempts:
                    missing = {tp: todo[tp] for tp in todo if tp not in done}
                    spans = ", ".join(f"{t}[{p}] [{s}, {e})" for (t, p), (s, e) in missing.items())
                    raise ReplayError(
                        f"{self.where(missing)}: no records arrive for offsets {spans} "
                        "although the cluster answers"
                    )

    def read_ranges(
        self, ranges: Mapping[TP, tuple[int, int]], batch: int = 10_000
    ) -> dict[TP, list[Any]]:
        """:meth:`iter_ranges` gathered per partition, in offset order."""
        out: dict[TP, list[Any]] = {tp: [] for tp in ranges}
        for chunk in self.iter_ranges(ranges, batch):
            for m in chunk:
                out[(m.topic(), m.partition())].append(m)
        return out

    # -- committing ----------------------------------------------------------------------
    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit ``offsets`` (the next offsets to read) to the group, asynchronously.

        Asynchronous because a synchronous commit blocks for up to a minute while the
        group coordinator is away. librdkafka does not retry a commit the coordinator
        refused: the result arrives through :meth:`fetch` (or :meth:`settle_commits` for a
        consumer that never reads), a failure is logged and counted in
        :attr:`commit_failures`, and the next commit carries newer offsets anyway.
        """
        if not offsets:
            return
        self._newest_commit = {**self._newest_commit, **offsets}
        self._send_commit(offsets)

    def _send_commit(self, offsets: Mapping[TP, int]) -> None:
        parts = [TopicPartition(t, p, int(o)) for (t, p), o in sorted(offsets.items())]
        try:
            self.consumer.commit(offsets=parts, asynchronous=True)
            self._commits_in_flight += 1
        except KafkaException as exc:
            self.commit_failures += 1
            self._commit_failed = True
            log.warning(
                "%s: committing offsets to group %s failed: %s", self.label, self.group_id, exc
            )

    def settle_commits(self) -> None:
        """For a consumer that never reads (the data source's driver side): serve the
        answers to earlier commits and, when one failed, commit the newest offsets again
        (at most once per retry backoff). Nothing else would: the last commit of a run has
        no successor to carry its offsets.
        """
        if self._commits_in_flight and not self.consumer.assignment():
            self.consumer.poll(0)  # no assignment: serves callbacks, returns no record
        if not self._commit_failed or self._commits_in_flight or not self._newest_commit:
            return
        now = time.monotonic()
        if now < self._recommit_at:
            return
        # doubling: a commit that keeps failing (a deleted topic) must not flood the log
        self._recommit_delay = min(
            max(self._recommit_delay * 2, self.retry.backoff_ms / 1000),
            self.retry.max_backoff_ms / 1000,
        )
        self._recommit_at = now + self._recommit_delay
        self._commit_failed = False
        self._send_commit(self._newest_commit)

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:  # closing twice, broker away
                log.debug("%s: closing the consumer: %s", self.label, exc)
