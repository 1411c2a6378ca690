"""Codecs: round trips, order preservation and prefix-freeness of the key codecs."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from malhar.util.state import (
    AUTO_KEY,
    AUTO_VALUE,
    BYTES,
    FLOAT,
    INT,
    INT_VALUE,
    PICKLE,
    STR,
    TupleCodec,
)

ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
floats = st.floats(allow_nan=False)
texts = st.text()
blobs = st.binary()
scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts, blobs)
auto_keys = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.tuples(inner))


@pytest.mark.parametrize(
    ("codec", "values"),
    [(INT, ints), (FLOAT, floats), (STR, texts), (BYTES, blobs)],
    ids=["int", "float", "str", "bytes"],
)
def test_key_codecs_round_trip_and_preserve_order(codec, values) -> None:
    @given(values, values)
    def check(a, b) -> None:
        ea, eb = codec.encode(a), codec.encode(b)
        assert codec.decode(ea) == a or (isinstance(a, float) and math.copysign(1, a) != 1)
        assert codec.decode_from(ea + b"tail", 0) == (codec.decode(ea), len(ea))
        if a < b:
            assert ea < eb
        elif a == b and not isinstance(a, float):
            assert ea == eb
        # prefix-free: a proper prefix would break prefix scans of composite keys
        assert ea == eb or not eb.startswith(ea)

    check()


def _auto_order(v):
    """The documented cross-type order of AUTO_KEY: None < bool < int < float < bytes < str < tuple."""
    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, v)
    if isinstance(v, int):
        return (2, v)
    if isinstance(v, float):
        return (3, v)
    if isinstance(v, bytes):
        return (4, v)
    if isinstance(v, str):
        return (5, v.encode("utf-8", "surrogatepass"))
    return (6, tuple(_auto_order(x) for x in v))


@given(auto_keys, auto_keys)
def test_auto_key_round_trips_and_orders_across_types(a, b) -> None:
    ea, eb = AUTO_KEY.encode(a), AUTO_KEY.encode(b)
    assert AUTO_KEY.decode(ea) == a or a != a
    oa, ob = _auto_order(a), _auto_order(b)
    if oa < ob:
        assert ea < eb
    if oa == ob:
        assert ea == eb or (0.0 in (a, b))  # -0.0 and 0.0 compare equal but encode apart
    assert ea == eb or not eb.startswith(ea)


@given(st.tuples(ints, texts), st.tuples(ints, texts))
def test_tuple_codec_orders_lexicographically(a, b) -> None:
    codec = TupleCodec(INT, STR)
    assert codec.decode(codec.encode(a)) == a
    assert (codec.encode(a) < codec.encode(b)) == (
        (a[0], a[1].encode("utf-8", "surrogatepass"))
        < (b[0], b[1].encode("utf-8", "surrogatepass"))
    )


class Custom:
    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Custom) and other.x == self.x


@given(st.one_of(auto_keys, ints.map(Custom), st.lists(ints), st.integers()))
def test_auto_value_round_trips_with_pickle_fallback(v) -> None:
    assert AUTO_VALUE.decode(AUTO_VALUE.encode(v)) == v


def test_value_codecs() -> None:
    assert INT_VALUE.decode(INT_VALUE.encode(-5)) == -5
    assert PICKLE.decode(PICKLE.encode({"a": [1]})) == {"a": [1]}
    assert AUTO_VALUE.encode(7)[0] == 4 and AUTO_VALUE.encode(Custom(1))[0] == 0xFF
    with pytest.raises(TypeError):
        AUTO_KEY.encode(Custom(1))
    with pytest.raises(OverflowError):
        INT.encode(2**63)


def test_import_does_not_pull_pyspark() -> None:
    """``malhar.util.state`` (and what it imports) never imports pyspark or pyarrow.

    ``malhar/__init__.py`` itself imports the engine (and pyspark); the package is
    loaded here without running it, as the engine could once it imports lazily.
    """
    repo = Path(__file__).resolve().parents[3]
    code = textwrap.dedent(
        f"""
        import sys, types
        pkg = types.ModuleType("malhar"); pkg.__path__ = [{str(repo / "malhar")!r}]
        sys.modules["malhar"] = pkg
        import malhar.util.state
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "pyarrow", "pandas"))
        print(bad)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
