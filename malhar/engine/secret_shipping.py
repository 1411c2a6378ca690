"""Literal secrets travel to the executors through their environment, not the plan.

The plan Spark ships to its executors is a pickle of the application's configured
operators. A property that holds a literal secret (a ``secret=True`` property, a
value under a secret key of a mapping such as ``consumer_config``, a URL with a
password) would travel in it in clear. For every property whose operator reads
``${env:...}`` references (``Property(references=True)``, implied by ``secret``),
``launch`` replaces each literal secret in the shipped copy by a reference
``${env:MALHAR_SECRET_<digest>}`` and puts the value in the environment of Spark's
Python workers (``SparkContext.environment``: handed to every Python function Spark
starts, never written to the checkpoint, the plan or the event log). The operator
resolves the reference in ``setup`` as it resolves references a user wrote.

Secrets in other properties cannot be moved (their operator would not resolve a
reference): ``launch`` warns about them by name (never value).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from malhar.dag import DAG
from malhar.properties import Property, properties_of
from malhar.redaction import is_secret_key, secret_values
from malhar.secrets import is_reference

PREFIX = "MALHAR_SECRET_"


def _reference(value: str, environment: dict[str, str]) -> str:
    name = PREFIX + hashlib.sha256(value.encode()).hexdigest()[:16].upper()
    environment[name] = value
    return "${env:" + name + "}"


def _strip(value: Any, prop: Property, key: str | None, environment: dict[str, str]) -> Any:
    """``value`` with its literal secrets replaced by references (what the operator reads)."""
    if isinstance(value, Mapping):
        return {k: _strip(v, prop, str(k), environment) for k, v in value.items()}
    if not isinstance(value, str) or not value or is_reference(value):
        return value
    secret = prop.secret if key is None else is_secret_key(key)
    if secret or (key is None and secret_values(value)):  # a URL with a password
        return _reference(value, environment)
    return value


def ship_secrets(dag: DAG, environment: dict[str, str]) -> tuple[DAG, list[str]]:
    """A copy of ``dag`` whose operators hold references instead of literal secrets
    (their values added to ``environment``), and ``operator.property`` of the literal
    secrets that could not be moved."""
    shipped = copy.copy(dag)
    shipped.operators = {}
    left: list[str] = []
    for name, meta in dag.operators.items():
        operator = meta.operator
        changed: dict[str, Any] = {}
        for pname, prop in properties_of(type(operator)).items():
            value = operator.__dict__.get(pname)
            literal = [
                v for v in secret_values(value, pname, secret=prop.secret) if not is_reference(v)
            ]
            if not literal:
                continue
            if not prop.references:
                left.append(f"{name}.{pname}")
                continue
            changed[pname] = _strip(value, prop, None, environment)
        if changed:
            operator = operator.clone()
            operator.__dict__.update(changed)  # references: no constraint to re-check
        shipped.operators[name] = dataclasses.replace(meta, operator=operator)
    return shipped, left
