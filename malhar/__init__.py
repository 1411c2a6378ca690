"""malhar: Apache Apex Malhar's connectors and operators, with exactly-once delivery, on PySpark."""

from malhar.session import build_session, session_conf

__all__ = ["build_session", "session_conf"]
__version__ = "0.1.0"
