"""report.md's cells and tables: numbers, 95% intervals ("n too small" below
`MIN_RUNS_FOR_CI`) and markdown tables."""

import math
from collections.abc import Sequence
from typing import Any

from .intervals import MIN_RUNS_FOR_CI

TOO_FEW = "n too small"
"""What a table shows in place of a CI its runs cannot support."""


def fmt(value: Any, digits: int = 4) -> str:
    """A table cell: a float to `digits` significant digits, "–" for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def ci(row: Any, prefix: str, n: int) -> str:
    """`[low, high]` from the row's `<prefix>_ci_low` and `<prefix>_ci_high`, or
    `[n too small]` with fewer than `MIN_RUNS_FOR_CI` runs."""
    if n < MIN_RUNS_FOR_CI:
        return f"[{TOO_FEW}]"
    return f"[{fmt(row[f'{prefix}_ci_low'])}, {fmt(row[f'{prefix}_ci_high'])}]"


def markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table, every entry through `fmt`."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


__all__ = ["TOO_FEW", "ci", "fmt", "markdown"]
