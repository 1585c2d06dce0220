"""Quality-diversity on the planar arm: eqxevo's MAP-Elites (through `evolve`)
against QDax's, on the same task with the same budget, in one process; and
eqxevo's CMA-ME against its MAP-Elites (issue 41's goals; docs/qd.md).

QDax's budget (its own measurement in issue 41): 20 degrees of freedom, a
32 x 32 grid over the end effector's position, QD offset 1, iso+line variation
(0.005, 0.05), an initial batch of 256 and 200 iterations of 256. eqxevo spends
the same evaluations: a first generation of 256 samples and 200 more.
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo._src.evolve import evolve
from eqxevo._src.qd.archive import Archive
from eqxevo._src.qd.emitters import ESEmitter, IsoLineEmitter
from eqxevo._src.qd.map_elites import MapElites
from eqxevo._src.qd.tasks import arm, arm_fitness

from ..study.intervals import iqm_interval
from .common import steady_times

DOF = 20
GRID = (32, 32)
BATCH = 256
ITERATIONS = 200
QD_OFFSET = 1.0
ISO_SIGMA, LINE_SIGMA = 0.005, 0.05
SEEDS = 16
"""Runs per side: enough for a 95% IQM interval (`MIN_RUNS_FOR_CI`, 14)."""

QD_COLUMNS = [
    "side",
    "runs",
    "qd_score_iqm",
    "qd_score_low",
    "qd_score_high",
    "coverage_iqm",
    "coverage_low",
    "coverage_high",
    "generation_s",
    "evaluations_per_s",
    "over_qdax",
]


def _archive() -> Archive:
    return Archive.grid(GRID, 0.0, 1.0, qd_offset=QD_OFFSET)


def eqxevo_strategy(algorithm: str) -> MapElites:
    """eqxevo's MAP-Elites (iso+line, one emitter of 256) or CMA-ME (four
    CMA_ES emitters of 64, improvement ranking), from the middle of the box."""
    initial = jnp.full((DOF,), 0.5)
    if algorithm == "MAP-Elites":
        emitters: Any = IsoLineEmitter(BATCH, ISO_SIGMA, LINE_SIGMA)
    else:
        emitters = [ESEmitter("CMA_ES", BATCH // 4, params={"std_init": 0.05})] * 4
    return MapElites(initial, _archive(), emitters, init_scale=0.3)


def eqxevo_run(strategy: MapElites, seed: int, generations: int) -> Any:
    return evolve(
        jr.key(seed),
        strategy,
        arm_fitness,
        num_generations=generations,
        chunk_size=generations,
    )


@functools.cache
def _qdax_map_elites() -> Any:
    from qdax.core.containers.mapelites_repertoire import compute_euclidean_centroids
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.core.map_elites import MAPElites
    from qdax.utils.metrics import default_qd_metrics

    def scoring(genotypes: Any, key: Any) -> Any:
        del key
        fitness, descriptors = jax.vmap(arm)(genotypes)
        return fitness, descriptors, {}

    variation: Any = functools.partial(
        isoline_variation,
        iso_sigma=ISO_SIGMA,
        line_sigma=LINE_SIGMA,
        minval=0.0,
        maxval=1.0,
    )
    emitter = MixingEmitter(
        mutation_fn=lambda x, key: (x, key),
        variation_fn=variation,
        variation_percentage=1.0,
        batch_size=BATCH,
    )
    me = MAPElites(
        scoring_function=scoring,
        emitter=emitter,
        metrics_function=functools.partial(default_qd_metrics, qd_offset=QD_OFFSET),
    )
    centroids = compute_euclidean_centroids(GRID, 0.0, 1.0)
    return me, centroids


def qdax_run(seed: int, iterations: int) -> Any:
    """QDax's MAP-Elites: an initial batch uniform in [0, 1]^DOF, then
    `iterations` updates under `lax.scan` (its `scan_update`)."""
    me, centroids = _qdax_map_elites()
    return _qdax_program(me, centroids, jr.key(seed), iterations)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _qdax_program(me: Any, centroids: Any, key: Any, iterations: int) -> Any:
    key, init_key, state_key = jr.split(key, 3)
    genotypes = jr.uniform(init_key, (BATCH, DOF))
    repertoire, emitter_state, _ = me.init(genotypes, centroids, state_key)
    (repertoire, _, _), metrics = jax.lax.scan(
        me.scan_update, (repertoire, emitter_state, key), length=iterations
    )
    return metrics


def _row(
    side: str, scores: list[float], coverage: list[float], timing: dict
) -> dict[str, Any]:
    qd, qd_low, qd_high = iqm_interval(np.asarray(scores))
    cov, cov_low, cov_high = iqm_interval(np.asarray(coverage))
    return {
        "side": side,
        "runs": len(scores),
        "qd_score_iqm": qd,
        "qd_score_low": qd_low,
        "qd_score_high": qd_high,
        "coverage_iqm": cov,
        "coverage_low": cov_low,
        "coverage_high": cov_high,
        "generation_s": timing["generation_s"],
        "evaluations_per_s": BATCH / timing["generation_s"],
    }


def qd_arm(*, quick: bool, repeats: int) -> list[dict[str, Any]]:
    """One row per side: final QD score and coverage (IQM and 95% BCa interval
    over `SEEDS` runs) and the steady time per generation, with eqxevo's
    generations per second over QDax's (`over_qdax`)."""
    seeds = range(SEEDS)
    iterations = 20 if quick else ITERATIONS
    strategies = {name: eqxevo_strategy(name) for name in ("MAP-Elites", "CMA-ME")}
    rows = []
    scores: dict[str, tuple[list[float], list[float]]] = {}
    for name, strategy in strategies.items():
        finals = [eqxevo_run(strategy, s, iterations + 1).history for s in seeds]
        scores[f"eqxevo {name}"] = (
            [float(h["qd_score"][-1]) for h in finals],
            [100 * float(h["coverage"][-1]) for h in finals],
        )
    finals = [qdax_run(s, iterations) for s in seeds]
    scores["QDax MAP-Elites"] = (
        [float(m["qd_score"][-1]) for m in finals],
        [float(m["coverage"][-1]) for m in finals],  # QDax's is in percent
    )
    timing = steady_times(
        {
            "eqxevo MAP-Elites": lambda n: (
                eqxevo_run(strategies["MAP-Elites"], 0, n).best_fitness
            ),
            "eqxevo CMA-ME": lambda n: (
                eqxevo_run(strategies["CMA-ME"], 0, n).best_fitness
            ),
            "QDax MAP-Elites": lambda n: qdax_run(0, n)["qd_score"],
        },
        10 if quick else 50,
        repeats,
    )
    qdax_s = timing["QDax MAP-Elites"]["generation_s"]
    for side, (qd, coverage) in scores.items():
        row = _row(side, qd, coverage, timing[side])
        row["over_qdax"] = qdax_s / row["generation_s"]
        rows.append(row)
    return rows


__all__ = ["QD_COLUMNS", "eqxevo_run", "eqxevo_strategy", "qd_arm", "qdax_run"]
