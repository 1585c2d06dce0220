"""The meta-RL bandits and their reference agents, against NumPy, SciPy and closed
forms."""

import collections
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from scipy import integrate, stats

from eqxevo._src.agents.bandits import beta_quantile
from eqxevo._src.envs.bandits import IndependentBanditState, ReversalBanditState
from eqxevo._src.references import references
from eqxevo.agents import (
    BayesUCBAgent,
    ChangePointBayesAgent,
    KArmedWinStayLoseShiftAgent,
    OracleBanditAgent,
    ThompsonSamplingAgent,
)
from eqxevo.envs import (
    IndependentBandit,
    IndependentBanditParams,
    ReversalBandit,
    ReversalBanditParams,
    privileged,
)
from eqxevo.testing import check_env, check_policy

# -- helpers --------------------------------------------------------------------------


def seen(env, obs, state, params, told):
    """What the policy reads: the observation, then `env.privileged` if `told` (as
    `eqxevo.envs.privileged(env)` would give it)."""
    if not told:
        return obs
    return jnp.concatenate([obs, env.privileged(state, params)])


@eqx.filter_jit
def play(policy, env, params, keys, num_steps, told=False):
    """Lifetimes of `num_steps` steps, one per key, a new episode after each done:
    every step's reward and info, `[N, T]` each (a lean scan: small programs).
    With `told`, the policy reads the privileged observation."""

    def lifetime(key):
        reset_key, policy_key, run_key = jr.split(key, 3)
        obs, state = env.reset(reset_key, params)

        def body(carry, key):
            obs, state, memory = carry
            step_key, next_key = jr.split(key)
            action, memory = policy(seen(env, obs, state, params, told), memory)
            obs, state, reward, done, info = env.step(step_key, state, action, params)
            fresh_obs, fresh_state = env.reset(next_key, params)
            obs, state = jax.tree.map(
                lambda a, b: jnp.where(done, a, b),
                (fresh_obs, fresh_state),
                (obs, state),
            )
            return (obs, state, memory), (reward, info)

        carry = (obs, state, policy.initial_state(policy_key))
        _, out = jax.lax.scan(body, carry, jr.split(run_key, num_steps))
        return out

    return jax.vmap(lifetime)(keys)


@eqx.filter_jit
def respond(policy, observations):
    """The policy's actions on a fixed sequence of observations, `[T, actions]`."""

    def body(memory, obs):
        action, memory = policy(obs, memory)
        return memory, action

    return jax.lax.scan(body, policy.initial_state(jr.key(0)), observations)[1]


def observations(arms, rewards, num_arms, horizon):
    """The observations of an episode's pulls (`arms`, `rewards`): the reset one,
    then `[one-hot arm, reward, t / H]` after each pull but the last (float32)."""
    k = num_arms
    out = np.zeros((len(arms), k + 2), np.float32)
    for t in range(1, len(arms)):
        out[t, arms[t - 1]] = 1.0
        out[t, k] = rewards[t - 1]
        out[t, k + 1] = np.float32(t) / np.float32(horizon)
    return out


def mean_and_error(x, axis=0):
    """The mean of `x` over `axis` and its standard error."""
    x = np.asarray(x, np.float64)
    return x.mean(axis), x.std(axis, ddof=1) / np.sqrt(x.shape[axis])


def change_bounds(change_min, change_max, horizon):
    """`[round(change_min H), round(change_max H)]`, in float32 as the bandit."""
    h = np.float32(horizon)
    return int(np.round(np.float32(change_min) * h)), int(
        np.round(np.float32(change_max) * h)
    )


# -- the environments -----------------------------------------------------------------


@pytest.mark.parametrize(
    "env", [IndependentBandit(3), ReversalBandit()], ids=["independent", "reversal"]
)
def test_bandits_pass_check_env(env, key):
    check_env(env, key=key, num_steps=3)


def numpy_good(state, time):
    """The reversal bandit's good arm at pull `time`."""
    first = int(state["first_good"])
    return first if time < state["change"] else 1 - first


def numpy_transition(state, action, params, u):
    """One pull in NumPy: `(obs, state, reward, done, regret, best, privileged)`."""
    time, horizon = int(state["time"]), int(params["episode_length"])
    if "probs" in state:
        probs = np.asarray(state["probs"], np.float32)
        told = probs
    else:
        good = np.arange(2) == numpy_good(state, time)
        probs = np.where(good, params["p_high"], params["p_low"]).astype(np.float32)
        told = (np.arange(2) == numpy_good(state, time + 1)).astype(np.float32)
    k = len(probs)
    arm = int(np.argmax(action))  # the first of equal scores
    reward = np.float32(np.float32(u) < probs[arm])
    new = dict(state, last_arm=arm, last_reward=reward, time=time + 1)
    obs = np.zeros(k + 2, np.float32)
    obs[arm], obs[k] = 1.0, reward
    obs[k + 1] = np.float32(time + 1) / np.float32(horizon)
    regret = np.float32(probs.max() - probs[arm])
    done, best = time + 1 >= horizon, probs[arm] == probs.max()
    return obs, new, reward, done, regret, best, told


@pytest.mark.parametrize("kind", ["independent", "reversal"])
def test_a_step_is_the_numpy_step_given_the_same_draw(kind, seed):
    rng = np.random.default_rng(seed)
    n, horizon = 64, 12
    if kind == "independent":
        env = IndependentBandit(3)
        params = IndependentBanditParams(episode_length=horizon)
        extra = {"probs": rng.random((n, 3), np.float32)}
        # equal probabilities too: a tie for the best arm
        extra["probs"][:8, 1] = extra["probs"][:8, 0]
        state_cls = IndependentBanditState
    else:
        env = ReversalBandit()
        params = ReversalBanditParams(p_high=0.7, p_low=0.4, episode_length=horizon)
        extra = {
            "first_good": rng.integers(0, 2, n).astype(np.int32),
            "change": rng.integers(0, horizon + 1, n).astype(np.int32),
        }
        state_cls = ReversalBanditState
    common = {
        "last_arm": rng.integers(-1, env.num_arms, n).astype(np.int32),
        "last_reward": rng.integers(0, 2, n).astype(np.float32),
        "time": rng.integers(0, horizon, n).astype(np.int32),
    }
    states = jax.vmap(lambda fields: state_cls(**fields))(
        {k: jnp.asarray(v) for k, v in {**common, **extra}.items()}
    )
    # whole-number scores: ties, which go to the lowest arm
    actions = rng.integers(-1, 2, (n, env.num_arms)).astype(np.float32)
    noise = rng.random(n, np.float32)
    obs, new, reward, done, info = jax.jit(
        jax.vmap(env.transition, in_axes=(0, 0, None, 0))
    )(states, jnp.asarray(actions), params, jnp.asarray(noise))
    told = jax.vmap(env.privileged, in_axes=(0, None))(new, params)
    plain = {f: float(getattr(params, f)) for f in type(params).specs()}
    for i in range(n):
        state = {k: v[i] for k, v in {**common, **extra}.items()}
        want = numpy_transition(state, actions[i], plain, noise[i])
        # t / H within an ulp: XLA may divide by multiplying by 1 / H
        np.testing.assert_allclose(np.asarray(obs[i]), want[0], rtol=1.2e-7, atol=0)
        assert int(new.last_arm[i]) == want[1]["last_arm"]
        assert int(new.time[i]) == want[1]["time"]
        assert float(reward[i]) == want[2] and bool(done[i]) == want[3]
        assert float(info["regret"][i]) == want[4]
        assert float(info["best_arm"][i]) == float(want[5])
        np.testing.assert_array_equal(np.asarray(told[i]), want[6])
    # step is transition with sample_noise's draw
    key = jr.key(seed)
    state, action = jax.tree.map(lambda x: x[0], states), jnp.asarray(actions[0])
    stepped = env.step(key, state, action, params)
    replayed = env.transition(state, action, params, env.sample_noise(key, params))
    assert eqx.tree_equal(stepped, replayed)


def test_resets_draw_the_documented_distributions(key):
    n = 11_000
    keys = jr.split(key, n)
    env = IndependentBandit(3)
    params = env.default_params()
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    np.testing.assert_array_equal(np.asarray(obs), 0.0)  # no pull, t = 0
    assert np.all(np.asarray(state.last_arm) == -1)
    probs = np.asarray(state.probs, np.float64)
    assert stats.kstest(probs.ravel(), "uniform").pvalue > 1e-4
    corr = np.corrcoef(probs.T)[np.triu_indices(3, 1)]
    assert np.all(np.abs(corr) < 4.5 / np.sqrt(n))  # independent arms

    env = ReversalBandit()
    params = ReversalBanditParams(change_min=0.3, change_max=0.55, episode_length=30)
    _, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    low, high = change_bounds(0.3, 0.55, 30)  # round(9.0), round(16.5) = 16
    assert (low, high) == (9, 16)
    change = np.asarray(state.change)
    counts = np.bincount(change - low, minlength=high - low + 1)
    assert change.min() == low and change.max() == high
    assert stats.chisquare(counts).pvalue > 1e-4  # uniform over the integers
    good, error = mean_and_error(np.asarray(state.first_good))
    assert abs(good - 0.5) < 4.5 * error


# -- the agents, rule by rule ---------------------------------------------------------


def test_win_stay_lose_shift_and_the_oracle_pull_the_numpy_rules_arm(seed):
    rng = np.random.default_rng(seed)
    k, n = 4, 64
    arms = rng.integers(-1, k, n)
    obs = np.zeros((n, 2 * k + 2), np.float32)
    obs[arms >= 0, arms[arms >= 0]] = 1.0
    obs[:, k] = rng.integers(0, 2, n)
    obs[:, k + 1] = rng.random(n)
    obs[:, k + 2 :] = rng.random((n, k))
    wsls = jax.vmap(lambda o: KArmedWinStayLoseShiftAgent(k)(o, None)[0])
    chosen = np.argmax(np.asarray(wsls(jnp.asarray(obs[:, : k + 2]))), axis=1)
    want = np.where(arms < 0, 0, np.where(obs[:, k] > 0.5, arms, (arms + 1) % k))
    np.testing.assert_array_equal(chosen, want)
    oracle = jax.vmap(lambda o: OracleBanditAgent(k)(o, None)[0])
    chosen = np.argmax(np.asarray(oracle(jnp.asarray(obs))), axis=1)
    np.testing.assert_array_equal(chosen, np.argmax(obs[:, k + 2 :], axis=1))


@pytest.mark.parametrize(
    ("policy", "env"),
    [
        (ThompsonSamplingAgent(3), IndependentBandit(3)),
        (BayesUCBAgent(3), IndependentBandit(3)),
        (ChangePointBayesAgent(), ReversalBandit()),
    ],
    ids=["thompson", "bayes_ucb", "change_point"],
)
def test_learners_pass_check_policy(policy, env, key):
    check_policy(policy, env, key=key, num_steps=3)


def test_beta_quantile_is_within_its_stated_accuracy_of_scipy(seed):
    rng = np.random.default_rng(seed)
    for top, tolerance in ((102, 1e-5), (1002, 5e-5)):
        total = rng.integers(2, top + 1, 2000)
        a = rng.integers(1, total).astype(np.float32)
        b = (total - a).astype(np.float32)
        level = rng.uniform(0.0, 0.999, 2000).astype(np.float32)
        got = np.asarray(jax.jit(beta_quantile)(a, b, level))
        want = stats.beta.ppf(level.astype(np.float64), a, b)
        np.testing.assert_allclose(got, want, rtol=0, atol=tolerance)


def test_bayes_ucb_pulls_the_arm_scipy_picks(seed):
    rng = np.random.default_rng(seed)
    k, horizon, tolerance = 3, 60, 1e-5
    obs, quantiles, chosen = [], [], []
    for _ in range(3):  # episodes back to back: each starts afresh
        probs, arms, rewards = rng.random(k), [], []
        successes, failures = np.zeros(k), np.zeros(k)
        for t in range(1, horizon + 1):
            # Bayes-UCB in SciPy (float64): the quantile of level 1 - 1/t
            q = stats.beta.ppf(1.0 - 1.0 / t, successes + 1, failures + 1)
            arms.append(int(np.argmax(q)))  # the first of equal quantiles
            rewards.append(int(rng.random() < probs[arms[-1]]))
            successes[arms[-1]] += rewards[-1]
            failures[arms[-1]] += 1 - rewards[-1]
            quantiles.append(q)
        obs.append(observations(arms, rewards, k, horizon))
        chosen += arms
    scores = np.asarray(respond(BayesUCBAgent(k), jnp.asarray(np.concatenate(obs))))
    quantiles = np.asarray(quantiles)
    # its scores are 2 q - 1, q within the quantile's accuracy of SciPy's
    np.testing.assert_allclose((scores + 1) / 2, quantiles, rtol=0, atol=tolerance)
    picked = np.argmax(scores, axis=1)
    top_two = np.sort(quantiles, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * tolerance
    np.testing.assert_array_equal(picked[clear], np.asarray(chosen)[clear])
    # a near tie goes either way, to an arm as good within the accuracy
    best = quantiles.max(axis=1)
    assert np.all(quantiles[np.arange(len(picked)), picked] >= best - 2 * tolerance)
    assert np.all(picked[::horizon] == 0)  # level 0: every quantile 0, arm 0
    assert clear.mean() > 0.9


def numpy_reversal_posterior(arms, rewards, p_high, p_low, low, high):
    """P(arm 0 is good at pull t | pulls before t) for every pull of an episode, by
    enumerating every (first good arm, tau) with its prior (float64)."""
    taus = np.arange(low, high + 1)
    log_weight = np.zeros((2, len(taus)))  # uniform prior
    out = []
    for t, (arm, reward) in enumerate(zip(arms, rewards, strict=True)):
        good = np.where(t < taus[None, :], [[0], [1]], [[1], [0]])  # [first, tau]
        weight = np.exp(log_weight - log_weight.max())
        out.append(weight[good == 0].sum() / weight.sum())
        p = np.where(good == arm, p_high, p_low)
        log_weight += np.log(p if reward else 1 - p)
    return np.asarray(out)


@pytest.mark.parametrize(
    "params",
    [
        (0.8, 0.2, 0.25, 0.75),
        (0.7, 0.4, 0.0, 0.5),  # tau may be 0: swapped before the first pull
        (0.9, 0.1, 0.5, 0.5),  # tau known
    ],
)
def test_change_point_filter_is_the_posterior_over_every_hypothesis(params, seed):
    p_high, p_low, change_min, change_max = params
    rng = np.random.default_rng(seed)
    horizon = 40
    low, high = change_bounds(change_min, change_max, horizon)
    obs, posterior = [], []
    for _ in range(3):  # episodes back to back: each starts afresh
        first, tau = rng.integers(0, 2), rng.integers(low, high + 1)
        arms = rng.integers(0, 2, horizon)  # random pulls: evidence on both arms
        good = np.where(np.arange(horizon) < tau, first, 1 - first)
        paid = np.where(arms == good, p_high, p_low)
        rewards = (rng.random(horizon) < paid).astype(int)
        obs.append(observations(arms, rewards, 2, horizon))
        posterior.append(
            numpy_reversal_posterior(arms, rewards, p_high, p_low, low, high)
        )
    agent = ChangePointBayesAgent(*params)
    scores = np.asarray(respond(agent, jnp.asarray(np.concatenate(obs))))
    posterior = np.concatenate(posterior)
    # its scores are (P_0 - P_1, P_1 - P_0)
    np.testing.assert_allclose(scores[:, 0], 2 * posterior - 1, rtol=0, atol=2e-5)
    np.testing.assert_array_equal(scores[:, 1], -scores[:, 0])
    clear = np.abs(posterior - 0.5) > 1e-4
    picked = np.argmax(scores, axis=1)
    np.testing.assert_array_equal(picked[clear], (posterior < 0.5)[clear])


# -- the agents in their bandits ------------------------------------------------------


def thompson_exact_curve(horizon):
    """Thompson sampling's expected reward at each pull of a two-armed bandit with
    independent uniform arms, by dynamic programming over the posterior counts."""

    @functools.cache
    def chooses_0(s0, f0, s1, f1):
        # P(Beta(s0 + 1, f0 + 1) > Beta(s1 + 1, f1 + 1)): the integrand is a
        # polynomial of degree < 2 H, which Gauss-Legendre with H + 1 nodes
        # integrates exactly.
        def integrand(x):
            return stats.beta.pdf(x, s0 + 1, f0 + 1) * stats.beta.cdf(x, s1 + 1, f1 + 1)

        return integrate.fixed_quad(integrand, 0.0, 1.0, n=horizon + 1)[0]

    counts, curve = {(0, 0, 0, 0): 1.0}, []
    for _ in range(horizon):
        step, later = 0.0, collections.defaultdict(float)
        for (s0, f0, s1, f1), weight in counts.items():
            q = chooses_0(s0, f0, s1, f1)
            # the predictive success probability of an arm: (s + 1) / (s + f + 2)
            m0, m1 = (s0 + 1) / (s0 + f0 + 2), (s1 + 1) / (s1 + f1 + 2)
            step += weight * (q * m0 + (1 - q) * m1)
            later[(s0 + 1, f0, s1, f1)] += weight * q * m0
            later[(s0, f0 + 1, s1, f1)] += weight * q * (1 - m0)
            later[(s0, f0, s1 + 1, f1)] += weight * (1 - q) * m1
            later[(s0, f0, s1, f1 + 1)] += weight * (1 - q) * (1 - m1)
        curve.append(step)
        counts = later
    return np.asarray(curve)


def test_thompson_sampling_earns_its_exact_expected_reward_curve(key):
    horizon, n = 8, 32_768
    exact = thompson_exact_curve(horizon)
    # sanity of the exact curve: 1/2 at the first pull, rising below E[max] = 2/3
    assert exact[0] == pytest.approx(0.5) and np.all(np.diff(exact) > 0)
    assert exact[-1] < 2 / 3
    env = IndependentBandit(2)
    params = IndependentBanditParams(episode_length=horizon)
    # two episodes per lifetime: the second starts afresh, so it earns the same
    rewards, _ = play(ThompsonSamplingAgent(2), env, params, jr.split(key, n), 16)
    per_pull = np.asarray(rewards).reshape(n, 2, horizon).reshape(2 * n, horizon)
    mean, error = mean_and_error(per_pull)
    assert np.all(np.abs(mean - exact) < 4.5 * error), (mean, exact, error)
    # the test tells Thompson sampling from a rule that never learns (1/2)
    assert np.all(np.abs(exact[2:] - 0.5) > 10 * error[2:])


def test_the_oracle_earns_the_expected_maximum_of_the_arms(key):
    k, horizon, n = 3, 10, 8192
    env = IndependentBandit(k)
    params = IndependentBanditParams(episode_length=horizon)
    rewards, info = play(
        OracleBanditAgent(k), env, params, jr.split(key, n), horizon, told=True
    )
    mean, error = mean_and_error(np.asarray(rewards).mean(axis=1))
    assert abs(mean - k / (k + 1)) < 4.5 * error  # E[max of K uniforms]
    assert float(jnp.max(info["regret"])) == 0.0


def test_learners_beat_win_stay_lose_shift_on_the_defaults(key):
    n = 1024
    keys = jr.split(key, n)
    cases = [
        (IndependentBandit(2), [ThompsonSamplingAgent(2), BayesUCBAgent(2)], 3.0),
        (ReversalBandit(), [ChangePointBayesAgent()], 15.0),
    ]
    for env, learners, margin in cases:
        params = env.default_params()
        horizon = int(params.episode_length)
        floor = KArmedWinStayLoseShiftAgent(2)
        base = np.asarray(play(floor, env, params, keys, horizon)[0]).sum(axis=1)
        for learner in learners:
            total = np.asarray(play(learner, env, params, keys, horizon)[0]).sum(1)
            # the same lifetimes (keys): a paired difference
            gain, error = mean_and_error(total - base)
            assert gain - 3 * error > margin, (type(learner).__name__, gain, error)


# -- references and bad input ---------------------------------------------------------


@pytest.mark.parametrize(
    "env", [IndependentBandit(3), ReversalBandit()], ids=["independent", "reversal"]
)
def test_references_are_declared_and_sized_for_the_bandits(env):
    params = env.default_params()
    refs = references(env, params)
    assert {r.kind for r in refs} == {"random", "no_memory", "learner", "oracle"}
    assert len({r.name for r in refs}) == len(refs)
    for ref in refs:
        assert ref.privileged == (ref.kind == "oracle"), ref.name
        size = privileged(env).obs_size if ref.privileged else env.obs_size
        assert ref.policy.obs_size == size, ref.name
        assert ref.policy.action_size == env.action_size, ref.name

        def first(key, policy=ref.policy, told=ref.privileged):
            obs, state = env.reset(key, params)
            obs = seen(env, obs, state, params, told)
            return policy(obs, policy.initial_state(key))[0]

        action = jax.eval_shape(first, jr.key(0))
        assert action.shape == (env.action_size,), ref.name


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: IndependentBandit(1), "num_arms must be an int >= 2; got 1"),
        (lambda: KArmedWinStayLoseShiftAgent(1), "num_arms must be an int >= 2"),
        (lambda: ThompsonSamplingAgent(0), "num_arms must be an int >= 2"),
        (lambda: BayesUCBAgent(1), "num_arms must be an int >= 2"),
        (lambda: OracleBanditAgent(1), "num_arms must be an int >= 2"),
        (
            lambda: ReversalBanditParams(p_high=0.3, p_low=0.6),
            "p_low must be <= p_high; got p_low=0.6, p_high=0.3",
        ),
        (
            lambda: ReversalBanditParams(change_min=0.8),
            "change_min must be <= change_max; got change_min=0.8, change_max=0.75",
        ),
        (
            lambda: ChangePointBayesAgent(p_high=0.3, p_low=0.6),
            "p_low must be <= p_high; got p_low=0.6",
        ),
        (
            lambda: ChangePointBayesAgent(change_min=0.9, change_max=0.5),
            "change_min must be <= change_max; got change_min=0.9, change_max=0.5",
        ),
        (lambda: ChangePointBayesAgent(p_high=1.5), r"p_high must be in \[0, 1\]"),
    ],
)
def test_bad_input_raises_one_line_naming_the_argument(make, match):
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)
