"""Unit tests of the spillable structures and time buckets (local checkpoint root)."""

from __future__ import annotations

import pytest

from malhar.util.state import (
    INT,
    INT_VALUE,
    STR,
    StateCodecError,
    StateError,
    TupleCodec,
)


def test_map_basics_order_range_len(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    m = ms.map("m", key_codec=INT, value_codec=STR)
    for k in [5, -3, 10, 0, 7]:
        m[k] = f"v{k}"
    assert len(m) == 5
    assert list(m) == [-3, 0, 5, 7, 10]
    assert list(m.range(0, 7)) == [(0, "v0"), (5, "v5")]
    assert list(m.range(lo=6)) == [(7, "v7"), (10, "v10")]
    assert m[5] == "v5" and m.get(99) is None and m.get(99, "d") == "d" and 5 in m
    with pytest.raises(KeyError):
        m[99]
    m[5] = "again"
    assert len(m) == 5
    del m[5]
    with pytest.raises(KeyError):
        del m[5]
    assert len(m) == 4 and 5 not in m
    assert dict(m.items()) == {-3: "v-3", 0: "v0", 7: "v7", 10: "v10"}
    assert list(m.values()) == ["v-3", "v0", "v7", "v10"]
    ms.checkpoint(0)
    # mixing checkpointed entries (local store) and this window's (overlay) in one scan
    m[1] = "one"
    del m[7]
    assert list(m) == [-3, 0, 1, 10]
    m.clear()
    assert len(m) == 0 and list(m) == []
    m[2] = "two"
    ms.checkpoint(1)
    assert list(m.items()) == [(2, "two")]
    ms.restore(0)
    assert list(m) == [-3, 0, 7, 10] and len(m) == 4


def test_structures_do_not_collide_and_names_are_typed(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    a, b = ms.map("a"), ms.map("a\x00b")
    mm = ms.set_multimap("mm")
    a["x"] = 1
    b["x"] = 2
    mm.add("x", 1)
    assert ms.map("a") is a
    assert (a["x"], b["x"], len(a), len(b)) == (1, 2, 1, 1)
    with pytest.raises(StateError, match="is a SpillableMap, not a SpillableList"):
        ms.list("a")
    with pytest.raises(StateError, match=r"exists with codecs \['auto', 'auto-value'\]"):
        ms.map("a", key_codec=STR)
    ms.checkpoint(0)
    ms.close()
    other = type(ms)(ms.root, ms.operator, ms.partition, local_dir=ms.local_dir + "-2")
    other.restore(0)
    with pytest.raises(StateError, match="checkpointed as a SpillableMap, not a SpillableList"):
        len(other.list("a"))
    other.close()


def test_set_multimap(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    mm = ms.set_multimap("mm", key_codec=STR, value_codec=INT)
    assert mm.add("k", 3) and mm.add("k", 1) and not mm.add("k", 3)
    mm.add("ka", 9)  # "k" is a prefix of "ka": must not leak into k's set
    mm.add("j", 2)
    assert mm["k"] == {1, 3} and mm.get("ka") == {9} and mm.get("none") == set()
    assert len(mm) == 4 and "k" in mm and "z" not in mm
    assert mm.contains("k", 1) and not mm.contains("k", 2)
    assert list(mm.keys()) == ["j", "k", "ka"]
    assert list(mm.items()) == [("j", 2), ("k", 1), ("k", 3), ("ka", 9)]
    ms.checkpoint(0)
    assert mm.discard("k", 1) and not mm.discard("k", 1)
    assert mm.remove_all("ka") == 1 and mm.remove_all("ka") == 0
    assert list(mm.items()) == [("j", 2), ("k", 3)] and len(mm) == 2
    ms.checkpoint(1)
    ms.restore(0)
    assert len(mm) == 4 and mm["ka"] == {9}


def test_list_append_only(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    lst = ms.list("events")
    lst.extend(["a", ("b", 1), 3])
    ms.checkpoint(0)
    lst.append(None)
    assert len(lst) == 4 and lst[0] == "a" and lst[-1] is None and lst[1] == ("b", 1)
    assert lst[1:3] == [("b", 1), 3] and list(lst) == ["a", ("b", 1), 3, None]
    with pytest.raises(IndexError, match="out of range"):
        lst[4]
    ms.restore(0)
    assert list(lst) == ["a", ("b", 1), 3]
    lst.clear()
    assert len(lst) == 0 and list(lst) == []


def test_time_buckets_put_get_expire(new_state) -> None:
    ms = new_state()
    ms.restore(-1)
    tb = ms.time_buckets("dedup", bucket_span=10, key_codec=STR, value_codec=INT_VALUE)
    assert tb.put("a", 5, 1) and tb.put("a", 15, 2) and tb.put("b", 27, 3)
    assert tb.get("a", 9) == 1 and tb.get("a", 10) == 2 and tb.get("a", 20) is None
    assert tb.contains("b", 20) and not tb.contains("b", 30)
    assert list(tb.items()) == [(0, "a", 1), (10, "a", 2), (20, "b", 3)]
    assert list(tb.items(10, 20)) == [(10, "a", 2)]
    ms.checkpoint(0)
    assert tb.expire_before(19) == 1  # bucket [10, 20) still reaches 19
    assert tb.get("a", 5) is None and tb.is_expired(9) and not tb.is_expired(10)
    assert not tb.put("late", 3, 0), "a put into an expired bucket is refused"
    assert tb.get("a", 15) == 2 and tb.horizon == 10
    assert tb.expire_before(5) == 1, "the horizon never goes back"
    ms.checkpoint(1)
    assert tb.expire_before(30) == 3
    assert list(tb.items()) == []
    ms.checkpoint(2)
    ms.restore(1)
    assert tb.horizon == 10 and list(tb.items()) == [(10, "a", 2), (20, "b", 3)]
    assert tb.delete("a", 11) and not tb.delete("a", 11)
    with pytest.raises(StateError, match="span 10, not 5"):
        ms.time_buckets("dedup", 5, STR, INT_VALUE)


def test_codec_errors_name_operator_structure_and_key_type(new_state) -> None:
    ms = new_state(operator="joiner", partition=2)
    ms.restore(-1)
    m = ms.map("orders", key_codec=TupleCodec(INT, STR), value_codec=INT_VALUE)
    with pytest.raises(StateCodecError) as err:
        m[(1, "x")] = "not an int"
    msg = str(err.value)
    assert "operator 'joiner' partition 2" in msg and "SpillableMap 'orders'" in msg
    assert "value of type str (key type tuple)" in msg and "'int-value'" in msg
    with pytest.raises(StateCodecError, match=r"cannot encode a key of type list"):
        m[[1, "x"]] = 1
    auto = ms.map("auto")
    with pytest.raises(
        StateCodecError, match=r"SpillableMap 'auto' cannot encode a key of type object"
    ):
        auto[object()] = 1
    tb = ms.time_buckets("tb", 10)
    with pytest.raises(StateCodecError, match=r"TimeBucketedState 'tb'.*key of type dict"):
        tb.put({}, 1, 1)


def test_use_before_restore_and_window_order(new_state) -> None:
    ms = new_state()
    m = ms.map("m")
    with pytest.raises(StateError, match="call restore"):
        m["a"] = 1
    ms.restore(-1)
    ms.checkpoint(3)
    with pytest.raises(ValueError, match="checkpoint\\(3\\) after window 3"):
        ms.checkpoint(3)


def test_pickle_keeps_only_configuration(new_state) -> None:
    import pickle

    ms = new_state()
    ms.restore(-1)
    ms.map("m")["a"] = 1
    ms.checkpoint(0)
    clone = pickle.loads(pickle.dumps(ms))
    assert clone.window is None and clone.root == ms.root and clone.budget_bytes == ms.budget_bytes
    ms.close()
    clone.restore(0)
    assert clone.map("m")["a"] == 1
    clone.close()


class _CountingOperator:
    """How an operator would hold managed state: the manager and its structures as attributes."""

    def __init__(self, ms) -> None:
        self.ms = ms
        self.counts = ms.map("counts", STR, INT_VALUE)
        self.seen = ms.set_multimap("seen", STR, INT)


def test_an_operator_pickled_with_its_structures_gets_them_back(new_state) -> None:
    import pickle

    ms = new_state()
    op = _CountingOperator(ms)
    ms.restore(-1)
    op.counts["a"] = 1
    op.seen.add("a", 1)
    ms.checkpoint(0)
    op.counts["uncheckpointed"] = 1
    clone = pickle.loads(pickle.dumps(op))
    ms.close()
    assert clone.counts._state is clone.ms
    assert clone.ms.map("counts", STR, INT_VALUE) is clone.counts
    clone.ms.restore(0)
    assert dict(clone.counts.items()) == {"a": 1} and len(clone.counts) == 1
    clone.counts["b"] = 2  # the size is flushed at the checkpoint: the structure is registered
    clone.ms.checkpoint(1)
    clone.ms.restore(1)
    assert len(clone.counts) == 2 and clone.seen["a"] == {1}
    clone.ms.close()


def test_the_example_of_docs_state_md_runs(tmp_path, monkeypatch) -> None:
    import re
    import tempfile
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "state.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the default local_dir
    exec(compile(code.replace("/tmp/app-ckpt", str(tmp_path / "ckpt")), "state.md", "exec"), {})
    assert (tmp_path / "ckpt" / "malhar" / "managed" / "counter" / "0").is_dir()
