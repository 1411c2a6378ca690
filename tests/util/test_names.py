"""Operator names -> one safe path segment: injective, reversible, never escaping."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from malhar.util import FSWindowDataManager, StorageConfigError
from malhar.util.fs.names import MAX_SEGMENT_BYTES, decode_segment, encode_segment

TRICKY = ["a b", "a/b", "a_b", "a%20b", "..", ".", "", "é", "e\u0301", "日本", "a\\b", ":", ".x"]


def test_tricky_names_map_to_distinct_safe_segments() -> None:
    segments = [encode_segment(n) for n in TRICKY]
    assert len(set(segments)) == len(TRICKY)
    for name, seg in zip(TRICKY, segments, strict=True):
        assert seg and seg not in (".", "..") and "/" not in seg and "\\" not in seg
        assert not seg.startswith(".") and seg.isascii() and ":" not in seg
        assert decode_segment(seg) == name
    # names that were already safe keep their directory (existing checkpoints stay valid)
    for plain in ("kafka-in", "__app__", "op.v2", "Words_1"):
        assert encode_segment(plain) == plain


@given(st.text(max_size=40))
@example("0000:::::" + "\x80" * 16 + "\u0800" + "\U00010000" * 12)  # 256 bytes encoded
def test_encoding_is_reversible_and_safe(name: str) -> None:
    utf8 = len(name.encode("utf-8", "surrogatepass"))
    if utf8 * 3 > MAX_SEGMENT_BYTES:  # 40 four-byte characters encode to 480 bytes
        try:
            seg = encode_segment(name)
        except ValueError as exc:  # refused only when it really is too long
            assert "too long for one path segment" in str(exc)
            return
        assert len(seg) <= MAX_SEGMENT_BYTES
    seg = encode_segment(name)
    assert decode_segment(seg) == name
    assert seg not in (".", "..") and "/" not in seg and not seg.startswith(".")
    assert os.path.normpath(os.path.join("/root", seg)) == f"/root/{seg}"


@given(st.text(max_size=20), st.text(max_size=20))
def test_encoding_is_injective(a: str, b: str) -> None:
    assert (encode_segment(a) == encode_segment(b)) == (a == b)


def test_bad_segments_and_names_are_rejected_clearly() -> None:
    for bad in ("a/b", "..", ".", "%2e", "%zz", "%4", "a b", "%61"):  # %61 is 'a' encoded
        with pytest.raises(ValueError, match="segment"):
            decode_segment(bad)
    with pytest.raises(ValueError, match="255"):
        encode_segment("é" * 100)  # 600 bytes once encoded
    with pytest.raises(TypeError):
        encode_segment(3)  # type: ignore[arg-type]


def test_window_data_manager_logs_of_tricky_operator_names_stay_apart(store: Any) -> None:
    names = ["a b", "a/b", "a_b", "..", ".", "日本", "../../escape", "50%", "a%2Fb"]

    def manager(name: str) -> FSWindowDataManager:
        return FSWindowDataManager(f"{store.root}/inner", name, fs_options=store.fs_options)

    for i, name in enumerate(names):
        with manager(name) as m:
            m.save({"name": name}, i + 1)
    fs, outer = store.fs()
    assert [e.name for e in fs.list(outer)] == ["inner"]  # nothing escaped
    listed = sorted(e.name for e in fs.list(fs.join(outer, "inner")))
    assert listed == sorted(encode_segment(n) for n in names)
    for i, name in enumerate(names):
        with manager(name) as m:
            assert m.retrieve(i + 1) == {"name": name}
            assert m.partition_largest_window() == i + 1  # its own log only
    with pytest.raises(StorageConfigError, match="non-empty"):
        manager("")


def test_log_path_names_the_encoded_directory(tmp_path: Path) -> None:
    m: Any = FSWindowDataManager(str(tmp_path), "my op")
    assert m.log_path == f"file://{tmp_path}/my%20op/0"
