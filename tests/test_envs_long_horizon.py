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
reset = eqx.filter_jit(ENV.reset)


def _run(params, key, num_steps, action=(0.0, 0.0)):
    _, state = reset(key, params)
    action = jnp.asarray(action, jnp.float32)

    def advance(state, k):
        _, state, reward, done, _ = ENV.step(k, state, action, params)
        return state, (state.good, state.time, done, reward)

    return jax.lax.scan(advance, state, jr.split(key, num_steps))


def test_roles_swap_every_season_and_only_then(key):
    params = LongHorizonParams(season_length=5, swap_prob=1.0, episode_length=1000)
    _, (good, time, done, _) = _run(params, key, 20)
    good, time = np.asarray(good), np.asarray(time)
    for t in range(1, 20):
        swapped = good[t] != good[t - 1]
        assert swapped == (time[t] % 5 == 0)
    assert not np.any(done)


def test_lifetime_ends_only_at_episode_length(key):
    params = LongHorizonParams(episode_length=6)
    _, (_, _, done, _) = _run(params, key, 6)
    assert list(np.asarray(done)) == [False] * 5 + [True]


def _sitting_on_a(env, key, params, steps):
    """Tastes, rewards, amounts and the season's roles of a body sitting on A."""
    _, state = env.reset(key, params)
    patches = state.patches.at[1].set(jnp.full((M, 2), 0.8))  # B out of reach
    patches = patches.at[0].set(jnp.full((M, 2), -0.8))
    state = eqx.tree_at(
        lambda s: (s.patches, s.position), state, (patches, patches[0, 0])
    )
    go = eqx.filter_jit(env.step)
    tastes, rewards, amounts, goods = [], [], [], []
    for t in range(steps):
        goods.append(int(state.good))  # the roles the step is eaten under
        _, state, reward, *_ = go(
            jr.fold_in(key, t), state, jnp.zeros(2, jnp.float32), params
        )
        tastes.append(float(state.taste))
        rewards.append(float(reward))
        amounts.append(np.asarray(state.amounts))
    return np.asarray(tastes), np.asarray(rewards), np.asarray(amounts), goods


def test_a_fixed_preference_is_punished_in_alternate_seasons(key):
    # Sitting on a patch of A nourishes in A's seasons and poisons in B's: the
    # reward and the noiseless taste flip sign with the season.
    params = LongHorizonParams(
        season_length=4, relocate_prob=0.0, taste_noise=0.0, episode_length=100
    )
    at_once = LongHorizon(M, digestion=0)
    tastes, rewards, _, goods = _sitting_on_a(at_once, key, params, 8)
    for taste, reward, good in zip(tastes, rewards, goods, strict=True):
        assert (taste > 0) == (good == 0) and taste != 0.0
        assert (reward > 0) == (good == 0)
    assert len(set(goods)) == 2


def test_food_tastes_and_nourishes_digestion_steps_after_it_is_eaten(key):
    # The same lifetime (same keys) digested at once and 3 steps later: the
    # taste and the reward of step t arrive at step t + 3.
    params = LongHorizonParams(
        season_length=4, relocate_prob=0.0, taste_noise=0.0, episode_length=100
    )
    at_once = _sitting_on_a(LongHorizon(M, digestion=0), key, params, 12)
    later = _sitting_on_a(LongHorizon(M, digestion=3), key, params, 12)
    np.testing.assert_array_equal(later[0][:3], 0.0)  # nothing digested yet
    np.testing.assert_array_equal(later[1][:3], 0.0)
    np.testing.assert_allclose(later[0][3:], at_once[0][:9], rtol=1e-6)
    np.testing.assert_allclose(later[1][3:], at_once[1][:9], rtol=1e-6)
    assert later[3] == at_once[3]  # the seasons do not care


def test_patches_never_deplete_by_default_so_fields_show_no_meal(key):
    # The fields are sums over patches weighted by their amounts: by default
    # the amounts stay exactly 1 however much is eaten (no stigmergy).
    params = LongHorizonParams(season_length=1000, episode_length=100)
    _, _, amounts, _ = _sitting_on_a(ENV, key, params, 20)
    np.testing.assert_array_equal(amounts, 1.0)
    depleting = LongHorizonParams(regrowth_rate=0.002, episode_length=100)
    _, _, amounts, _ = _sitting_on_a(ENV, key, depleting, 20)
    assert float(amounts[-1, 0, 0]) < 0.9


def test_taste_noise_is_gaussian_with_the_declared_deviation(key):
    # Far from every patch nothing is eaten: the taste is the noise alone.
    params = LongHorizonParams(taste_noise=2.0, season_length=100_000)
    _, state = reset(key, params)
    state = eqx.tree_at(lambda s: s.patches, state, jnp.full_like(state.patches, 0.8))
    state = eqx.tree_at(lambda s: s.position, state, jnp.array([-1.0, -1.0]))

    def advance(state, k):
        _, state, *_ = ENV.step(k, state, jnp.zeros(2, jnp.float32), params)
        return state, state.taste

    _, tastes = jax.lax.scan(advance, state, jr.split(key, 4000))
    tastes = np.asarray(tastes)
    assert abs(tastes.mean()) < 0.15 and abs(tastes.std() - 2.0) < 0.1


def test_l4_lifetime_runs_twenty_thousand_steps(key):
    from eqxevo.agents import RandomAgent

    fitness, summary = rollout(
        key, RandomAgent(ENV.obs_size), ENV, ENV.default_params(), 20_000
    )
    assert int(summary["steps"]) == 20_000 and int(summary["num_episodes"]) == 1
    assert np.isfinite(float(fitness))


@pytest.mark.parametrize(
    "bad", [{"season_length": 0}, {"swap_prob": 1.5}, {"taste_noise": -1.0}]
)
def test_bad_params_raise_naming_the_parameter(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        LongHorizonParams(**bad)
