"""Keep secrets out of logs, errors and listings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_SECRET_KEY = re.compile(r"(pass(word)?|secret|token|credential|private|sasl\.jaas|key\.pem)", re.I)
MASK = "***"


def redact_url(url: str) -> str:
    """``scheme://user:***@host/...``: the URL with its password masked."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{netloc}"))


def is_secret_key(key: str) -> bool:
    """True for settings whose value must never be shown (``sasl.password``, ``ssl.key.password``...)."""
    return bool(_SECRET_KEY.search(key))


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with secret values masked and URLs' passwords masked."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if is_secret_key(str(key)):
            out[key] = MASK
        elif isinstance(value, str) and "://" in value:
            out[key] = redact_url(value)
        else:
            out[key] = value
    return out
