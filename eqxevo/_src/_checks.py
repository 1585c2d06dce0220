"""Argument checks shared by every module: one message per kind of bad value."""

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def _is_int(value: Any) -> bool:
    # bool is an int to Python; never a size or a count here.
    return isinstance(value, int | np.integer) and not isinstance(
        value, bool | np.bool_
    )


def positive_int(name: str, value: Any) -> int:
    """`value` as an int, or a `ValueError` naming `name` unless it is an int >= 1."""
    return int_at_least(name, value, 1)


def int_at_least(name: str, value: Any, minimum: int) -> int:
    """`value` as an int, or a `ValueError` unless it is an int >= `minimum`."""
    if not _is_int(value) or value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {what}; got {value!r}")
    return int(value)


def optional_positive_int(name: str, value: Any, none_means: str) -> int | None:
    """`value` (None allowed, meaning `none_means`), else as `positive_int`."""
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise ValueError(
            f"{name} must be None ({none_means}) or a positive int; got {value!r}"
        )
    return int(value)


def positive_number(name: str, value: Any) -> float:
    """`value` as a float, or a `ValueError` unless it is a finite number > 0."""
    if (
        not isinstance(value, int | float | np.integer | np.floating)
        or isinstance(value, bool | np.bool_)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    return float(value)


def one_of(name: str, value: Any, allowed: tuple[Any, ...]) -> Any:
    """`value`, or a `ValueError` listing `allowed`."""
    if not isinstance(value, str | int | float | bool | None) or value not in allowed:
        shown = " | ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {shown}; got {value!r}")
    return value


def did_you_mean(
    name: str,
    choices: Iterable[str],
    *,
    n: int = 1,
    prefix: str = "",
    quote: bool = False,
    cutoff: float = 0.6,
) -> str:
    """' (did you mean X?)' naming the `n` closest `choices` to a misspelled
    `name` (case-only differences too), each written `prefix + choice` (quoted
    with `quote`); '' when none is close."""
    choices = list(choices)
    close = difflib.get_close_matches(name, choices, n=n, cutoff=cutoff)
    # difflib misses case-only differences ("Snes" for "SNES"): add them.
    close += [c for c in choices if c.lower() == name.lower() and c not in close]
    if not close:
        return ""
    named = [repr(prefix + c) if quote else prefix + c for c in close]
    return f" (did you mean {', '.join(named)}?)"


def known_name(
    name: str, names: Sequence[str], unknown: str, *, prefix: str, listed: str
) -> str:
    """`name` if it is one of `names`; else a ValueError: `unknown`, the closest
    of `names` (written `prefix + name`), then `listed` and every name."""
    if name in names:
        return name
    raise ValueError(
        unknown
        + did_you_mean(name, names, prefix=prefix, quote=True)
        + f"; {listed}: {', '.join(names)}"
    )


def dotted_keys(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as one level of dotted keys: `{"run": {"seed": 0}}` and
    `{"run.seed": 0}` both give the latter (config keys, leaf paths)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(dotted_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


__all__ = [
    "did_you_mean",
    "dotted_keys",
    "int_at_least",
    "known_name",
    "one_of",
    "optional_positive_int",
    "positive_int",
    "positive_number",
]
