import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxevo._src.envs.cue_reward import CueRewardNoise, CueRewardState
from eqxevo._src.references import references
from eqxevo.agents import ConstantResponseAgent, CueRewardLearner, CueRewardOracle
from eqxevo.envs import CueReward, CueRewardParams
from eqxevo.testing import check_env, check_policy

ENV = CueReward()  # 4 cues of 20 bits, 5-step trials
# 6 cues of 3 bits: 6 of the 7 non-zero codes, so distinctness is tight.
SMALL = CueReward(num_cues=6, cue_bits=3, filler=2)


def test_check_env_and_check_policy_pass():
    check_env(ENV, num_steps=6)
    check_policy(CueRewardLearner(), ENV, num_steps=6)


# -- the task against NumPy ----------------------------------------------------------


def numpy_arrange(order, num_cues, slots):
    half = num_cues // 2
    picked = np.argsort(order[:num_cues], kind="stable")[:half]
    places = np.argsort(order[num_cues:], kind="stable")[:half]
    schedule = np.full(slots, -1)
    schedule[places] = picked
    return schedule


def numpy_steps(env, cues, target, schedule, orders, actions, reward, length):
    """Observations, rewards, dones and privileged vectors of `CueReward` steps
    from a reset state, given each step's draws (`CueRewardNoise.order`)."""
    trial, m = env.trial_steps, env.slots
    out = []
    for t, (order, action) in enumerate(zip(orders, actions, strict=True)):
        respond = action[1] > action[0]
        go = t % trial == trial - 1
        r = 0.0
        if go:
            r = reward if respond == (target in schedule) else -reward
            schedule = numpy_arrange(order, env.num_cues, m)
        phase = (t + 1) % trial
        cue = np.zeros(env.cue_bits)
        if 1 <= phase <= m and schedule[phase - 1] >= 0:
            cue = cues[schedule[phase - 1]]
        obs = np.concatenate(
            [cue, [phase == trial - 1], np.eye(2)[int(respond)], [r, 1.0]]
        )
        seen = target in schedule[:phase]  # the middle steps shown so far
        out.append((obs, r, t + 1 >= length, float(seen)))
    return out


def test_the_step_is_a_numpy_task_given_the_same_draws(key):
    params = CueRewardParams(reward=0.5, episode_length=23)  # ends mid-trial
    num_steps = 30
    reset_key, action_key, step_key = jr.split(key, 3)
    actions = jr.normal(action_key, (num_steps, 2))
    keys = jr.split(step_key, num_steps)

    @jax.jit
    def run(reset_key, actions, keys):
        obs, state = SMALL.reset(reset_key, params)

        def body(state, inputs):
            action, k = inputs
            noise = SMALL.sample_noise(k, params)
            out = SMALL.transition(state, action, params, noise)
            stepped = SMALL.step(k, state, action, params)
            same = jax.tree.map(lambda a, b: jnp.all(a == b), out, stepped)
            priv = SMALL.privileged(out[1], params)
            return out[1], (out[0], out[2], out[3], priv, noise.order, same)

        _, trace = jax.lax.scan(body, state, (actions, keys))
        return obs, state, trace

    obs0, state, (obs, rewards, dones, priv, orders, same) = run(
        reset_key, actions, keys
    )
    assert all(bool(jnp.all(x)) for x in jax.tree.leaves(same))  # step = transition
    cues, target = np.asarray(state.cues), int(state.target)
    np.testing.assert_array_equal(np.asarray(obs0), [0.0] * 3 + [0.0] * 4 + [1.0])
    np.testing.assert_array_equal(
        np.asarray(SMALL.privileged(state, params)), [0.0]
    )  # nothing shown yet at reset
    want = numpy_steps(
        SMALL,
        cues,
        target,
        np.asarray(state.schedule),
        np.asarray(orders),
        np.asarray(actions),
        0.5,
        23,
    )
    for t, (o, r, d, p) in enumerate(want):
        np.testing.assert_array_equal(np.asarray(obs[t]), o.astype(np.float32), t)
        assert (float(rewards[t]), bool(dones[t]), float(priv[t, 0])) == (r, d, p), t
    assert list(np.flatnonzero(np.asarray(dones))) == list(range(22, 30))
    assert set(np.asarray(rewards).tolist()) <= {0.0, 0.5, -0.5}


def test_cues_are_distinct_nonzero_and_uniform_over_codes(key):
    num = 4096
    states = jax.jit(jax.vmap(lambda k: SMALL.reset(k, SMALL.default_params())[1]))(
        jr.split(key, num)
    )
    bits = np.asarray(states.cues).astype(int)
    assert set(np.unique(bits)) == {0, 1}
    codes = (bits << np.arange(3)).sum(axis=2)  # [num, 6]
    assert np.all(codes > 0)  # no cue looks like a blank
    assert all(len(set(row)) == 6 for row in codes)
    # a uniform 6-subset of the 7 codes: each code is left out 1 time in 7
    counts = np.bincount(codes.ravel(), minlength=8)[1:]
    p = 6 / 7
    assert np.all(np.abs(counts - num * p) < 4.5 * math.sqrt(num * p * (1 - p)))
    targets = np.bincount(np.asarray(states.target), minlength=6)
    assert np.all(np.abs(targets - num / 6) < 4.5 * math.sqrt(num * 5 / 36))


def test_each_trial_shows_half_the_cues_once_each_in_random_places(key):
    num = 4096
    params = SMALL.default_params()
    schedules = jax.jit(
        jax.vmap(lambda k: SMALL.arrange(SMALL.sample_noise(k, params).order))
    )(jr.split(key, num))
    schedules = np.asarray(schedules)  # [num, 5]: 3 cues and 2 blanks
    shown = schedules >= 0
    assert np.all(shown.sum(axis=1) == 3)
    assert all(len(set(row[row >= 0])) == 3 for row in schedules)
    assert schedules.max() == 5
    # each cue in half the trials, each middle step holding a cue 3 times in 5
    per_cue = np.stack([(schedules == c).any(axis=1) for c in range(6)]).mean(axis=1)
    assert np.all(np.abs(per_cue - 0.5) < 4.5 * math.sqrt(0.25 / num))
    per_slot = shown.mean(axis=0)
    assert np.all(np.abs(per_slot - 0.6) < 4.5 * math.sqrt(0.24 / num))


@pytest.mark.parametrize("respond", [False, True])
def test_the_go_step_rewards_an_answer_that_matches_the_target(respond):
    params = CueRewardParams(reward=2.0)
    go = jnp.asarray(ENV.trial_steps - 1, jnp.int32)  # the first trial's go step
    action = jnp.asarray([0.0, 1.0] if respond else [0.0, 0.0])  # a tie: no
    order = jnp.zeros((ENV.num_cues + ENV.slots,))

    @jax.jit
    def answer(target, time):
        _, state = ENV.reset(jr.key(0), params)
        state = CueRewardState(state.cues, target, jnp.asarray([-1, 0, 2]), time)
        noise = CueRewardNoise(order)
        _, _, reward, _, info = ENV.transition(state, action, params, noise)
        return reward, info["correct"]

    for target in range(4):
        shown = target in (0, 2)
        want = 2.0 if respond == shown else -2.0
        reward, correct = answer(jnp.asarray(target, jnp.int32), go)
        assert (float(reward), bool(correct)) == (want, want > 0)
        # any other step earns nothing, whatever the answer
        assert float(answer(jnp.asarray(target, jnp.int32), go - 1)[0]) == 0.0


# -- the learner's posterior against enumeration -------------------------------------


def synthetic_lifetime(rng, num_cues, cue_bits, filler, episodes):
    """Observations of episodes of the task with random answers on every step
    (NumPy), each followed by a reset; and, per observation, what the episode
    knows: its cues' ids in the order first seen, the outcomes so far (trial
    cues, target among them), the current trial's cues, the go flag."""
    half, slots = num_cues // 2, num_cues // 2 + filler
    observations, facts = [], []
    for trials in episodes:
        codes = rng.choice(np.arange(1, 2**cue_bits), num_cues, replace=False)
        cues = ((codes[:, None] >> np.arange(cue_bits)) & 1).astype(np.float32)
        target, reward = rng.integers(num_cues), float(rng.uniform(0.1, 3.0))
        last, r, seen, outcomes = np.zeros(2), 0.0, [], []
        for _ in range(trials):
            picked = rng.choice(num_cues, half, replace=False)
            middle = np.full(slots, -1)
            middle[rng.choice(slots, half, replace=False)] = picked
            for phase, shown in enumerate([-1, *middle, -1]):
                go = phase == slots + 1
                cue = cues[shown] if shown >= 0 else np.zeros(cue_bits)
                if shown >= 0 and shown not in seen:
                    seen.append(shown)
                observations.append(np.concatenate([cue, [go], last, [r, 1.0]]))
                facts.append((list(seen), list(outcomes), set(picked), go))
                respond = rng.random() < 0.5
                last, r = np.eye(2)[int(respond)], 0.0
                if go:
                    inside = target in picked
                    r = reward if respond == inside else -reward
                    outcomes.append((set(picked), inside))
        # the last go step's outcome shows, then a new episode begins
        observations.append(np.concatenate([np.zeros(cue_bits + 1), last, [r, 1.0]]))
        facts.append((list(seen), list(outcomes), set(), False))
    return np.asarray(observations, np.float32), facts


def enumerated_posterior(num_cues, outcomes):
    """P(target = h | outcomes) by enumeration, uniform prior, exact."""
    consistent = [
        all((h in cues) == inside for cues, inside in outcomes) for h in range(num_cues)
    ]
    return [Fraction(int(c), sum(consistent)) for c in consistent]


def test_the_learners_posterior_is_bayes_by_enumeration(seed):
    num_cues, cue_bits = 6, 4
    learner = CueRewardLearner(num_cues, cue_bits)
    rng = np.random.default_rng(seed)
    # three episodes: the learner must start afresh at each reset observation
    obs, facts = synthetic_lifetime(rng, num_cues, cue_bits, 1, [9, 7, 8])

    @jax.jit
    def run(observations):
        def body(state, o):
            action, state = learner(o, state)
            return state, (action, learner.posterior(state), state.num_seen)

        return jax.lax.scan(body, learner.initial_state(jr.key(0)), observations)[1]

    actions, posteriors, num_seen = run(jnp.asarray(obs))
    respond = np.asarray(actions[:, 1] > actions[:, 0])
    for t, (seen, outcomes, current, go) in enumerate(facts):
        posterior = enumerated_posterior(num_cues, outcomes)
        got = np.asarray(posteriors[t], np.float64)
        assert int(num_seen[t]) == len(seen), t
        # seen cues in the order first seen, then the unseen ones' equal shares
        unseen = [h for h in range(num_cues) if h not in seen]
        want = [posterior[h] for h in seen] + [posterior[h] for h in unseen]
        np.testing.assert_allclose(got, np.asarray(want, np.float64), rtol=1e-6)
        inside = sum(posterior[h] for h in current)
        assert respond[t] == (go and inside > Fraction(1, 2)), t


# -- references over many lifetimes ---------------------------------------------------


def test_the_references_are_declared():
    refs = references(ENV, ENV.default_params())
    assert [(r.name, r.kind, r.privileged) for r in refs] == [
        ("random", "random", False),
        ("always respond", "no_memory", False),
        ("never respond", "no_memory", False),
        ("Bayes learner", "learner", False),
        ("oracle", "oracle", True),
    ]
    for ref in refs:
        size = ENV.obs_size + ref.privileged
        assert (ref.policy.obs_size, ref.policy.action_size) == (size, 2)


def test_the_learner_approaches_the_oracle_and_constant_answers_earn_nothing(key):
    params = CueRewardParams(reward=0.5)  # 40 trials of 5 steps
    num, steps, trial = 2048, 200, ENV.trial_steps
    # (agent, whether it reads the privileged vector after the observation,
    # as in `eqxevo.envs.privileged(ENV)`)
    agents = {
        "learner": (CueRewardLearner(), False),
        "oracle": (CueRewardOracle(), True),
        "always": (ConstantResponseAgent(True), False),
        "never": (ConstantResponseAgent(False), False),
    }

    @jax.jit
    def go_rewards(key):
        # every agent plays the same lifetime (the same draws)
        reset_key, step_key, memory_key = jr.split(key, 3)
        keys = jr.split(step_key, steps)
        out = {}
        for name, (agent, told) in agents.items():
            obs, state = ENV.reset(reset_key, params)

            def body(carry, k, agent=agent, told=told):
                obs, state, memory = carry
                if told:
                    obs = jnp.concatenate([obs, ENV.privileged(state, params)])
                action, memory = agent(obs, memory)
                obs, state, reward, _, _ = ENV.step(k, state, action, params)
                return (obs, state, memory), reward

            carry = (obs, state, agent.initial_state(memory_key))
            out[name] = jax.lax.scan(body, carry, keys)[1][trial - 1 :: trial]
        return out

    rewards = {
        name: np.asarray(r) / 0.5
        for name, r in jax.vmap(go_rewards)(jr.split(key, num)).items()
    }
    assert rewards["oracle"].shape == (num, 40)
    assert np.all(rewards["oracle"] == 1.0)  # every trial right
    np.testing.assert_array_equal(rewards["always"], -rewards["never"])
    # no memory: 0 per trial in expectation (40 independent +-1 per lifetime)
    total = rewards["always"].sum(axis=1)
    assert abs(total.mean()) < 4.5 * math.sqrt(40 / num)
    # the learner: trial 1 is a guess, then trial k >= 2 earns
    # 1 - (2/3) (1/3)^(k - 2) (two candidates left, then one)
    expected = np.array([0.0] + [1 - (2 / 3) * 3.0 ** -(k - 2) for k in range(2, 41)])
    got = rewards["learner"].mean(axis=0)
    tolerance = 4.5 * np.sqrt((1 - expected**2) / num) + 1e-9
    assert np.all(np.abs(got - expected) <= tolerance), (got[:6], expected[:6])
    assert np.all(got[20:] == 1.0)  # the oracle's figure


# -- bad configuration -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CueReward(num_cues=1), r"^num_cues must be an int >= 2; got 1$"),
        (lambda: CueReward(num_cues=5), r"^num_cues must be even .*; got 5$"),
        (
            lambda: CueReward(num_cues=4, cue_bits=2),
            r"^cue_bits must be in \[3, 30\] for 4 distinct non-zero cues; got 2$",
        ),
        (lambda: CueReward(cue_bits=31), r"^cue_bits must be in \[3, 30\] .*got 31$"),
        (lambda: CueReward(filler=-1), r"^filler must be an int >= 0; got -1$"),
        (lambda: CueRewardLearner(num_cues=0), r"^num_cues must be an int >= 2"),
    ],
)
def test_bad_configuration_raises_a_one_line_error_naming_the_argument(make, message):
    with pytest.raises(ValueError, match=message) as error:
        make()
    assert "\n" not in str(error.value)
