"""HMAC-SHA256 over WAL records (malhar.util.integrity): tampering is rejected."""

from __future__ import annotations

import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from malhar.secrets import SecretReferenceError
from malhar.util import CorruptRecordError, StorageConfigError
from malhar.util.integrity import IntegrityError, Signer
from malhar.util.wal import framing

KEY = b"k" * 32


# -- the Signer ----------------------------------------------------------------------------------
def test_sign_and_verify_round_trip_and_reject_changes() -> None:
    s = Signer(KEY)
    signed = s.sign(b"payload", context=b"op/0")
    assert len(signed) == len(b"payload") + Signer.TAG_BYTES
    assert s.verify(signed, context=b"op/0") == b"payload"
    for bad, ctx in [
        (signed[:-1] + b"X", b"op/0"),  # data changed
        (bytes([signed[0] ^ 1]) + signed[1:], b"op/0"),  # tag changed
        (signed, b"op/1"),  # moved to another log
        (signed[:10], b"op/0"),  # cut
    ]:
        with pytest.raises(IntegrityError) as err:
            s.verify(bad, context=ctx, path="file:///x/wal-1.log", offset=77)
        e = err.value
        assert isinstance(e, CorruptRecordError)
        assert (e.path, e.offset) == ("file:///x/wal-1.log", 77)
        assert "offset=77" in str(e) and "file:///x/wal-1.log" in str(e)
    with pytest.raises(IntegrityError):
        Signer(b"o" * 32).verify(signed, context=b"op/0")  # another key


def test_signer_from_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert Signer.from_setting(None) is None and Signer.from_setting("") is None
    signed = Signer(KEY).sign(b"x")
    monkeypatch.setenv("MALHAR_TEST_KEY", KEY.decode())
    assert Signer.from_setting("${env:MALHAR_TEST_KEY}").verify(signed) == b"x"
    key_file = tmp_path / "key"
    key_file.write_text(KEY.decode() + "\n")
    assert Signer.from_setting(f"${{file:{key_file}}}").verify(signed) == b"x"
    assert Signer.from_setting(KEY).verify(signed) == b"x"
    with pytest.raises(StorageConfigError, match=r"\$\{env:NAME\}"):
        Signer.from_setting("literal-secret-in-a-config-file")
    with pytest.raises(StorageConfigError, match="at least 16 bytes"):
        Signer(b"short")
    with pytest.raises(SecretReferenceError, match="MALHAR_NOT_SET"):
        Signer.from_setting("${env:MALHAR_NOT_SET}")


def test_signer_never_shows_or_pickles_its_key() -> None:
    s = Signer(KEY)
    assert KEY.decode() not in repr(s)
    with pytest.raises(TypeError, match="from_setting"):
        pickle.dumps(s)


# -- the WAL with a key ------------------------------------------------------------------------------
def _tamper(fs: Any, path: str, window_index: int, new_payload: bytes) -> int:
    """Replace one record's payload as an attacker would: valid length and CRC32."""
    data = fs.read_all(path)
    header = framing.decode_header(data)
    result = framing.scan(data, header.size)
    window, off, n = result.records[window_index]
    start = off - framing.RECORD_HEADER_SIZE
    crc = zlib.crc32(new_payload, zlib.crc32(struct.pack("<Iq", len(new_payload), window)))
    forged = struct.pack("<IIq", len(new_payload), crc, window) + new_payload
    fs.create(path, data[:start] + forged + data[off + n :], overwrite=True)
    return start


def test_tampered_record_is_rejected_with_a_key(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MALHAR_WAL_KEY", "0123456789abcdef0123456789abcdef")
    key = "${env:MALHAR_WAL_KEY}"
    with store.manager(integrity_key=key, segment_bytes=1 << 20) as m:
        for w in range(1, 4):
            m.save({"offsets": [w]}, w)
        assert m.retrieve(2) == {"offsets": [2]}
    fs, _ = store.fs()
    path = store.segment_path(active=True)
    evil = pickle.dumps({"offsets": [999]}, 5)
    at = _tamper(fs, path, 1, evil)
    with store.manager(integrity_key=key, segment_bytes=1 << 20) as m:
        assert m.retrieve(1) == {"offsets": [1]} and m.retrieve(3) == {"offsets": [3]}
        with pytest.raises(IntegrityError) as err:
            m.retrieve(2)
        assert (err.value.path, err.value.offset) == (fs.describe(path), at)
        assert "integrity" in str(err.value).lower()
    unkeyed = store.manager(segment_bytes=1 << 20)
    with pytest.raises(StorageConfigError, match="integrity_key"):
        unkeyed.retrieve(1)  # a signed log is never read as if it were not


def test_unsigned_log_is_rejected_when_a_key_is_set(store: Any) -> None:
    """An attacker cannot replace a signed log by an unsigned one."""
    with store.manager(segment_bytes=1 << 20) as m:
        m.save({"a": 1}, 1)
    keyed = store.manager(integrity_key=KEY, segment_bytes=1 << 20)
    with pytest.raises(IntegrityError, match="not authenticated"):
        keyed.retrieve(1)


def test_signed_records_survive_rotation_and_restart(store: Any) -> None:
    with store.manager(integrity_key=KEY, segment_bytes=200) as m:
        for w in range(1, 8):
            m.save({"w": w}, w)
        m.save({"w": 7}, 7)  # idempotent re-save compares the payload, not the tag
    with store.manager(integrity_key=KEY, segment_bytes=200) as m:
        assert [m.retrieve(w) for w in range(1, 8)] == [{"w": w} for w in range(1, 8)]
        assert m.verify() == []


def test_a_record_moved_to_another_partition_log_is_rejected(local_store: Any) -> None:
    for p in (0, 1):
        with local_store.manager(partition=p, integrity_key=KEY, segment_bytes=1 << 20) as m:
            m.save({"p": p}, 1)
    fs, _ = local_store.fs()
    p0 = local_store.segment_path(log_id=0, active=True)
    p1 = local_store.segment_path(log_id=1, active=True)
    fs.create(p1, fs.read_all(p0), overwrite=True)  # partition 0's valid log, as partition 1's
    m = local_store.manager(partition=1, integrity_key=KEY, segment_bytes=1 << 20)
    with pytest.raises(IntegrityError, match="moved from another log"):
        m.retrieve(1)


def test_key_is_not_in_the_pickled_manager(
    local_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MALHAR_WAL_KEY", "0123456789abcdef0123456789abcdef")
    m = local_store.manager(integrity_key="${env:MALHAR_WAL_KEY}")
    m.save({"a": 1}, 1)
    blob = pickle.dumps(m)
    assert b"0123456789abcdef" not in blob and b"${env:MALHAR_WAL_KEY}" in blob
    assert "0123456789abcdef" not in repr(m)
    assert pickle.loads(blob).retrieve(1) == {"a": 1}
    m.teardown()
