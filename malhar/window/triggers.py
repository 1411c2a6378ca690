"""Triggers: when a window (per key, in a keyed operator) emits a pane.

Two ways to say it:

- Malhar's :class:`TriggerOption` builder: at the watermark, plus early and late firings
  every N tuples or every duration of processing time, with the accumulation mode and
  ``firing_only_updated_panes``;
- Beam's composable triggers, the full model: :class:`AfterWatermark` (with ``early`` and
  ``late`` firings), :class:`AfterCount`, :class:`AfterProcessingTime`,
  :class:`Repeatedly`, :class:`AfterAny`, :class:`AfterAll`, :class:`AfterEach`,
  :class:`OrFinally` (``trigger.or_finally(until)``), :class:`Never`, :class:`Always`,
  :class:`DefaultTrigger` (``Repeatedly(AfterWatermark())``, the default).

The protocol. A trigger is an immutable description; its state, per window and key, is
a small picklable value (checkpointed with the operator) that the trigger's methods take
and return (an immutable value: tuples, numbers, None; never changed in place, so
cells may share one): ``init()``, ``on_elements(state, n, ctx)``, ``should_fire(state, ctx)``,
``on_fire(state, ctx) -> (state, finished)``, ``on_merge(states, ctx)`` (session
merges) and ``deadline(state)`` (the processing time at which it wants to be asked
again). A finished trigger closes its window: later tuples of that window and key are
dropped (counted).

When triggers are asked. Only at **streaming window boundaries** (the operator's
``end_window``), never per tuple: the operator asks a window's trigger when tuples
arrived for it in the streaming window (``on_elements`` with how many), when the
watermark passed the window's end, and when a processing-time deadline is due. The
processing time is the streaming window's implicit time, ``window id *
STREAMING_WINDOW_MS``, not the wall clock. So a replayed streaming window, with the same
tuples in any order, emits exactly the same panes. Beam's triggers are lower bounds ("at
least N elements"), so firing at the next boundary keeps their meaning; a count trigger
fires at most once per streaming window.

Example:
    >>> t = AfterWatermark(early=AfterCount(2))
    >>> ctx = TriggerContext(Window(0, 10), watermark=3, now=0)
    >>> s = t.on_elements(t.init(), 1, ctx)
    >>> t.should_fire(s, ctx)
    False
    >>> s = t.on_elements(s, 1, ctx)
    >>> t.should_fire(s, ctx)        # two elements: an early pane
    True
    >>> s, finished = t.on_fire(s, ctx)
    >>> ctx = TriggerContext(Window(0, 10), watermark=10, now=500)
    >>> t.should_fire(s, ctx), t.on_fire(s, ctx)[1]   # the watermark passed: on time, done
    (True, True)
    >>> TriggerOption.at_watermark().with_early_firings_at_every(100).to_trigger()
    AfterWatermark(early=AfterCount(100))
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

from malhar.window.errors import WindowConfigError
from malhar.window.panes import AccumulationMode
from malhar.window.windows import Window, to_millis

__all__ = [
    "AfterAll",
    "AfterAny",
    "AfterCount",
    "AfterEach",
    "AfterProcessingTime",
    "AfterWatermark",
    "Always",
    "DefaultTrigger",
    "Never",
    "OrFinally",
    "Repeatedly",
    "Trigger",
    "TriggerContext",
    "TriggerOption",
]


@dataclass(slots=True)
class TriggerContext:
    """What a trigger may look at: its window, the operator's watermark (None before the
    first one) and the processing time (the streaming window's implicit time)."""

    window: Window
    watermark: int | None
    now: int

    @property
    def past_end(self) -> bool:
        """The watermark has passed the end of the window."""
        return self.watermark is not None and self.watermark >= self.window.end


def _min_deadline(values: Sequence[int | None]) -> int | None:
    found = [v for v in values if v is not None]
    return min(found) if found else None


class Trigger:
    """Base of all triggers; see the module docstring for the protocol."""

    def init(self) -> Any:
        """The state of a fresh window (and key)."""
        return None

    def on_elements(self, state: Any, n: int, ctx: TriggerContext) -> Any:
        """``n`` tuples arrived for the window since the trigger was last asked."""
        return state

    def should_fire(self, state: Any, ctx: TriggerContext) -> bool:
        raise NotImplementedError

    def on_fire(self, state: Any, ctx: TriggerContext) -> tuple[Any, bool]:
        """The window fired: the new state, and whether the trigger is finished."""
        raise NotImplementedError

    def on_merge(self, states: Sequence[Any], ctx: TriggerContext) -> Any:
        """The state of a session window merged from windows with ``states``."""
        return self.init()

    def deadline(self, state: Any) -> int | None:
        """The processing time at which the trigger wants to be asked again, if any."""
        return None

    def reacts_before_end(self) -> bool:
        """Whether tuples arriving before the watermark passes the window's end can make
        the trigger fire (the operator skips the bookkeeping when not)."""
        return True

    def or_finally(self, until: Trigger) -> OrFinally:
        """This trigger, finishing as soon as ``until`` fires (Beam's ``orFinally``)."""
        return OrFinally(self, until)

    # -- value semantics ---------------------------------------------------------------------
    def _args(self) -> tuple[Any, ...]:
        return ()

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._args() == other._args()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._args()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self._args()))})"


class Never(Trigger):
    """Never fires (state is kept until the window is purged)."""

    def should_fire(self, state: Any, ctx: TriggerContext) -> bool:
        return False

    def on_fire(self, state: Any, ctx: TriggerContext) -> tuple[Any, bool]:
        return state, False

    def reacts_before_end(self) -> bool:
        return False


class AfterCount(Trigger):
    """Fires once at least ``count`` tuples arrived (since the last firing, when repeated)."""

    def __init__(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise WindowConfigError(f"AfterCount({count!r}): the count must be an int >= 1")
        self.count = count

    def _args(self) -> tuple[Any, ...]:
        return (self.count,)

    def init(self) -> int:
        return 0

    def on_elements(self, state: int, n: int, ctx: TriggerContext) -> int:
        return state + n

    def should_fire(self, state: int, ctx: TriggerContext) -> bool:
        return state >= self.count

    def on_fire(self, state: int, ctx: TriggerContext) -> tuple[int, bool]:
        return state, True

    def on_merge(self, states: Sequence[int], ctx: TriggerContext) -> int:
        return sum(states)


class AfterProcessingTime(Trigger):
    """Fires once ``delay`` of processing time passed since the first tuple (since the last
    firing, when repeated). Processing time is the streaming windows' implicit time, so a
    replay fires at the same streaming window."""

    def __init__(self, delay: int | _dt.timedelta = 0) -> None:
        self.delay = to_millis(delay, what="AfterProcessingTime delay")
        if self.delay < 0:
            raise WindowConfigError(f"AfterProcessingTime: delay must be >= 0, got {self.delay}")

    def _args(self) -> tuple[Any, ...]:
        return (self.delay,)

    def on_elements(self, state: int | None, n: int, ctx: TriggerContext) -> int | None:
        return ctx.now + self.delay if state is None else state

    def should_fire(self, state: int | None, ctx: TriggerContext) -> bool:
        return state is not None and ctx.now >= state

    def on_fire(self, state: int | None, ctx: TriggerContext) -> tuple[int | None, bool]:
        return state, True

    def on_merge(self, states: Sequence[int | None], ctx: TriggerContext) -> int | None:
        return _min_deadline(states)

    def deadline(self, state: int | None) -> int | None:
        return state


class Repeatedly(Trigger):
    """Fires every time ``underlying`` fires, restarting it; never finishes."""

    def __init__(self, underlying: Trigger) -> None:
        _check_trigger(underlying, "Repeatedly")
        self.underlying = underlying

    def _args(self) -> tuple[Any, ...]:
        return (self.underlying,)

    def init(self) -> Any:
        return self.underlying.init()

    def on_elements(self, state: Any, n: int, ctx: TriggerContext) -> Any:
        return self.underlying.on_elements(state, n, ctx)

    def should_fire(self, state: Any, ctx: TriggerContext) -> bool:
        return self.underlying.should_fire(state, ctx)

    def on_fire(self, state: Any, ctx: TriggerContext) -> tuple[Any, bool]:
        state, finished = self.underlying.on_fire(state, ctx)
        return (self.underlying.init() if finished else state), False

    def on_merge(self, states: Sequence[Any], ctx: TriggerContext) -> Any:
        return self.underlying.on_merge(states, ctx)

    def deadline(self, state: Any) -> int | None:
        return self.underlying.deadline(state)

    def reacts_before_end(self) -> bool:
        return self.underlying.reacts_before_end()


class AfterWatermark(Trigger):
    """Fires when the watermark passes the end of the window (the ON_TIME pane).

    ``early``: repeated before that (EARLY panes); ``late``: repeated after it (LATE
    panes, until the window is purged). Without ``late`` the trigger finishes with the
    ON_TIME pane and later tuples of the window are dropped; a window that only gets
    tuples after the watermark passed its end fires once, LATE.
    """

    def __init__(self, early: Trigger | None = None, late: Trigger | None = None) -> None:
        self.early = None if early is None else Repeatedly(_check_trigger(early, "early"))
        self.late = None if late is None else Repeatedly(_check_trigger(late, "late"))

    def _args(self) -> tuple[Any, ...]:
        return (self.early, self.late)

    def __repr__(self) -> str:
        parts = []
        if self.early is not None:
            parts.append(f"early={self.early.underlying!r}")
        if self.late is not None:
            parts.append(f"late={self.late.underlying!r}")
        return f"AfterWatermark({', '.join(parts)})"

    def init(self) -> tuple[bool, Any, Any]:
        return (
            False,
            None if self.early is None else self.early.init(),
            None if self.late is None else self.late.init(),
        )

    def on_elements(self, state: tuple, n: int, ctx: TriggerContext) -> tuple:
        late, es, ls = state
        if late:
            if self.late is not None:
                ls = self.late.on_elements(ls, n, ctx)
        elif self.early is not None:
            es = self.early.on_elements(es, n, ctx)
        return late, es, ls

    def should_fire(self, state: tuple, ctx: TriggerContext) -> bool:
        late, es, ls = state
        if late:
            return self.late is not None and self.late.should_fire(ls, ctx)
        if ctx.past_end:
            return True
        return self.early is not None and self.early.should_fire(es, ctx)

    def on_fire(self, state: tuple, ctx: TriggerContext) -> tuple[tuple, bool]:
        late, es, ls = state
        if late:
            if self.late is not None:
                ls, _ = self.late.on_fire(ls, ctx)
            return (True, es, ls), False
        if ctx.past_end:
            return (True, es, ls), self.late is None
        if self.early is not None:
            es, _ = self.early.on_fire(es, ctx)
        return (False, es, ls), False

    def on_merge(self, states: Sequence[tuple], ctx: TriggerContext) -> tuple:
        late = any(s[0] for s in states) and ctx.past_end
        es = None if self.early is None else self.early.on_merge([s[1] for s in states], ctx)
        ls = None if self.late is None else self.late.on_merge([s[2] for s in states], ctx)
        return late, es, ls

    def deadline(self, state: tuple) -> int | None:
        late, es, ls = state
        if late:
            return None if self.late is None else self.late.deadline(ls)
        return None if self.early is None else self.early.deadline(es)

    def reacts_before_end(self) -> bool:
        return self.early is not None and self.early.reacts_before_end()


class AfterAny(Trigger):
    """Fires when any sub-trigger fires; finishes when any of them finishes."""

    def __init__(self, *triggers: Trigger) -> None:
        if not triggers:
            raise WindowConfigError(f"{type(self).__name__} needs at least one trigger")
        self.triggers = tuple(_check_trigger(t, type(self).__name__) for t in triggers)

    def _args(self) -> tuple[Any, ...]:
        return self.triggers

    def init(self) -> tuple:
        return tuple(t.init() for t in self.triggers)

    def on_elements(self, state: tuple, n: int, ctx: TriggerContext) -> tuple:
        return tuple(t.on_elements(s, n, ctx) for t, s in zip(self.triggers, state, strict=True))

    def should_fire(self, state: tuple, ctx: TriggerContext) -> bool:
        return any(t.should_fire(s, ctx) for t, s in zip(self.triggers, state, strict=True))

    def on_fire(self, state: tuple, ctx: TriggerContext) -> tuple[tuple, bool]:
        out, finished = [], False
        for t, s in zip(self.triggers, state, strict=True):
            if t.should_fire(s, ctx):
                s, done = t.on_fire(s, ctx)
                finished = finished or done
            out.append(s)
        return tuple(out), finished

    def on_merge(self, states: Sequence[tuple], ctx: TriggerContext) -> tuple:
        return tuple(t.on_merge([s[i] for s in states], ctx) for i, t in enumerate(self.triggers))

    def deadline(self, state: tuple) -> int | None:
        return _min_deadline([t.deadline(s) for t, s in zip(self.triggers, state, strict=True)])

    def reacts_before_end(self) -> bool:
        return any(t.reacts_before_end() for t in self.triggers)


class AfterAll(Trigger):
    """Fires once every sub-trigger has fired (each at least once); then finishes."""

    def __init__(self, *triggers: Trigger) -> None:
        if not triggers:
            raise WindowConfigError("AfterAll needs at least one trigger")
        self.triggers = tuple(_check_trigger(t, "AfterAll") for t in triggers)

    def _args(self) -> tuple[Any, ...]:
        return self.triggers

    def init(self) -> tuple:
        return tuple((t.init(), False) for t in self.triggers)

    def on_elements(self, state: tuple, n: int, ctx: TriggerContext) -> tuple:
        return tuple(
            (s, True) if fired else (t.on_elements(s, n, ctx), False)
            for t, (s, fired) in zip(self.triggers, state, strict=True)
        )

    def should_fire(self, state: tuple, ctx: TriggerContext) -> bool:
        return all(
            fired or t.should_fire(s, ctx)
            for t, (s, fired) in zip(self.triggers, state, strict=True)
        )

    def on_fire(self, state: tuple, ctx: TriggerContext) -> tuple[tuple, bool]:
        out = []
        for t, (s, fired) in zip(self.triggers, state, strict=True):
            if not fired and t.should_fire(s, ctx):
                s, _ = t.on_fire(s, ctx)
                fired = True
            out.append((s, fired))
        return tuple(out), all(f for _, f in out)

    def on_merge(self, states: Sequence[tuple], ctx: TriggerContext) -> tuple:
        return tuple(
            (t.on_merge([s[i][0] for s in states], ctx), all(s[i][1] for s in states))
            for i, t in enumerate(self.triggers)
        )

    def deadline(self, state: tuple) -> int | None:
        return _min_deadline(
            [None if f else t.deadline(s) for t, (s, f) in zip(self.triggers, state, strict=True)]
        )

    def reacts_before_end(self) -> bool:
        return any(t.reacts_before_end() for t in self.triggers)


class AfterEach(Trigger):
    """Fires as the first sub-trigger until it finishes, then as the second, and so on;
    finishes with the last one."""

    def __init__(self, *triggers: Trigger) -> None:
        if not triggers:
            raise WindowConfigError("AfterEach needs at least one trigger")
        self.triggers = tuple(_check_trigger(t, "AfterEach") for t in triggers)

    def _args(self) -> tuple[Any, ...]:
        return self.triggers

    def init(self) -> tuple[int, Any]:
        return 0, self.triggers[0].init()

    def on_elements(self, state: tuple[int, Any], n: int, ctx: TriggerContext) -> tuple:
        i, s = state
        if i < len(self.triggers):
            s = self.triggers[i].on_elements(s, n, ctx)
        return i, s

    def should_fire(self, state: tuple[int, Any], ctx: TriggerContext) -> bool:
        i, s = state
        return i < len(self.triggers) and self.triggers[i].should_fire(s, ctx)

    def on_fire(self, state: tuple[int, Any], ctx: TriggerContext) -> tuple[tuple, bool]:
        i, s = state
        s, finished = self.triggers[i].on_fire(s, ctx)
        if finished:
            i += 1
            s = self.triggers[i].init() if i < len(self.triggers) else None
        return (i, s), i >= len(self.triggers)

    def on_merge(self, states: Sequence[tuple[int, Any]], ctx: TriggerContext) -> tuple:
        i = max(s[0] for s in states)  # the furthest along, as Beam
        if i >= len(self.triggers):
            return i, None
        return i, self.triggers[i].on_merge([s for j, s in states if j == i], ctx)

    def deadline(self, state: tuple[int, Any]) -> int | None:
        i, s = state
        return self.triggers[i].deadline(s) if i < len(self.triggers) else None


class OrFinally(Trigger):
    """Fires as ``main``; finishes when ``until`` fires (or ``main`` finishes)."""

    def __init__(self, main: Trigger, until: Trigger) -> None:
        self.main = _check_trigger(main, "OrFinally")
        self.until = _check_trigger(until, "OrFinally")

    def _args(self) -> tuple[Any, ...]:
        return (self.main, self.until)

    def init(self) -> tuple[Any, Any]:
        return self.main.init(), self.until.init()

    def on_elements(self, state: tuple, n: int, ctx: TriggerContext) -> tuple:
        ms, us = state
        return self.main.on_elements(ms, n, ctx), self.until.on_elements(us, n, ctx)

    def should_fire(self, state: tuple, ctx: TriggerContext) -> bool:
        ms, us = state
        return self.main.should_fire(ms, ctx) or self.until.should_fire(us, ctx)

    def on_fire(self, state: tuple, ctx: TriggerContext) -> tuple[tuple, bool]:
        ms, us = state
        if self.until.should_fire(us, ctx):
            us, _ = self.until.on_fire(us, ctx)
            return (ms, us), True
        ms, finished = self.main.on_fire(ms, ctx)
        return (ms, us), finished

    def on_merge(self, states: Sequence[tuple], ctx: TriggerContext) -> tuple:
        return (
            self.main.on_merge([s[0] for s in states], ctx),
            self.until.on_merge([s[1] for s in states], ctx),
        )

    def deadline(self, state: tuple) -> int | None:
        return _min_deadline([self.main.deadline(state[0]), self.until.deadline(state[1])])

    def reacts_before_end(self) -> bool:
        return self.main.reacts_before_end() or self.until.reacts_before_end()


class Always(Repeatedly):
    """Fires at every streaming window in which tuples arrived: ``Repeatedly(AfterCount(1))``."""

    def __init__(self) -> None:
        super().__init__(AfterCount(1))

    def _args(self) -> tuple[Any, ...]:
        return ()


class DefaultTrigger(Repeatedly):
    """Beam's default: ``Repeatedly(AfterWatermark())``: the ON_TIME pane, then a LATE
    pane at each streaming window in which late tuples (within the allowed lateness)
    arrived."""

    def __init__(self) -> None:
        super().__init__(AfterWatermark())

    def _args(self) -> tuple[Any, ...]:
        return ()


def _check_trigger(value: Any, where: str) -> Trigger:
    if not isinstance(value, Trigger):
        raise WindowConfigError(
            f"{where}: expected a Trigger (AfterCount(10), AfterWatermark() ...), got "
            f"{type(value).__name__} {value!r}"
        )
    return value


class TriggerOption:
    """Malhar's ``TriggerOption``: a simple builder that compiles to a Beam trigger.

    ``every`` is a tuple count when an ``int``, a processing-time duration when a
    ``timedelta`` (Malhar's ``long`` / ``Duration`` overloads). A time firing fires the
    duration after the first tuple that arrived since the last pane (Beam's
    ``AfterProcessingTime``), so a window with no new tuples does not fire again.

    Example:
        >>> from datetime import timedelta
        >>> opt = (TriggerOption.at_watermark()
        ...        .with_early_firings_at_every(timedelta(seconds=10))
        ...        .with_late_firings_at_every(1)
        ...        .accumulating_and_retracting_fired_panes())
        >>> opt.to_trigger()
        AfterWatermark(early=AfterProcessingTime(10000), late=AfterCount(1))
        >>> opt.accumulation_mode
        <AccumulationMode.ACCUMULATING_AND_RETRACTING: 'ACCUMULATING_AND_RETRACTING'>
    """

    def __init__(self) -> None:
        self.on_time = False
        self.early: list[Trigger] = []
        self.late: list[Trigger] = []
        self.accumulation_mode = AccumulationMode.DISCARDING
        self.fire_only_updated_panes = False

    @classmethod
    def at_watermark(cls) -> TriggerOption:
        """Fire when the watermark passes the end of a window (Malhar's ``AtWatermark()``)."""
        opt = cls()
        opt.on_time = True
        return opt

    @staticmethod
    def _every(every: int | _dt.timedelta, what: str) -> Trigger:
        if isinstance(every, _dt.timedelta):
            return AfterProcessingTime(every)
        if isinstance(every, bool) or not isinstance(every, int):
            raise WindowConfigError(
                f"{what}: give a tuple count (int) or a processing-time duration (timedelta), "
                f"got {every!r}"
            )
        return AfterCount(every)

    def with_early_firings_at_every(self, every: int | _dt.timedelta) -> Self:
        """Early panes every ``every`` tuples (int) or processing-time duration (timedelta)."""
        self.early.append(self._every(every, "with_early_firings_at_every"))
        return self

    def with_late_firings_at_every(self, every: int | _dt.timedelta) -> Self:
        """Late panes every ``every`` late tuples (int) or processing-time duration."""
        self.late.append(self._every(every, "with_late_firings_at_every"))
        return self

    def discarding_fired_panes(self) -> Self:
        self.accumulation_mode = AccumulationMode.DISCARDING
        return self

    def accumulating_fired_panes(self) -> Self:
        self.accumulation_mode = AccumulationMode.ACCUMULATING
        return self

    def accumulating_and_retracting_fired_panes(self) -> Self:
        self.accumulation_mode = AccumulationMode.ACCUMULATING_AND_RETRACTING
        return self

    def firing_only_updated_panes(self) -> Self:
        """Skip a pane whose value equals the previous pane's (not with DISCARDING)."""
        self.fire_only_updated_panes = True
        return self

    @staticmethod
    def _any(triggers: list[Trigger]) -> Trigger | None:
        if not triggers:
            return None
        return triggers[0] if len(triggers) == 1 else AfterAny(*triggers)

    def to_trigger(self) -> Trigger:
        """The equivalent Beam trigger."""
        early, late = self._any(self.early), self._any(self.late)
        if self.on_time:
            return AfterWatermark(early=early, late=late)
        both = self._any(self.early + self.late)
        if both is None:
            raise WindowConfigError(
                "TriggerOption fires nothing: start with TriggerOption.at_watermark() or add "
                "early firings"
            )
        return Repeatedly(both)

    def __repr__(self) -> str:
        return (
            f"TriggerOption({self.to_trigger()!r}, {self.accumulation_mode.value}"
            f"{', only updated panes' if self.fire_only_updated_panes else ''})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TriggerOption) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]
