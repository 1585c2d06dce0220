"""A testing kit for your own environments, policies and genomes: checkers that
explain what is wrong, and Hypothesis strategies (docs/environments.md).
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np

from ._checks import positive_int
from ._hypothesis import (
    actions as actions,
    keys as keys,
    population_sizes as population_sizes,
    small_genomes as small_genomes,
)
from ._types import PRNGKey
from .envs.base import AbstractEnv
from .nets.base import AbstractPolicy
from .rollout import rollout

# -- failures ------------------------------------------------------------------------


class CheckFailed(AssertionError):
    """A check of the testing kit failed; the message explains what and why."""


def _fail(what: str, message: str) -> CheckFailed:
    return CheckFailed(f"{what}: {message}")


# -- pytree helpers ------------------------------------------------------------------


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _leaf_type(x: Any) -> str:
    if isinstance(x, jax.Array | np.ndarray | np.generic):
        weak = " (weakly typed)" if getattr(x, "weak_type", False) else ""
        return f"{x.dtype}{list(x.shape)}{weak}"
    return f"Python {type(x).__name__} {x!r}"


def _signature(x: Any) -> Any:
    # Weak types count: a weakly typed leaf changes the program it is traced into.
    if isinstance(x, jax.Array | np.ndarray | np.generic):
        return (tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False)))
    return ("python", type(x).__name__)


def _paths(tree: Any) -> list[tuple[str, Any]]:
    leaves, _ = jtu.tree_flatten_with_path(tree)
    return [(jtu.keystr(path) or "(the value itself)", leaf) for path, leaf in leaves]


def _type_difference(before: Any, after: Any) -> str | None:
    """Where two pytrees differ in structure, shape, dtype or weak type, in words."""
    if jtu.tree_structure(before) != jtu.tree_structure(after):
        return (
            f"its structure changed from {jtu.tree_structure(before)} to "
            f"{jtu.tree_structure(after)}"
        )
    for (path, a), (_, b) in zip(_paths(before), _paths(after), strict=True):
        if _signature(a) != _signature(b):
            return f"leaf {path} changed from {_leaf_type(a)} to {_leaf_type(b)}"
    return None


def _value(x: Any) -> np.ndarray:
    # Typed keys cannot be compared as they are: compare their key data.
    if _is_key(x):
        return np.asarray(jr.key_data(x))
    return np.asarray(x)


def _value_difference(a: Any, b: Any) -> str | None:
    """Where two pytrees of the same type differ in value (bit for bit; NaN == NaN)."""
    structure = _type_difference(a, b)
    if structure is not None:
        return structure
    for (path, x), (_, y) in zip(_paths(a), _paths(b), strict=True):
        x, y = _value(x), _value(y)
        if not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
            return f"leaf {path} differs: {x!r} vs {y!r}"
    return None


def _all_arrays(what: str, tree: Any, why: str) -> None:
    """`CheckFailed` naming every leaf of `tree` that is not an array."""
    bad = [
        f"{path} = {_leaf_type(leaf)}"
        for path, leaf in _paths(tree)
        if not isinstance(leaf, jax.Array | np.ndarray)
    ]
    if bad:
        raise _fail(what, why + "; ".join(bad))


def _non_finite(tree: Any) -> list[str]:
    bad = []
    for path, leaf in _paths(tree):
        if _is_key(leaf) or not isinstance(leaf, jax.Array | np.ndarray):
            continue
        value = np.asarray(leaf)
        if value.dtype.kind in "fc" and not np.all(np.isfinite(value)):
            bad.append(f"{path} = {value!r}")
    return bad


def _call(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except CheckFailed:
        raise
    except Exception as err:
        raise _fail(what, f"raised {type(err).__name__}: {err}") from err


_JIT_HINT = (
    "Usual causes: Python `if`/`while` on a traced value (use jnp.where or "
    "lax.cond), converting an array to a Python number (float(x), int(x), "
    "x.item()), NumPy functions on traced values (use jax.numpy), or shapes that "
    "depend on values."
)
_SHAPE_HINT = (
    "JAX compiles one program per shape and dtype: a state whose type changes "
    "cannot be carried through lax.scan and recompiles every step. Keep shapes "
    "fixed (pad to a maximum size and use a mask) and create every array with an "
    "explicit dtype (jnp.zeros((), jnp.int32) rather than the Python number 0)."
)
_PURITY_HINT = (
    "A step must be a pure function of its arguments: no global counters, no "
    "Python or NumPy random numbers, no state kept on the object; draw randomness "
    "from the key argument."
)


def _random_action(key: PRNGKey, size: int) -> jax.Array:
    return jr.uniform(key, (size,), jnp.float32, -1.0, 1.0)


def _check_outputs(what: str, env: AbstractEnv, out: Any) -> None:
    if not isinstance(out, tuple) or len(out) != 5:
        raise _fail(
            what,
            "must return the 5-tuple (obs, state, reward, done, info); got "
            f"{type(out).__name__}"
            + (f" of length {len(out)}" if isinstance(out, tuple) else ""),
        )
    obs, state, reward, done, info = out
    _check_vector(what, "observation", obs, env.obs_size, " (env.obs_size)")
    reward = jnp.asarray(reward)
    if reward.shape != () or not jnp.issubdtype(reward.dtype, jnp.floating):
        raise _fail(what, f"reward must be a float scalar; got {_leaf_type(reward)}")
    done = jnp.asarray(done)
    if done.shape != () or done.dtype != jnp.bool_:
        raise _fail(what, f"done must be a bool scalar; got {_leaf_type(done)}")
    if not isinstance(info, dict):
        raise _fail(what, f"info must be a dict; got {type(info).__name__}")
    for k, v in info.items():
        if not isinstance(v, jax.Array) or v.shape != ():
            raise _fail(
                what, f"info[{k!r}] must be a scalar array; got {_leaf_type(v)}"
            )
    why = (
        "every leaf of the state must be a JAX array (Python numbers become "
        "weakly typed or static under jit); offending leaves: "
    )
    _all_arrays(what, state, why)


def _check_vector(what: str, label: str, x: Any, size: int, source: str = "") -> None:
    """`CheckFailed` unless `x` is a floating array of shape `(size,)`."""
    if not isinstance(x, jax.Array) or x.shape != (size,):
        raise _fail(
            what,
            f"the {label} must be an array of shape ({size},){source}; got "
            f"{_leaf_type(x)}",
        )
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise _fail(what, f"the {label} must be floating; got {x.dtype}")


def _name_of(subject: Any, protocol: type, public_name: str) -> str:
    """The subject's type name; `CheckFailed` unless it implements `protocol`."""
    name = type(subject).__name__
    if not isinstance(subject, protocol):
        raise CheckFailed(f"{name} is not an {public_name}")
    return name


def _same_type(what: str, where: str, before: Any, after: Any) -> None:
    """`CheckFailed` unless two pytrees have one structure, shapes and dtypes."""
    difference = _type_difference(before, after)
    if difference is not None:
        raise _fail(what, f"{where} {difference}. {_SHAPE_HINT}")


def _finite(what: str, where: str, tree: Any, advice: str = "") -> None:
    """`CheckFailed` naming the first non-finite leaves of `tree`, if any."""
    bad = _non_finite(tree)
    if bad:
        raise _fail(what, f"{where}: " + "; ".join(bad[:5]) + advice)


def _traces(what: str, hint: str, fn: Callable[..., Any], *args: Any) -> Any:
    """The output shapes of `fn(*args)`; `CheckFailed` if it does not trace."""
    try:
        return eqx.filter_eval_shape(fn, *args)
    except Exception as err:
        raise _fail(what, f"{type(err).__name__}: {err}. {hint}") from err


# -- purity by tracing twice -------------------------------------------------------


def _program(fn: Callable[..., Any], *args: Any) -> tuple[str, list[Any], Any]:
    """The jaxpr of `fn(*args)`: its text, its constants and its output shapes."""
    # A fresh function object each time: JAX caches traces by function identity.
    closed, shapes = jax.make_jaxpr(lambda *a: fn(*a), return_shape=True)(*args)
    return str(closed.jaxpr), list(closed.consts), shapes


def _check_traces_alike(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Trace `fn` twice; a pure function gives the same program both times."""
    # Catches what running twice cannot: state read at trace time (a global
    # counter, Python's random) is baked into the program as a constant.
    try:
        first = _program(fn, *args)
        second = _program(fn, *args)
    except CheckFailed:
        raise
    except Exception as err:
        raise _fail(
            f"{what} is not traceable (so not jittable)",
            f"{type(err).__name__}: {err}\n{_JIT_HINT}",
        ) from err
    if first[0] != second[0]:
        raise _fail(
            f"{what} is impure",
            "tracing it twice with the same inputs gave two different programs: it "
            f"depends on something besides its arguments. {_PURITY_HINT}",
        )
    difference = _value_difference(first[1], second[1])
    if difference is not None:
        raise _fail(
            f"{what} is impure",
            "tracing it twice with the same inputs baked different constants into "
            f"the program (constant {difference}). {_PURITY_HINT}",
        )
    return first[2]


def _named(out: Any) -> Any:
    """Name the parts of a reset/step/act output, for readable leaf paths."""
    # "['state'].time differs" reads better than "[1].time differs".
    if isinstance(out, tuple) and len(out) == 5:
        return dict(zip(("obs", "state", "reward", "done", "info"), out, strict=True))
    if isinstance(out, tuple) and len(out) == 2:
        return {"first": out[0], "second": out[1]}
    return out


def _check_runs_alike(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a jitted `fn` twice on the same inputs; outputs must be bit-identical."""
    first = _call(what, fn, *args)
    difference = _value_difference(_named(first), _named(_call(what, fn, *args)))
    if difference is not None:
        raise _fail(
            f"{what} is impure",
            "running it twice with the same key and inputs gave different outputs "
            f"({difference}). {_PURITY_HINT}",
        )
    return first


# -- compiled entry points, shared by every check (compile once per env/policy type) --


@eqx.filter_jit
def _jit_reset(env: AbstractEnv, key: PRNGKey, params: Any) -> Any:
    return env.reset(key, params)


def _traced_step(
    env: AbstractEnv, key: PRNGKey, state: Any, action: Any, params: Any
) -> Any:
    return env.step(key, state, action, params)


# Counted traces tell a step that traces again although its inputs kept their
# types: it depends on something that changes between calls at trace time.
_counted_step = eqx.debug.assert_max_traces(_traced_step, max_traces=None)
_jit_step = eqx.filter_jit(_counted_step)


@eqx.filter_jit
def _jit_initial_state(policy: AbstractPolicy, key: PRNGKey) -> Any:
    return policy.initial_state(key)


def _traced_act(policy: AbstractPolicy, obs: Any, state: Any, reward: Any) -> Any:
    action, state = policy(obs, state)
    return action, policy.reinforce(reward, state)


_counted_act = eqx.debug.assert_max_traces(_traced_act, max_traces=None)
_jit_act = eqx.filter_jit(_counted_act)


def _recompiled(what: str, t: int, counter: Any, before: int) -> None:
    if eqx.debug.get_num_traces(counter) != before:
        raise _fail(
            f"{what} recompiled",
            f"step {t} traced it again although its inputs kept their types: it "
            "depends on something that changes between calls at trace time. "
            f"{_PURITY_HINT}",
        )


# -- check_env -----------------------------------------------------------------------


def check_env(
    env: AbstractEnv,
    params: Any = None,
    *,
    key: PRNGKey | None = None,
    num_steps: int = 4,
) -> None:
    """Check that an environment meets eqxevo's protocol; raise `CheckFailed` if not.

    Purity (traced twice: one program; run twice: the same bits), `jit` and
    `vmap`, the documented output types, a state whose type never changes over
    `num_steps` random steps, one compilation, finite outputs
    (docs/environments.md, "Checking your own environment or policy").

    Arguments:
        env: the environment.
        params: its params (default `env.default_params()`).
        key: the key to draw from (default `jax.random.key(0)`).
        num_steps: steps to take (>= 1).

    Raises:
        CheckFailed: with a plain-words explanation of the first failure.
    """
    name = _name_of(env, AbstractEnv, "eqxevo.envs.AbstractEnv")
    for attr in ("obs_size", "action_size"):
        try:
            positive_int(attr, getattr(env, attr, None))
        except ValueError as err:
            raise _fail(name, str(err)) from None
    if params is None:
        params = _call(f"{name}.default_params()", env.default_params)
    why = (
        "every leaf must be an array: under jit a Python number is a compile-time "
        "constant (each variant recompiles) and vmap cannot map it. Offending "
        "leaves: "
    )
    _all_arrays(f"{name} params", params, why)
    key = jr.key(0) if key is None else key
    reset_key, step_key, batch_key = jr.split(key, 3)

    # reset: pure, typed.
    _check_traces_alike(f"{name}.reset", env.reset, reset_key, params)
    first = _check_runs_alike(f"{name}.reset", _jit_reset, env, reset_key, params)
    if not isinstance(first, tuple) or len(first) != 2:
        raise _fail(f"{name}.reset", "must return the pair (obs, state)")
    obs, state = first
    _check_vector(f"{name}.reset", "observation", obs, env.obs_size, " (env.obs_size)")
    why = "every leaf of the state must be a JAX array; offending leaves: "
    _all_arrays(f"{name}.reset", state, why)
    advice = (
        ". NaN or inf in an observation or state poisons the whole lifetime "
        "(check divisions, logs and exponentials)."
    )
    tree = {"obs": obs, "state": state}
    _finite(f"{name} produced non-finite values", "at reset", tree, advice)

    # step: pure, typed, type-stable over steps, compiled once.
    def step_inputs(t: int, state: Any) -> tuple[Any, ...]:
        key_t, action_key = jr.split(jr.fold_in(step_key, t))
        return key_t, state, _random_action(action_key, env.action_size), params

    _check_traces_alike(f"{name}.step", env.step, *step_inputs(0, state))
    current, reference, traces = state, None, 0
    for t in range(max(num_steps, 1)):
        out = _check_runs_alike(
            f"{name}.step", _jit_step, env, *step_inputs(t, current)
        )
        # Later steps must reuse step 0's program: a new trace means the step
        # depends on something besides its inputs' types.
        if t == 0:
            traces = eqx.debug.get_num_traces(_counted_step)
        _recompiled(f"{name}.step", t, _counted_step, traces)
        _check_outputs(f"{name}.step (step {t})", env, out)
        reference = out if reference is None else reference
        current = out[1]
        _same_type(
            f"{name}.step changed the state's type",
            f"(compared with the state reset returns) at step {t}",
            state,
            current,
        )
        for label, before, after in (
            ("observation", obs, out[0]),
            ("reward", reference[2], out[2]),
            ("done", reference[3], out[3]),
            ("info", reference[4], out[4]),
        ):
            _same_type(
                f"{name}.step changed the {label}'s type", f"at step {t}", before, after
            )
        _finite(
            f"{name} produced non-finite values", f"at step {t}", _named(out), advice
        )

    # vmap over keys and states, and over stacked params (traced only: shapes
    # are what a population needs, and tracing is cheap).
    batch = 3
    keys = jr.split(batch_key, batch)
    actions = jax.vmap(lambda k: _random_action(k, env.action_size))(keys)
    stacked = jtu.tree_map(lambda x: jnp.stack([x] * batch), params)

    def batched(keys: Any, actions: Any, stacked: Any) -> Any:
        _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, states, actions, params)
        _, states = jax.vmap(env.reset)(keys, stacked)
        return jax.vmap(env.step)(keys, states, actions, stacked)

    hint = (
        "vmap runs a population of agents (and variants of params) in one program; "
        f"every operation must act on one example at a time. {_JIT_HINT}"
    )
    shapes = _traces(f"{name} is not vmappable", hint, batched, keys, actions, stacked)
    if shapes[0].shape != (batch, env.obs_size):
        raise _fail(
            f"{name} under vmap",
            f"a batch of {batch} observations has shape {shapes[0].shape}, expected "
            f"{(batch, env.obs_size)}",
        )


# -- check_policy --------------------------------------------------------------------


def check_policy(
    policy: AbstractPolicy,
    env: AbstractEnv,
    params: Any = None,
    *,
    key: PRNGKey | None = None,
    num_steps: int = 4,
    action_range: tuple[float, float] | None = (-1.0, 1.0),
) -> None:
    """Check that a policy meets eqxevo's protocol in `env`; raise `CheckFailed` if not.

    Sizes that match `env`, purity of `initial_state`, `__call__` and
    `reinforce`, float actions of the right shape in `action_range`, a lifetime
    state whose type never changes, one compilation, `vmap` over a population,
    and a `rollout` that traces (docs/environments.md).

    Arguments:
        policy: the policy (a genome).
        env: an environment it is meant for.
        params: the environment's params (default `env.default_params()`).
        key: the key to draw from (default `jax.random.key(0)`).
        num_steps: steps to take (>= 1).
        action_range: the interval actions must lie in; None to skip.

    Raises:
        CheckFailed: with a plain-words explanation of the first failure.
    """
    name = _name_of(policy, AbstractPolicy, "eqxevo.nets.AbstractPolicy")
    for attr in ("obs_size", "action_size"):
        mine, theirs = getattr(policy, attr, None), getattr(env, attr)
        if mine != theirs:
            raise _fail(
                name,
                f"{attr} is {mine!r} but the environment {type(env).__name__} has "
                f"{attr} = {theirs}",
            )
    if params is None:
        params = env.default_params()
    key = jr.key(0) if key is None else key
    state_key, reset_key, run_key, batch_key = jr.split(key, 4)
    obs, env_state = _jit_reset(env, reset_key, params)

    _check_traces_alike(f"{name}.initial_state", policy.initial_state, state_key)
    state = _check_runs_alike(
        f"{name}.initial_state", _jit_initial_state, policy, state_key
    )
    shapes = _check_traces_alike(f"{name}.__call__", policy, obs, state)
    if not isinstance(shapes, tuple) or len(shapes) != 2:
        raise _fail(f"{name}.__call__", "must return the pair (action, state)")
    reward = jnp.ones((), jnp.float32)
    _check_traces_alike(f"{name}.reinforce", policy.reinforce, reward, state)

    current, traces = state, 0
    for t in range(max(num_steps, 1)):
        # A reward that changes every step exercises reward-driven plasticity.
        reward = jnp.asarray(0.5 * t, jnp.float32)
        action, current = _check_runs_alike(
            f"{name}", _jit_act, policy, obs, current, reward
        )
        if t == 0:
            traces = eqx.debug.get_num_traces(_counted_act)
        _recompiled(f"{name}", t, _counted_act, traces)
        _same_type(
            f"{name} changed its lifetime state's type",
            f"(compared with initial_state) after step {t}",
            state,
            current,
        )
        _check_vector(f"{name}.__call__", "action", action, policy.action_size)
        tree = {"action": action, "state": current}
        _finite(f"{name} produced non-finite values", f"at step {t}", tree)
        if action_range is not None:
            low, high = action_range
            value = np.asarray(action)
            if np.any(value < low) or np.any(value > high):
                raise _fail(
                    f"{name} acted out of range",
                    f"at step {t} the action {value!r} leaves [{low}, {high}]; "
                    "policies output actions in [-1, 1] by convention (pass "
                    "action_range=None to skip this check).",
                )
        obs, env_state, *_ = _jit_step(
            env, jr.fold_in(run_key, t), env_state, action, params
        )

    # vmap over observations/states and over a population; a rollout (traced).
    batch = 3
    keys = jr.split(batch_key, batch)
    # A population as evaluate builds it: floating leaves stacked, the rest shared.
    evolvable, static = eqx.partition(policy, eqx.is_inexact_array)
    population = jtu.tree_map(lambda x: jnp.stack([x] * batch), evolvable)

    def batched(keys: Any, observations: Any, population: Any) -> Any:
        states = jax.vmap(policy.initial_state)(keys)
        jax.vmap(policy)(observations, states)

        def member(evolvable: Any, obs: Any, state: Any) -> Any:
            return eqx.combine(evolvable, static)(obs, state)

        return eqx.filter_vmap(member)(population, observations, states)

    hint = (
        "evaluate() vmaps the policy over a population (its floating leaves "
        "stacked) and over keys."
    )
    observations = jnp.stack([obs] * batch)
    _traces(f"{name} is not vmappable", hint, batched, keys, observations, population)
    hint = "The lifetime state must keep one type (a lax.scan carry)."
    _traces(
        f"rollout of {name} does not trace",
        hint,
        rollout,
        run_key,
        policy,
        env,
        params,
        2,
    )


__all__ = [
    "CheckFailed",
    "actions",
    "check_env",
    "check_policy",
    "keys",
    "population_sizes",
    "small_genomes",
]
