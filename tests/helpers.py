"""Small genomes and fitness functions shared by the tests."""

import re
import signal
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo import GenomeLayout


class Net(eqx.Module):
    """A genome with evolvable floats, a static integer array and a function."""

    weight: jax.Array
    bias: jax.Array
    edges: jax.Array  # integer: static, shared by the population
    activation: object = eqx.field(static=True)

    def __init__(self, shapes=((3, 2), (2,)), *, key):
        wkey, bkey = jr.split(key)
        self.weight = jr.normal(wkey, shapes[0])
        self.bias = jr.normal(bkey, shapes[1])
        self.edges = jnp.arange(5, dtype=jnp.int32)
        self.activation = jnp.tanh


def sphere(genome, key):
    """Sum of squares of every evolvable leaf (key unused: deterministic)."""
    del key
    leaves = jax.tree.leaves(eqx.filter(genome, eqx.is_inexact_array))
    return sum(jnp.sum(jnp.square(x)) for x in leaves)


def noisy_sphere(genome, key):
    """Sphere plus key-dependent noise, with an aux summary."""
    value = sphere(genome, None) + 0.1 * jr.normal(key, ())
    return value, {"norm": jnp.sqrt(sphere(genome, None))}


def tree_equal(a, b) -> bool:
    """Bit-identical pytrees (NaNs equal to NaNs in the same place)."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    if ta != tb:
        return False
    for x, y in zip(la, lb, strict=True):
        if not isinstance(x, jax.Array | np.ndarray | np.generic | int | float | bool):
            if x is not y and x != y:  # functions, strings: static leaves
                return False
            continue
        if jax.dtypes.issubdtype(jnp.asarray(x).dtype, jax.dtypes.prng_key):
            x, y = jr.key_data(x), jr.key_data(y)
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
            return False
    return True


def whole_and_resumed(strategy, fitness, key, generations, first=1):
    """`evolve` run whole for `generations`, and the same run stopped after
    `first` and resumed from its state: `(whole, resumed)` results."""
    import eqxevo  # here: sharding_worker imports this module before its hook

    whole = eqxevo.evolve(key, strategy, fitness, num_generations=generations)
    part = eqxevo.evolve(key, strategy, fitness, num_generations=first)
    resumed = eqxevo.evolve(
        key, strategy, fitness, num_generations=generations - first, state=part.state
    )
    return whole, resumed


def check_finite_with_stable_state(strategy, result, num_generations):
    """An `evolve` result ran `num_generations` of finite populations, and its
    state has the types of a fresh one (so a user's jitted ask/tell loop
    compiles once)."""
    assert int(result.state.generation) == num_generations
    # A genome with a NaN or inf gives a non-finite fitness, which evolve
    # counts: every population was finite, the last one asked included.
    assert (result.history["num_nonfinite"] == 0).all(), "a population went NaN"
    fresh = jax.eval_shape(strategy.init, jr.key(3))  # traced, not compiled
    assert jax.tree.structure(fresh) == jax.tree.structure(result.state)
    for a, b in zip(jax.tree.leaves(fresh), jax.tree.leaves(result.state), strict=True):
        assert jax.typeof(a) == jax.typeof(b)
        assert jax.typeof(a).weak_type == jax.typeof(b).weak_type


def check_physics_step(env, action_size, episode_length):
    """A physics environment (`eqxevo._src.envs.physics.PhysicsEnv`) truncates after
    `episode_length` zero-action steps, and a NaN action ends the episode with a
    NaN reward, counted in `info["nonfinite"]`; returns the rewards.

    Steps through `check_env`'s own compiled reset and step (a physics step
    compiles for seconds): after `check_env` on the same environment, nothing
    compiles again."""
    from eqxevo._src.testing import _jit_reset, _jit_step

    params = env.default_params()
    _, first = _jit_reset(env, jr.key(0), params)

    def step(key, state, action, params):
        return _jit_step(env, key, state, action, params)

    state, dones, truncated, rewards = first, [], [], []
    for t in range(episode_length):
        _, state, reward, done, info = step(
            jr.key(t), state, jnp.zeros(action_size), params
        )
        dones.append(bool(done))
        truncated.append(float(info["truncated"]))
        rewards.append(float(reward))
        assert float(info["nonfinite"]) == 0.0
    ends = [False] * (episode_length - 1) + [True]
    assert dones == ends and truncated == [float(e) for e in ends]
    _, _, reward, done, info = step(
        jr.key(0), first, jnp.full(action_size, jnp.nan, jnp.float32), params
    )
    assert bool(done) and np.isnan(float(reward))
    assert float(info["nonfinite"]) == 1.0 and float(info["terminated"]) == 1.0
    return rewards


def lifetime(genome, key, steps=6):
    """A small scanned lifetime with per-step noise and an aux summary."""

    def step(carry, step_key):
        x, total = carry
        x = jnp.tanh(genome.weight.T @ x[:3] + genome.bias) + 0.1 * jr.normal(
            step_key, (2,)
        )
        x = jnp.concatenate([x, x[:1]])
        return (x, total + jnp.sum(x**2)), None

    (x, total), _ = jax.lax.scan(
        step, (jnp.ones(3), jnp.zeros(())), jr.split(key, steps)
    )
    return total / steps, {"last": x[:2]}


def random_population(seed, size):
    key = jr.key(seed)
    layout = GenomeLayout.from_genome(Net(key=key))
    return layout.unflatten_population(jr.normal(key, (size, layout.num_params)))


# -- cases a stranger would bring ----------------------------------------------------
# Not our networks: a vector genome with an integer leaf, an eqx.nn.MLP, and
# fitness functions with multiply-adds, reductions, transcendentals and noise.


class Rosenbrock(eqx.Module):
    """A point in R^d with an integer leaf (static, shared by the population)."""

    x: jax.Array
    index: jax.Array

    def __init__(self, dim=6):
        self.x = jnp.linspace(-1.0, 1.0, dim)
        self.index = jnp.arange(dim, dtype=jnp.int32)


def rosenbrock(genome, key):
    """Multiply-adds and a reduction, plus key-dependent noise."""
    x = genome.x
    value = jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    return (
        value + 0.01 * jr.normal(key, ()) + 0.0 * jnp.sum(genome.index).astype(x.dtype)
    )


def transcendental(genome, key):
    """exp, log, sin, tanh, a max reduction and noise, with an aux pytree."""
    x = genome.x
    noise = jr.uniform(key, x.shape, minval=-0.1, maxval=0.1)
    value = (
        jnp.mean(jnp.exp(-((x + noise) ** 2)))
        + jnp.log1p(jnp.sum(jnp.abs(jnp.sin(3.0 * x))))
        - jnp.max(jnp.tanh(x * genome.index.astype(x.dtype)))
    )
    return value, {"peak": jnp.max(x), "norm": jnp.linalg.norm(x)}


def mlp_genome(key=None):
    return eqx.nn.MLP(
        1,
        1,
        width_size=8,
        depth=2,
        activation=jnp.tanh,
        key=jr.key(0) if key is None else key,
    )


def mlp_regression(mlp, key):
    """A regression loss through an eqx.nn.MLP (dots, tanh, a mean), noisy targets."""
    # Built here, not at import: sharding_worker imports this module before
    # jax.distributed starts, and a module-level array would start JAX.
    xs = jnp.linspace(-2.0, 2.0, 16)[:, None]
    targets = jnp.sin(xs) + 0.05 * jr.normal(key, xs.shape)
    return -jnp.mean((jax.vmap(mlp)(xs) - targets) ** 2)


class Stranger(eqx.Module):
    """Every kind of leaf at once: an eqx.nn.MLP, a float vector and an integer
    leaf (static, shared by the population)."""

    mlp: eqx.nn.MLP
    x: jax.Array
    index: jax.Array

    def __init__(self, dim=5):
        self.mlp = mlp_genome()
        self.x = jnp.linspace(-1.0, 1.0, dim)
        self.index = jnp.arange(dim, dtype=jnp.int32)


def stranger_fitness(genome, key):
    """All of the above in one fitness: the MLP's noisy regression (dots, tanh, a
    mean), Rosenbrock's multiply-adds and sum, and `transcendental` (exp, log1p,
    sin, tanh, max, noise) with its aux pytree."""
    regression_key, rosenbrock_key, transcendental_key = jr.split(key, 3)
    value, aux = transcendental(genome, transcendental_key)
    value = (
        value
        + mlp_regression(genome.mlp, regression_key)
        - 0.01 * rosenbrock(genome, rosenbrock_key)
    )
    return value, aux


# -- small experiments (`eqxevo run` through the Python API and the CLI) ----------

SMALL_EXPERIMENT = [
    "net.name=mlp",
    "net.options.width=8",
    "net.options.depth=1",
    "strategy.population_size=8",
    "run.lifetime=40",
    "run.generations=6",
    "run.chunk_size=2",
    "run.checkpoint_every=2",
    # fixed chunks: checkpoints land on the same generations whatever the timing
    "run.chunk_seconds=0",
]
"""A chemotaxis experiment that runs in seconds: an MLP, P=8, T=40, 6 generations."""


def small_experiment(*extra: str):
    """`SMALL_EXPERIMENT` with `--set` style overrides."""
    from eqxevo._app import config

    return config.load(None, [*SMALL_EXPERIMENT, *extra])


def final_state(run_dir, like):
    """`(generation, state)` of a run directory's newest checkpoint."""
    from eqxevo._app import config
    from eqxevo._app.checkpoint import Checkpointer

    ckpt = Checkpointer(run_dir / "checkpoints")
    generation, state = ckpt.restore(
        like, ckpt.experiment(ckpt.latest()), ignore=config.RESUMABLE_CHANGES
    )
    ckpt.close()
    return generation, state


SAVED = re.compile(r"^checkpoint at generation (\d+) saved; `eqxevo resume (.+)`$")
"""A run's last line after a stop that saved a checkpoint."""


def handles_sigterm(pid):
    """Whether the process catches SIGTERM yet (eqxevo's handler: Python sets
    none), from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = re.search(r"SigCgt:\s*([0-9a-f]+)", status)
    return caught is not None and bool(int(caught[1], 16) >> (signal.SIGTERM - 1) & 1)
