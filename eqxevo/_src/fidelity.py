"""Multi-fidelity evaluation (`MultiFidelity`): a cheap proxy for every genome, in
full for the best k; `promote` and `combine_fidelities` are its two steps.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu

from ._checks import positive_int
from ._types import Array, Bool, Fitness, Float, Int, PRNGKey, PyTree
from .evaluate import AbstractPopulationFitness, EvalSettings, evaluate_genomes
from .sharding import check_divisible, mesh_size


class MultiFidelity(AbstractPopulationFitness):
    """Two-rung evaluation: a cheap proxy for every genome, the full one for the best k.

    Pass it wherever a fitness function goes (`evaluate`, `evolve`). Rung 1 runs
    `proxy_fn` on all P genomes; the `num_promoted` best by proxy (ties: lower
    genome index first; non-finite proxies last) run `full_fn`. Both rungs give
    genome i the key single-fidelity evaluation would (the same episodes for
    every genome by default, see `evaluate`'s `episodes`), so the proxy sees the
    start of the same episode and a promoted genome's full fitness is exactly
    what single-fidelity `evaluate(key, full_fn, ...)` gives it. The combined
    fitness ranks every promoted genome above every other one and keeps the
    order inside each group (`combine_fidelities`). Promotion runs on device.

    Arguments:
        proxy_fn: `proxy_fn(genome, key) -> scalar | (scalar, aux)`, e.g. a
            shorter lifetime or fewer rollouts. Same sign as `full_fn`; on a
            comparable scale (a mean per step, say) so the proxy's values mean
            something to the strategy.
        full_fn: the full evaluation, same signature.
        num_promoted: k, how many genomes get the full evaluation (a Python int,
            1 <= k <= P; a multiple of the device count when sharded).
        proxy_steps: agent-steps one proxy evaluation costs (e.g. its lifetime
            T/10); used for the agent-steps metrics only.
        full_steps: agent-steps one full evaluation costs (e.g. T).

    Example:
        >>> mf = eqxevo.MultiFidelity(lambda g, k: lifetime(g, k, 100),
        ...                           lambda g, k: lifetime(g, k, 1000),
        ...                           num_promoted=64, proxy_steps=100, full_steps=1000)
        >>> result = eqxevo.evolve(key, strategy, mf, num_generations=100)
        >>> result.history["agent_steps"]  # per generation (vs "agent_steps_full")
    """

    proxy_fn: Callable[..., Any]
    full_fn: Callable[..., Any]
    num_promoted: int = eqx.field(static=True)
    proxy_steps: int = eqx.field(static=True)
    full_steps: int = eqx.field(static=True)

    def __check_init__(self) -> None:
        for name in ("proxy_fn", "full_fn"):
            if not callable(getattr(self, name)):
                raise TypeError(
                    f"{name} must be callable as fn(genome, key); "
                    f"got {type(getattr(self, name)).__name__}"
                )
        for name in ("num_promoted", "proxy_steps", "full_steps"):
            positive_int(name, getattr(self, name))

    def agent_steps(self, population_size: int) -> int | None:
        """Agent-steps one generation spends: `P * proxy_steps + k * full_steps`."""
        return population_size * self.proxy_steps + self.num_promoted * self.full_steps

    def full_agent_steps(self, population_size: int) -> int:
        """Agent-steps a single-fidelity full evaluation spends: `P * full_steps`."""
        return population_size * self.full_steps

    def history_fields(self, population_size: int) -> dict[str, int]:
        """`agent_steps` (spent per generation) and `agent_steps_full` (what a
        full evaluation of every genome would spend), for `evolve`'s history."""
        return {
            "agent_steps": int(self.agent_steps(population_size) or 0),
            "agent_steps_full": self.full_agent_steps(population_size),
        }

    def check(self, population_size: int, settings: EvalSettings) -> None:
        """Raise a clear error if k does not fit a population of this size/mesh."""
        if self.num_promoted > population_size:
            raise ValueError(
                f"num_promoted={self.num_promoted} must be at most the population "
                f"size {population_size}"
            )
        check_divisible("num_promoted", self.num_promoted, mesh_size(settings.mesh))

    def evaluate_population(
        self,
        key: PRNGKey,
        evolvable: Any,
        static: Any,
        ids: Int[Array, " pop"] | None,
        settings: EvalSettings,
        *,
        maximize: bool,
    ) -> tuple[Fitness, PyTree]:
        """Both rungs; fitness is the combined fitness and aux is a dict:
        `proxy` (every genome's proxy fitness), `promoted` (bool mask of the k
        genomes evaluated fully), `proxy_aux` and `full_aux` (the rungs' aux;
        `full_aux` is zero for genomes not promoted)."""
        size = jtu.tree_leaves(evolvable)[0].shape[0]
        proxy, proxy_aux = evaluate_genomes(
            key, self.proxy_fn, evolvable, static, ids, settings
        )
        promoted = promote(proxy, self.num_promoted, maximize)
        # The proxy fitness is whole on every device, so is `promoted`: the gather
        # is local, and the k promoted genomes are split over the mesh again.
        chosen = jtu.tree_map(lambda x: x[promoted], evolvable)
        full, full_aux = evaluate_genomes(
            key,
            self.full_fn,
            chosen,
            static,
            None if ids is None else ids[promoted],
            settings,
        )
        dtype = jnp.promote_types(proxy.dtype, full.dtype)
        fitness, mask = combine_fidelities(
            proxy.astype(dtype), full.astype(dtype), promoted, maximize
        )
        full_aux = jtu.tree_map(
            lambda a: jnp.zeros((size, *a.shape[1:]), a.dtype).at[promoted].set(a),
            full_aux,
        )
        aux = {
            "proxy": proxy,
            "promoted": mask,
            "proxy_aux": proxy_aux,
            "full_aux": full_aux,
        }
        return fitness, aux


def promote(
    proxy: Float[Array, " pop"], num_promoted: int, maximize: bool
) -> Int[Array, " k"]:
    """Indices of the `num_promoted` best genomes by proxy fitness, best first.

    Non-finite proxies (NaN, +-inf) count as worst; ties go to the lower genome
    index (`lax.top_k` is stable), so promotion is deterministic.
    """
    score = proxy if maximize else -proxy
    score = jnp.where(jnp.isfinite(score), score, -jnp.inf)
    # top_k orders -0.0 below +0.0; they are equal fitness, so make them one tie.
    score = jnp.where(score == 0, jnp.zeros_like(score), score)
    return jax.lax.top_k(score, num_promoted)[1]


def combine_fidelities(
    proxy: Float[Array, " pop"],
    full: Float[Array, " k"],
    promoted: Int[Array, " k"],
    maximize: bool,
) -> tuple[Float[Array, " pop"], Bool[Array, " pop"]]:
    """One fitness per genome from two rungs, promoted genomes ranked first.

    Promoted genome `promoted[j]` gets its full fitness `full[j]` unchanged. The
    others keep their proxy fitness, shifted, if needed, by one common offset so
    that the best of them lands just below the worst finite full fitness (the
    next float towards worse). So every promoted genome ranks strictly above
    every other one, and the order inside each group is kept (up to float
    rounding merging two proxy values, which only happens when the offset dwarfs
    their difference, or when they span more than the float range). When the
    proxies already rank below the full values nothing is shifted: with
    `proxy == full` the result equals single-fidelity fitness. Non-finite values
    stay as they are, for the non-finite policy downstream (a failed genome ranks
    worst whichever rung it failed in).

    Ties in the proxy are broken by genome index (`promote`); a tie across the
    promotion boundary leaves the lower index promoted and the other just below.

    Arguments:
        proxy: every genome's proxy fitness, in the user's sign.
        full: the promoted genomes' full fitness (same dtype).
        promoted: their genome indices (distinct).
        maximize: whether higher fitness is better.

    Returns:
        `(fitness, promoted_mask)`.
    """
    # Work in "higher is better"; negation is exact, so the sign round-trips.
    up = (lambda x: x) if maximize else jnp.negative
    s_proxy, s_full = up(proxy), up(full)
    mask = jnp.zeros(proxy.shape, jnp.bool_).at[promoted].set(True)
    full_finite = jnp.isfinite(s_full)
    floor = jnp.min(jnp.where(full_finite, s_full, jnp.inf))
    rest = ~mask & jnp.isfinite(s_proxy)
    top = jnp.max(jnp.where(rest, s_proxy, -jnp.inf))
    needs_shift = jnp.any(full_finite) & jnp.any(rest) & (top >= floor)
    info = jnp.finfo(proxy.dtype)
    # The next float below `floor`; near zero that is subnormal, which XLA:CPU
    # flushes to zero (== floor), so step at least the smallest normal number.
    ceiling = jnp.minimum(
        jnp.nextafter(floor, jnp.asarray(-jnp.inf, proxy.dtype)),
        floor - jnp.asarray(info.smallest_normal, proxy.dtype),
    )
    # ceiling - (top - s): (top - s) >= 0 rounds to >= 0, so every shifted value
    # is <= ceiling < floor whatever the rounding; equal gaps stay equal.
    lowest = jnp.asarray(info.min, proxy.dtype)  # never shift a finite value to -inf
    shifted = jnp.maximum(ceiling - (top - s_proxy), lowest)
    s_rest = jnp.where(needs_shift & jnp.isfinite(s_proxy), shifted, s_proxy)
    combined = s_rest.at[promoted].set(s_full)
    return up(combined), mask


__all__ = ["MultiFidelity", "combine_fidelities", "promote"]
