import functools
import sys

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
from helpers import (
    Net,
    Rosenbrock,
    Stranger,
    check_finite_with_stable_state,
    noisy_sphere,
    rosenbrock,
    sphere,
    stranger_fitness,
    transcendental,
    tree_equal,
)
from hypothesis import given, settings

import eqxevo
from eqxevo import NonFiniteFitnessError, Strategy, generation_keys
from eqxevo._src.program import run_chunk


@functools.cache
def strategy_for(name: str, maximize: bool = False) -> Strategy:
    return Strategy(name, Net(key=jr.key(0)), 8, maximize=maximize)


def hand_written_loop(strategy, fitness_fn, key, num_generations, episodes="shared"):
    """The documented key schedule, one jitted public call at a time."""
    init_key, run_key = jr.split(key)
    state = strategy.init(init_key)
    best = []
    for g in range(num_generations):
        ask_key, eval_key, tell_key = generation_keys(run_key, g)
        population, state = strategy.ask(ask_key, state)
        fitness, _ = eqxevo.evaluate(
            eval_key,
            fitness_fn,
            population,
            filter_spec=strategy.filter_spec,
            maximize=strategy.maximize,
            episodes=episodes,
        )
        state, metrics = strategy.tell(tell_key, population, fitness, state)
        best.append(metrics["best"])
    return state, np.asarray(best)


# Several algorithms (CMA_ES and Sep_CMA_ES included, three population-based),
# maximising and minimising, on a genome and a fitness the project's own tests do
# not otherwise use: `Stranger` holds an eqx.nn.MLP, a float vector and an int
# leaf; `stranger_fitness` has multiply-adds, reductions, transcendentals, noise
# and an aux pytree (one strong case in place of three weaker ones).
ALGORITHMS = {
    # algorithm: maximize
    "SNES": True,
    "PGPE": False,
    "Open_ES": True,
    "CMA_ES": False,
    "Sep_CMA_ES": True,
    "DifferentialEvolution": False,
    "SimpleGA": True,
    "PSO": False,
}


@functools.cache
def stranger(algorithm, population_size=8):
    maximize = ALGORITHMS[algorithm]
    strategy = Strategy(algorithm, Stranger(), population_size, maximize=maximize)
    return strategy, stranger_fitness


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_evolve_equals_hand_written_loop(algorithm, key):
    strategy, fitness_fn = stranger(algorithm)
    result = eqxevo.evolve(key, strategy, fitness_fn, num_generations=5, chunk_size=2)
    # test_strategy.py's every-algorithm test, for these algorithms: finite
    # populations, and a state of the types of a fresh one.
    check_finite_with_stable_state(strategy, result, 5)
    state, best = hand_written_loop(strategy, fitness_fn, key, 5)
    assert tree_equal(result.state, state)
    np.testing.assert_array_equal(result.history["best"], best)
    np.testing.assert_array_equal(result.history["generation"], np.arange(5))
    assert tree_equal(result.best_genome, strategy.best(state))
    # Other chunks, and several seeds in one program: seed k is the hand-written
    # loop on key k of `jr.split(key, 2)`, bit for bit.
    seeds = eqxevo.evolve(
        key, strategy, fitness_fn, num_generations=5, num_seeds=2, chunk_size=3
    )
    for k, seed_key in enumerate(jr.split(key, 2)):
        state, best = hand_written_loop(strategy, fitness_fn, seed_key, 5)
        assert tree_equal(jax.tree.map(lambda x, k=k: x[k], seeds.state), state)
        np.testing.assert_array_equal(seeds.history["best"][k], best)


@pytest.mark.parametrize("algorithm", ["SNES", "PGPE", "CMA_ES"])
def test_evolve_with_per_genome_episodes_equals_hand_written_loop(algorithm, key):
    strategy, fitness_fn = stranger(algorithm)
    # chunks of 2, as above: the shared-episode run is that test's program
    result = eqxevo.evolve(
        key,
        strategy,
        fitness_fn,
        num_generations=4,
        chunk_size=2,
        episodes="per_genome",
    )
    state, best = hand_written_loop(
        strategy, fitness_fn, key, 4, episodes=strategy.episode_ids
    )
    assert tree_equal(result.state, state)
    np.testing.assert_array_equal(result.history["best"], best)
    shared = eqxevo.evolve(key, strategy, fitness_fn, num_generations=4, chunk_size=2)
    assert not np.array_equal(shared.history["mean"], result.history["mean"])


class Shifted(eqx.Module):
    """A fitness function holding an array: an environment variant, say."""

    shift: jax.Array

    def __call__(self, genome, key):
        shifted = eqx.tree_at(lambda g: g.x, genome, genome.x - self.shift)
        return transcendental(shifted, key)


@pytest.mark.parametrize("algorithm", ["SNES", "CMA_ES", "Sep_CMA_ES", "SimpleGA"])
def test_stacked_runs_equal_separate_runs(algorithm, key):
    # Runs that differ in array values only: initial genome, a strategy
    # parameter (population-based ones have none to vary here), the fitness's
    # own array. One program, each run bit-identical to a run of its own.
    base = Rosenbrock(5)
    genomes = [eqx.tree_at(lambda g: g.x, base, base.x + 0.3 * r) for r in range(3)]
    params = [
        None if algorithm == "SimpleGA" else {"std_init": jnp.float32(0.2 + 0.1 * r)}
        for r in range(3)
    ]
    strategies = [
        Strategy(algorithm, g, 8, maximize=True, params=p)
        for g, p in zip(genomes, params, strict=True)
    ]
    fns = [Shifted(jnp.float32(0.1 * r)) for r in range(3)]
    keys = jr.split(key, 3)
    result = eqxevo.evolve(
        keys,
        eqxevo.stack_runs(strategies),
        eqxevo.stack_runs(fns),
        num_generations=4,
        chunk_size=3,
        runs=3,
    )
    assert result.history["best"].shape == (3, 4)
    for r in range(3):
        single = eqxevo.evolve(keys[r], strategies[r], fns[r], num_generations=4)
        assert tree_equal(jax.tree.map(lambda x, r=r: x[r], result.state), single.state)
        np.testing.assert_array_equal(result.history["best"][r], single.history["best"])
        np.testing.assert_array_equal(
            result.history["aux"]["peak"][r], single.history["aux"]["peak"]
        )


def test_stack_runs_refuses_runs_that_need_their_own_program(key):
    a = Strategy("SNES", Rosenbrock(5), 8)
    with pytest.raises(ValueError, match="differs from tree 0"):
        eqxevo.stack_runs([a, Strategy("SNES", Rosenbrock(5), 16)])
    with pytest.raises(ValueError, match="differs from tree 0"):
        eqxevo.stack_runs([a, Strategy("CMA_ES", Rosenbrock(5), 8)])
    with pytest.raises(ValueError, match="leading axis 2"):
        eqxevo.evolve(jr.split(key, 2), a, rosenbrock, num_generations=1, runs=2)
    with pytest.raises(ValueError, match="2 typed keys"):
        eqxevo.evolve(
            key, eqxevo.stack_runs([a, a]), rosenbrock, num_generations=1, runs=2
        )


@given(chunk_size=st.integers(1, 8))
def test_evolve_does_not_depend_on_chunk_size(chunk_size):
    strategy = strategy_for("snes")
    reference = eqxevo.evolve(
        jr.key(3), strategy, noisy_sphere, num_generations=7, chunk_size=7
    )
    result = eqxevo.evolve(
        jr.key(3), strategy, noisy_sphere, num_generations=7, chunk_size=chunk_size
    )
    assert tree_equal(result.state, reference.state)
    assert tree_equal(result.history, reference.history)


def test_num_seeds_results_carry_a_seed_axis_and_share_static_leaves(key):
    strategy = strategy_for("simple_ga")
    batched = eqxevo.evolve(key, strategy, noisy_sphere, num_generations=4, num_seeds=3)
    assert batched.history["best"].shape == (3, 4)
    assert batched.history["aux"]["norm"].shape == (3, 4)
    assert batched.best_fitness.shape == (3,)
    assert batched.best_genome.weight.shape == (3, 3, 2)
    assert batched.best_genome.edges.shape == (5,)  # static stays shared


def test_evolve_compiles_once_across_generations_and_calls(key):
    strategy = Strategy("snes", Net(key=key), 6)
    before = eqx.debug.get_num_traces(run_chunk)
    # 23 generations in chunks of 5: four full chunks and a masked partial one.
    eqxevo.evolve(key, strategy, sphere, num_generations=23, chunk_size=5)
    assert eqx.debug.get_num_traces(run_chunk) == before + 1
    eqxevo.evolve(jr.fold_in(key, 1), strategy, sphere, num_generations=8, chunk_size=5)
    assert eqx.debug.get_num_traces(run_chunk) == before + 1


def test_user_scan_of_ask_tell_traces_once(key):
    strategy = strategy_for("snes")

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def generation(state, gen_key):
        ask_key, eval_key, tell_key = jr.split(gen_key, 3)
        population, state = strategy.ask(ask_key, state)
        fitness, _ = eqxevo.evaluate(eval_key, sphere, population)
        return strategy.tell(tell_key, population, fitness, state)[0]

    state = strategy.init(key)
    for g in range(4):  # a second trace would raise
        state = generation(state, jr.fold_in(key, g))
    assert int(state.generation) == 4


def test_resumed_run_equals_uninterrupted_run(key):
    strategy = strategy_for("simple_ga")
    full = eqxevo.evolve(key, strategy, noisy_sphere, num_generations=6)
    first = eqxevo.evolve(key, strategy, noisy_sphere, num_generations=4)
    rest = eqxevo.evolve(
        key, strategy, noisy_sphere, num_generations=2, state=first.state
    )
    assert tree_equal(rest.state, full.state)
    np.testing.assert_array_equal(rest.history["generation"], [4, 5])
    np.testing.assert_array_equal(rest.history["best"], full.history["best"][4:])


def test_callback_receives_each_chunk_on_the_host(key):
    received = []
    eqxevo.evolve(
        key,
        strategy_for("snes"),
        sphere,
        num_generations=7,
        chunk_size=3,
        callback=received.append,
    )
    histories = [chunk.history for chunk in received]
    assert [list(h["generation"]) for h in histories] == [[0, 1, 2], [3, 4, 5], [6]]
    assert all(isinstance(h["best"], np.ndarray) for h in histories)
    assert [chunk.generation for chunk in received] == [3, 6, 7]
    assert all(chunk.num_generations == 7 for chunk in received)


def test_history_is_in_the_users_sign(key):
    strategy = strategy_for("snes", maximize=True)
    result = eqxevo.evolve(key, strategy, lambda g, k: -sphere(g, k), num_generations=5)
    h = result.history
    np.testing.assert_array_equal(h["best"], h["max"])
    assert (h["min"] <= h["mean"]).all() and (h["mean"] <= h["max"]).all()
    np.testing.assert_array_equal(h["best_so_far"], np.maximum.accumulate(h["best"]))
    assert float(result.best_fitness) == h["best"].max()


# -- non-finite fitness -------------------------------------------------------------


def explode(genome, key):
    """NaN for genomes whose first weight is positive, +inf for the third bias > 1."""
    value = sphere(genome, key)
    value = jnp.where(genome.weight[0, 0] > 0, jnp.nan, value)
    return jnp.where(genome.bias[1] > 1.0, jnp.inf, value)


def count_nonfinite(strategy, key, num_generations):
    init_key, run_key = jr.split(key)
    state = strategy.init(init_key)
    counts, best_finite = [], []
    for g in range(num_generations):
        ask_key, eval_key, tell_key = generation_keys(run_key, g)
        population, state = strategy.ask(ask_key, state)
        fitness, _ = eqxevo.evaluate(eval_key, explode, population)
        counts.append(int((~jnp.isfinite(fitness)).sum()))
        best_finite.append(
            float(jnp.min(jnp.where(jnp.isfinite(fitness), fitness, jnp.inf)))
        )
        state, _ = strategy.tell(tell_key, population, fitness, state)
    return counts, best_finite


@pytest.mark.parametrize(
    "name", ["snes", "simple_ga", "differential_evolution", "pgpe"]
)
def test_nonfinite_fitness_ranks_worst_and_is_counted(name, key):
    # From a zero genome about half of the samples have weight[0, 0] > 0 (NaN).
    zero = jax.tree.map(
        lambda x: jnp.zeros_like(x) if eqx.is_inexact_array(x) else x, Net(key=key)
    )
    strategy = Strategy(name, zero, 8, init_scale=1.0)
    result = eqxevo.evolve(key, strategy, explode, num_generations=6)
    counts, best_finite = count_nonfinite(strategy, key, 6)
    np.testing.assert_array_equal(result.history["num_nonfinite"], counts)
    assert sum(counts) > 0, "the test needs some non-finite genomes"
    # the strategy state never holds NaN, and the best genome has finite fitness
    for leaf in jax.tree.leaves(result.state):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert not np.isnan(np.asarray(leaf)).any()
    assert np.isfinite(float(result.best_fitness))
    assert float(result.best_fitness) == pytest.approx(min(best_finite))
    assert np.isfinite(float(explode(result.best_genome, key)))


def test_nonfinite_policy_raise_names_the_generation(key):
    zero = jax.tree.map(
        lambda x: jnp.zeros_like(x) if eqx.is_inexact_array(x) else x, Net(key=key)
    )
    strategy = Strategy("snes", zero, 8)

    def grows_then_fails(genome, key):
        # Minimising -sum(weight) pushes the weights up until weight[0, 0]
        # crosses 1, some generations in: then the fitness turns NaN.
        del key
        value = -jnp.sum(genome.weight)
        return jnp.where(genome.weight[0, 0] > 1.0, jnp.nan, value)

    clean = eqxevo.evolve(key, strategy, grows_then_fails, num_generations=40)
    bad_generations = np.flatnonzero(clean.history["num_nonfinite"])
    assert bad_generations.size, "the test needs a generation with NaN fitness"
    first = int(bad_generations[0])
    assert first > 0
    with pytest.raises(NonFiniteFitnessError, match=f"at generation {first}") as info:
        eqxevo.evolve(
            key,
            strategy,
            grows_then_fails,
            num_generations=40,
            chunk_size=4,
            on_nonfinite="raise",
        )
    assert info.value.generation == first
    assert info.value.count == clean.history["num_nonfinite"][first]
    # the state attached is the last good one: just before the bad generation
    assert int(info.value.state.generation) == first
    np.testing.assert_array_equal(
        np.asarray(info.value.state.best_flat),
        np.asarray(
            eqxevo.evolve(
                key, strategy, grows_then_fails, num_generations=first
            ).state.best_flat
        ),
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_generations": 0}, "num_generations"),
        ({"num_generations": 3, "chunk_size": 0}, "chunk_size"),
        ({"num_generations": 3, "num_seeds": 0}, "num_seeds"),
        ({"num_generations": 3, "on_nonfinite": "ignore"}, "on_nonfinite"),
    ],
)
def test_evolve_rejects_bad_arguments(kwargs, match, key):
    with pytest.raises((ValueError, TypeError), match=match):
        eqxevo.evolve(key, strategy_for("snes"), sphere, **kwargs)


def test_equal_strategies_share_one_compilation(key):
    net = Net(key=key)
    before = eqx.debug.get_num_traces(run_chunk)
    eqxevo.evolve(key, Strategy("open_es", net, 6), sphere, num_generations=2)
    # built again from the same preset (new evosax and optax objects): no retrace
    eqxevo.evolve(key, Strategy("open_es", net, 6), sphere, num_generations=2)
    assert eqx.debug.get_num_traces(run_chunk) == before + 1
    # other values of the genome do not matter either (they are the mean, an input)
    shifted = jax.tree.map(lambda x: x + 1 if eqx.is_inexact_array(x) else x, net)
    eqxevo.evolve(key, Strategy("open_es", shifted, 6), sphere, num_generations=2)
    assert eqx.debug.get_num_traces(run_chunk) == before + 1
    # a user's own optimizer object is compared by identity: a new program
    eqxevo.evolve(
        key,
        Strategy("open_es", net, 6, optimizer=optax.adam(0.1)),
        sphere,
        num_generations=2,
    )
    assert eqx.debug.get_num_traces(run_chunk) == before + 2


def test_random_search_default_sampler_depends_on_the_genome(key):
    net = Net(key=key)
    shifted = jax.tree.map(lambda x: x + 5 if eqx.is_inexact_array(x) else x, net)
    a = Strategy("RandomSearch", net, 4)
    b = Strategy("RandomSearch", shifted, 4)
    assert a._algorithm != b._algorithm
    pop_b, _ = b.ask(key, b.init(key))
    assert float(jnp.mean(pop_b.bias)) > 3.0  # sampled around the shifted genome


# -- multi-fidelity and micro-batching ------------------------------------------------


def reach(genome, key, steps=6):
    """A scanned lifetime: higher is better (maximised), with an aux summary."""

    def step(carry, step_key):
        x, total = carry
        x = jnp.tanh(genome.weight.T @ x + genome.bias[0]) + 0.1 * jr.normal(
            step_key, (2,)
        )
        x = jnp.concatenate([x, x[:1]])
        return (x, total - jnp.sum(x**2)), None

    (x, total), _ = jax.lax.scan(
        step, (jnp.ones(3), jnp.zeros(())), jr.split(key, steps)
    )
    return total / steps, {"x0": x[0]}


def test_evolve_with_multi_fidelity_equals_hand_written_loop(key):
    strategy = strategy_for("snes", maximize=True)
    fidelity = eqxevo.MultiFidelity(
        lambda g, k: reach(g, k, steps=2),
        reach,
        num_promoted=2,
        proxy_steps=2,
        full_steps=6,
    )
    # two seeds, micro-batches of 3 (8 = 3 + 3 + 2 padded), chunks of 3
    result = eqxevo.evolve(
        key,
        strategy,
        fidelity,
        num_generations=4,
        chunk_size=3,
        num_seeds=2,
        batch_size=3,
    )
    h = result.history
    np.testing.assert_array_equal(h["agent_steps"], np.full((2, 4), 8 * 2 + 2 * 6))
    np.testing.assert_array_equal(h["agent_steps_full"], np.full((2, 4), 8 * 6))
    assert h["aux"]["promoted"].all()  # the generation's best was evaluated fully
    for k, seed_key in enumerate(jr.split(key, 2)):
        # the documented schedule, unbatched, with evaluate(..., maximize=...)
        init_key, run_key = jr.split(seed_key)
        state = strategy.init(init_key)
        best = []
        for g in range(4):
            ask_key, eval_key, tell_key = generation_keys(run_key, g)
            population, state = strategy.ask(ask_key, state)
            fitness, _ = eqxevo.evaluate(
                eval_key, fidelity, population, maximize=strategy.maximize
            )
            state, metrics = strategy.tell(tell_key, population, fitness, state)
            best.append(metrics["best"])
        assert tree_equal(jax.tree.map(lambda x, k=k: x[k], result.state), state)
        np.testing.assert_array_equal(h["best"][k], np.asarray(best))


def test_evolve_checks_multi_fidelity_and_batch_size(key):
    strategy = strategy_for("snes")
    too_many = eqxevo.MultiFidelity(
        sphere, sphere, num_promoted=9, proxy_steps=1, full_steps=1
    )
    with pytest.raises(ValueError, match="num_promoted=9 must be at most"):
        eqxevo.evolve(key, strategy, too_many, num_generations=1)
    with pytest.raises(ValueError, match="batch_size"):
        eqxevo.evolve(key, strategy, sphere, num_generations=1, batch_size=0)


# -- regressions of issue 11 ------------------------------------------------------


def test_a_short_last_chunk_or_run_reuses_the_compiled_program(key):
    strategy = Strategy("snes", Net(key=key), 6)
    eqxevo.evolve(key, strategy, sphere, num_generations=10, chunk_size=5)
    before = eqx.debug.get_num_traces(run_chunk)
    # fewer generations than one chunk, and a resumed run: the same program
    result = eqxevo.evolve(key, strategy, sphere, num_generations=3, chunk_size=5)
    eqxevo.evolve(
        key, strategy, sphere, num_generations=2, chunk_size=5, state=result.state
    )
    assert eqx.debug.get_num_traces(run_chunk) == before


def test_callback_can_stop_the_loop_after_its_chunk(key):
    strategy = strategy_for("snes")
    seen = []

    def stop_at_six(chunk):
        seen.append(chunk.generation)
        return chunk.generation >= 6

    result = eqxevo.evolve(
        key, strategy, sphere, num_generations=20, chunk_size=3, callback=stop_at_six
    )
    assert seen == [3, 6]
    assert result.stopped
    assert int(result.state.generation) == 6
    np.testing.assert_array_equal(result.history["generation"], np.arange(6))
    full = eqxevo.evolve(key, strategy, sphere, num_generations=6, chunk_size=3)
    assert tree_equal(result.state, full.state)  # the chunk in flight was dropped


def test_align_ends_chunks_at_its_multiples_also_after_a_resume(key):
    strategy = strategy_for("snes")
    full = eqxevo.evolve(key, strategy, sphere, num_generations=11, chunk_size=4)
    ends = []
    before = eqx.debug.get_num_traces(run_chunk)
    first = eqxevo.evolve(
        key,
        strategy,
        sphere,
        num_generations=5,
        chunk_size=4,
        align=3,
        callback=lambda chunk: ends.append(chunk.generation),
    )
    # resumed from generation 5: chunks still end at multiples of 3
    second = eqxevo.evolve(
        key,
        strategy,
        sphere,
        num_generations=6,
        chunk_size=4,
        align=3,
        state=first.state,
        callback=lambda chunk: ends.append(chunk.generation),
    )
    assert ends == [3, 5, 6, 9, 11]
    assert eqx.debug.get_num_traces(run_chunk) == before  # no new program
    assert tree_equal(second.state, full.state)
    with pytest.raises(ValueError, match="align must be a positive int"):
        eqxevo.evolve(key, strategy, sphere, num_generations=2, align=0)


def test_host_work_on_a_chunk_overlaps_the_next_chunk(key, monkeypatch):
    # The order of events: chunk k + 1 is dispatched before chunk k reaches the
    # callback, so the device runs while the host works.
    events = []
    evolve_module = sys.modules["eqxevo._src.evolve"]
    real = evolve_module.run_chunk

    def recording(*args, **kwargs):
        events.append("dispatch")
        return real(*args, **kwargs)

    monkeypatch.setattr(evolve_module, "run_chunk", recording)
    eqxevo.evolve(
        key,
        strategy_for("snes"),
        sphere,
        num_generations=9,
        chunk_size=3,
        callback=lambda chunk: events.append(f"host {chunk.generation}"),
    )
    assert events == ["dispatch", "dispatch", "host 3", "dispatch", "host 6", "host 9"]


def test_a_state_of_another_strategy_is_refused(key):
    small = Strategy("snes", Rosenbrock(5), 16)
    large = Strategy("snes", Rosenbrock(5), 32)
    with pytest.raises(
        ValueError, match=r"not made by this strategy.*population_size=32"
    ):
        eqxevo.evolve(key, large, rosenbrock, num_generations=1, state=small.init(key))
    with pytest.raises(ValueError, match="not made by this strategy"):
        large.ask(key, small.init(key))
    cma = Strategy("CMA_ES", Rosenbrock(5), 16)
    with pytest.raises(ValueError, match="made by SNES"):
        eqxevo.evolve(key, cma, rosenbrock, num_generations=1, state=small.init(key))
    # a single-seed state handed to a 3-seed run
    with pytest.raises(ValueError, match="3 seeds"):
        eqxevo.evolve(
            key,
            small,
            rosenbrock,
            num_generations=1,
            num_seeds=3,
            state=small.init(key),
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"params": {"std_init": -1.0}}, "std_init"),
        ({"params": {"std_init": float("nan")}}, "std_init"),
        ({"params": {"std_init": float("inf")}}, "std_init"),
        ({"init_scale": float("nan")}, "init_scale"),
        ({"init_scale": 0.0}, "init_scale"),
        ({"init_scale": float("inf")}, "init_scale"),
    ],
)
def test_bad_scales_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Strategy("snes", Rosenbrock(5), 8, **kwargs)


def test_population_of_one_where_the_algorithm_allows_it(key):
    strategy = Strategy("HillClimbing", Rosenbrock(5), 1)
    result = eqxevo.evolve(key, strategy, rosenbrock, num_generations=3)
    assert result.history["best"].shape == (3,)
    with pytest.raises(ValueError, match="population_size=1 is rejected by PGPE"):
        Strategy("PGPE", Rosenbrock(5), 1)


def test_population_based_initial_state_holds_no_nan_under_any_shaping(key):
    # The state before the first tell is built without running evosax's fitness
    # shaping on placeholder values (normalize of all-inf fitness was NaN).
    from evosax.core.fitness_shaping import normalize_fitness_shaping_fn

    strategy = Strategy(
        "DifferentialEvolution",
        Rosenbrock(5),
        8,
        fitness_shaping_fn=normalize_fitness_shaping_fn,
    )
    state = strategy.init(key)
    for leaf in jax.tree.leaves(state.inner):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert not np.isnan(np.asarray(leaf)).any()
    result = eqxevo.evolve(key, strategy, explode_rosenbrock, num_generations=4)
    assert np.isfinite(float(result.best_fitness))


def explode_rosenbrock(genome, key):
    value = rosenbrock(genome, key)
    return jnp.where(genome.x[0] > -0.9, jnp.nan, value)


aux_leaves = st.sampled_from(
    [
        1.5,
        3,
        True,
        np.float32(2.0),
        np.int64(7),
        "a label",
        None,
        "array-f32",
        "array-i32",
        "array-bool",
        "vector",
    ]
)


def _aux_leaf(kind, genome):
    x = genome.weight[0, 0]
    return (
        {
            "array-f32": jnp.sin(x),
            "array-i32": jnp.int32(3) + (x > 0).astype(jnp.int32),
            "array-bool": x > 0,
            "vector": jnp.stack([x, 2 * x]),
        }.get(kind, kind)
        if isinstance(kind, str)
        else kind
    )


@settings(max_examples=min(6, settings().max_examples))  # each example compiles
@given(leaves=st.dictionaries(st.sampled_from("abcde"), aux_leaves, max_size=4))
def test_aux_pytrees_of_every_leaf_kind_reach_the_history(leaves):
    def fitness(genome, key):
        aux = {k: _aux_leaf(v, genome) for k, v in leaves.items()}
        return sphere(genome, key), {"nested": (aux, [1.0])}

    result = eqxevo.evolve(
        jr.key(0), strategy_for("snes"), fitness, num_generations=3, chunk_size=2
    )
    history_aux = result.history["aux"]["nested"][0]
    for k, v in leaves.items():
        got = history_aux[k]
        if isinstance(v, str) and v.startswith(("array", "vector")):
            assert got.shape[0] == 3  # one per generation
        elif isinstance(v, str) or v is None:
            assert got == v  # static leaves pass through
        else:
            np.testing.assert_array_equal(got, np.full(3, v))
    np.testing.assert_array_equal(result.history["aux"]["nested"][1][0], [1.0] * 3)


def test_no_module_loops_over_generations_but_evolve():
    # "One loop": nothing in the package or the scripts continues a run inside a
    # Python for/while loop (a loop over chunks or generations of its own): no
    # loop calls the chunk programs, nor `evolve` with a `state` to go on from.
    # Loops over independent runs (variants, each from its own key) are fine.
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    offenders = []
    for path in [*root.glob("eqxevo/**/*.py"), *root.glob("scripts/*.py")]:
        if path.name == "evolve.py" and path.parent.name == "_src":
            continue  # the loop itself (over chunks)
        tree = ast.parse(path.read_text())
        for loop in ast.walk(tree):
            if not isinstance(loop, ast.For | ast.While):
                continue
            for node in ast.walk(loop):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = getattr(f, "id", getattr(f, "attr", None))
                    keywords = {k.arg for k in node.keywords}
                    if name in ("generation_step", "run_chunk") or (
                        name == "evolve" and "state" in keywords
                    ):
                        offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, f"loops over evolve: {offenders}"


def test_adaptive_chunks_equal_fixed_chunks_and_compile_once():
    strategy = eqxevo.Strategy("sep_cma_es", Net(key=jr.key(0)), 8)
    fixed = eqxevo.evolve(
        jr.key(1), strategy, noisy_sphere, num_generations=9, chunk_size=4
    )
    sizes = []
    before = eqx.debug.get_num_traces(run_chunk)
    adaptive = eqxevo.evolve(
        jr.key(1),
        strategy,
        noisy_sphere,
        num_generations=9,
        chunk_size=4,
        chunk_seconds=1e-9,  # every chunk is one generation
        callback=lambda chunk: sizes.append(chunk.history["generation"].shape[0]),
    )
    assert sizes == [1] * 9
    assert eqx.debug.get_num_traces(run_chunk) == before  # no new program
    assert tree_equal(fixed.state, adaptive.state)
    for key in ("best", "mean", "best_so_far"):
        np.testing.assert_array_equal(fixed.history[key], adaptive.history[key])
    with pytest.raises(ValueError, match="chunk_seconds must be a finite number > 0"):
        eqxevo.evolve(
            jr.key(1), strategy, noisy_sphere, num_generations=2, chunk_seconds=0.0
        )
