"""Lesions: plasticity cut, memory wiped every step, and the networks that have
nothing for a lesion to act on."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from test_nets_backpropamine import hand_wired_bandit_learner

import eqxevo
from eqxevo._src.nets.base import LesionError
from eqxevo._src.nets.lesion import MemoryLesioned, lesion
from eqxevo.nets import (
    GRUPolicy,
    HebbianRule,
    MLPPolicy,
    PlasticMLPPolicy,
    RecurrentPolicy,
    SparseRatePolicy,
    Topology,
)


def test_a_hand_wired_plastic_mlp_loses_its_advantage_under_the_plasticity_lesion():
    gymnax = pytest.importorskip("eqxevo._src.envs.gymnax")
    env = gymnax.GymnaxEnv("BernoulliBandit-misc")
    fitness = eqxevo.LifetimeFitness(env, env.default_params(), 100)
    learner = hand_wired_bandit_learner()
    lesioned = lesion(learner, "plasticity")
    # alpha = 0 on every plastic layer: the same network as its own non-plastic self
    assert all(not np.any(a) for a in lesioned.alpha)
    keys = jr.split(jr.key(2024), 512)
    lifetimes = eqx.filter_jit(
        lambda genome, keys: jax.vmap(lambda k: fitness(genome, k)[0])(keys)
    )
    learned = float(jnp.mean(lifetimes(learner, keys)))
    cut = float(jnp.mean(lifetimes(lesioned, keys)))
    assert learned >= 87.0, learned  # greedy Bayes about 89.4
    assert cut < 83.0, cut  # win-stay lose-shift, the best without memory: 81.7


def test_the_memory_lesion_answers_every_step_from_the_state_at_birth(key):
    policy = RecurrentPolicy(3, 2, 8, key=key)
    lesioned = lesion(policy, "memory")
    assert isinstance(lesioned, MemoryLesioned)
    observations = jr.normal(jr.key(1), (6, 3))
    state = lesioned.initial_state(jr.key(2))
    born = policy.initial_state(jr.key(2))
    for obs in observations:
        action, state = lesioned(obs, state)
        expected, _ = policy(obs, born)
        np.testing.assert_array_equal(action, expected)
    # intact, the same network answers from what it remembers
    intact, remembered = policy(observations[0], born)
    assert not np.allclose(policy(observations[1], remembered)[0], expected)
    del intact


def test_a_sparse_network_keeps_its_plastic_weights_under_the_memory_lesion(key):
    topology = Topology.random(12, 0.3, num_edges=48, key=jr.key(0))
    rule = HebbianRule(learning_rate=0.5, modulation="none")
    policy = SparseRatePolicy(3, 2, topology, plasticity=rule, key=key)
    lesioned = lesion(policy, "memory")
    state = lesioned.initial_state(jr.key(1))
    obs = jnp.ones((3,))
    for _ in range(3):
        _, state = lesioned(obs, state)
    current, born = state
    # activity is reborn every step; the plastic state carries on across steps
    # (with activity reset, a Hebbian rule sees no presynaptic rate: no increment)
    np.testing.assert_array_equal(born.rate, policy.initial_state(jr.key(1)).rate)
    assert int(current.plastic.step) == 3 and int(born.plastic.step) == 0
    # the plasticity lesion: the weights stay those it is born with
    frozen = lesion(policy, "plasticity")
    state = frozen.initial_state(jr.key(1))
    first = state.plastic.weights
    for _ in range(3):
        _, state = frozen(obs, state)
        state = frozen.reinforce(jnp.float32(1.0), state)
    np.testing.assert_array_equal(frozen.settled(state).plastic.weights, first)


@pytest.mark.parametrize(
    ("make", "what", "message"),
    [
        (lambda k: MLPPolicy(2, 2, key=k), "plasticity", "MLPPolicy has no plasticity"),
        (lambda k: MLPPolicy(2, 2, key=k), "memory", "MLPPolicy has no recurrent"),
        (lambda k: GRUPolicy(2, 2, 4, key=k), "plasticity", "GRUPolicy has no plast"),
        (
            lambda k: PlasticMLPPolicy(2, 2, 4, 1, key=k),
            "memory",
            "PlasticMLPPolicy has no recurrent state",
        ),
        (
            lambda k: SparseRatePolicy(
                2, 2, Topology.random(8, 0.3, num_edges=16, key=k), key=k
            ),
            "plasticity",
            "SparseRatePolicy has no plasticity",
        ),
    ],
)
def test_a_lesion_with_nothing_to_act_on_is_refused(make, what, message, key):
    with pytest.raises(LesionError, match=message):
        lesion(make(key), what)
    with pytest.raises(ValueError, match="lesion must be one of 'plasticity'"):
        lesion(make(key), "weights")


def test_eval_lesion_plasticity_takes_the_hand_wired_learners_advantage(tmp_path):
    """`eqxevo eval --lesion plasticity` on a run whose saved genome is the
    hand-wired plastic MLP: intact it beats win-stay lose-shift (the best without
    memory) on the run's held-out lifetimes by more than 5; lesioned its advantage
    is gone (what is left is that reflex: within 1 of it)."""
    import json

    from click.testing import CliRunner

    from eqxevo._app.cli import main
    from eqxevo._app.experiment.rundir import sha256
    from eqxevo.experiment import RunDir

    pytest.importorskip("eqxevo._src.envs.gymnax")
    task = [
        "env.name=gymnax:BernoulliBandit-misc",
        "net.name=mlp",
        "net.options.width=4",
        "net.options.depth=1",
        "net.options.plasticity={ layers = [1] }",
        "strategy.population_size=8",
        "run.generations=1",
        "run.lifetime=100",
        "run.reset_on_done=false",
        "run.eval_episodes=256",
    ]
    args = [a for item in task for a in ("--set", item)]
    runner = CliRunner()
    ran = runner.invoke(
        main, ["run", *args, "--out", str(tmp_path), "--name", "r", "--quiet"]
    )
    assert ran.exit_code == 0, ran.output
    run = RunDir(tmp_path / "r")
    run.save_genome("best", hand_wired_bandit_learner())  # the learner in its place
    summary = run.read_summary()
    summary["checksums"]["best_genome.eqx"] = sha256(run.path / "best_genome.eqx")
    run.write_summary(summary)

    def scored(*extra):
        result = runner.invoke(main, ["eval", str(run.path), "--json", *extra])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        floor = max(r["mean"] for r in data["references"] if r["kind"] == "no_memory")
        return data["mean"], floor, data["lesion"]

    intact, floor, lesion_name = scored()
    cut, same_floor, cut_name = scored("--lesion", "plasticity")
    assert (lesion_name, cut_name) == (None, "plasticity")
    assert same_floor == floor  # the references are not lesioned
    assert intact - floor > 5.0 and abs(cut - floor) < 1.0, (intact, floor, cut)
