"""Suggestions for a mistyped name: the one place that says "did you mean ...?"."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_matches", "did_you_mean"]


def close_matches(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three of ``candidates`` that look like ``name`` (case differences first)."""
    candidates = list(candidates)
    same_case = [c for c in candidates if c.lower() == name.lower()]
    fuzzy = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    lower = {c.lower(): c for c in candidates}
    fuzzy += [
        lower[c] for c in difflib.get_close_matches(name.lower(), list(lower), n=3, cutoff=0.6)
    ]
    return list(dict.fromkeys([*same_case, *fuzzy]))[:3]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest candidates, or ``""``."""
    hint = close_matches(name, candidates)
    return f"; did you mean {' or '.join(map(repr, hint))}?" if hint else ""
