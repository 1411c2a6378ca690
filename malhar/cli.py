"""The ``malhar`` command line."""

from __future__ import annotations

import click

from malhar.testing.cli import services


@click.group()
@click.version_option(package_name="malhar")
def cli() -> None:
    """malhar: Apex Malhar connectors and operators with exactly-once delivery, on PySpark."""


cli.add_command(services)


def main() -> None:
    cli()
