"""Environment params: scalar arrays declared with their default and range.

See docs/environments.md ("Params") for how and where the checks run.
"""

import dataclasses
import itertools
from typing import Any, ClassVar, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, Bool

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Spec:
    """One field's default, allowed interval and dtype.

    Values must be finite and in `[low, high]` (an end is open with `low_open`
    or `high_open`; None is unbounded); `integer` fields are int32 and take
    whole numbers only, the others float32.
    """

    default: float | int
    low: float | int | None = None
    high: float | int | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    @property
    def dtype(self) -> Any:
        return jnp.int32 if self.integer else jnp.float32

    def allowed(self) -> str:
        """What the field takes, in words: `"finite and in (0.0, inf)"`."""
        left = "(" if self.low_open or self.low is None else "["
        right = ")" if self.high_open or self.high is None else "]"
        low = "-inf" if self.low is None else f"{self.low}"
        high = "inf" if self.high is None else f"{self.high}"
        kind = "a whole number in" if self.integer else "finite and in"
        return f"{kind} {left}{low}, {high}{right}"

    def outside(self, value: Any) -> Any:
        """True where `value` is non-finite or out of range.

        NumPy in, NumPy out (construction, eager resets); JAX in, JAX out (a
        traced check).
        """
        xp = jnp if isinstance(value, jax.Array) else np
        bad = ~xp.isfinite(value)
        if self.low is not None:
            bad = bad | (value <= self.low if self.low_open else value < self.low)
        if self.high is not None:
            bad = bad | (value >= self.high if self.high_open else value > self.high)
        return bad


def param(
    default: float | int,
    *,
    low: float | int | None = None,
    high: float | int | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
) -> Any:
    """Declare a params field: its default and allowed range (see `Spec`)."""
    spec = Spec(default, low, high, low_open, high_open, integer)
    return eqx.field(metadata={"spec": spec})


def positive(default: float) -> Any:
    """A float field in (0, inf)."""
    return param(default, low=0.0, low_open=True)


def non_negative(default: float) -> Any:
    """A float field in [0, inf)."""
    return param(default, low=0.0)


def fraction(default: float) -> Any:
    """A float field in [0, 1] (a probability, a rate per step, a share)."""
    return param(default, low=0.0, high=1.0)


def count(default: int) -> Any:
    """An int32 field >= 1 (a number of steps)."""
    return param(default, low=1, integer=True)


def _is_traced(value: Any) -> bool:
    # Traced values cannot be compared in Python: they are checked in the
    # program (if at all), concrete ones at once.
    return isinstance(value, jax.core.Tracer)  # pyright: ignore[reportAttributeAccessIssue]


class AbstractParams(eqx.Module):
    """Base of environment params: declared fields, checked (docs/environments.md).

    Arguments:
        **values: a value per field to set (keyword only; a Python number, a
            NumPy or JAX scalar, or a traced scalar); the others take their
            declared default.
    """

    orders: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """Chains of fields whose values must be non-decreasing in the order given."""

    def __init__(self, **values: Any):
        cls = type(self)
        specs = cls.specs()
        unknown = sorted(set(values) - set(specs))
        if unknown:
            raise TypeError(
                f"{cls.__name__} has no parameter {unknown[0]!r}; its parameters are "
                + ", ".join(specs)
            )
        for name, spec in specs.items():
            value = values.get(name, spec.default)
            setattr(self, name, _convert(cls.__name__, name, spec, value))
        self.checked(None, traced=False)

    @classmethod
    def specs(cls) -> dict[str, Spec]:
        """Every field's `Spec`, in field order."""
        return {f.name: f.metadata["spec"] for f in dataclasses.fields(cls)}

    def checked(self, value: _T, *, traced: bool) -> _T:
        """`value`, once every field has passed its checks.

        A concrete field out of range (or out of order) raises a `ValueError`
        at once. Traced fields are checked only with `traced=True` (the
        environment's `traced_param_checks`): `value` comes back wrapped in an
        `eqx.branched_error_if` naming the first bad field. Without it, `value`
        comes back unchanged and the program gets nothing.
        """
        owner = type(self).__name__
        rules: list[tuple[str, Bool[Array, ""]]] = []
        for name, spec in self.specs().items():
            x = getattr(self, name)
            _check_kind(owner, name, spec, x)
            if not _is_traced(x):
                _check_value(owner, name, spec, x)
            elif traced:
                rules.append((f"{name} must be {spec.allowed()}", spec.outside(x)))
        for chain in self.orders:
            for a, b in itertools.pairwise(chain):
                xa, xb = getattr(self, a), getattr(self, b)
                if not (_is_traced(xa) or _is_traced(xb)):
                    if float(xa) > float(xb):
                        raise ValueError(
                            f"{owner}: {a} must be <= {b}; got {a}={_show(xa)}, "
                            f"{b}={_show(xb)}"
                        )
                elif traced:
                    rules.append((f"{a} must be <= {b}", xa > xb))
        if not rules:
            return value
        # One branched_error_if for every rule: a single host callback, whose
        # message names the first field that fails.
        bad = jnp.stack([rule for _, rule in rules])
        messages = tuple(f"{owner}: {m} (a traced value is not)" for m, _ in rules)
        return eqx.branched_error_if(value, jnp.any(bad), jnp.argmax(bad), messages)


def _convert(owner: str, name: str, spec: Spec, value: Any) -> Array:
    """`value` as a strongly typed scalar array of the field's dtype, checked.

    Concrete values are checked as stored (a float field in float32), so a value
    that passes here passes every later check too.
    """
    if _is_traced(value):
        _check_kind(owner, name, spec, value)
        return jnp.asarray(value, spec.dtype)
    array = np.asarray(value)
    _check_kind(owner, name, spec, array, value)
    if spec.integer:  # a whole number in range before the cast to int32
        wide = array.astype(np.float64)
        _check_value(owner, name, spec, wide, value)
        if not np.iinfo(np.int32).min <= wide <= np.iinfo(np.int32).max:
            raise ValueError(f"{owner}: {name} must fit in int32; got {_show(value)}")
    stored = array.astype(np.dtype(spec.dtype))
    _check_value(owner, name, spec, stored, value)
    return jnp.asarray(stored)


def _show(value: Any) -> str:
    """A concrete scalar as its shortest text (`0.95`, not `0.949999988`)."""
    return str(np.asarray(value)[()])


def _check_kind(
    owner: str, name: str, spec: Spec, value: Any, given: Any = None
) -> None:
    """What holds without looking at the value: a real scalar of the right kind."""
    kind = np.dtype(value.dtype).kind
    if kind not in "iuf":
        shown = value if given is None else given
        raise ValueError(
            f"{owner}: {name} must be a number ({spec.allowed()}); got {shown!r}"
        )
    if np.shape(value) != ():
        raise ValueError(
            f"{owner}: {name} must be a scalar; got an array of shape "
            f"{np.shape(value)} (vmap over stacked params to run several variants)"
        )
    if spec.integer and kind == "f" and _is_traced(value):
        raise ValueError(
            f"{owner}: {name} must be {spec.allowed()}; got a traced "
            f"{np.dtype(value.dtype).name} value (pass an integer array)"
        )


def _check_value(
    owner: str, name: str, spec: Spec, value: Any, given: Any = None
) -> None:
    """A concrete value in range, compared in its own dtype (as JAX compares)."""
    array = np.asarray(value)
    whole = not spec.integer or array.dtype.kind != "f" or array == np.round(array)
    if bool(spec.outside(array)) or not whole:
        shown = _show(value if given is None else given)
        raise ValueError(f"{owner}: {name} must be {spec.allowed()}; got {shown}")


__all__ = [
    "AbstractParams",
    "Spec",
    "count",
    "fraction",
    "non_negative",
    "param",
    "positive",
]
