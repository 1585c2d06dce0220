"""The evosax instance behind a `Strategy`: built, compared by behaviour, its params."""

import dataclasses
import hashlib
import inspect
from typing import TYPE_CHECKING, Any

import jax.random as jr
import numpy as np

from .._types import FlatGenome
from ..registry import StrategySpec
from .base import AbstractFamily, standard_promotion

if TYPE_CHECKING:
    from evosax.algorithms.base import EvolutionaryAlgorithm


class _Identity:
    """Compares by identity and keeps its object alive (so no id is reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _value_key(value: Any) -> Any:
    """Plain values compare by value; anything else (optax objects, functions) by
    identity."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple | list):
        return tuple(_value_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _value_key(v)) for k, v in value.items()))
    return _Identity(value)


class Algorithm:
    """An evosax instance, compared by what determines its behaviour.

    evosax uses the `solution` it is built with only for its shape, so two
    instances of one class with equal population size, dimension, dtype and
    constructor arguments behave identically. Comparing by that signature (not by
    object identity) lets equal strategies share compiled programs: building the
    same experiment twice in one process compiles once.

    Arguments:
        instance: the evosax instance.
        signature: a hashable value equal for instances that behave alike.
    """

    __slots__ = ("instance", "signature")

    def __init__(self, instance: "EvolutionaryAlgorithm", signature: Any):
        self.instance = instance
        self.signature = signature

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Algorithm) and other.signature == self.signature

    def __hash__(self) -> int:
        return hash(self.signature)


@standard_promotion
def build_algorithm(
    spec: StrategySpec,
    family: AbstractFamily,
    population_size: int,
    solution: FlatGenome,
    init_scale: float,
    kwargs: dict[str, Any],
    kwargs_keys: dict[str, Any],
) -> Algorithm:
    """Construct the evosax instance `spec` names for a genome like `solution`.

    Arguments:
        spec: what the user's `algorithm=` resolved to.
        family: the algorithm's family (it may split the population).
        population_size: P, the genomes per generation.
        solution: the initial genome, flat (evosax reads its shape and dtype).
        init_scale: the spread of RandomSearch's default sampler.
        kwargs: constructor arguments.
        kwargs_keys: what stands for `kwargs` in the signature (raw preset
            values, or the user's objects).
    """
    accepted = inspect.signature(spec.cls.__init__).parameters
    bad = sorted(set(kwargs) - set(accepted) - {"self"})
    if bad:
        raise TypeError(
            f"algorithm_kwargs {bad} are not arguments of {spec.name} "
            f"({spec.cls.__name__}); it accepts "
            f"{sorted(set(accepted) - {'self', 'population_size', 'solution'})}"
        )
    kwargs = dict(kwargs)
    kwargs_keys = dict(kwargs_keys)
    sampling = accepted.get("sampling_fn")
    if (
        sampling is not None
        and sampling.default is inspect.Parameter.empty
        and "sampling_fn" not in kwargs
    ):
        # RandomSearch needs a sampler; by default sample around the genome. It
        # bakes the genome's values in, so they join the signature.
        values = np.asarray(solution)
        kwargs_keys["sampling_fn"] = (
            "default",
            hashlib.sha256(values.tobytes()).hexdigest(),
            str(values.dtype),
            init_scale,
        )
        kwargs.setdefault(
            "sampling_fn",
            lambda key: (
                solution + init_scale * jr.normal(key, solution.shape, solution.dtype)
            ),
        )
    # Stein-variational families give evosax the size of one sub-population.
    evosax_size = family.evosax_size(spec.name, population_size, kwargs)
    signature = (
        spec.cls,
        evosax_size,
        int(solution.shape[0]),
        str(solution.dtype),
        tuple(sorted((k, _value_key(v)) for k, v in kwargs_keys.items())),
    )
    try:
        instance = spec.cls(population_size=evosax_size, solution=solution, **kwargs)
        return Algorithm(instance, signature)
    except TypeError as err:
        raise TypeError(f"cannot construct {spec.name}: {err}") from err
    except (AssertionError, ValueError) as err:  # evosax asserts on sizes
        raise ValueError(
            f"population_size={population_size} is rejected by {spec.name}: "
            f"{err or type(err).__name__}"
        ) from err


def given_algorithm(
    instance: "EvolutionaryAlgorithm",
    name: str,
    num_params: int,
    population_size: int,
    algorithm_kwargs: dict[str, Any],
) -> Algorithm:
    """The evosax instance the user passed, checked against the genome and P."""
    if algorithm_kwargs:
        raise TypeError(
            "algorithm_kwargs cannot be combined with an evosax instance; "
            "construct the instance with them instead"
        )
    if instance.num_dims != num_params:
        raise ValueError(
            f"algorithm: the {name} instance was built for "
            f"{instance.num_dims} parameters but the genome has {num_params}"
        )
    # Stein-variational instances count every sub-population.
    total = getattr(instance, "total_population_size", instance.population_size)
    if total != population_size:
        raise ValueError(
            f"population_size={population_size} differs from the instance's "
            f"population size {total}"
        )
    # A user's instance may hold anything: equal only to itself.
    return Algorithm(instance, ("instance", _Identity(instance)))


@standard_promotion
def _apply_params(algorithm: "EvolutionaryAlgorithm", name: str, overrides: Any) -> Any:
    defaults = algorithm.default_params
    if overrides is None:
        return defaults
    if not isinstance(overrides, dict):
        if type(overrides) is not type(defaults):
            raise TypeError(
                f"params: expected a dict of overrides or a {type(defaults).__name__}; "
                f"got {type(overrides).__name__}"
            )
        return overrides
    fields = {f.name for f in dataclasses.fields(defaults)}
    bad = sorted(set(overrides) - fields)
    if bad:
        raise ValueError(
            f"params: {bad} are not parameters of {name}; it has {sorted(fields)}"
        )
    return defaults.replace(**overrides)


def _check_params(name: str, params: Any) -> None:
    """Raise a clear error for a NaN parameter, or a `std_init` not finite and > 0."""
    for field in dataclasses.fields(params):
        value = getattr(params, field.name)
        array = np.asarray(value)
        if array.dtype.kind not in "fi" or array.size == 0:
            continue  # functions and empty fields have nothing to check
        if array.dtype.kind == "f" and np.isnan(array).any():
            raise ValueError(f"params.{field.name} = {value!r} for {name} is NaN")
        if field.name == "std_init" and not (np.isfinite(array) & (array > 0)).all():
            raise ValueError(
                f"params.{field.name} = {value!r} for {name} must be finite and "
                "> 0 (a standard deviation)"
            )


def algorithm_params(
    algorithm: "EvolutionaryAlgorithm", spec: StrategySpec, params: Any
) -> Any:
    """evosax's `Params` for `algorithm`: its defaults, then the preset's overrides,
    then the user's `params` (a dict of fields, or a whole `Params`); checked."""
    # A dict of fields merges into the preset's; a whole Params replaces them.
    overrides = spec.params
    if isinstance(params, dict):
        overrides = {**overrides, **params}
        params = None
    base = _apply_params(algorithm, spec.name, overrides or None)
    resolved = base if params is None else _apply_params(algorithm, spec.name, params)
    _check_params(spec.name, resolved)
    return resolved


__all__ = ["Algorithm", "algorithm_params", "build_algorithm", "given_algorithm"]
