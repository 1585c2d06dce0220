"""`Strategy`: any evosax algorithm over populations of an Equinox module.

`strategy.py` holds the class, `algorithm.py` the evosax instance it wraps,
`base.py` the family interface; one module per family (see docs/internals.md)."""
