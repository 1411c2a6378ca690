"""Connector bases: the contracts a connector author subclasses (see ``docs/howto-input.md``).

- :class:`ReplayableInput`: an input operator that replays a window exactly, recording
  per window what it read in the partition's window data manager.
"""

from malhar.io.base.input import ReplayableInput, ReplayError, WindowRecord

__all__ = ["ReplayError", "ReplayableInput", "WindowRecord"]
