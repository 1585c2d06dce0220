"""The lifetime: one policy acting in one environment, under `lax.scan`.

`rollout` runs a lifetime of `num_steps` steps and keeps only running sums in
the scan's carry (no stacked per-step outputs), so its memory is flat in T and
its compilation does not grow with T (jax#40101: stacked scan outputs are
quadratic in T on CPU in some jaxlibs). It returns `(fitness, summary)`, so

    fitness_fn = lambda genome, key: rollout(key, genome, env, params, 1000)

is an eqxevo fitness function with aux, ready for `evaluate` and `evolve`.

`record` runs the same lifetime, with the same keys, for one genome and a
short T, and returns the whole trajectory (for pictures and debugging).

One step of a lifetime:

    action, policy_state = policy(obs, policy_state)
    obs, env_state, reward, done, info = env.step(env_key, env_state, action, params)
    policy_state = policy.reinforce(reward, policy_state)
    if done: obs, env_state = env.reset(reset_key, params)     # reset_on_done

Auto-reset starts a new *episode* in the same *lifetime*: the environment
resets, the policy's lifetime state (activations, plastic weights, traces) does
not, so whatever the agent learned carries into the next episode. Pass
`reset_policy_on_done=True` to reset it too. With `reset_on_done=False` the
lifetime is one episode: after the first `done` the environment is frozen and
no more reward accrues (the classic "return of one episode" fitness).

Key schedule (`record` follows it exactly):

    init_key, run_key = split(key)
    reset_key, policy_key = split(init_key)      # env.reset, policy.initial_state
    env_keys, reset_keys, policy_keys = split(run_key, 3)
    step t: env.step gets fold_in(env_keys, t); an auto-reset after it gets
            fold_in(reset_keys, t); a policy reset fold_in(policy_keys, t)

Each step derives only the keys it uses (one `fold_in` each): on CPU the
threefry rounds behind every key cost as much as a whole arena step.
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu

from ._deprecated import key_first
from ._types import Array, Bool, Float, PRNGKey, Scalar
from .envs.base import AbstractEnv, EnvParams, EnvState
from .nets.base import AbstractPolicy

Summary = dict[str, Array]


class _Carry(eqx.Module):
    t: Array  # the step index (carried, not scanned over: no array of length T)
    policy_state: Any
    env_state: Any
    obs: Array
    active: Array  # the environment still runs (False after a done without reset)
    total_reward: Array
    num_episodes: Array
    steps_alive: Array  # steps up to and including the first done
    steps: Array  # steps the environment ran
    info_sums: dict[str, Array]


class _Step(eqx.Module):
    obs: Array
    action: Array
    reward: Array
    done: Array
    info: dict[str, Array]
    env_state: Any  # after the step, before any reset


def _check_num_steps(num_steps: Any) -> None:
    if not isinstance(num_steps, int) or isinstance(num_steps, bool) or num_steps < 1:
        raise ValueError(
            f"num_steps must be a positive Python int (a static lifetime length); "
            f"got {num_steps!r}"
        )


def _select(pred: Array, on_true: Any, on_false: Any) -> Any:
    return jtu.tree_map(lambda a, b: jax.lax.select(pred, a, b), on_true, on_false)


def _info_shapes(
    policy: AbstractPolicy, env: AbstractEnv, env_params: EnvParams, key: PRNGKey
) -> dict[str, Any]:
    def first(key: PRNGKey) -> dict[str, Array]:
        reset_key, policy_key, step_key = jr.split(key, 3)
        obs, state = env.reset(reset_key, env_params)
        action, _ = policy(obs, policy.initial_state(policy_key))
        return env.step(step_key, state, action, env_params)[4]

    return jax.eval_shape(first, key)


class _StepKeys(eqx.Module):
    env: PRNGKey
    reset: PRNGKey
    policy: PRNGKey


def _start(
    policy: AbstractPolicy, env: AbstractEnv, env_params: EnvParams, key: PRNGKey
) -> tuple[_Carry, _StepKeys]:
    init_key, run_key = jr.split(key)
    reset_key, policy_key = jr.split(init_key)
    env_keys, reset_keys, policy_keys = jr.split(run_key, 3)
    obs, env_state = env.reset(reset_key, env_params)
    info = _info_shapes(policy, env, env_params, key)
    bad = sorted(k for k, v in info.items() if v.shape != ())
    if bad:
        raise ValueError(
            f"{type(env).__name__}.step must return an info dict of scalars; entries "
            f"{bad} are not"
        )
    carry = _Carry(
        t=jnp.zeros((), jnp.int32),
        policy_state=policy.initial_state(policy_key),
        env_state=env_state,
        obs=obs,
        active=jnp.bool_(True),
        total_reward=jnp.zeros((), jnp.float32),
        num_episodes=jnp.zeros((), jnp.int32),
        steps_alive=jnp.zeros((), jnp.int32),
        steps=jnp.zeros((), jnp.int32),
        info_sums={k: jnp.zeros((), jnp.float32) for k in info},
    )
    return carry, _StepKeys(env_keys, reset_keys, policy_keys)


def _step(
    policy: AbstractPolicy,
    env: AbstractEnv,
    env_params: EnvParams,
    keys: _StepKeys,
    reset_on_done: bool,
    reset_policy_on_done: bool,
    carry: _Carry,
) -> tuple[_Carry, _Step]:
    env_key = jr.fold_in(keys.env, carry.t)
    action, policy_state = policy(carry.obs, carry.policy_state)
    obs, env_state, reward, done, info = env.step(
        env_key, carry.env_state, action, env_params
    )
    reward = jnp.asarray(reward, jnp.float32)
    done = jnp.asarray(done, jnp.bool_)
    active = carry.active
    reward = jnp.where(active, reward, 0.0)
    policy_state = policy.reinforce(reward, policy_state)

    if reset_on_done:
        reset_key = jr.fold_in(keys.reset, carry.t)
        reset_obs, reset_state = env.reset(reset_key, env_params)
        next_obs, next_state = _select(done, (reset_obs, reset_state), (obs, env_state))
        if reset_policy_on_done:
            policy_key = jr.fold_in(keys.policy, carry.t)
            policy_state = _select(done, policy.initial_state(policy_key), policy_state)
        still_active = active
    else:
        next_obs, next_state = _select(
            active, (obs, env_state), (carry.obs, carry.env_state)
        )
        policy_state = _select(active, policy_state, carry.policy_state)
        still_active = active & ~done

    # Record the state after the step, before any reset; a frozen one stays frozen.
    kept = env_state if reset_on_done else next_state
    record = _Step(carry.obs, action, reward, done & active, info, kept)
    first_done_seen = carry.num_episodes > 0
    weight = active.astype(jnp.float32)
    new_carry = _Carry(
        t=carry.t + 1,
        policy_state=policy_state,
        env_state=next_state,
        obs=next_obs,
        active=still_active,
        total_reward=carry.total_reward + reward,
        num_episodes=carry.num_episodes + (done & active).astype(jnp.int32),
        steps_alive=carry.steps_alive + (~first_done_seen).astype(jnp.int32),
        steps=carry.steps + active.astype(jnp.int32),
        info_sums={
            k: carry.info_sums[k] + weight * jnp.asarray(info[k], jnp.float32)
            for k in carry.info_sums
        },
    )
    return new_carry, record


def _summary(carry: _Carry, num_steps: int, reset_on_done: bool) -> Summary:
    # With auto-reset the environment runs every step, so the divisor is the
    # static lifetime length. Keep it static: XLA turns a division by a value it
    # can prove constant into a multiplication by its reciprocal (not exact), and
    # whether it can prove the carried step count constant depends on the
    # surrounding program (it could inside a sharded program, not outside), so
    # the means would change in their last bit with the device count.
    if reset_on_done:
        steps = jnp.asarray(num_steps, jnp.float32)
    else:
        steps = jnp.maximum(carry.steps, 1).astype(jnp.float32)
    summary = {
        "total_reward": carry.total_reward,
        "mean_reward": carry.total_reward / steps,
        "num_episodes": carry.num_episodes,
        "steps_alive": carry.steps_alive,
        "steps": carry.steps,
    }
    for k, v in carry.info_sums.items():
        summary[f"mean_{k}"] = v / steps
    return summary


@key_first(old_position=3)
@eqx.filter_jit
def rollout(
    key: PRNGKey,
    policy: AbstractPolicy,
    env: AbstractEnv,
    env_params: EnvParams,
    num_steps: int,
    *,
    reset_on_done: bool = True,
    reset_policy_on_done: bool = False,
) -> tuple[Scalar, Summary]:
    """Run one lifetime of `num_steps` steps; return its fitness and a summary.

    Memory is flat in `num_steps` (only running sums are carried) and the
    program compiles once per `num_steps`.

    Arguments:
        key: the lifetime's key (see the module docstring for its schedule).
        policy: any `AbstractPolicy` (a genome).
        env: any `AbstractEnv`.
        env_params: the environment's params (a variant).
        num_steps: lifetime length T, a static Python int.
        reset_on_done: reset the environment when an episode ends and carry on
            (True), or freeze it for the rest of the lifetime (False).
        reset_policy_on_done: also reset the policy's lifetime state when an
            episode ends (default False: lifetime learning persists).

    Returns:
        `(fitness, summary)`: fitness is the total reward over the lifetime
        (float32 scalar). summary is a dict of scalars: `total_reward`,
        `mean_reward` (per step the environment ran), `num_episodes` (episodes
        that ended), `steps_alive` (steps up to and including the first `done`;
        `num_steps` if none), `steps` (steps the environment ran), and
        `mean_<name>` for every entry of the environment's `info`, averaged
        over the steps the environment ran.

    Example:
        >>> env = Chemotaxis()
        >>> fitness, summary = rollout(key, policy, env, env.default_params(), 1000)
        >>> fitness_fn = lambda g, k: rollout(k, g, env, env.default_params(), 1000)
    """
    _check_num_steps(num_steps)
    carry, keys = _start(policy, env, env_params, key)

    def body(carry: _Carry, xs: None) -> tuple[_Carry, None]:
        del xs
        carry, _ = _step(
            policy, env, env_params, keys, reset_on_done, reset_policy_on_done, carry
        )
        return carry, None

    carry, _ = jax.lax.scan(body, carry, length=num_steps)
    summary = _summary(carry, num_steps, reset_on_done)
    return summary["total_reward"], summary


class Trajectory(eqx.Module):
    """A recorded lifetime (from `record`).

    Attributes:
        env_states: the environment's state, stacked over T + 1 entries: entry 0
            at the start, entry t + 1 after step t (before any reset, so an
            episode's last position is kept; the next entry may start a new
            episode).
        observations: `(T, obs)`, what the policy saw at each step.
        actions: `(T, action)`, what it did.
        rewards: `(T,)`; zero once the environment is frozen.
        dones: `(T,)`, whether an episode ended at step t.
        info: the environment's info, each entry stacked to `(T,)`.
        fitness, summary: as `rollout` returns for the same arguments.
    """

    env_states: EnvState
    observations: Float[Array, "T obs"]
    actions: Float[Array, "T action"]
    rewards: Float[Array, " T"]
    dones: Bool[Array, " T"]
    info: dict[str, Array]
    fitness: Scalar
    summary: Summary


@key_first(old_position=3)
@eqx.filter_jit
def record(
    key: PRNGKey,
    policy: AbstractPolicy,
    env: AbstractEnv,
    env_params: EnvParams,
    num_steps: int,
    *,
    reset_on_done: bool = True,
    reset_policy_on_done: bool = False,
) -> Trajectory:
    """Run one lifetime like `rollout` and keep every step (for one genome, short T).

    Same arguments, keys and results as `rollout`; memory grows with
    `num_steps`, so use it for pictures and debugging, not for evolution.

    Returns:
        A `Trajectory`.

    Example:
        >>> trajectory = record(key, policy, env, params, 500)
        >>> eqxevo.envs.render.render_trajectory(trajectory, env, params, "path.png")
    """
    _check_num_steps(num_steps)
    carry, keys = _start(policy, env, env_params, key)
    initial_state = carry.env_state

    def body(carry: _Carry, xs: None) -> tuple[_Carry, _Step]:
        del xs
        return _step(
            policy, env, env_params, keys, reset_on_done, reset_policy_on_done, carry
        )

    carry, steps = jax.lax.scan(body, carry, length=num_steps)
    env_states = jtu.tree_map(
        lambda first, rest: jnp.concatenate([first[None], rest]),
        initial_state,
        steps.env_state,
    )
    summary = _summary(carry, num_steps, reset_on_done)
    return Trajectory(
        env_states=env_states,
        observations=steps.obs,
        actions=steps.action,
        rewards=steps.reward,
        dones=steps.done,
        info=steps.info,
        fitness=summary["total_reward"],
        summary=summary,
    )


__all__ = ["Summary", "Trajectory", "record", "rollout"]
