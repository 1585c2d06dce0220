"""A testing kit for your own environments, policies and genomes.

Checkers, for your test suite:

    from eqxevo.testing import check_env, check_policy
    check_env(MyEnv(), params)             # raises CheckFailed explaining what is wrong
    check_policy(MyNet(key=k), MyEnv(), params)

They verify what eqxevo relies on: purity (the same key gives bit-identical
output), static shapes and dtypes (the state a step returns has the type of the
state it was given), that `jit` and `vmap` work (over keys, states and params),
that stepping compiles once, and that outputs are finite. A failure raises
`CheckFailed` (an `AssertionError`, so pytest reports it as a test failure)
saying in plain words what went wrong and the usual fix.

Hypothesis strategies, to draw inputs (need `hypothesis`, in eqxevo's `dev` extra):

    from hypothesis import given
    from eqxevo import testing

    @given(key=testing.keys(), size=testing.population_sizes(even=True))
    def test_my_fitness(key, size): ...

`keys()`, `population_sizes()`, `small_genomes()` (small `MLPPolicy` genomes),
`actions()`.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np

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
    if _is_key(x):
        return np.asarray(jr.key_data(x))
    return np.asarray(x)


def _value_difference(
    a: Any, b: Any, rtol: float = 0.0, atol: float = 0.0
) -> str | None:
    """Where two pytrees of the same type differ in value (exactly by default)."""
    structure = _type_difference(a, b)
    if structure is not None:
        return structure
    for (path, x), (_, y) in zip(_paths(a), _paths(b), strict=True):
        x, y = _value(x), _value(y)
        if rtol == 0.0 and atol == 0.0:
            same = np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
        else:
            same = bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True))
        if not same:
            return f"leaf {path} differs: {x!r} vs {y!r}"
    return None


def _non_arrays(tree: Any) -> list[str]:
    return [
        f"{path} = {_leaf_type(leaf)}"
        for path, leaf in _paths(tree)
        if not isinstance(leaf, jax.Array | np.ndarray)
    ]


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
    _check_obs(what, env, obs)
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
    bad = _non_arrays(state)
    if bad:
        raise _fail(
            what,
            "every leaf of the state must be a JAX array (Python numbers become "
            "weakly typed or static under jit); offending leaves: " + "; ".join(bad),
        )


def _check_obs(what: str, env: AbstractEnv, obs: Any) -> None:
    if not isinstance(obs, jax.Array) or obs.shape != (env.obs_size,):
        raise _fail(
            what,
            f"the observation must be an array of shape ({env.obs_size},) "
            f"(env.obs_size); got {_leaf_type(obs)}",
        )
    if not jnp.issubdtype(obs.dtype, jnp.floating):
        raise _fail(what, f"the observation must be floating; got {obs.dtype}")


# -- purity by tracing twice -------------------------------------------------------


def _program(fn: Callable[..., Any], *args: Any) -> tuple[str, list[Any], Any]:
    """The jaxpr of `fn(*args)`: its text, its constants and its output shapes."""
    # A fresh function object each time: JAX caches traces by function identity.
    closed, shapes = jax.make_jaxpr(lambda *a: fn(*a), return_shape=True)(*args)
    return str(closed.jaxpr), list(closed.consts), shapes


def _check_traces_alike(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Trace `fn` twice; a pure function gives the same program both times."""
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

    Verifies: sizes are positive ints; params are a pytree of arrays; `reset`
    and `step` are pure (traced twice they give the same program, run twice
    with the same key and inputs they give bit-identical outputs); they trace
    under `jit`; outputs have the documented types (obs `(obs_size,)` float,
    reward float scalar, done bool scalar, info a dict of scalars, state leaves
    arrays); the state keeps its structure, shapes and dtypes (weak types
    included) from reset through `num_steps` steps with random actions in
    [-1, 1], and stepping compiles once; `vmap` over keys and states, and over
    stacked params, traces; every output is finite.

    Arguments:
        env: the environment.
        params: its params (default `env.default_params()`).
        key: the key to draw from (default `jax.random.key(0)`).
        num_steps: steps to take (>= 1).

    Raises:
        CheckFailed: with a plain-words explanation of the first failure.
    """
    name = type(env).__name__
    if not isinstance(env, AbstractEnv):
        raise CheckFailed(f"{name} is not an eqxevo.envs.AbstractEnv")
    for attr in ("obs_size", "action_size"):
        value = getattr(env, attr, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _fail(name, f"{attr} must be a positive Python int; got {value!r}")
    if params is None:
        params = _call(f"{name}.default_params()", env.default_params)
    bad = _non_arrays(params)
    if bad:
        raise _fail(
            f"{name} params",
            "every leaf must be an array: under jit a Python number is a "
            "compile-time constant (each variant recompiles) and vmap cannot map "
            "it. Offending leaves: " + "; ".join(bad),
        )
    key = jr.key(0) if key is None else key
    reset_key, step_key, batch_key = jr.split(key, 3)

    # reset: pure, typed.
    _check_traces_alike(f"{name}.reset", env.reset, reset_key, params)
    first = _check_runs_alike(f"{name}.reset", _jit_reset, env, reset_key, params)
    if not isinstance(first, tuple) or len(first) != 2:
        raise _fail(f"{name}.reset", "must return the pair (obs, state)")
    obs, state = first
    _check_obs(f"{name}.reset", env, obs)
    bad = _non_arrays(state)
    if bad:
        raise _fail(
            f"{name}.reset",
            "every leaf of the state must be a JAX array; offending leaves: "
            + "; ".join(bad),
        )

    # step: pure, typed, type-stable over steps, compiled once.
    def step_inputs(t: int, state: Any) -> tuple[Any, ...]:
        key_t, action_key = jr.split(jr.fold_in(step_key, t))
        return key_t, state, _random_action(action_key, env.action_size), params

    _check_traces_alike(f"{name}.step", env.step, *step_inputs(0, state))

    current, reference, outputs, traces = state, None, [first], 0
    for t in range(max(num_steps, 1)):
        difference = _type_difference(state, current)
        if difference is not None:
            raise _fail(
                f"{name}.step changed the state's type",
                f"(compared with the state reset returns) at step {t - 1} "
                f"{difference}. {_SHAPE_HINT}",
            )
        out = _check_runs_alike(
            f"{name}.step", _jit_step, env, *step_inputs(t, current)
        )
        if t == 0:
            traces = eqx.debug.get_num_traces(_counted_step)
        _recompiled(f"{name}.step", t, _counted_step, traces)
        _check_outputs(f"{name}.step (step {t})", env, out)
        if reference is None:
            reference = out
        for label, before, after in (
            ("observation", obs, out[0]),
            ("reward", reference[2], out[2]),
            ("done", reference[3], out[3]),
            ("info", reference[4], out[4]),
        ):
            difference = _type_difference(before, after)
            if difference is not None:
                raise _fail(
                    f"{name}.step changed the {label}'s type",
                    f"at step {t} {difference}. {_SHAPE_HINT}",
                )
        outputs.append(out)
        current = out[1]
    difference = _type_difference(state, current)
    if difference is not None:
        raise _fail(
            f"{name}.step changed the state's type",
            f"(compared with the state reset returns) {difference}. {_SHAPE_HINT}",
        )

    # Finite outputs.
    for t, out in enumerate(outputs):
        bad = _non_finite(_named(out) if t else {"obs": out[0], "state": out[1]})
        if bad:
            where = "reset" if t == 0 else f"step {t - 1}"
            raise _fail(
                f"{name} produced non-finite values",
                f"at {where}: " + "; ".join(bad[:5]) + ". NaN or inf in an "
                "observation or state poisons the whole lifetime (check divisions, "
                "logs and exponentials).",
            )

    # vmap over keys and states, and over stacked params (traced only).
    batch = 3
    keys = jr.split(batch_key, batch)
    actions = jax.vmap(lambda k: _random_action(k, env.action_size))(keys)
    stacked = jtu.tree_map(lambda x: jnp.stack([x] * batch), params)

    def batched(keys: Any, actions: Any, stacked: Any) -> Any:
        _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, states, actions, params)
        _, states = jax.vmap(env.reset)(keys, stacked)
        return jax.vmap(env.step)(keys, states, actions, stacked)

    try:
        shapes = jax.eval_shape(batched, keys, actions, stacked)
    except Exception as err:
        raise _fail(
            f"{name} is not vmappable",
            f"{type(err).__name__}: {err}. vmap runs a population of agents (and "
            "variants of params) in one program; every operation must act on one "
            f"example at a time. {_JIT_HINT}",
        ) from err
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

    Verifies: its sizes match the environment's; `initial_state`, `__call__`
    and `reinforce` are pure (traced twice they give the same program, run
    twice they give bit-identical outputs); actions are float `(action_size,)`
    arrays, finite and (unless `action_range` is None) within `action_range`;
    the lifetime state keeps its structure, shapes and dtypes across
    `num_steps` steps of acting and reinforcing in `env`, compiled once; `vmap`
    over a batch of observations and states, and over a population of the
    policy (its floating leaves stacked, as `evaluate` does), traces; and a
    `rollout` traces (the lifetime state fits a `lax.scan` carry).

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
    name = type(policy).__name__
    if not isinstance(policy, AbstractPolicy):
        raise CheckFailed(f"{name} is not an eqxevo.nets.AbstractPolicy")
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
        difference = _type_difference(state, current)
        if difference is not None:
            raise _fail(
                f"{name} changed its lifetime state's type",
                f"(compared with initial_state) after step {t - 1} {difference}. "
                f"{_SHAPE_HINT}",
            )
        reward = jnp.asarray(0.5 * t, jnp.float32)
        action, current = _check_runs_alike(
            f"{name}", _jit_act, policy, obs, current, reward
        )
        if t == 0:
            traces = eqx.debug.get_num_traces(_counted_act)
        _recompiled(f"{name}", t, _counted_act, traces)
        if not isinstance(action, jax.Array) or action.shape != (policy.action_size,):
            raise _fail(
                f"{name}.__call__",
                f"the action must be an array of shape ({policy.action_size},); got "
                f"{_leaf_type(action)}",
            )
        if not jnp.issubdtype(action.dtype, jnp.floating):
            raise _fail(
                f"{name}.__call__", f"the action must be floating; got {action.dtype}"
            )
        bad = _non_finite({"action": action, "state": current})
        if bad:
            raise _fail(
                f"{name} produced non-finite values",
                f"at step {t}: " + "; ".join(bad[:5]),
            )
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
    difference = _type_difference(state, current)
    if difference is not None:
        raise _fail(
            f"{name} changed its lifetime state's type",
            f"(compared with initial_state) {difference}. {_SHAPE_HINT}",
        )

    # vmap over observations/states and over a population; a rollout (traced).
    batch = 3
    keys = jr.split(batch_key, batch)
    evolvable, static = eqx.partition(policy, eqx.is_inexact_array)
    population = jtu.tree_map(lambda x: jnp.stack([x] * batch), evolvable)

    def batched(keys: Any, observations: Any, population: Any) -> Any:
        states = jax.vmap(policy.initial_state)(keys)
        jax.vmap(policy)(observations, states)

        def member(evolvable: Any, obs: Any, state: Any) -> Any:
            return eqx.combine(evolvable, static)(obs, state)

        return eqx.filter_vmap(member)(population, observations, states)

    try:
        eqx.filter_eval_shape(batched, keys, jnp.stack([obs] * batch), population)
    except Exception as err:
        raise _fail(
            f"{name} is not vmappable",
            f"{type(err).__name__}: {err}. evaluate() vmaps the policy over a "
            "population (its floating leaves stacked) and over keys.",
        ) from err
    try:
        eqx.filter_eval_shape(rollout, run_key, policy, env, params, 2)
    except Exception as err:
        raise _fail(
            f"rollout of {name} does not trace",
            f"{type(err).__name__}: {err}. The lifetime state must keep one type "
            "(a lax.scan carry).",
        ) from err


# -- Hypothesis strategies -----------------------------------------------------------


def _hypothesis() -> Any:
    try:
        import hypothesis.strategies as st
    except ImportError as err:  # pragma: no cover - hypothesis is a dev dependency
        raise ImportError(
            "eqxevo.testing's strategies need hypothesis: pip install hypothesis "
            '(or "eqxevo[dev]")'
        ) from err
    return st


def keys() -> Any:
    """Hypothesis strategy: typed PRNG keys `jax.random.key(seed)`."""
    st = _hypothesis()
    return st.integers(0, 2**32 - 1).map(jr.key)


def population_sizes(
    min_size: int = 2, max_size: int = 32, *, even: bool = False
) -> Any:
    """Hypothesis strategy: population sizes in `[min_size, max_size]`.

    Arguments:
        even: only even sizes (antithetic strategies such as open_es and pgpe).
    """
    st = _hypothesis()
    if min_size < 1 or max_size < min_size:
        raise ValueError(
            f"need 1 <= min_size <= max_size; got min_size={min_size}, "
            f"max_size={max_size}"
        )
    if not even:
        return st.integers(min_size, max_size)
    low, high = (min_size + 1) // 2, max_size // 2
    if low > high:
        raise ValueError(f"no even size in [{min_size}, {max_size}]")
    return st.integers(low, high).map(lambda n: 2 * n)


def small_genomes(
    obs_size: int | None = None,
    action_size: int | None = None,
    *,
    max_width: int = 8,
    max_depth: int = 2,
) -> Any:
    """Hypothesis strategy: small `MLPPolicy` genomes (few shapes: compiling costs).

    Arguments:
        obs_size, action_size: fixed sizes, or None to draw them in [1, 4].
        max_width, max_depth: bounds of the hidden layers.
    """
    from .nets.mlp import MLPPolicy

    st = _hypothesis()
    size = st.integers(1, 4)
    return st.builds(
        lambda o, a, w, d, seed: MLPPolicy(o, a, w, d, key=jr.key(seed)),
        st.just(obs_size) if obs_size is not None else size,
        st.just(action_size) if action_size is not None else size,
        st.integers(1, max_width),
        st.integers(0, max_depth),
        st.integers(0, 2**32 - 1),
    )


def actions(action_size: int) -> Any:
    """Hypothesis strategy: float32 actions of shape `(action_size,)` in [-1, 1]."""
    st = _hypothesis()
    element = st.floats(-1.0, 1.0, width=32)
    return st.lists(element, min_size=action_size, max_size=action_size).map(
        lambda xs: jnp.asarray(xs, jnp.float32)
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
