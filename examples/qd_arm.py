"""MAP-Elites or CMA-ME on QDax's planar arm: QD metrics and a drawn archive.

    python examples/qd_arm.py                          # docs/qd.md's heatmap
    python examples/qd_arm.py --algorithm CMA-ME --seeds 4

The planar arm (20 joints, each angle in [0, 1]) with QDax's budget: a 32 x 32
grid over the end effector's position, QD offset 1, batch 256, a first
generation and 200 more. `--seeds` runs share one program
(`evolve(num_seeds=K)`); the first seed's archive is drawn to `--out`.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxevo
from eqxevo.qd import Archive, ESEmitter, IsoLineEmitter, MapElites, archive_figure


def arm(angles, key):
    """Fitness: minus the angles' spread; descriptor: the end effector's (x, y)."""
    del key
    x = jnp.clip(angles, 0, 1)
    cumulative = jnp.cumsum(2 * jnp.pi * x - jnp.pi)
    position = jnp.stack([jnp.sum(jnp.cos(cumulative)), jnp.sum(jnp.sin(cumulative))])
    return -jnp.std(x), position / (2 * x.size) + 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--algorithm", choices=["MAP-Elites", "CMA-ME"], default="MAP-Elites"
    )
    parser.add_argument("--generations", type=int, default=201)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--out", default="qd_arm.png")
    args = parser.parse_args()

    archive = Archive.grid((32, 32), 0.0, 1.0, qd_offset=1.0)
    if args.algorithm == "MAP-Elites":
        emitters = IsoLineEmitter(256, iso_sigma=0.005, line_sigma=0.05)
    else:
        emitters = [ESEmitter("CMA_ES", 64, params={"std_init": 0.05})] * 4
    strategy = MapElites(jnp.full(20, 0.5), archive, emitters, init_scale=0.3)
    start = time.perf_counter()
    result = eqxevo.evolve(
        jr.key(0),
        strategy,
        arm,
        num_generations=args.generations,
        num_seeds=args.seeds,
    )
    seconds = time.perf_counter() - start
    qd = np.atleast_1d(result.history["qd_score"][..., -1]).astype(float)
    coverage = np.atleast_1d(result.history["coverage"][..., -1]).astype(float)
    print(
        f"{args.algorithm}: QD score {np.round(qd, 1).tolist()}, coverage "
        f"{np.round(100 * coverage, 1).tolist()}% ({seconds:.1f} s)"
    )
    first = (
        result.state if args.seeds == 1 else jax.tree.map(lambda x: x[0], result.state)
    )
    figure = archive_figure(
        archive,
        first.inner.archive,
        labels=("end effector x", "end effector y"),
        title=f"{args.algorithm} on the planar arm (20 joints), seed 0",
    )
    figure.savefig(args.out, dpi=120)
    print(f"archive drawn to {args.out}")


if __name__ == "__main__":
    main()
