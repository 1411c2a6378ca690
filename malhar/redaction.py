"""The one path that keeps secrets out of logs, errors, listings and command output.

- :func:`is_secret_key`: whether a setting's *name* says its value is secret
  (``sasl.password``, ``ssl.key.password``, ``sasl.oauthbearer.config``, ``api_key``...);
- :func:`redact`: a copy of any value, nested mappings and lists included, with
  secret values and URL passwords masked;
- :func:`secret_values` and :class:`Scrubber`: the secret strings found in a value,
  and a text filter that masks them wherever they appear (error messages, plans).

Example:
    >>> redact({"bootstrap.servers": "b:9092", "consumer": {"sasl.password": "pw"},
    ...         "url": "postgresql://app:pw@db/x"})
    {'bootstrap.servers': 'b:9092', 'consumer': {'sasl.password': '***'}, 'url': 'postgresql://app:***@db/x'}
    >>> scrub = Scrubber()
    >>> scrub.add({"sasl.password": "hunter22"})
    >>> scrub("login failed with hunter22")
    'login failed with ***'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

__all__ = [
    "MASK",
    "Scrubber",
    "is_secret_key",
    "redact",
    "redact_config",
    "redact_url",
    "url_password",
]

_SECRET_KEY = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|credential|private|jaas|key\.pem|api[_.-]?key"
    r"|integrity[_.-]?key"
    r"|oauthbearer\.config|user\.info|auth\.info)",
    re.I,
)
#: ``scheme://user:password@``. The password runs to the last ``@`` of the URL: SQLAlchemy
#: takes ``/ ? # : [ ]`` into a password unencoded (``urlsplit`` would read them as the path or
#: fail), and an unencoded ``@`` in a password must not leave its tail in the host. So an
#: ``@`` in the path or query of a URL with a port and no user masks too much, never too
#: little. ``scheme//`` (a forgotten colon) is masked the same way.
_URL_PASSWORD = r"(?P<head>\b[a-zA-Z][\w+.-]*:?//[^\s:/@]*:)(?P<password>\S*)@"
_URL = re.compile(_URL_PASSWORD)
#: ``?password=...`` / ``&sslpassword=...``: a query parameter, masked when its name is a
#: secret's (libpq and JDBC drivers take passwords there too)
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<key>[^\s=&;#?]+)=)(?P<value>[^\s&;#]+)")
MASK = "***"


def is_secret_key(key: str) -> bool:
    """True for settings whose value must never be shown (``sasl.password``, ``api_key``...)."""
    return bool(_SECRET_KEY.search(key))


def redact_url(url: str) -> str:
    """``scheme://user:***@host/...?password=***``: the URL with its password masked, in
    its user part and in query parameters with a secret's name (any text: a URL that does
    not parse is masked the same way).

    Example:
        >>> redact_url("postgresql://app:pw@db:5432/shop?sslmode=require&sslpassword=k")
        'postgresql://app:***@db:5432/shop?sslmode=require&sslpassword=***'
    """
    masked = _mask_url(url)
    if "%" in masked:
        # a URL inside a query value, percent-encoded (``?webhdfs=http%3A%2F%2Fu%3Apw%40nn``):
        # its password shows once decoded, so it is masked in the decoded text
        decoded = unquote(masked)
        again = _mask_url(decoded)
        if again != decoded:
            return again
    return masked


def _mask_url(url: str) -> str:
    masked = _URL.sub(rf"\g<head>{MASK}@", url)
    if "=" not in masked:
        return masked
    return _QUERY_PARAM.sub(_mask_param, masked)


def _mask_param(found: re.Match[str]) -> str:
    return found["head"] + MASK if is_secret_key(found["key"]) else found[0]


def url_password(url: str) -> str | None:
    """The password of ``scheme://user:password@...`` (None without one), read as
    :func:`redact_url` masks it."""
    found = _URL.search(url)
    return found.group("password") if found is not None else None


def redact(value: Any, key: str | None = None) -> Any:
    """A copy of ``value`` with every secret masked: values under secret keys (at any
    depth of mappings, lists and tuples) and passwords in URLs."""
    if key is not None and is_secret_key(str(key)) and value not in (None, ""):
        return MASK
    if isinstance(value, Mapping):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str) and "//" in value:
        return redact_url(value)
    return value


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`redact` of a mapping of settings."""
    return redact(dict(config))


def secret_values(value: Any, key: str | None = None, *, secret: bool = False) -> set[str]:
    """The secret strings inside ``value`` (``secret``: the value itself is one)."""
    found: set[str] = set()
    secret = secret or (key is not None and is_secret_key(str(key)))
    if isinstance(value, Mapping):
        for k, v in value.items():
            found |= secret_values(v, str(k), secret=secret)
    elif isinstance(value, list | tuple | set):
        for v in value:
            found |= secret_values(v, secret=secret)
    elif isinstance(value, str) and value:
        if secret:
            found.add(value)
        elif "//" in value and (password := url_password(value)):
            found.add(password)
    elif secret and isinstance(value, int | float | bytes) and not isinstance(value, bool):
        found.add(str(value))  # a password of digits given unquoted: refused, never shown
    return found


class Scrubber:
    """Masks known secret strings, and any URL password, in text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: set[str] = set(secrets)

    def add(self, value: Any, key: str | None = None, *, secret: bool = False) -> None:
        """Remember the secrets inside ``value`` (a setting, a mapping, a list ...)."""
        self.secrets |= secret_values(value, key, secret=secret)

    def add_operators(self, operators: Iterable[Any]) -> None:
        """Remember the secrets in the properties of ``operators`` (secret properties and
        secret keys at any depth of their values)."""
        from malhar.properties import properties_of

        for op in operators:
            for name, prop in properties_of(type(op)).items():
                self.add(getattr(op, name, None), name, secret=prop.secret)

    def __call__(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(repr(secret), repr(MASK))
            if len(secret) >= 4:  # masking "a" everywhere would shred the text
                text = text.replace(secret, MASK)
        return redact_url(text)
