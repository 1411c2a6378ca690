"""malhar: Apache Apex Malhar's connectors and operators, with exactly-once delivery, on PySpark.

The public API of the core engine:

- operators: :class:`Operator`, :class:`InputOperator`, :class:`Unifier`,
  :class:`ActivationListener`, :class:`CheckpointListener`, :class:`OperatorContext`
- ports: :class:`InputPort`, :class:`OutputPort`; configuration: :class:`Property`;
  checkpointed state: :class:`State`
- applications: :class:`DAG`, :class:`ProcessingMode`, :class:`StreamCodec`,
  :class:`KeyCodec`, the attribute constants in :mod:`malhar.attributes`
- control tuples: :class:`ControlTuple`, :class:`DeliveryType`, :class:`ControlSender`
- running: :func:`launch`, :func:`run`, :func:`build_session`, :class:`ApplicationFailed`
- errors: :class:`MalharError`, the base of every error malhar raises

Names are imported on first use: ``import malhar.util`` or ``import malhar.io`` does
not start importing PySpark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time names load on first use
    from malhar import attributes
    from malhar.attributes import ProcessingMode
    from malhar.codec import KeyCodec, StreamCodec
    from malhar.control import ControlSender, ControlTuple, DeliveryType
    from malhar.dag import DAG
    from malhar.engine.failure import ApplicationFailed
    from malhar.engine.launcher import RunningApplication, launch, run
    from malhar.errors import ConfigError, ConfigWarning, MalharError, OperatorError, StateError
    from malhar.operator import (
        ActivationListener,
        CheckpointListener,
        InputOperator,
        Operator,
        OperatorContext,
        PassThroughUnifier,
        Unifier,
    )
    from malhar.ports import InputPort, OutputPort
    from malhar.preflight import ConnectionCheck, check_connections
    from malhar.properties import Property, PropertyError
    from malhar.session import build_session, session_conf
    from malhar.state import DividedByKey, State
    from malhar.validation import ValidationError

_EXPORTS: dict[str, str] = {
    "ActivationListener": "malhar.operator",
    "ApplicationFailed": "malhar.engine.failure",
    "DividedByKey": "malhar.state",
    "CheckpointListener": "malhar.operator",
    "ConfigError": "malhar.errors",
    "ConfigWarning": "malhar.errors",
    "ConnectionCheck": "malhar.preflight",
    "ControlSender": "malhar.control",
    "ControlTuple": "malhar.control",
    "DAG": "malhar.dag",
    "DeliveryType": "malhar.control",
    "InputOperator": "malhar.operator",
    "InputPort": "malhar.ports",
    "KeyCodec": "malhar.codec",
    "MalharError": "malhar.errors",
    "Operator": "malhar.operator",
    "OperatorContext": "malhar.operator",
    "OperatorError": "malhar.errors",
    "OutputPort": "malhar.ports",
    "PassThroughUnifier": "malhar.operator",
    "ProcessingMode": "malhar.attributes",
    "Property": "malhar.properties",
    "PropertyError": "malhar.properties",
    "RunningApplication": "malhar.engine.launcher",
    "State": "malhar.state",
    "StateError": "malhar.errors",
    "StreamCodec": "malhar.codec",
    "Unifier": "malhar.operator",
    "ValidationError": "malhar.validation",
    "build_session": "malhar.session",
    "check_connections": "malhar.preflight",
    "launch": "malhar.engine.launcher",
    "run": "malhar.engine.launcher",
    "session_conf": "malhar.session",
}

__all__ = [
    "DAG",
    "ActivationListener",
    "ApplicationFailed",
    "CheckpointListener",
    "ConfigError",
    "ConfigWarning",
    "ConnectionCheck",
    "ControlSender",
    "ControlTuple",
    "DeliveryType",
    "DividedByKey",
    "InputOperator",
    "InputPort",
    "KeyCodec",
    "MalharError",
    "Operator",
    "OperatorContext",
    "OperatorError",
    "OutputPort",
    "PassThroughUnifier",
    "ProcessingMode",
    "Property",
    "PropertyError",
    "RunningApplication",
    "State",
    "StateError",
    "StreamCodec",
    "Unifier",
    "ValidationError",
    "attributes",
    "build_session",
    "check_connections",
    "launch",
    "run",
    "session_conf",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        if name == "attributes":
            return importlib.import_module("malhar.attributes")
        raise AttributeError(f"module 'malhar' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
