"""The `eqxevo` command's entry point (and `python -m eqxevo`).

Ctrl-C and SIGTERM are taken over on its first line, before click, JAX or any
other part of eqxevo is imported: a signal at any moment of any command, imports
included, ends it with one line and 128 + signal (docs/internals.md,
"Interrupts"). Keep this module's imports to the standard library and
`eqxevo._app.interrupts`.
"""

from ._app.interrupts import guard_process


def main() -> None:
    """Run the `eqxevo` command line with signals handled from the start."""
    with guard_process():
        from ._app.cli import main as command_line

        command_line(prog_name="eqxevo")


if __name__ == "__main__":
    main()
