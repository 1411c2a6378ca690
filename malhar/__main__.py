"""``python -m malhar``: the same as the ``malhar`` command."""

from malhar.cli import main

main()
