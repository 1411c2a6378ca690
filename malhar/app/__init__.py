"""How an application is named and loaded (``malhar run APP``, ``malhar validate APP``).

An application populates a :class:`~malhar.dag.DAG`. It can be:

- a function ``app(dag, config)`` (or ``app(dag)``), or a function of no arguments
  returning a DAG;
- a class with ``populate_dag(self, dag, config)`` (Apex's ``StreamingApplication``),
  or an instance of one;
- a ready :class:`~malhar.dag.DAG` object;
- a JSON file naming registered operators (see :func:`application_from_json`).

``APP`` names it as one of:

- ``package.module:attr`` (the current directory is importable, as with ``python -m``);
- ``path/to/file.py:attr``, or ``path/to/file.py`` alone (then ``application`` or ``app``,
  or the module's only class with ``populate_dag``);
- ``path/to/app.json``;
- the name of an entry point in the ``malhar.applications`` group (what an installed
  pack registers; see :mod:`malhar.registry`).

``config`` is a plain dict handed to the application. Keys in Apex's form set
attributes and properties after the DAG is populated, whatever kind of application
it is (``*`` as operator name means every operator)::

    dt.attr.STREAMING_WINDOW_MS=200
    dt.operator.src.attr.PARTITIONS=2
    dt.operator.src.prop.topic=words
    dt.operator.count.port.input.attr.PARALLEL_PARTITION=true
"""

from malhar.app.config import CONFIG_PREFIXES, apply_config, construct, parse_config, parse_value
from malhar.app.json_doc import application_from_json
from malhar.app.loading import DEFAULT_ATTRIBUTES, Resolved, load_application, resolve
from malhar.errors import ApplicationError

__all__ = [
    "CONFIG_PREFIXES",
    "DEFAULT_ATTRIBUTES",
    "ApplicationError",
    "Resolved",
    "application_from_json",
    "apply_config",
    "construct",
    "load_application",
    "parse_config",
    "parse_value",
    "resolve",
]
