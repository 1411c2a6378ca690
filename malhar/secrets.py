"""Secret references: ``${env:NAME}`` and ``${file:/path}`` in place of a secret value.

A property or option holding a reference keeps the secret itself out of the
operator's state, the checkpoint and the plan Spark ships to its executors: the
value is read where it is used (in the Python worker, at ``setup``), from that
process's environment or filesystem.

    >>> import os
    >>> os.environ["DEMO_PW"] = "s3cret"
    >>> resolve("${env:DEMO_PW}", "password")
    's3cret'
    >>> resolve("plain value")
    'plain value'
"""

from __future__ import annotations

import os
import re
from typing import Any

from malhar.errors import ConfigError

_REFERENCE = re.compile(r"^\$\{(env|file):([^}]+)\}$")


class SecretReferenceError(ConfigError):
    """A ``${env:...}`` / ``${file:...}`` reference that cannot be read."""


def is_reference(value: Any) -> bool:
    """True for a string of the form ``${env:NAME}`` or ``${file:/path}``."""
    return isinstance(value, str) and _REFERENCE.match(value.strip()) is not None


def resolve(value: Any, key: str = "?") -> Any:
    """The value a reference names; any other value unchanged.

    Raises:
        SecretReferenceError: the variable is not set or the file cannot be read
            (the message names ``key`` and the reference, never a secret).
    """
    if not isinstance(value, str):
        return value
    match = _REFERENCE.match(value.strip())
    if match is None:
        return value
    kind, name = match.groups()
    if kind == "env":
        if name not in os.environ:
            raise SecretReferenceError(f"setting {key!r}: environment variable {name!r} is not set")
        return os.environ[name]
    try:
        with open(name, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as exc:
        raise SecretReferenceError(
            f"setting {key!r}: cannot read {name!r}: {exc.strerror}"
        ) from None
