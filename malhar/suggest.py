"""Suggestions for a mistyped name: the one place that says "did you mean ...?"."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_matches", "did_you_mean"]

#: how like the name a candidate must be (difflib's ratio, case ignored) to be suggested
CUTOFF = 0.6
#: how far behind the best candidate another may be: ``ListInpt`` suggests ``ListInput``,
#: not also ``Distinct`` (0.94 against 0.63), while two near misses are both offered
MARGIN = 0.1


def close_matches(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three of ``candidates`` that look like ``name``, closest first (a name that
    differs only in case before any other); none when nothing is close."""
    wanted = name.lower()
    scored: dict[str, float] = {}
    for candidate in candidates:
        folded = candidate.lower()
        if folded == wanted:
            scored[candidate] = 2.0
            continue
        matcher = difflib.SequenceMatcher(None, wanted, folded)
        if matcher.real_quick_ratio() >= CUTOFF and matcher.quick_ratio() >= CUTOFF:
            ratio = matcher.ratio()
            if ratio >= CUTOFF:
                scored[candidate] = ratio
    if not scored:
        return []
    best = max(scored.values())
    close = [c for c, score in scored.items() if score >= min(best, 1.0) - MARGIN]
    return sorted(close, key=lambda c: -scored[c])[:3]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest candidates, or ``""``."""
    hint = close_matches(name, candidates)
    return f"; did you mean {' or '.join(map(repr, hint))}?" if hint else ""
