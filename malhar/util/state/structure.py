"""What every spillable structure shares: its key range, codec errors, one metadata counter."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, ClassVar

from malhar.util.state.codecs import Codec
from malhar.util.state.errors import StateCodecError, StateError
from malhar.util.state.keys import KIND_NAMES, META, prefix_end, structure_prefix

if TYPE_CHECKING:
    from malhar.util.state.manager import ManagedState

_Q = struct.Struct("<q")


class Structure:
    """Base of the structures: ``KIND`` byte, key prefix, a persisted int ``_meta``.

    The metadata (a size, a length, an expiry horizon) lives in Python while the
    window runs and is written into the overlay by ``_flush_meta`` just before a
    checkpoint; it is reloaded after every restore (``state.epoch`` changes).
    """

    KIND: ClassVar[bytes]
    META_DEFAULT: ClassVar[int] = 0

    def __init__(self, state: ManagedState, name: str, key_codec: Any, value_codec: Codec) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"state name must be a non-empty str, got {name!r}")
        self._state = state
        self.name = name
        self.key_codec = key_codec
        self.value_codec = value_codec
        self._prefix = structure_prefix(name, self.KIND)
        self._end = prefix_end(self._prefix)
        self._plen = len(self._prefix)
        self._meta_key = structure_prefix(name, META)
        self._meta_epoch = -1
        self._meta_value = self.META_DEFAULT
        self._meta_dirty = False
        self._ekey = key_codec.encode if key_codec is not None else None
        self._evalue = value_codec.encode
        self._dvalue = value_codec.decode

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # reloaded from the state after the next restore; never carried across processes
        state.update(_meta_epoch=-1, _meta_value=self.META_DEFAULT, _meta_dirty=False)
        return state

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self._state.where})"

    # -- codec errors name the operator, the structure and the key type ----------------------
    def _describe(self) -> str:
        return f"{self._state.where}: {KIND_NAMES[self.KIND]} {self.name!r}"

    def _ek(self, key: Any) -> bytes:
        try:
            return self._ekey(key)  # type: ignore[misc]
        except StateCodecError:
            raise
        except Exception as exc:
            raise StateCodecError(
                f"{self._describe()} cannot encode a key of type {type(key).__name__} "
                f"with key codec {self.key_codec.name!r}: {exc}"
            ) from exc

    def _ev(self, value: Any, key: Any) -> bytes:
        try:
            return self._evalue(value)
        except StateCodecError:
            raise
        except Exception as exc:
            raise StateCodecError(
                f"{self._describe()} cannot encode a value of type {type(value).__name__} "
                f"(key type {type(key).__name__}) with value codec "
                f"{self.value_codec.name!r}: {exc}"
            ) from exc

    # -- metadata -----------------------------------------------------------------------------
    @property
    def _meta(self) -> int:
        st = self._state
        if self._meta_epoch != st.epoch:
            raw = st.get_raw(self._meta_key)
            if raw is None:
                self._meta_value = self.META_DEFAULT
            elif raw[:1] != self.KIND:
                raise StateError(
                    f"{st.where}: state {self.name!r} was checkpointed as a "
                    f"{KIND_NAMES.get(raw[:1], repr(raw[:1]))}, not a {KIND_NAMES[self.KIND]}"
                )
            else:
                self._meta_value = _Q.unpack_from(raw, 1)[0]
            self._meta_epoch = st.epoch
            self._meta_dirty = False
        return self._meta_value

    @_meta.setter
    def _meta(self, value: int) -> None:
        _ = self._meta  # load first (checks the kind)
        if value != self._meta_value:
            self._meta_value = value
            self._meta_dirty = True

    def _flush_meta(self) -> None:
        if self._meta_dirty and self._meta_epoch == self._state.epoch:
            self._state.put_raw(self._meta_key, self.KIND + _Q.pack(self._meta_value))
            self._meta_dirty = False


__all__ = ["Structure"]
