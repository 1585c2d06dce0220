"""Per-leaf search scales: `Strategy(..., leaf_scales=...)`,
`[strategy] leaf_scales`, and `GenomeLayout`'s search coordinates."""

import tomllib

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from evosax.algorithms import algorithms
from helpers import tree_equal

from eqxevo import GenomeLayout, Strategy, stack_runs
from eqxevo._app.config import ConfigError, check_resumable, dumps, from_dict
from eqxevo.experiment import build, load

SCALE = 0.01


def genome() -> dict[str, jax.Array]:
    """A learning rate beside weights: 8 and 24 evolvable values."""
    return {
        "rate": jnp.linspace(0.01, 0.02, 8, dtype=jnp.float32),
        "w": jnp.linspace(-1.0, 1.0, 24, dtype=jnp.float32),
    }


def first_population(strategy: Strategy, key: jax.Array) -> dict[str, np.ndarray]:
    init_key, ask_key = jr.split(key)
    population, _ = strategy.ask(ask_key, strategy.init(init_key))
    return {k: np.asarray(v) for k, v in population.items()}


@pytest.mark.parametrize(
    "name",
    [
        "SNES",
        "CMA_ES",
        "Sep_CMA_ES",
        "Open_ES",
        "DifferentialEvolution",
        "RandomSearch",
    ],
)
def test_a_leaf_of_scale_a_hundredth_gets_a_hundredth_of_the_spread(name):
    start = genome()
    strategy = Strategy(name, start, 256, leaf_scales={"rate": SCALE})
    population = first_population(strategy, jr.key(3))
    spread = {k: np.std(population[k] - np.asarray(start[k])) for k in start}
    assert spread["w"] > 0.05  # std_init or init_scale: 0.1 in every preset here
    np.testing.assert_allclose(spread["rate"] / spread["w"], SCALE, rtol=0.1)


def test_the_search_starts_at_the_genome_itself():
    start = genome()
    strategy = Strategy("SNES", start, 8, leaf_scales={"rate": SCALE})
    mean = strategy.mean(strategy.init(jr.key(0)))
    # a scaled leaf round-trips to within one rounding; the others exactly
    np.testing.assert_array_max_ulp(mean["rate"], start["rate"], maxulp=1)
    np.testing.assert_array_equal(mean["w"], start["w"])


def _native_snes(start, scales, key, generations):
    """Raw evosax SNES whose per-dimension std starts at `std_init * scales`."""
    flat0 = jnp.concatenate([start["rate"], start["w"]])
    with jax.numpy_dtype_promotion("standard"):
        algo = algorithms["SNES"](population_size=16, solution=flat0)
        params = algo.default_params
        init_key, key = jr.split(key)
        state = algo.init(init_key, flat0, params)
        state = state.replace(std=state.std * scales)
        out = []
        for g in range(generations):
            ask_key, tell_key = jr.split(jr.fold_in(key, g))
            population, state = algo.ask(ask_key, state, params)
            out.append(np.asarray(population))
            fitness = jnp.sum(jnp.square(population), axis=1)
            state = algo.tell(tell_key, population, fitness, state, params)[0]
    return out


def test_snes_with_a_leaf_scale_is_snes_with_that_per_dimension_std():
    # SNES has a per-dimension std: searching a leaf in units of s is SNES
    # whose std starts s times smaller there (to float rounding).
    start, key = genome(), jr.key(5)
    strategy = Strategy("SNES", start, 16, leaf_scales={"rate": SCALE})
    scales = jnp.concatenate([jnp.full((8,), SCALE), jnp.ones((24,))])
    want = _native_snes(start, scales, key, 3)
    init_key, key = jr.split(key)
    state = strategy.init(init_key)
    for g in range(3):
        ask_key, tell_key = jr.split(jr.fold_in(key, g))
        population, state = strategy.ask(ask_key, state)
        flat = np.concatenate([population["rate"], population["w"]], axis=1)
        np.testing.assert_allclose(flat, want[g], rtol=2e-5, atol=1e-7)
        fitness = jnp.sum(jnp.square(jnp.asarray(flat)), axis=1)
        state, _ = strategy.tell(tell_key, population, fitness, state)


@pytest.mark.parametrize("name", ["SNES", "CMA_ES", "Sep_CMA_ES"])
def test_no_scales_is_todays_strategy(name):
    # The same pytree, no scales: the same programs, whose bits
    # test_strategy.py::test_strategy_trajectory_equals_raw_evosax_on_bbob
    # proves equal to raw evosax's.
    start = genome()
    today = Strategy(name, start, 16)
    assert today.layout.scales is None
    for unset in (None, {}, {"rule": {}}):
        strategy = Strategy(name, start, 16, leaf_scales=unset)
        assert strategy.layout.scales is None
        assert tree_equal(strategy, today)
    layout = GenomeLayout.from_genome(start)
    flat = jnp.arange(32, dtype=jnp.float32)
    assert str(jax.make_jaxpr(layout.unflatten)(flat)).count(" mul ") == 0
    assert str(jax.make_jaxpr(layout.flatten)(start)).count(" div ") == 0


def test_runs_that_differ_only_in_scale_values_share_a_program():
    start = genome()
    a = Strategy("SNES", start, 8, leaf_scales={"rate": SCALE})
    b = Strategy("SNES", start, 8, leaf_scales={"rate": 0.5})
    stacked = stack_runs([a, b])
    assert stacked.layout.scales.shape == (2, 32)
    with pytest.raises(ValueError, match="programs of their own"):
        stack_runs([a, Strategy("SNES", start, 8)])


def test_the_longest_key_covering_a_leaf_wins_and_tables_nest():
    tree = {"rule": {"a": jnp.zeros(2), "learning_rate": jnp.zeros(())}}
    for scales in (
        {"rule": 0.5, "rule.learning_rate": SCALE},
        {"rule": {"learning_rate": SCALE}, "rule.a": 0.5},
    ):
        layout = GenomeLayout.from_genome(tree, leaf_scales=scales)
        assert layout.scales is not None
        np.testing.assert_array_equal(
            layout.scales, np.asarray([0.5, 0.5, SCALE], np.float32)
        )


def test_bad_scales_name_the_key_and_the_leaves():
    start = genome()
    with pytest.raises(ValueError) as info:
        Strategy("SNES", start, 8, leaf_scales={"rates": SCALE})
    assert str(info.value) == (
        "leaf_scales: 'rates' is neither an evolvable leaf of the genome nor a "
        "prefix of one (did you mean 'rate'?); its evolvable leaves: rate, w"
    )
    with pytest.raises(ValueError, match=r"leaf_scales\['rate'\] must be a finite"):
        Strategy("SNES", start, 8, leaf_scales={"rate": 0.0})


def test_random_search_with_its_own_sampler_cannot_take_leaf_scales():
    def sampler(key):
        return jr.normal(key, (32,))

    with pytest.raises(ValueError) as info:
        Strategy(
            "RandomSearch",
            genome(),
            8,
            leaf_scales={"rate": SCALE},
            sampling_fn=sampler,
        )
    assert str(info.value).startswith(
        "leaf_scales: RandomSearch draws its genomes with your own sampling_fn"
    )


PLASTIC = {
    "env": {"name": "long_horizon"},
    "net": {
        "name": "sparse_rate",
        "options": {"num_neurons": 8, "fan_in": 2, "plasticity": True},
    },
    "strategy": {"population_size": 8},
}


def test_the_config_key_round_trips_and_sets_the_leafs_scale():
    experiment = from_dict(
        {**PLASTIC, "strategy": {"population_size": 8, "leaf_scales": {"rule": 0.5}}}
    )
    assert from_dict(tomllib.loads(dumps(experiment))) == experiment
    dotted = from_dict(
        {
            **PLASTIC,
            "strategy": {
                "population_size": 8,
                "leaf_scales": {"rule.learning_rate": SCALE},
            },
        }
    )
    assert from_dict(tomllib.loads(dumps(dotted))) == dotted
    nested = load(None, ["strategy.leaf_scales.rule.learning_rate=0.01"])
    assert nested.strategy.leaf_scales == {"rule": {"learning_rate": SCALE}}
    a = build(dotted).strategy
    b = build(from_dict({**PLASTIC, "strategy": {**PLASTIC["strategy"]}}))
    assert b.strategy.layout.scales is None
    assert a.layout.scales is not None
    scales = np.asarray(a.layout.scales)
    assert scales[-1] == np.float32(SCALE)  # rule.learning_rate, the last leaf
    assert np.all(scales[:-1] == 1.0)


def test_a_bad_config_key_is_a_config_error_naming_it():
    data = {
        **PLASTIC,
        "strategy": {"population_size": 8, "leaf_scales": {"rule.rate": SCALE}},
    }
    with pytest.raises(ConfigError) as info:
        build(from_dict(data))
    assert str(info.value).startswith(
        "strategy 'snes': strategy.leaf_scales: 'rule.rate' is neither an evolvable "
        "leaf of the genome nor a prefix of one"
    )
    with pytest.raises(ConfigError, match="would change its trajectory"):
        check_resumable(["strategy.leaf_scales.rule=0.5"])
