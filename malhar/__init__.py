"""malhar: Apache Apex Malhar's connectors and operators, with exactly-once delivery, on PySpark.

The public API of the core engine:

- operators: :class:`Operator`, :class:`InputOperator`, :class:`Unifier`,
  :class:`ActivationListener`, :class:`CheckpointListener`, :class:`OperatorContext`
- ports: :class:`InputPort`, :class:`OutputPort`; properties: :class:`Property`
- applications: :class:`DAG`, :class:`ProcessingMode`, :class:`StreamCodec`, :class:`KeyCodec`
- control tuples: :class:`ControlTuple`, :class:`DeliveryType`
- running: :func:`launch`, :func:`run`, :func:`build_session`, :class:`ApplicationFailed`
"""

from malhar.attributes import ProcessingMode
from malhar.codec import KeyCodec, StreamCodec
from malhar.control import ControlTuple, DeliveryType
from malhar.dag import DAG
from malhar.engine.failure import ApplicationFailed
from malhar.engine.launcher import RunningApplication, launch, run
from malhar.engine.task import OperatorError
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
from malhar.properties import Property, PropertyError
from malhar.session import build_session, session_conf
from malhar.validation import ValidationError

__all__ = [
    "DAG",
    "ActivationListener",
    "ApplicationFailed",
    "CheckpointListener",
    "ControlTuple",
    "DeliveryType",
    "InputOperator",
    "InputPort",
    "KeyCodec",
    "Operator",
    "OperatorContext",
    "OperatorError",
    "OutputPort",
    "PassThroughUnifier",
    "ProcessingMode",
    "Property",
    "PropertyError",
    "RunningApplication",
    "StreamCodec",
    "Unifier",
    "ValidationError",
    "build_session",
    "launch",
    "run",
    "session_conf",
]
__version__ = "0.1.0"
