"""What every `eqxevo` command shares: help layout and one-line errors."""

from typing import NoReturn

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
"""Context settings of every command: `-h` and `--help`, 100 columns."""


def fail(err: Exception) -> NoReturn:
    """Stop the command with `err`'s message as one line (`Error: ...`, exit 1)."""
    raise click.ClickException(str(err)) from err


__all__ = ["CONTEXT", "fail"]
