"""Runs `evolve` in a fresh process, with or without `eqxevo.fast_cpu_prng()`.

`tests/test_prng.py` launches this script twice and compares what the two save
bit for bit:

    python tests/prng_worker.py OUT.npz unrolled
    python tests/prng_worker.py OUT.npz default

Every case is 3 generations of `evolve`: CMA_ES and Sep_CMA_ES on the L0
milestone shrunk (its compile is the cost), and SNES, CMA_ES, Sep_CMA_ES and
SimpleGA on a stranger fitness with key-dependent noise;
every leaf of the result (state, history, best genome) is saved under
`"{case}/{algorithm}/{leaf}"`, and the first generation's fitness statistics
under `"{case}/{algorithm}/first/{statistic}"`. `"random/{i}"` are raw draws
(bits, uniform, normal, split, fold_in) and `"while_loops"` counts the `while`
ops in the compiled `jr.split`, to show which lowering the process used;
`"lowering/at_import"` and `"lowering/called"` name the registered lowering
after the imports and after `fast_cpu_prng()` (or none), and `"active/..."`
what `fast_cpu_prng_active()` said then.
"""

import sys

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from helpers import Rosenbrock, transcendental

# The same checks as the test suite (conftest).
from jaxtyping import install_import_hook

install_import_hook("eqxevo", "beartype.beartype")
import eqxevo  # noqa: E402
import eqxevo._src.bits  # noqa: E402
from eqxevo._app.bench.milestones import milestone_experiment  # noqa: E402
from eqxevo._app.config import from_dict, to_dict  # noqa: E402
from eqxevo.experiment import build  # noqa: E402

ALGORITHMS = ("SNES", "CMA_ES", "Sep_CMA_ES", "SimpleGA")
L0_ALGORITHMS = ("CMA_ES", "Sep_CMA_ES")
GENERATIONS = 3


def l0(algorithm: str) -> eqxevo.EvolveResult:
    table = to_dict(milestone_experiment("L0", quick=True))
    table["strategy"].update(name=algorithm, population_size=8)
    table["run"]["lifetime"] = 30
    built = build(from_dict(table))
    return eqxevo.evolve(
        built.key, built.strategy, built.fitness, num_generations=GENERATIONS
    )


def stranger(algorithm: str) -> eqxevo.EvolveResult:
    strategy = eqxevo.Strategy(algorithm, Rosenbrock(5), 8, maximize=True)
    return eqxevo.evolve(
        jr.key(7), strategy, transcendental, num_generations=GENERATIONS
    )


def lowering() -> str:
    """The CPU lowering of threefry this process has registered: JAX's own
    ("default"), the unrolled one `fast_cpu_prng` registers, or another."""
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32 as t

    rule = mlir._platform_specific_lowerings["cpu"][t.threefry2x32_p].rule
    if rule is t._threefry2x32_cpu_lowering_rule:
        return "default"
    if rule is t._threefry2x32_lowering_rule:
        return "unrolled"
    return repr(rule)


def leaves(tree: object) -> list[np.ndarray]:
    out = []
    for leaf in jax.tree.leaves(tree):
        if jnp.issubdtype(jnp.asarray(leaf).dtype, jax.dtypes.prng_key):
            leaf = jr.key_data(leaf)
        out.append(np.asarray(jax.device_get(leaf)))
    return out


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    saved = {}
    # importing eqxevo (and all of the above) leaves JAX's lowering alone
    saved["lowering/at_import"] = np.asarray(lowering())
    saved["active/at_import"] = np.asarray(eqxevo._src.bits.fast_cpu_prng_active())
    if mode == "unrolled":
        assert eqxevo.fast_cpu_prng()
        assert eqxevo.fast_cpu_prng()  # idempotent
    saved["lowering/called"] = np.asarray(lowering())
    saved["active/called"] = np.asarray(eqxevo._src.bits.fast_cpu_prng_active())
    key = jr.key(3)
    draws = jax.jit(
        lambda k: (
            jr.bits(k, (4096,)),
            jr.uniform(k, (4096,)),
            jr.normal(k, (4096,)),
            jr.key_data(jr.split(k, 64)),
            jr.key_data(jax.vmap(lambda i: jr.fold_in(k, i))(jnp.arange(64))),
        )
    )(key)
    for i, draw in enumerate(draws):
        saved[f"random/{i}"] = np.asarray(draw)
    split = jax.jit(lambda k: jr.split(k, 4)).lower(jr.key(0)).compile().as_text()
    assert split is not None
    saved["while_loops"] = np.asarray(split.count(" while("))
    for case, run, algorithms in (
        ("l0", l0, L0_ALGORITHMS),
        ("stranger", stranger, ALGORITHMS),
    ):
        for algorithm in algorithms:
            result = run(algorithm)
            tree = (result.state, result.history, result.best_genome)
            for i, leaf in enumerate(leaves(tree)):
                saved[f"{case}/{algorithm}/{i}"] = leaf
            for statistic in ("best", "mean", "min", "max"):
                saved[f"{case}/{algorithm}/first/{statistic}"] = np.asarray(
                    result.history[statistic][0]
                )
    np.savez(out, **saved)


if __name__ == "__main__":
    main()
