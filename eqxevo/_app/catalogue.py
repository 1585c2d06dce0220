"""What `--help` and `eqxevo strategies NAME` print about the names: each
network's and environment's options with their defaults (TOML literals), and an
algorithm's params and constructor arguments, read from the constructors'
signatures and the `names` tables.
"""

import dataclasses
import importlib
import inspect
from typing import Any

from eqxevo._src.names import ENV_PREFIXES, ENVS, NETS
from eqxevo._src.registry import (
    SIGNATURE_SKIP,
    family_of,
    lookup_env,
    lookup_net,
    lookup_strategy,
)

from .config import ConfigError, plain_value, toml_value


def strategy_help(name: str) -> str:
    """What `eqxevo strategies NAME` prints: the algorithm (or preset), its family,
    its `[strategy.params]` fields and its `[strategy.kwargs]` arguments."""
    spec = lookup_strategy(name)
    lines = [f"{spec.name}: {spec.cls.__name__} ({family_of(spec.cls)} family)"]
    summary = spec.description or (inspect.getdoc(spec.cls) or "").split("\n")[0]
    if summary:
        lines.append(f"  {summary}")
    if spec.paper:
        lines.append(f"  paper: {spec.paper}")
    if spec.raw_kwargs or spec.params:
        lines.append(f"  preset kwargs: {toml_value(spec.raw_kwargs)}")
        lines.append(f"  preset params: {toml_value(spec.params)}")
    lines.append("[strategy.params] (evosax Params fields):")
    lines.extend(f"  {row}" for row in _params_rows(spec.cls) or ["-"])
    lines.append("[strategy.kwargs] (constructor arguments):")
    kwargs = [
        row
        for row in signature_rows(spec.cls)
        if not row.startswith(("population_size", "solution", "metrics_fn"))
    ]
    lines.extend(f"  {row}" for row in kwargs or ["-"])
    return "\n".join(lines)


def signature_rows(constructor: Any) -> list[str]:
    """`name: type = default` for each option of a constructor (TOML literals)."""
    try:
        parameters = inspect.signature(constructor).parameters.values()
    except (TypeError, ValueError):
        return []
    rows = []
    for p in parameters:
        if p.name in SIGNATURE_SKIP or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        annotation = (
            ""
            if p.annotation is inspect.Parameter.empty
            else inspect.formatannotation(p.annotation)
        )
        for long, short in (
            ("collections.abc.", ""),
            ("typing.", ""),
            ("optax._src.base.", "optax."),
            ("jax.jaxlib._jax.", ""),
            ("jaxlib._jax.", ""),
        ):
            annotation = annotation.replace(long, short)
        rows.append(
            f"{p.name}: {annotation} = {_shown_default(p)}" if annotation else p.name
        )
    return rows


def _shown_default(p: inspect.Parameter) -> str:
    if p.default is inspect.Parameter.empty:
        return "(required)"
    if p.default is None:
        return "(unset)"
    try:
        return toml_value(p.default)
    except ConfigError:
        pass
    if p.name == "optimizer":
        return '(default) or { optax = "adam", learning_rate = 0.01 }'
    if p.name == "fitness_shaping_fn":
        return '(default) or "centered_rank" | "weights" | "identity" | ...'
    return "(Python only)"


def _params_rows(cls: Any) -> list[str]:
    """The fields of an evosax algorithm's Params dataclass, with their types."""
    module = importlib.import_module(cls.__module__)
    params_cls = getattr(module, "Params", None)
    if params_cls is None or not dataclasses.is_dataclass(params_cls):
        return []
    out = []
    for f in dataclasses.fields(params_cls):
        tp = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", f.type)
        tp = str(tp).replace("jax.Array", "Array").replace("jaxlib._Array", "Array")
        out.append(f"{f.name}: {tp}")
    return out


def _env_params_row(cls: Any) -> str | None:
    # Built from a default instance: a class that needs arguments has no row.
    try:
        params = cls().default_params()
    except Exception:  # a catalogue line must never break --help
        return None
    values = {
        f.name: plain_value(getattr(params, f.name)) for f in dataclasses.fields(params)
    }
    return "    params " + ", ".join(
        f"{k} = {toml_value(v)}" for k, v in values.items() if v is not None
    )


def catalogue() -> str:
    """The networks' and environments' options (defaults as TOML literals): the
    second half of `eqxevo run --help`. Algorithms: `eqxevo strategies NAME`."""
    lines = ["Networks ([net] name = ...; [net.options]):"]
    for name in NETS:
        lines.append(f"  {name}: " + ", ".join(signature_rows(lookup_net(name))))
    lines.append("")
    lines.append("Environments ([env] name = ...; [env.options]; [env.params]):")
    for name in ENVS:
        cls, _ = lookup_env(name)
        lines.append(f"  {name}: options " + ", ".join(signature_rows(cls)))
        row = _env_params_row(cls)
        if row:
            lines.append(row)
    lines.extend(f"  {prefix}: {what}" for prefix, what in ENV_PREFIXES.items())
    lines.append("")
    lines.append(
        "Strategies ([strategy] name = ...): `eqxevo strategies` lists every "
        "algorithm and preset; `eqxevo strategies NAME` its [strategy.params] and "
        "[strategy.kwargs]."
    )
    return "\n".join(lines)


__all__ = ["catalogue", "signature_rows", "strategy_help"]
