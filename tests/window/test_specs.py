"""Window settings given as JSON values (``malhar.window.specs``): what JSON applications
and ``--config`` use, since an accumulation, a window option or a trigger is a Python
object."""

from __future__ import annotations

import pytest

from malhar.properties import PropertyError
from malhar.testing import OperatorHarness
from malhar.validation import operator_problems
from malhar.window import (
    AfterAny,
    AfterCount,
    AfterWatermark,
    GlobalWindow,
    InMemoryWindowedStorage,
    KeyedWindowedMergeOperator,
    KeyedWindowedOperator,
    SessionWindows,
    SpillableWindowedStorage,
    TimeWindows,
    Watermark,
    WindowConfigError,
    WindowedOperator,
)
from malhar.window.accumulation import Count, InnerJoin, ToList, TopN
from malhar.window.impl.settings import WindowedSettings
from malhar.window.specs import (
    accumulation_from_json,
    storage_from_json,
    trigger_from_json,
    window_option_from_json,
)


def test_accumulations_by_name_and_with_parameters() -> None:
    assert type(accumulation_from_json("Count")) is Count
    top = accumulation_from_json({"TopN": {"n": 3}})
    assert type(top) is TopN and top.n == 3 and top.key is None
    assert accumulation_from_json({"TopN": 2}).n == 2
    assert accumulation_from_json({"ToList": {"sort": True}}).sort is True
    assert type(accumulation_from_json("InnerJoin")) is InnerJoin
    same = Count()
    assert accumulation_from_json(same) is same  # a Python object is left as it is


def test_window_options_triggers_and_storages() -> None:
    assert repr(window_option_from_json({"TimeWindows": 10_000})) == "TimeWindows(10000)"
    sliding = window_option_from_json({"TimeWindows": {"duration": 10_000, "slide": 5_000}})
    assert repr(sliding) == "TimeWindows(10000).slide_by(5000)"
    assert repr(window_option_from_json({"TimeWindows": [10_000, 2_000]})) == (
        "TimeWindows(10000).slide_by(2000)"
    )
    assert isinstance(window_option_from_json("GlobalWindow"), GlobalWindow)
    assert window_option_from_json({"SessionWindows": 60_000}).min_gap == 60_000
    nested = trigger_from_json({"AfterWatermark": {"early": {"AfterCount": 2}, "late": "Always"}})
    assert isinstance(nested, AfterWatermark)
    assert repr(nested) == "AfterWatermark(early=AfterCount(2), late=Always())"
    any_of = trigger_from_json({"AfterAny": [{"AfterCount": 5}, "AfterWatermark"]})
    assert isinstance(any_of, AfterAny)
    assert isinstance(storage_from_json("InMemoryWindowedStorage"), InMemoryWindowedStorage)
    spill = storage_from_json({"SpillableWindowedStorage": {"budget_bytes": 16 << 20}})
    assert isinstance(spill, SpillableWindowedStorage) and spill.budget_bytes == 16 << 20


@pytest.mark.parametrize(
    ("read", "value", "message"),
    [
        (
            accumulation_from_json,
            "Cont",
            "unknown accumulation 'Cont'; did you mean 'Count'? (known: Average, Cogroup, Count,",
        ),
        (accumulation_from_json, "Fold", "accumulation 'Fold' cannot be given as a JSON value"),
        (
            accumulation_from_json,
            {"TopN": {"m": 3}},
            "TopN: unknown parameter 'm' (TopN takes n=10)",
        ),
        (accumulation_from_json, {"Count": 1, "Sum": 2}, "an object of one name"),
        (accumulation_from_json, {"Count": 1}, "Count: too many positional arguments"),
        (window_option_from_json, {"TimeWindows": {"duraton": 5}}, "did you mean 'duration'?"),
        (accumulation_from_json, {"TopN": 0}, "TopN: n must be >= 1, got 0"),
        (window_option_from_json, "TimeWindows(10)", "did you mean 'TimeWindows'?"),
        (window_option_from_json, "TimeWindows", "missing a required argument: 'duration'"),
        (window_option_from_json, {"TimeWindows": [10, 3]}, "the slide must be positive"),
        (
            window_option_from_json,
            {"TimeWindows": 1.5},
            "TimeWindows duration: 1.5 is not a whole number of milliseconds",
        ),
        (trigger_from_json, {"AfterWatermark": {"early": "AfterCont"}}, "'AfterCount'"),
        # a count given as text was said to be an unknown trigger '3'
        (trigger_from_json, {"AfterCount": "3"}, "AfterCount('3'): the count must be an int"),
        (trigger_from_json, "TriggerOption", "use AfterWatermark with early/late triggers"),
        (storage_from_json, "SpillableStorage", "did you mean 'SpillableWindowedStorage'?"),
    ],
)
def test_bad_values_name_the_value_and_the_known_names(read, value, message) -> None:
    with pytest.raises(WindowConfigError) as caught:
        read(value)
    assert message in str(caught.value)


def test_the_operators_take_json_values_for_their_settings() -> None:
    op = KeyedWindowedOperator(
        "Count",
        {"TimeWindows": 10},
        key="user",
        timestamp="t",
        trigger={"AfterWatermark": {"early": {"AfterCount": 1}}},
        storage="InMemoryWindowedStorage",
        accumulation_mode="ACCUMULATING",
    )
    assert type(op.accumulation) is Count and repr(op.window_option) == "TimeWindows(10)"
    assert repr(op.trigger) == "AfterWatermark(early=AfterCount(1))"
    h = OperatorHarness(op)
    h.run_window([("input", {"user": "ann", "t": 1}), ("input", {"user": "ann", "t": 2})])
    h.put_control("input", Watermark(10))
    h.run_window()
    h.run_window()
    got = [(p.key, p.value, p.pane.timing.value) for p in h.sink("output").tuples]
    assert got == [("ann", 2, "EARLY"), ("ann", 2, "ON_TIME")]


def test_a_bad_value_is_a_property_error_naming_the_property() -> None:
    with pytest.raises(PropertyError, match=r"WindowedOperator\.accumulation: unknown "):
        WindowedOperator("Sume", TimeWindows(10))
    op = WindowedOperator(Count())
    with pytest.raises(PropertyError, match=r"WindowedOperator\.window_option: unknown window"):
        op.window_option = "Tumbling"
    with pytest.raises(PropertyError, match=r"as JSON: \"Count\".*got int 3"):
        op.accumulation = 3
    # the Python objects themselves are taken as before
    op.window_option = SessionWindows(5)
    assert op.window_option.min_gap == 5


def test_object_properties_read_text_as_it_is() -> None:
    # a JSON app's "properties" and --config go through Property.parse, which refused
    # every string for an ``object`` property ("cannot read 't' as object")
    prop = WindowedOperator.timestamp
    assert prop.parse("t") == "t"
    assert WindowedSettings.accumulation.parse("Count") == "Count"


def test_settings_problems_are_found_before_setup() -> None:
    assert operator_problems(WindowedOperator(window_option=TimeWindows(10))) == [
        'accumulation is not set: give one, e.g. Count() (in JSON: "Count"; see '
        "malhar.window.specs for the names)"
    ]
    merge = KeyedWindowedMergeOperator(ToList(), TimeWindows(10), key="id")
    assert "a merge operator needs a MergeAccumulation" in operator_problems(merge)[0]
    only = WindowedOperator(Count(), TimeWindows(10), fire_only_updated_panes=True)
    assert (
        "fire_only_updated_panes needs accumulation_mode ACCUMULATING"
        in (operator_problems(only)[0])
    )
    only.accumulation_mode = "ACCUMULATING"
    assert operator_problems(only) == []
    assert operator_problems(WindowedOperator("Count", trigger=AfterCount(2))) == []
