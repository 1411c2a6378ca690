"""A tuple's event time and an Arrow column's are converted alike (malhar.util.epoch_millis)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malhar.io.kafka.event_time import to_event_millis
from malhar.util.epoch_millis import epoch_millis, event_millis

UTC_TIMES = st.datetimes(
    min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)
)


@settings(deadline=None)  # the first example imports pyarrow's compute kernels
@given(st.lists(UTC_TIMES, min_size=1, max_size=20))
def test_a_datetime_tuple_and_a_microsecond_column_give_the_same_milliseconds(times) -> None:
    column = pa.array(times, pa.timestamp("us", tz="UTC"))
    assert epoch_millis(column).tolist() == [event_millis(t) for t in times]


@settings(deadline=None)
@given(st.lists(st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1)), min_size=1, max_size=20))
def test_a_date_tuple_and_a_date32_column_are_midnight_utc(days) -> None:
    assert epoch_millis(pa.array(days, pa.date32())).tolist() == [event_millis(d) for d in days]


def test_the_other_kinds_a_tuple_may_give() -> None:
    assert event_millis(5) == 5
    assert event_millis(5.9) == 5
    assert event_millis(np.int32(7)) == 7
    assert event_millis(np.datetime64("1970-01-01T00:00:01.0019")) == 1001
    assert event_millis(dt.datetime(1970, 1, 1, 0, 0, 1)) == 1000  # naive is UTC


@pytest.mark.parametrize(
    "value",
    [True, float("nan"), float("inf"), "noon", None, b"1", np.datetime64("NaT"), pd.NaT, 2**63],
)
def test_what_is_not_an_event_time_raises_type_error(value) -> None:
    with pytest.raises(TypeError, match="event time"):
        event_millis(value)


def test_the_kafka_input_takes_a_date_and_names_where_a_bad_time_came_from() -> None:
    assert to_event_millis(dt.date(1970, 1, 2), "orders") == 86_400_000
    assert to_event_millis(None, "orders") is None
    with pytest.raises(TypeError, match=r"^orders: event time 'x' is not a time .*a date$"):
        to_event_millis("x", "orders")


@pytest.mark.parametrize(
    "column",
    [
        pa.array(["5"]),
        pa.array(["5"], pa.large_string()),
        pa.array([b"5"]),
        pa.array([True]),
        pa.array(["5"]).dictionary_encode(),
    ],
    ids=["string", "large-string", "binary", "bool", "dictionary"],
)
def test_a_column_of_what_is_no_tuple_time_is_no_time_either(column) -> None:
    # Arrow casts "5" and True to 5 and 1: a batch made a pane of what a tuple could not
    with pytest.raises(TypeError, match="is not an event time"):
        epoch_millis(column)
