"""The lifetime: one policy acting in one environment, under `lax.scan`.

See docs/environments.md ("Lifetimes") for a step, auto-reset and the key schedule.
"""

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu

from ._checks import positive_int
from ._types import Array, PRNGKey, PRNGKeys, Scalar
from .bits import draws_apart_pay, stage, true_at_run_time
from .draws import StepDraws, StepKeys, block_draws, draw_block
from .early_exit import EXIT_CHUNK, until_done
from .envs.base import AbstractEnv, EnvParams, noise_apart
from .nets.base import AbstractPolicy
from .obs_norm import ObsMoments, RunningObs, merge_stacked, normalized

Summary = dict[str, Any]
"""A lifetime's scalars: `total_reward`, `mean_reward`, ... (see `rollout`), and
the observations' `obs_moments` where tracked."""


class LifetimeCarry(eqx.Module):
    """What a lifetime carries from step to step: states and running sums only."""

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
    info_last: dict[str, Array]  # the info of the last step the environment ran
    obs_moments: ObsMoments | None = None  # the observations' moments, if tracked


class StepRecord(eqx.Module):
    """What one step did (kept by `record`, dropped by `rollout`)."""

    obs: Array
    action: Array
    reward: Array
    done: Array
    info: dict[str, Array]
    env_state: Any  # after the step, before any reset


def _select(pred: Array, on_true: Any, on_false: Any) -> Any:
    # Both branches are computed every step (a scan body has one shape); select,
    # not lax.cond, which under vmap would run both anyway.
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


# On CPU, everything a lifetime draws from its key (resets, initial states, a
# step's noise) is computed as a computation of its own (`stage`): with a key
# shared by the population (`evaluate`'s shared episodes) it runs once,
# unbatched, and its bits cannot depend on the batched code that reads it
# (docs/reproducibility.md).


def _apart(fn: Any, key: PRNGKey) -> Any:
    """`fn` as a computation of its own where that pays (`draws_apart_pay`)."""
    return stage(fn, true_at_run_time(key)) if draws_apart_pay() else fn


def _reset(env: AbstractEnv, env_params: EnvParams, key: PRNGKey) -> Any:
    return _apart(env.reset, key)(key, env_params)


def _initial_state(policy: AbstractPolicy, key: PRNGKey) -> Any:
    return _apart(lambda p, k: p.initial_state(k), key)(policy, key)


def start_lifetime(
    policy: AbstractPolicy,
    env: AbstractEnv,
    env_params: EnvParams,
    key: PRNGKey,
    track_obs: bool = False,
) -> tuple[LifetimeCarry, StepKeys]:
    """Birth: the environment reset, the policy's initial state, the step keys;
    with `track_obs`, moments of the observations the policy will see.

    Raises:
        ValueError: the environment's `info` holds entries that are not scalars.
    """
    init_key, run_key = jr.split(key)
    reset_key, policy_key = jr.split(init_key)
    env_keys, reset_keys, policy_keys = jr.split(run_key, 3)
    obs, env_state = _reset(env, env_params, reset_key)
    # The info entries are known only by tracing one step; their sums start at 0.
    info = _info_shapes(policy, env, env_params, key)
    bad = sorted(k for k, v in info.items() if v.shape != ())
    if bad:
        raise ValueError(
            f"{type(env).__name__}.step must return an info dict of scalars; entries "
            f"{bad} are not"
        )
    carry = LifetimeCarry(
        t=jnp.zeros((), jnp.int32),
        policy_state=_initial_state(policy, policy_key),
        env_state=env_state,
        obs=obs,
        active=jnp.bool_(True),
        total_reward=jnp.zeros((), jnp.float32),
        num_episodes=jnp.zeros((), jnp.int32),
        steps_alive=jnp.zeros((), jnp.int32),
        steps=jnp.zeros((), jnp.int32),
        info_sums={k: jnp.zeros((), jnp.float32) for k in info},
        info_last={k: jnp.zeros((), jnp.float32) for k in info},
        obs_moments=ObsMoments.zeros(obs.shape[0]) if track_obs else None,
    )
    return carry, StepKeys(env_keys, reset_keys, policy_keys)


def lifetime_step(
    policy: AbstractPolicy,
    env: AbstractEnv,
    env_params: EnvParams,
    keys: StepKeys,
    reset_on_done: bool,
    reset_policy_on_done: bool,
    carry: LifetimeCarry,
    draws: StepDraws | None = None,
) -> tuple[LifetimeCarry, StepRecord]:
    """One step of a lifetime: act, step the environment, reinforce, maybe reset.

    `draws`: this step's environment draws, computed ahead (`block_draws`; an
    environment that draws apart only); None: the step draws them itself."""
    action, policy_state = policy(carry.obs, carry.policy_state)
    if draws is not None:
        step = env.transition(carry.env_state, action, env_params, draws.noise)
    elif noise_apart(env):
        env_key = jr.fold_in(keys.env, carry.t)
        noise = _apart(env.sample_noise, env_key)(env_key, env_params)
        step = env.transition(carry.env_state, action, env_params, noise)
    else:
        step = env.step(
            jr.fold_in(keys.env, carry.t), carry.env_state, action, env_params
        )
    obs, env_state, reward, done, info = step
    reward = jnp.asarray(reward, jnp.float32)
    done = jnp.asarray(done, jnp.bool_)
    active = carry.active
    reward = jnp.where(active, reward, 0.0)  # a frozen environment earns nothing
    policy_state = policy.reinforce(reward, policy_state)

    if reset_on_done:
        # A reset is computed every step and kept only where done: no branch.
        if draws is not None:
            reset_obs, reset_state = draws.reset
        else:
            reset_key = jr.fold_in(keys.reset, carry.t)
            reset_obs, reset_state = _reset(env, env_params, reset_key)
        next_obs, next_state = _select(done, (reset_obs, reset_state), (obs, env_state))
        if reset_policy_on_done:
            policy_key = jr.fold_in(keys.policy, carry.t)
            fresh = _initial_state(policy, policy_key)
            policy_state = _select(done, fresh, policy_state)
        still_active = active
    else:
        # One episode per lifetime: after its done, environment and policy freeze.
        next_obs, next_state = _select(
            active, (obs, env_state), (carry.obs, carry.env_state)
        )
        policy_state = _select(active, policy_state, carry.policy_state)
        still_active = active & ~done

    # Record the state after the step, before any reset; a frozen one stays frozen.
    kept = env_state if reset_on_done else next_state
    record = StepRecord(carry.obs, action, reward, done & active, info, kept)
    first_done_seen = carry.num_episodes > 0
    weight = active.astype(jnp.float32)  # info of a frozen environment is not averaged
    new_carry = LifetimeCarry(
        t=carry.t + 1,
        policy_state=policy_state,
        env_state=next_state,
        obs=next_obs,
        active=still_active,
        total_reward=carry.total_reward + reward,
        num_episodes=carry.num_episodes + (done & active).astype(jnp.int32),
        steps_alive=carry.steps_alive + (~first_done_seen).astype(jnp.int32),
        steps=carry.steps + active.astype(jnp.int32),
        # a select, not a weight: a frozen step leaves the sums exactly as they
        # are (0 * a non-finite info would not), so a lifetime may stop early
        info_sums={
            k: jnp.where(
                active, carry.info_sums[k] + jnp.asarray(info[k], jnp.float32), v
            )
            for k, v in carry.info_sums.items()
        },
        info_last={
            k: jnp.where(active, jnp.asarray(info[k], jnp.float32), v)
            for k, v in carry.info_last.items()
        },
        obs_moments=None
        if carry.obs_moments is None
        else carry.obs_moments.add(carry.obs, weight),
    )
    return new_carry, record


def lifetime_summary(
    carry: LifetimeCarry, num_steps: int, reset_on_done: bool
) -> Summary:
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
    summary: Summary = {
        "total_reward": carry.total_reward,
        "mean_reward": carry.total_reward / steps,
        "num_episodes": carry.num_episodes,
        "steps_alive": carry.steps_alive,
        "steps": carry.steps,
    }
    for k, v in carry.info_sums.items():
        summary[f"mean_{k}"] = v / steps
        summary[f"final_{k}"] = carry.info_last[k]
    if carry.obs_moments is not None:
        summary["obs_moments"] = carry.obs_moments
    return summary


def run_lifetime(
    key: PRNGKey,
    policy: AbstractPolicy,
    env: AbstractEnv,
    env_params: EnvParams,
    num_steps: int,
    reset_on_done: bool,
    reset_policy_on_done: bool,
    keep_steps: bool = False,
    block: int = 1,
    track_obs: bool = False,
    exit_early: bool = True,
) -> tuple[LifetimeCarry, Any]:
    """The scan both `rollout` and `record` run; with `keep_steps`, also the
    environment's first state and every step's record. A lifetime of one
    episode of at least `2 * EXIT_CHUNK` steps runs in chunks and, with
    `exit_early`, stops after the chunk in which its episode ended
    (`eqxevo._src.early_exit.until_done`)."""
    num_steps = positive_int("num_steps", num_steps)
    carry, keys = start_lifetime(policy, env, env_params, key, track_obs)
    first_state = carry.env_state

    def body(carry: LifetimeCarry, draws: StepDraws | None) -> tuple[Any, Any]:
        carry, step = lifetime_step(
            policy,
            env,
            env_params,
            keys,
            reset_on_done,
            reset_policy_on_done,
            carry,
            draws,
        )
        # Dropping the record here keeps memory flat in T: nothing is stacked.
        return carry, step if keep_steps else None

    def block_body(carry: LifetimeCarry, first: Array) -> tuple[Any, Any]:
        steps = first + jnp.arange(block, dtype=first.dtype)
        draws = block_draws(env, env_params, keys, steps, reset_on_done)
        return jax.lax.scan(body, carry, draws)

    def steps_from(carry: LifetimeCarry, first: Array, count: int) -> tuple[Any, Any]:
        # `count` steps from step index `first` (a multiple of `block`)
        if block == 1:
            return jax.lax.scan(body, carry, length=count)
        starts = first + jnp.arange(0, count, block, dtype=jnp.int32)
        return jax.lax.scan(block_body, carry, starts)

    if keep_steps or reset_on_done or num_steps < 2 * EXIT_CHUNK:
        carry, steps = steps_from(carry, jnp.int32(0), num_steps)
        if keep_steps and block > 1:  # [T / S, S, ...] -> [T, ...]
            steps = jtu.tree_map(lambda x: x.reshape(num_steps, *x.shape[2:]), steps)
        return carry, (first_state, steps) if keep_steps else None
    return until_done(carry, num_steps, block, steps_from, exit_early), None


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
    draw_ahead: bool = False,
    track_obs: bool = False,
) -> tuple[Scalar, Summary]:
    """Run one lifetime of `num_steps` steps; return its fitness and a summary.

    Memory is flat in `num_steps` (only running sums are carried) and the
    program compiles once per `num_steps`.

    Arguments:
        key: the lifetime's key (its schedule: docs/environments.md, "Lifetimes").
        policy: any `AbstractPolicy` (a genome).
        env: any `AbstractEnv`.
        env_params: the environment's params (a variant).
        num_steps: lifetime length T, a static Python int.
        reset_on_done: reset the environment when an episode ends and carry on
            (True), or freeze it for the rest of the lifetime (False).
        reset_policy_on_done: also reset the policy's lifetime state when an
            episode ends (default False: lifetime learning persists).
        draw_ahead: compute the environment's draws for blocks of steps ahead
            of them (`draw_block`; an environment that draws apart, on CPU):
            fewer kernels per step, the same draws. `evaluate` sets it (through
            `LifetimeFitness`) for shared episodes, whose key the population
            shares, so the block is drawn once for it.
        track_obs: also return the moments of the observations the policy saw
            (summary entry `obs_moments`, an `ObsMoments`), for observation
            normalisation.

    Returns:
        `(fitness, summary)`: fitness is the total reward over the lifetime
        (float32 scalar). summary is a dict of scalars: `total_reward`,
        `mean_reward` (per step the environment ran), `num_episodes` (episodes
        that ended), `steps_alive` (steps up to and including the first `done`;
        `num_steps` if none), `steps` (steps the environment ran), and
        `mean_<name>` for every entry of the environment's `info`, averaged
        over the steps the environment ran, and `final_<name>`, its value at the
        last of them.

    Example:
        >>> env = Chemotaxis()
        >>> fitness, summary = rollout(key, policy, env, env.default_params(), 1000)
        >>> fitness_fn = lambda g, k: rollout(k, g, env, env.default_params(), 1000)
    """
    block = draw_block(env, num_steps) if draw_ahead else 1
    carry, _ = run_lifetime(
        key,
        policy,
        env,
        env_params,
        num_steps,
        reset_on_done,
        reset_policy_on_done,
        block=block,
        track_obs=track_obs,
    )
    summary = lifetime_summary(carry, num_steps, reset_on_done)
    return summary["total_reward"], summary


def lifetime_keys(key: PRNGKey, lifetimes: int) -> PRNGKey | PRNGKeys:
    """The keys of a fitness's `lifetimes` lifetimes: `key` itself for one,
    `jr.split(key, lifetimes)` (lifetime j gets entry j) for more.

    Returns:
        one key for `lifetimes == 1`, else a `(lifetimes,)` array of keys.
    """
    lifetimes = positive_int("lifetimes", lifetimes)
    return key if lifetimes == 1 else jr.split(key, lifetimes)


class LifetimeFitness(eqx.Module):
    """`fitness(genome, key)`: the genome's mean fitness over `lifetimes`
    `rollout` lifetimes in `env`.

    The fitness function to hand `evolve` or `evaluate` for a lifetime. A module
    rather than a closure, so the environment's params are traced arrays (not
    constants baked into the program) and equal experiments share one
    compilation. Where the environment draws its steps' noise apart
    (`sample_noise`, as eqxevo's arena environments do), a generation's shared
    episode is drawn once for the whole population (`draws_apart`).

    Several lifetimes per fitness (E = `lifetimes` > 1, `run.lifetimes_per_fitness`
    in a config) average out a noisy task's luck: lifetime j gets
    `jr.split(key, E)[j]` (`lifetime_keys`), so with shared episodes every
    genome of a generation lives the same E lifetimes. They run one after
    another (`lax.scan`): memory stays that of one lifetime per genome, each
    lifetime's draws stay computations of their own (a `vmap` over them would
    turn the staged draws' conditionals into selects), and evaluation blocks
    keep their width, so the bits do not depend on `batch_size` or devices
    (docs/reproducibility.md). The fitness is `jnp.mean` of the E fitnesses,
    and every summary entry the mean of its E values (float32; the counts
    `num_episodes`, `steps_alive` and `steps` too). With E = 1 (the default)
    the key is the lifetime's key and the program is one `rollout`.

    Arguments:
        env: any `AbstractEnv`.
        env_params: its params.
        num_steps: lifetime length T (static).
        reset_on_done: as `rollout`'s.
        lifetimes: E, lifetimes averaged per call (static int >= 1).
        draw_ahead: as `rollout`'s (static; `shared_episode` sets it).
        normalize_obs: observation normalisation (static; docs/environments.md,
            "Observation normalisation"): the policy sees observations scaled by
            `obs_moments`, and the summary returns the moments of the raw
            observations it saw (`obs_moments`), which `evolve` merges into the
            running moments it carries in the state (`initial_carry`,
            `with_carry`, `next_carry`).
        obs_moments: the running moments this generation acts on (None: raw
            observations).

    Example:
        >>> fitness_fn = LifetimeFitness(env, env.default_params(), 1000)
        >>> fitness, summary = fitness_fn(policy, key)
        >>> noisy_task = LifetimeFitness(env, env.default_params(), 100, lifetimes=16)
    """

    env: AbstractEnv
    env_params: Any
    num_steps: int = eqx.field(static=True)
    reset_on_done: bool = eqx.field(static=True, default=True)
    lifetimes: int = eqx.field(static=True, default=1)
    draw_ahead: bool = eqx.field(static=True, default=False)
    normalize_obs: bool = eqx.field(static=True, default=False)
    obs_moments: ObsMoments | None = None

    def __check_init__(self) -> None:
        positive_int("lifetimes", self.lifetimes)

    # -- what `evolve` carries between generations (observation normalisation) --

    def initial_carry(self) -> RunningObs | None:
        """The running moments before any observation (None: not normalised)."""
        return RunningObs.zeros(self.env.obs_size) if self.normalize_obs else None

    def with_carry(self, carry: RunningObs | None) -> "LifetimeFitness":
        """This fitness acting on observations normalised by `carry`'s moments."""
        return dataclasses.replace(
            self, obs_moments=None if carry is None else carry.moments
        )

    def next_carry(
        self, carry: RunningObs | None, aux: Summary, improved: Array
    ) -> tuple[RunningObs | None, Summary]:
        """The running moments with a generation's observations (`aux`: the
        population's summaries) merged in, the best genome's moments (those
        this generation acted on where it found a new best: `improved`), and
        `aux` without the observations."""
        if carry is None or "obs_moments" not in aux:
            return carry, aux
        rest = {k: v for k, v in aux.items() if k != "obs_moments"}
        best = jtu.tree_map(
            lambda now, old: jnp.where(improved, now, old), carry.moments, carry.best
        )
        moments = carry.moments.merge(merge_stacked(aux["obs_moments"]))
        return RunningObs(moments, best), rest

    def frozen(self) -> "LifetimeFitness":
        """This fitness for an agent that normalises itself (`NormalizedPolicy`):
        raw observations, nothing tracked."""
        return dataclasses.replace(self, normalize_obs=False, obs_moments=None)

    def heldout_fitness(self) -> "LifetimeFitness":
        """The fitness of one held-out lifetime: one lifetime (held-out
        evaluation averages lifetimes of its own), and with observation
        normalisation raw observations (the held-out agent carries its frozen
        moments: `heldout.heldout_genomes`)."""
        if self.lifetimes != 1 or self.normalize_obs:
            return dataclasses.replace(self.frozen(), lifetimes=1)
        return self

    def shared_episode(self) -> "LifetimeFitness":
        """This fitness for a shared episode, whose key every genome gets
        unbatched (`evaluate` calls it): each block of steps draws the
        environment's noise and resets ahead, once for the population
        (`rollout`'s `draw_ahead`)."""
        return dataclasses.replace(self, draw_ahead=True) if self.draws_apart else self

    @property
    def draws_apart(self) -> bool:
        """Every draw from the key is a computation of its own (see `evaluate`):
        the environment draws apart, on a backend where that pays."""
        return noise_apart(self.env) and draws_apart_pay()

    def _one(self, genome: AbstractPolicy, key: PRNGKey) -> tuple[Scalar, Summary]:
        return rollout(
            key,
            normalized(genome, self.obs_moments if self.normalize_obs else None),
            self.env,
            self.env_params,
            self.num_steps,
            reset_on_done=self.reset_on_done,
            draw_ahead=self.draw_ahead,
            track_obs=self.normalize_obs,
        )

    def __call__(self, genome: AbstractPolicy, key: PRNGKey) -> tuple[Scalar, Summary]:
        keys = lifetime_keys(key, self.lifetimes)
        if self.lifetimes == 1:
            return self._one(genome, keys)

        def body(carry: None, key: PRNGKey) -> tuple[None, tuple[Scalar, Summary]]:
            return carry, self._one(genome, key)

        # Only E scalars per entry are stacked: memory stays flat in E and T.
        _, (fitness, summary) = jax.lax.scan(body, None, keys)
        moments = summary.pop("obs_moments", None)
        mean = jtu.tree_map(lambda x: jnp.mean(x.astype(jnp.float32)), summary)
        if moments is not None:  # the E lifetimes' observations together
            mean["obs_moments"] = merge_stacked(moments)
        return jnp.mean(fitness), mean


__all__ = [
    "LifetimeCarry",
    "LifetimeFitness",
    "StepRecord",
    "Summary",
    "lifetime_keys",
    "lifetime_step",
    "lifetime_summary",
    "rollout",
    "run_lifetime",
    "start_lifetime",
]
