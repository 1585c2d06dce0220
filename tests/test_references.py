import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxevo import LifetimeFitness
from eqxevo._src.references import (
    CEILING_KINDS,
    FLOOR_KINDS,
    Reference,
    Scale,
    references,
    scale,
    score_references,
)
from eqxevo.agents import RandomAgent
from eqxevo.envs import (
    AbstractEnv,
    Chemotaxis,
    CueReward,
    Foraging,
    IndependentBandit,
    LongHorizon,
    ReversalBandit,
    privileged,
)

gymnax_env = pytest.importorskip("eqxevo._src.envs.gymnax")
BANDIT = gymnax_env.GymnaxEnv("BernoulliBandit-misc")

ALL = {"random", "no_memory", "learner", "oracle"}
BUILT_IN = {
    "chemotaxis": (Chemotaxis(), {"random", "no_memory", "oracle"}),
    "foraging": (Foraging(num_resources=3), {"random", "no_memory", "oracle"}),
    "long_horizon": (LongHorizon(digestion=4), ALL),
    "gymnax bandit": (BANDIT, {"random", "no_memory", "learner"}),
    "meta maze": (gymnax_env.GymnaxEnv("MetaMaze-misc", normalize_obs=True), ALL),
    "bandit": (IndependentBandit(3), ALL),
    "reversal bandit": (ReversalBandit(), ALL),
    "cue reward": (CueReward(), ALL),
}


@pytest.mark.parametrize("name", list(BUILT_IN))
def test_every_built_in_env_declares_references_sized_for_it(name):
    env, kinds = BUILT_IN[name]
    params = env.default_params()
    refs = references(env, params)
    assert {r.kind for r in refs} == kinds
    assert len({r.name for r in refs}) == len(refs)
    for ref in refs:
        # an oracle (or a learner told its position) reads the privileged
        # environment: the observation, then the hidden variables
        plays = privileged(env, params) if ref.privileged else env
        assert ref.policy.obs_size == plays.obs_size, ref.name
        assert ref.policy.action_size == env.action_size, ref.name

        # one step from a reset (traced only): the policy reads this
        # environment's observations
        def first(key, policy=ref.policy, plays=plays):
            obs, _ = plays.reset(key, params)
            return policy(obs, policy.initial_state(key))[0]

        action = jax.eval_shape(first, jr.key(0))
        assert action.shape == (env.action_size,), ref.name


def test_an_env_without_a_declaration_gets_a_random_agent_and_can_register_its_own():
    cartpole = gymnax_env.GymnaxEnv("CartPole-v1")
    (ref,) = references(cartpole, cartpole.default_params())
    assert (ref.name, ref.kind) == ("random", "random")

    class MyChemotaxis(Chemotaxis):
        pass

    # subclasses inherit their parent's declaration
    assert [r.name for r in references(MyChemotaxis(), None)] == [
        r.name for r in references(Chemotaxis(), None)
    ]

    @references.register(MyChemotaxis)
    def _(env: AbstractEnv, params: object) -> tuple[Reference, ...]:
        del params
        oracle = RandomAgent(env.obs_size, env.action_size)
        return (Reference("told", "oracle", oracle),)

    assert [r.kind for r in references(MyChemotaxis(), None)] == ["oracle"]
    with pytest.raises(ValueError, match=r"kind must be one of 'no_memory' \|"):
        Reference("x", "best", RandomAgent(2))


def test_the_normalised_scale_is_the_best_floor_and_the_best_ceiling():
    entries = [
        ("random", "random", 50.0),
        ("wsls", "no_memory", 81.7),
        ("lazy", "no_memory", 60.0),
        ("bayes", "learner", 89.4),
        ("told", "oracle", 88.0),
        ("broken", "oracle", math.nan),
    ]
    s = scale(entries)
    assert (s.floor, s.floor_name, s.ceiling, s.ceiling_name) == (
        81.7,
        "wsls",
        89.4,
        "bayes",
    )
    assert s.normalise(81.7) == 0.0
    assert s.normalise(89.4) == pytest.approx(1.0)
    assert s.normalise(86.2) == pytest.approx((86.2 - 81.7) / (89.4 - 81.7))
    assert s.normalise(64.7) == pytest.approx(-17.0 / 7.7)
    assert s.below_floor(64.7) and not s.below_floor(81.7)
    assert math.isnan(s.normalise(None)) and not s.below_floor(None)
    # random is never the floor, even above the memoryless references
    assert scale([("r", "random", 5.0), ("n", "no_memory", 4.0)]).floor_name == "n"
    assert scale([("r", "random", 5.0), ("o", "oracle", 9.0)]).floor_name is None
    # no learner or oracle (L0, L2): no normalised score, but the floor flags
    floor_only = scale([("b", "no_memory", 776.0), ("r", "random", 68.7)])
    assert math.isnan(floor_only.normalise(800.0)) and floor_only.ceiling_name is None
    assert floor_only.below_floor(700.0)
    # a ceiling that does not beat the floor: no scale either
    assert math.isnan(Scale(10.0, "a", 10.0, "b").normalise(12.0))
    assert set(FLOOR_KINDS) | set(CEILING_KINDS) | {"random"} == {
        "no_memory",
        "random",
        "learner",
        "oracle",
    }


def test_references_play_the_same_lifetimes_as_the_fitness_on_those_keys():
    env = Chemotaxis()
    params = env.default_params()
    fitness = LifetimeFitness(env, params, 10)
    refs = [r for r in references(env, params) if r.kind == "no_memory"]
    key = jr.key(7)
    (scored,) = score_references(key, fitness, refs, 4)
    assert (scored.name, scored.kind) == (refs[0].name, "no_memory")
    # episode e is fitness(policy, fold_in(key, e)), as for a genome
    keys = jax.vmap(jr.fold_in, in_axes=(None, 0))(key, jnp.arange(4))
    direct = jax.vmap(lambda k: fitness(refs[0].policy, k)[0])(keys)
    np.testing.assert_allclose(scored.result.values, np.asarray(direct), rtol=1e-6)
    assert scored.result.num_episodes == 4


def numpy_bandit_scores(rule, lifetimes, pulls=100, p=0.1, seed=0):
    """Total reward per lifetime of a rule on a NumPy Bernoulli bandit: arm 0 pays
    p or 1 - p (a fair coin), arm 1 the other."""
    rng = np.random.default_rng(seed)
    arm0 = np.where(rng.random(lifetimes) < 0.5, p, 1 - p)
    pays = np.stack([arm0, 1 - arm0], axis=1)
    reward, arm = np.zeros(lifetimes), np.zeros(lifetimes, int)
    evidence, total = np.zeros(lifetimes), np.zeros(lifetimes)
    for t in range(pulls):
        if rule == "win-stay lose-shift":
            # the first observation reports arm 0 and no reward: it shifts
            arm = np.where(reward > 0.5, arm, 1 - arm)
        else:
            if t:
                evidence += np.where((arm == 0) == (reward > 0.5), 1.0, -1.0)
            arm = np.where(evidence >= 0, 0, 1)
        reward = (rng.random(lifetimes) < pays[np.arange(lifetimes), arm]) * 1.0
        total += reward
    return total


def test_bandit_references_score_what_a_numpy_bandit_gives():
    params = BANDIT.default_params()
    refs = references(BANDIT, params)
    learners = [r for r in refs if r.kind != "random"]  # random: 50, no news
    scored = score_references(
        jr.key(0), LifetimeFitness(BANDIT, params, 100), learners, 512
    )
    by_name = {s.name: s.result for s in scored}
    expected = {}
    for rule in ("win-stay lose-shift", "greedy Bayes"):
        expected[rule] = float(numpy_bandit_scores(rule, 100_000).mean())
    # the figures: greedy Bayes about 89.4, without memory about 81.7
    assert expected["win-stay lose-shift"] == pytest.approx(81.7, abs=0.05)
    assert expected["greedy Bayes"] == pytest.approx(89.4, abs=0.05)
    for name, want in expected.items():
        got = by_name[name]
        standard_error = got.std / math.sqrt(got.num_episodes)
        assert abs(got.mean - want) < 4 * standard_error, (name, got.mean, want)
    s = scale((s.name, s.kind, s.result.mean) for s in scored)
    assert (s.floor_name, s.ceiling_name) == ("win-stay lose-shift", "greedy Bayes")


def test_eval_lines_give_each_reference_the_normalised_score_and_the_flag():
    from eqxevo._src.heldout import summarize
    from eqxevo._src.references import Scored
    from eqxevo.experiment import Evaluation

    def evaluation(genome_scores):
        refs = (
            Scored("random", "random", summarize([49.0, 51.0])),
            Scored("win-stay lose-shift", "no_memory", summarize([81.0, 82.0])),
            Scored("greedy Bayes", "learner", summarize([89.0, 90.0])),
        )
        key = jr.key(0)
        return Evaluation(summarize(genome_scores), "best", "run", 0, 300, key, refs)

    below = evaluation([64.0, 65.0])
    lines = below.reference_lines()
    assert lines[0] == "reference agents on the same 2 lifetimes:"
    assert lines[1].startswith("  random (random)")
    assert lines[1].endswith("normalised -3.938")  # (50 - 81.5) / (89.5 - 81.5)
    assert lines[2].endswith("normalised 0.000")
    assert lines[3].endswith("normalised 1.000")
    assert lines[4] == (
        "normalised score: -2.125 (0 = win-stay lose-shift, the best without "
        "memory; 1 = greedy Bayes, the best learner or oracle)"
    )
    assert lines[5] == (
        "warning: the genome scores below the best reference without memory "
        "(win-stay lose-shift: 81.5)"
    )
    fields = below.reference_fields()
    assert fields["normalised"] == pytest.approx(-2.125)
    assert fields["below_no_memory"] is True
    assert [r["normalised"] for r in fields["references"]] == [-3.9375, 0.0, 1.0]
    above = evaluation([86.0, 87.0])
    assert not any(line.startswith("warning") for line in above.reference_lines())
    assert above.reference_fields()["normalised"] == pytest.approx(5 / 8)
