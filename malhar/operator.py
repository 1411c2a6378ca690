"""The operator API: lifecycle, listeners, input operators and unifiers."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from malhar.ports import InputPort, OutputPort
from malhar.properties import Configurable
from malhar.state import config_of, fields_of


def wal_root(checkpoint: str) -> str:
    """The window data managers' root: ``<checkpoint>/malhar/wal`` (the operators' logs and
    the application's window log, ``__app__``); a URL's ?query stays last."""
    from malhar.util.fs.urls import child_url

    return child_url(checkpoint, "malhar", "wal")


@dataclass
class OperatorContext:
    """What an operator partition knows about where it runs.

    Attributes:
        name: the operator's name in the DAG.
        partition: this partition's index, ``0 .. partitions - 1``.
        partitions: how many partitions the operator has.
        application: the application's stable name.
        attributes: the operator's attributes (see :mod:`malhar.attributes`).
        checkpoint: the application's checkpoint root (local path or ``hdfs://``).
        integrity_key: the application's ``CHECKPOINT_INTEGRITY_KEY`` (HMAC over what is
            written under the checkpoint), or None.
        checkpoint_id: the checkpoint's identity, a token created with it
            (:mod:`malhar.engine.checkpoint_identity`): outputs record it with each
            committed window, to tell a replay from a new checkpoint under an old name.
    """

    name: str
    partition: int = 0
    partitions: int = 1
    application: str = "app"
    attributes: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    integrity_key: str | bytes | None = field(default=None, repr=False)
    checkpoint_id: str | None = None
    #: set by the engine (or the harness): ``(operator, **options) -> ManagedState``
    managed: Any = field(default=None, repr=False, compare=False)

    def managed_state(self, **options: Any) -> Any:
        """This operator partition's managed state (:class:`malhar.util.state.ManagedState`).

        Spillable maps, set-multimaps, lists and time buckets whose memory is bounded
        (``budget_bytes``, 64 MiB by default) and that the engine checkpoints
        incrementally with every window, restores on any worker and closes at teardown
        (see ``docs/state.md``). Call it in ``setup`` and keep the structures as runtime
        attributes::

            def setup(self, context):
                state = context.managed_state(budget_bytes=256 << 20)
                self._seen = state.time_buckets("seen", bucket_span=60_000)
        """
        if self.managed is None:
            raise RuntimeError(
                f"operator {self.name!r}: managed state is only available inside a running "
                "application or an OperatorHarness with a checkpoint folder"
            )
        return self.managed(self.name, **options)

    def window_data_manager(self, **options: Any) -> Any:
        """The operator partition's window data manager (``FSWindowDataManager``), signed
        with the application's integrity key when it has one."""
        from malhar.util import FSWindowDataManager

        if self.checkpoint is None:
            raise RuntimeError(f"{self.name}: no checkpoint location, so no window data manager")
        options.setdefault("integrity_key", self.integrity_key)
        return FSWindowDataManager(
            wal_root(self.checkpoint),
            self.name,
            partition=self.partition,
            **options,
        )


class Operator(Configurable):
    """Base class of every operator.

    Lifecycle per partition: ``setup`` → (``activate``) → windows of
    ``begin_window`` / ``process…`` / ``end_window`` → (``deactivate``) → ``teardown``.

    What is kept (see :mod:`malhar.state`): :class:`~malhar.properties.Property`
    declarations are the configuration, :class:`~malhar.state.State` declarations the
    state checkpointed with every window (plus ``snapshot()``/``restore()`` if
    overridden); any other attribute is runtime, rebuilt in ``setup``.
    """

    def setup(self, context: OperatorContext) -> None:
        """Called once per partition instance before its first window."""

    def begin_window(self, window_id: int) -> None:
        """Called at the start of each (application) window."""

    def end_window(self) -> None:
        """Called at the end of each (application) window."""

    def teardown(self) -> None:
        """Called once when the partition instance is retired."""

    def get_unifier(self, port: str) -> Unifier | None:
        """The configured unifier that merges output ``port`` across this operator's
        partitions, or None for the pass-through default.

        By default: the ``unifier`` given to the port's ``OutputPort`` declaration (a
        :class:`Unifier` instance, or a class built without arguments). Override it to
        configure the unifier from the operator's properties. Called on the driver
        when the application is planned; the engine clones the result for every route
        and downstream partition.
        """
        declared = getattr(type(self), port).unifier
        if declared is None:
            return None
        return declared() if isinstance(declared, type) else declared.clone()

    def metrics(self) -> Mapping[str, float]:
        """The operator's own metrics of the window just ended (Apex's ``@AutoMetric``).

        Called after ``end_window``; the values reach stats listeners and
        ``RunningApplication.metrics()`` (summed over partitions there).
        """
        return {}

    def cannot_repartition(self) -> str | None:
        """Why a running application cannot repartition this operator (None: it can).

        Asked before the query stops for a repartitioning: a reason refuses the request
        with a :class:`~malhar.errors.ConfigError` and the application goes on. Say it for
        state that neither moves with its keys (``State(keyed=True)``, managed state by
        the input's stream codec) nor is the same in every partition.
        """
        return None

    def managed_state_keys(self) -> Mapping[str, Callable[[bytes], bytes | None]]:
        """Where the stream key is in the keys of this operator's managed-state structures,
        for a repartitioning (which moves each entry to the partition that owns its key).

        Structure name -> a function from an entry's encoded key (as the structure's key
        codec wrote it) to the stream key encoded with ``AUTO_KEY``, or to None for an
        entry the operator rebuilds itself after a repartitioning (a count per window).
        A structure not named here is keyed by the stream key itself (the default).
        """
        return {}

    def fields_read(self, port: str) -> Iterable[str]:
        """The fields this operator reads by name from the tuples of its input ``port``
        (a key, an event time, a value column), for ``DAG.validate()``: a stream into the
        port whose schema is declared must have them. Default: none said."""
        return ()

    def schema_follows(self, port: str) -> str | None:
        """The input port whose stream's schema this operator's untyped output ``port``
        carries on unchanged (a pass-through such as ``WatermarkGenerator``), so that
        ``DAG.validate()`` checks the fields read downstream against it; None: none."""
        return None

    def preflight(
        self, label: str, timeout: float, inputs: Mapping[str, Sequence[str]] | None = None
    ) -> str | None:
        """Check the external systems this operator reads or writes, from the driver, and
        change nothing in them (``malhar validate --connect``,
        :func:`malhar.check_connections`).

        Return one line saying what was found (None: the operator touches no external
        system); raise a :class:`~malhar.errors.MalharError` saying what is wrong and how
        to fix it, starting with ``label`` (``operator 'name'``). Wait at most about
        ``timeout`` seconds for a system that does not answer. ``inputs`` holds the field
        names of each input port whose stream has a declared schema (an untyped stream is
        not in it), for a check that compares them with the system (a table's columns);
        an override may leave the parameter out.
        """
        return None

    def snapshot(self) -> Any:
        """Custom checkpointed state beyond the ``State`` fields (None: nothing).

        Called after ``end_window`` of every streaming window; the value must pickle.
        """
        return None

    def restore(self, snapshot: Any) -> None:
        """Take back what :meth:`snapshot` returned (called before ``setup`` on a
        fresh copy of the configured operator when a partition is rebuilt)."""

    def __getstate__(self) -> dict[str, Any]:
        # configuration and state only: ports and runtime attributes are not shipped
        return {**config_of(self), **fields_of(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def clone(self) -> Operator:
        """A fresh copy for another partition: configuration and state, no runtime attributes."""
        return copy.deepcopy(self)

    def __deepcopy__(self, memo: dict) -> Operator:
        new = object.__new__(type(self))
        new.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return new


class ActivationListener:
    """Mixin: ``activate`` after setup and before the first window; ``deactivate`` before teardown."""

    def activate(self, context: OperatorContext) -> None:
        """The partition is about to process windows."""

    def deactivate(self) -> None:
        """The partition has stopped processing windows."""


class CheckpointListener:
    """Mixin: hear when a window is checkpointed and when it is committed everywhere."""

    def checkpointed(self, window_id: int) -> None:
        """This partition's state for ``window_id`` is durable."""

    def committed(self, window_id: int) -> None:
        """``window_id`` is durable in the whole application: renames, offset commits, purges."""


class InputOperator(Operator):
    """An operator that brings tuples in from outside.

    ``emit_tuples`` is called repeatedly inside each window; it emits what is
    available now (up to the port's share of the window limit) and returns. A
    window is replayed after a failure with the same window id: an input
    operator that must replay exactly records what it emitted per window in
    its window data manager (``context.window_data_manager()``).
    """

    def emit_tuples(self) -> None:
        """Emit available tuples through output ports; return when none are left for now."""
        raise NotImplementedError

    def backlog(self) -> int | None:
        """What is left to read after this window (e.g. Kafka lag), or None if unknown."""
        return None

    def is_bounded(self) -> bool:
        """Whether this input ends (a file input with an ``end_marker``). A partition that
        has read everything it will ever read reports the metric ``ended`` = 1 from then
        on; an application all of whose inputs are bounded stops by itself once every
        partition of each has (``malhar run``, ``RunningApplication.await_end_of_input``)."""
        return False


class Unifier(Operator):
    """Merges one output port's tuples from all upstream partitions.

    A unifier has one input port ``input`` and one output port ``output``; the
    default (:class:`PassThroughUnifier`) forwards everything unchanged. The
    engine runs one copy of the configured unifier per route and downstream
    partition (see ``Operator.get_unifier``).
    """

    input = InputPort()
    output = OutputPort()

    #: whether its output can be the input of another copy of it (cascading unifiers,
    #: ``UNIFIER_LIMIT``): a sum of partial sums can; one that turns partials into
    #: something else (the windowed unifier: panes) cannot
    cascades = True


class PassThroughUnifier(Unifier):
    """The default unifier: forwards tuples unchanged."""

    def process(self, value: Any) -> None:
        self.output.emit(value)

    def process_batch(self, batch: Any) -> None:
        self.output.emit_batch(batch)
