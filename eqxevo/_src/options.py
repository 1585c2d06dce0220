"""EvolveOptions: how `evolve` runs the generations (chunks, devices, blocks,
episodes), one frozen object that `eqxevo run`, studies and the benchmark build
once and pass on, and that a study compares to group runs into one program.
"""

import dataclasses
from typing import Any, Literal

import numpy as np
from jax.sharding import Mesh

from ._checks import did_you_mean, one_of, positive_int, positive_number
from .evaluate import EvalSettings

NonFinitePolicy = Literal["rank_worst", "raise"]


@dataclasses.dataclass(frozen=True, eq=False)
class EvolveOptions:
    """How `evolve` runs its generations. None of them changes a result, except
    `on_nonfinite` (whether a bad generation raises) and `episodes` (which
    episodes a genome plays).

    Attributes:
        chunk_size: generations per compiled chunk; the host sees results once per
            chunk. Results do not depend on it, and neither does the compiled
            program's count (a short last chunk reuses it).
        on_nonfinite: "rank_worst" ranks genomes with NaN/inf fitness worst and
            counts them in `history["num_nonfinite"]`; "raise" stops at the first
            such generation with `NonFiniteFitnessError` naming it.
        mesh: split each generation's evaluation over the devices of this mesh
            (`eqxevo.population_mesh()`, or `eqxevo.initialize_distributed(...)`
            for several processes); `ask`/`tell` and the state stay replicated.
            `population_size` (and a `MultiFidelity`'s `num_promoted`) must be a
            multiple of the number of devices.
        batch_size: evaluate this many genomes at a time (per device) to bound
            the lifetimes' memory; see `evaluate`. None: the whole population.
        episodes: `"shared"` (default: every genome of a generation plays the
            same episodes), `"per_genome"` (genome i its own, mirrored pairs
            sharing; `strategy.episode_ids`) or an integer array of P episode
            ids; see `evaluate`.
        chunk_seconds: aim for chunks of about this many seconds: the first two
            chunks run one generation each, later ones as many generations (at
            most `chunk_size`) as the measured time per generation fits in
            `chunk_seconds`. The chunk length is a traced value: nothing
            recompiles, and results do not depend on it. None: `chunk_size`.
        align: chunks also end at every multiple of `align` generations
            (counted from generation 0, so a resumed run ends chunks at the same
            generations), so the callback sees the state there (`eqxevo run`'s
            held-out evaluations every `run.eval_every`). Traced, like
            `chunk_seconds`: nothing recompiles, results do not depend on it.

    Two options objects are equal when every field is (an `episodes` array by
    its values), which is how a study tells whether runs can share a program.
    `evolve(..., chunk_size=5)` is short for
    `evolve(..., options=EvolveOptions(chunk_size=5))`.
    """

    chunk_size: int = 10
    on_nonfinite: NonFinitePolicy = "rank_worst"
    mesh: Mesh | None = None
    batch_size: int | None = None
    episodes: Any = "shared"
    chunk_seconds: float | None = None
    align: int | None = None

    def __post_init__(self) -> None:
        positive_int("chunk_size", self.chunk_size)
        one_of("on_nonfinite", self.on_nonfinite, ("rank_worst", "raise"))
        if self.align is not None:
            positive_int("align", self.align)
        if self.chunk_seconds is not None:
            positive_number("chunk_seconds", self.chunk_seconds)
        self.evaluation()  # mesh, batch_size and episodes, checked by their owner

    def evaluation(self, strategy: Any = None) -> EvalSettings:
        """How each generation's population is evaluated; with `strategy`,
        `episodes="per_genome"` becomes its `episode_ids` (mirrored pairs share
        their episodes)."""
        episodes = self.episodes
        if strategy is not None and isinstance(episodes, str):
            episodes = strategy.episode_ids if episodes == "per_genome" else episodes
        return EvalSettings(
            mesh=self.mesh, batch_size=self.batch_size, episodes=episodes
        )

    @classmethod
    def of(
        cls, options: "EvolveOptions | None", changes: dict[str, Any]
    ) -> "EvolveOptions":
        """`options` (default: `EvolveOptions()`) with `changes` (keyword
        arguments named as the fields) applied.

        Raises:
            TypeError: `options` is not an EvolveOptions, or a change names no
                field.
        """
        if options is None:
            options = cls()
        if not isinstance(options, cls):
            raise TypeError(
                f"options must be an eqxevo.EvolveOptions; got {type(options).__name__}"
            )
        fields = [f.name for f in dataclasses.fields(cls)]
        for name in changes:
            if name not in fields:
                raise TypeError(
                    f"unexpected keyword argument {name!r}"
                    + did_you_mean(name, fields, quote=True)
                    + f"; the options are {', '.join(fields)}"
                )
        return dataclasses.replace(options, **changes) if changes else options

    def _identity(self) -> tuple[Any, ...]:
        episodes = self.episodes
        if not isinstance(episodes, str):
            ids = np.asarray(episodes)
            episodes = (str(ids.dtype), ids.shape, ids.tobytes())
        return tuple(
            episodes if f.name == "episodes" else getattr(self, f.name)
            for f in dataclasses.fields(self)
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EvolveOptions):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())


__all__ = ["EvolveOptions", "NonFinitePolicy"]
