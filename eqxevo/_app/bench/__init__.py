"""The benchmark harness (`eqxevo bench`): every figure of docs/performance.md;
`cli.py` is the command, `parts.py` its parts (public names: none; it is run as
the command)."""
