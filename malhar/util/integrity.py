"""Authenticated records: an HMAC-SHA256 tag over stored bytes, keyed by a secret.

Whoever can write to a checkpoint directory can otherwise make malhar unpickle
bytes of their choosing. With a key, bytes are accepted only if they were
written by someone who holds the key.

>>> s = Signer(b"0123456789abcdef0123456789abcdef")
>>> signed = s.sign(b"payload", context=b"op/0")
>>> s.verify(signed, context=b"op/0")
b'payload'

API (small on purpose; also used for the engine's state snapshots):

- ``Signer(key: bytes)``: at least 16 bytes (32 random bytes recommended);
- ``Signer.from_setting(value)``: ``None``/empty -> ``None`` (authentication off);
  ``bytes`` -> a signer; a secret reference ``"${env:NAME}"`` / ``"${file:/path}"``
  (resolved with :func:`malhar.secrets.resolve` where it is called, UTF-8 encoded)
  -> a signer. Any other string is refused: a literal key in a setting would be
  copied into pickled configuration and logs;
- ``signer.sign(data, context=b"") -> tag + data``;
- ``signer.verify(signed, context=b"", *, path=None, offset=None, backend=None) -> data``,
  raising :class:`IntegrityError` (naming ``path`` and ``offset``) if the tag does
  not match.

``context`` is authenticated but not stored: bind a record to where it belongs
(the log, the window id) so that a valid record copied elsewhere is rejected.
A signer never shows its key (``repr``) and cannot be pickled: ship the setting
(a reference) and call ``from_setting`` where the key is used.

What a tag does not prove: that no record was *removed* (deleting or truncating
files is still possible for whoever can write there), nor freshness across two
copies of the same checkpoint (an old valid record can replace a newer one of
the same context).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Any, ClassVar, NoReturn

from malhar.secrets import is_reference, resolve
from malhar.util.fs.errors import CorruptRecordError, StorageConfigError

__all__ = ["IntegrityError", "Signer"]

_CONTEXT_LEN = struct.Struct("<I")


class IntegrityError(CorruptRecordError):
    """Stored bytes failed authentication: changed without the key, a different key,
    or not authenticated at all while a key is configured. ``path``/``offset`` say where."""


class Signer:
    """HMAC-SHA256 signing and verification with one secret key."""

    TAG_BYTES: ClassVar[int] = 32
    MIN_KEY_BYTES: ClassVar[int] = 16
    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes | bytearray):
            raise StorageConfigError(
                f"an integrity key must be bytes, got {type(key).__name__} "
                "(use Signer.from_setting for a ${env:NAME} / ${file:/path} reference)"
            )
        if len(key) < self.MIN_KEY_BYTES:
            raise StorageConfigError(
                f"an integrity key must have at least {self.MIN_KEY_BYTES} bytes, got "
                f"{len(key)}; generate one with: python -c 'import secrets; "
                "print(secrets.token_hex(32))'"
            )
        self._key = bytes(key)

    @classmethod
    def from_setting(cls, value: Any, *, setting: str = "integrity_key") -> Signer | None:
        """A signer for a setting's value, or None when the setting is empty (off)."""
        if value is None or value in ("", b""):
            return None
        if isinstance(value, bytes | bytearray):
            return cls(bytes(value))
        if isinstance(value, str) and is_reference(value):
            return cls(resolve(value, setting).encode("utf-8"))
        raise StorageConfigError(
            f"setting {setting!r}: give the key as bytes or as a secret reference "
            "${env:NAME} / ${file:/path}, not as a literal string (it would be copied "
            "into pickled configuration and logs)"
        )

    def _tag(self, data: bytes | memoryview, context: bytes) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        mac.update(_CONTEXT_LEN.pack(len(context)))  # unambiguous context/data boundary
        mac.update(context)
        mac.update(data)
        return mac.digest()

    def sign(self, data: bytes, context: bytes = b"") -> bytes:
        """``tag + data``: ``TAG_BYTES`` more than ``data``."""
        return self._tag(data, context) + data

    def verify(
        self,
        signed: bytes,
        context: bytes = b"",
        *,
        path: str | None = None,
        offset: int | None = None,
        backend: str | None = None,
    ) -> bytes:
        """The data inside ``signed`` if its tag matches; :class:`IntegrityError` otherwise."""
        view = memoryview(signed)
        if len(view) < self.TAG_BYTES:
            self._fail("record is shorter than its authentication tag", path, offset, backend)
        tag, data = view[: self.TAG_BYTES], view[self.TAG_BYTES :]
        if not hmac.compare_digest(self._tag(data, context), tag):
            self._fail(
                "authentication tag mismatch: the record was changed by someone without the "
                "integrity key, moved from another log, or written with another key",
                path,
                offset,
                backend,
            )
        return bytes(data)

    @staticmethod
    def _fail(why: str, path: str | None, offset: int | None, backend: str | None) -> NoReturn:
        raise IntegrityError(
            f"integrity check failed: {why}",
            offset=offset,
            path=path,
            backend=backend,
            operation="verify",
        )

    def __repr__(self) -> str:
        return "Signer(key=<hidden>)"

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a Signer holds a secret key and is not picklable: pickle the setting (a "
            "${env:NAME} / ${file:/path} reference) and call Signer.from_setting where it is used"
        )
