"""What of an operator is checkpointed, declared explicitly.

An operator instance holds three kinds of attributes:

- **configuration**: :class:`~malhar.properties.Property` declarations. Set before
  launch, shipped to every partition with the plan, checked by ``DAG.validate()``.
  Not part of the per-window checkpoint, so secrets in properties never reach the
  snapshot files. Read-only while the application runs.
- **state**: :class:`State` declarations. Saved with every window (only when it
  changed) and restored, on any worker, before a window is replayed.
- **runtime**: everything else (clients, caches, per-window scratch). Never
  checkpointed; build it in ``setup`` (or ``begin_window``). With
  ``APPLICATION_WINDOW_COUNT`` > 1 a partition rebuilt from the checkpoint of a streaming
  window in the middle of an application window gets ``setup`` but no new
  ``begin_window``: what must last to the application window's ``end_window`` is
  ``State``, not scratch made in ``begin_window``.

An operator whose state does not fit fields may also override
``Operator.snapshot()`` / ``Operator.restore(snapshot)``: ``snapshot`` is called
after ``end_window`` of every streaming window, ``restore`` on a fresh copy of the
configured operator before ``setup`` when a partition is rebuilt from a checkpoint.

``DAG.validate()`` refuses an attribute set before launch that is neither a
property nor a state field (it would silently not reach the partitions), and a
property or state value that will not pickle, naming the attribute.

Example:
    >>> from collections import Counter
    >>> from malhar import InputPort, Operator, Property, State
    >>> class CountAbove(Operator):
    ...     input = InputPort()
    ...     threshold = Property(int, default=10)        # configuration
    ...     counts = State(Counter)                       # checkpointed each window
    ...     def process(self, value):
    ...         if value > self.threshold:
    ...             self.counts[value] += 1
    >>> op = CountAbove()
    >>> op.process(12)
    >>> window_snapshot(op)["fields"]
    {'counts': Counter({12: 1})}
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from malhar.errors import StateError

__all__ = [
    "DividedByKey",
    "State",
    "restore_window_snapshot",
    "state_fields",
    "undeclared_attributes",
    "unpicklable_attributes",
    "window_snapshot",
]

T = TypeVar("T")
_UNSET: Any = object()
#: instance attributes the engine owns (bound ports): never configuration nor state
ENGINE_ATTRIBUTES = frozenset({"_malhar_ports"})


class State(Generic[T]):
    """A checkpointed field of an operator.

    Args:
        factory: builds the initial value (``State(dict)``, ``State(Counter)``); use it
            for mutable values so that partitions never share one object.
        default: an immutable initial value (``State(default=0)``), instead of ``factory``.
        keyed: the value is a mapping whose keys are the key of the operator's stream
            codec (``KeyCodec``): when the operator is repartitioned, each entry moves to
            the partition that receives its key. A value that is not a mapping may say
            how it is pooled and divided by key itself (:class:`DividedByKey`). A field
            that is not keyed must hold the same value in every partition to be
            repartitioned.
        doc: one line for ``malhar info``.

    The value lives in the instance like a plain attribute; reading a field that was
    never set returns (and keeps) its initial value.
    """

    def __init__(
        self,
        factory: Callable[[], T] | None = None,
        *,
        default: T = _UNSET,
        keyed: bool = False,
        doc: str = "",
    ) -> None:
        if factory is not None and default is not _UNSET:
            raise TypeError("State takes a factory or a default, not both")
        if factory is not None and not callable(factory):
            raise TypeError(
                f"State(factory): expected a callable such as dict or Counter, got {factory!r}; "
                "for an immutable value write State(default=...)"
            )
        self.factory = factory
        self.default = None if factory is None and default is _UNSET else default
        self.keyed = keyed
        self.__doc__ = doc
        self.name = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def initial(self) -> T:
        if self.factory is not None:
            return self.factory()
        return copy.copy(self.default)

    @overload
    def __get__(self, instance: None, owner: type) -> State[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            return self
        try:
            return instance.__dict__[self.name]
        except KeyError:
            value = instance.__dict__[self.name] = self.initial()
            return value

    def __set__(self, instance: Any, value: T) -> None:
        instance.__dict__[self.name] = value


@runtime_checkable
class DividedByKey(Protocol):
    """A keyed :class:`State` value that is not a mapping (``State(keyed=True)``) and
    moves with its keys by itself when its operator is repartitioned.

    The protocol: the engine calls ``type(value).pooled(values, operator)`` with the value
    of every old partition (None where a partition never set it) and the configured
    operator (its settings), then ``divided(owner_of, n)`` on the pool, which returns the ``n`` values of the new partitions, in order.
    ``owner_of(keys)`` gives the new partition of each stream key (the operator's
    stream codec through the new routing). Whatever is not per key (a watermark, a
    counter) is the value's to combine in ``pooled`` and to hand out in ``divided``.
    Either raises :class:`~malhar.errors.StateError` for state it cannot pool or divide
    (a key held by two partitions); the repartitioning is then refused before it takes
    effect.
    """

    @classmethod
    def pooled(cls, values: Sequence[Any], operator: Any) -> Any:
        """One value holding what every old partition's value held."""
        ...

    def divided(self, owner_of: Callable[[list[Any]], list[int]], n: int) -> list[Any]:
        """The values of ``n`` new partitions, each with the keys ``owner_of`` gives it."""
        ...


@cache
def state_fields(cls: type) -> dict[str, State]:
    """The :class:`State` fields declared on ``cls`` and its bases."""
    found: dict[str, State] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, State):
                found[name] = value
    return found


def _declared(cls: type) -> frozenset[str]:
    from malhar.properties import properties_of

    return frozenset(properties_of(cls)) | frozenset(state_fields(cls)) | ENGINE_ATTRIBUTES


def config_of(op: Any) -> dict[str, Any]:
    """The property values set on ``op`` (unset ones take their declared default)."""
    from malhar.properties import properties_of

    values = op.__dict__
    return {n: values[n] for n in properties_of(type(op)) if n in values}


def fields_of(op: Any) -> dict[str, Any]:
    """The state fields of ``op`` that hold a value."""
    values = op.__dict__
    return {n: values[n] for n in state_fields(type(op)) if n in values}


def window_snapshot(op: Any) -> dict[str, Any]:
    """What is checkpointed of ``op`` at the end of a window: its state fields and its
    custom ``snapshot()`` (None by default). Configuration is not included."""
    custom = op.snapshot()
    out: dict[str, Any] = {"fields": fields_of(op)}
    if custom is not None:
        out["custom"] = custom
    return out


def restore_window_snapshot(op: Any, snapshot: dict[str, Any]) -> None:
    """Put a :func:`window_snapshot` back into a fresh copy of the configured operator."""
    op.__dict__.update(snapshot["fields"])
    if "custom" in snapshot:
        op.restore(snapshot["custom"])


def undeclared_attributes(op: Any) -> list[str]:
    """Attributes of ``op`` that are neither properties nor state fields (runtime ones)."""
    declared = _declared(type(op))
    return sorted(n for n in op.__dict__ if n not in declared)


def unpicklable_attributes(op: Any, values: dict[str, Any] | None = None) -> list[str]:
    """``"name: why"`` for each configuration or state value of ``op`` that will not pickle."""
    from pyspark import cloudpickle  # the pickler Spark ships plans and snapshots with

    if values is None:
        values = {**config_of(op), **fields_of(op)}
    out = []
    for name, value in values.items():
        try:
            cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            out.append(f"{name}: {type(exc).__name__}: {exc}")
    return out


def explain_snapshot_failure(name: str, op: Any, exc: BaseException) -> StateError:
    """A :class:`StateError` naming the attribute of ``op`` that made its snapshot fail."""
    culprits = unpicklable_attributes(op, fields_of(op))
    custom = []
    try:
        from pyspark import cloudpickle

        cloudpickle.dumps(op.snapshot(), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as inner:
        custom = [f"snapshot(): {type(inner).__name__}: {inner}"]
    what = "; ".join(culprits + custom) or f"{type(exc).__name__}: {exc}"
    return StateError(
        f"operator {name!r} ({type(op).__name__}): its state cannot be checkpointed: {what}. "
        "Keep only picklable values in State fields and snapshot(); build clients, locks "
        "and open files in setup() as runtime attributes"
    )
