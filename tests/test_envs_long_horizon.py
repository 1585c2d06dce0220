import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxevo import rollout
from eqxevo.envs import LongHorizon, LongHorizonParams

M = 2
ENV = LongHorizon(M)
step = eqx.filter_jit(ENV.step)
reset = eqx.filter_jit(ENV.reset)


def _run(params, key, num_steps, action=(0.0, 0.0)):
    _, state = reset(key, params)
    action = jnp.asarray(action, jnp.float32)

    def advance(state, k):
        _, state, reward, done, info = ENV.step(k, state, action, params)
        return state, (state.good, state.time, done, info["died"], reward)

    return jax.lax.scan(advance, state, jr.split(key, num_steps))


def test_roles_swap_every_season_and_only_then(key):
    params = LongHorizonParams(season_length=5, swap_prob=1.0, episode_length=1000)
    _, (good, time, done, *_) = _run(params, key, 20)
    good, time = np.asarray(good), np.asarray(time)
    for t in range(1, 20):
        swapped = good[t] != good[t - 1]
        assert swapped == (time[t] % 5 == 0)
    assert not np.any(done)


def test_a_death_costs_the_penalty_but_the_clock_and_world_carry_on(key):
    params = LongHorizonParams(
        metabolic_rate=0.2, initial_energy=0.5, death_penalty=9.0, season_length=1000
    )
    _, (_, time, done, died, reward) = _run(params, key, 7)
    died, reward = np.asarray(died), np.asarray(reward)
    # 0.5 - 3 * 0.2 < 0: the body dies on every third step and is reborn.
    assert list(np.flatnonzero(died)) == [2, 5]
    assert np.all(reward[died] == -9.0) and np.all(reward[~died] >= 0.0)
    assert list(np.asarray(time)) == list(range(1, 8)) and not np.any(done)


def test_lifetime_ends_only_at_episode_length(key):
    params = LongHorizonParams(episode_length=6)
    _, (_, _, done, _, _) = _run(params, key, 6)
    assert list(np.asarray(done)) == [False] * 5 + [True]


def _sitting_on_a(env, key, params, steps):
    """Tastes, energies and the season's roles of a body that sits on A."""
    _, state = env.reset(key, params)
    patches = state.patches.at[1].set(jnp.full((M, 2), 0.8))  # B out of reach
    patches = patches.at[0].set(jnp.full((M, 2), -0.8))
    state = eqx.tree_at(
        lambda s: (s.patches, s.position), state, (patches, patches[0, 0])
    )
    go = eqx.filter_jit(env.step)
    tastes, energies, goods = [], [], []
    for t in range(steps):
        goods.append(int(state.good))  # the roles the step is eaten under
        _, state, *_ = go(jr.fold_in(key, t), state, jnp.zeros(2, jnp.float32), params)
        tastes.append(float(state.taste))
        energies.append(float(state.energy))
    return np.asarray(tastes), np.asarray(energies), goods


def test_a_fixed_preference_is_punished_in_alternate_seasons(key):
    # Sitting on a patch of A nourishes in A's seasons and poisons in B's: the
    # taste signal flips sign with the season (what a learning agent exploits).
    params = LongHorizonParams(season_length=4, relocate_prob=0.0, episode_length=100)
    tastes, _, goods = _sitting_on_a(LongHorizon(M, digestion=0), key, params, 8)
    for taste, good in zip(tastes, goods, strict=True):
        assert (taste > 0) == (good == 0) and taste != 0.0
    assert len(set(goods)) == 2


def test_food_tastes_and_nourishes_digestion_steps_after_it_is_eaten(key):
    # The same lifetime (same keys) digested at once and 3 steps later: the
    # taste and the energy change of step t arrive at step t + 3.
    params = LongHorizonParams(season_length=4, relocate_prob=0.0, episode_length=100)
    at_once = _sitting_on_a(LongHorizon(M, digestion=0), key, params, 12)
    later = _sitting_on_a(LongHorizon(M, digestion=3), key, params, 12)
    np.testing.assert_array_equal(later[0][:3], 0.0)  # nothing digested yet
    np.testing.assert_allclose(later[0][3:], at_once[0][:9], rtol=1e-6)
    metabolic = float(params.metabolic_rate)
    gained = np.diff(np.concatenate([[0.5], at_once[1]])) + metabolic
    gained_later = np.diff(np.concatenate([[0.5], later[1]])) + metabolic
    np.testing.assert_allclose(gained_later[3:], gained[:9], atol=1e-6)
    assert later[2] == at_once[2]  # the seasons do not care


def test_l4_lifetime_runs_twenty_thousand_steps(key):
    from eqxevo.agents import RandomAgent

    fitness, summary = rollout(
        key, RandomAgent(ENV.obs_size), ENV, ENV.default_params(), 20_000
    )
    assert int(summary["steps"]) == 20_000 and int(summary["num_episodes"]) == 1
    assert np.isfinite(float(fitness))


@pytest.mark.parametrize(
    "bad", [{"season_length": 0}, {"swap_prob": 1.5}, {"toxicity": -1.0}]
)
def test_bad_params_raise_naming_the_parameter(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        LongHorizonParams(**bad)
