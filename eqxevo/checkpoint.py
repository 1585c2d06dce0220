"""Save and restore a run's strategy state with orbax-checkpoint: atomic, bounded.

A checkpoint is a folder `checkpoints/<generation>/` holding the strategy state
(arrays only, orbax's standard format: array files plus JSON metadata, so
loading never unpickles or executes anything) and the experiment that wrote it
(JSON). orbax writes into a temporary folder and renames it when complete, so a
crash during a save never spoils the latest good checkpoint; only the last
`keep` checkpoints are kept.

The generation index lives in the state itself, and `evolve` derives every key
from (seed, generation), so restoring a checkpoint and running on reproduces the
uninterrupted run bit-for-bit.
"""

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp


@contextlib.contextmanager
def _quiet_orbax() -> Iterator[None]:
    """orbax logs every save at INFO through absl: quiet it while we call it,
    and give the user's logging configuration back afterwards."""
    logger = logging.getLogger("absl")
    previous = logger.level
    logger.setLevel(max(previous, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(previous)


class CheckpointError(RuntimeError):
    """A checkpoint is missing, or incompatible with the experiment resuming it."""


def _differences(saved: Any, current: Any, prefix: str = "") -> list[str]:
    if isinstance(saved, Mapping) and isinstance(current, Mapping):
        out = []
        for key in sorted(set(saved) | set(current)):
            out += _differences(saved.get(key), current.get(key), f"{prefix}{key}.")
        return out
    if saved != current:
        return [
            f"{prefix.rstrip('.')}: checkpoint has {saved!r}, config has {current!r}"
        ]
    return []


class Checkpointer:
    """Checkpoints of one run directory.

    Arguments:
        directory: the run's `checkpoints/` folder (created if missing).
        keep: how many of the most recent checkpoints to keep.
    """

    def __init__(self, directory: str | Path, keep: int = 3):
        self.directory = Path(directory).resolve()
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
        )

    def save(self, generation: int, state: Any, experiment: Mapping[str, Any]) -> None:
        """Write the state reached after `generation` generations (waits until done)."""
        with _quiet_orbax():
            self._manager.save(
                generation,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state),
                    experiment=ocp.args.JsonSave(dict(experiment)),
                ),
                force=True,
            )
            # Waiting keeps "latest checkpoint on disk" and "state we continue from"
            # in step; a save is small next to a chunk of generations.
            self._manager.wait_until_finished()

    def latest(self) -> int | None:
        """Generation of the newest complete checkpoint, or None."""
        self._manager.reload()
        return self._manager.latest_step()

    def experiment(self, generation: int) -> dict[str, Any]:
        """The experiment (nested dicts) that wrote a checkpoint."""
        out = self._manager.restore(
            generation, args=ocp.args.Composite(experiment=ocp.args.JsonRestore())
        )
        return dict(out["experiment"])

    def restore(
        self,
        like: Any,
        experiment: Mapping[str, Any],
        *,
        ignore: tuple[str, ...] = (),
        generation: int | None = None,
    ) -> tuple[int, Any]:
        """Restore the newest (or a given) checkpoint.

        Arguments:
            like: a state of the expected structure (e.g. `strategy.init(key)`, or
                its `jax.eval_shape`), to check shapes and dtypes against.
            experiment: the experiment resuming; it must match the one that wrote
                the checkpoint, except for the dotted keys in `ignore`.
            ignore: keys allowed to differ (e.g. "run.generations").
            generation: a specific checkpoint instead of the newest.

        Returns:
            `(generation, state)`.

        Raises:
            CheckpointError: no checkpoint, a config that differs, or a state of
                another structure.
        """
        if generation is None:
            generation = self.latest()
        if generation is None:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        saved = self.experiment(generation)
        diffs = [
            d
            for d in _differences(saved, dict(experiment))
            if not any(d.startswith(f"{key}:") for key in ignore)
        ]
        if diffs:
            raise CheckpointError(
                f"checkpoint {self.directory / str(generation)} was written by another "
                "experiment; resume with the run's own config or start a new run. "
                "Differences:\n  " + "\n  ".join(diffs)
            )
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        try:
            out = self._manager.restore(
                generation,
                args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)),
            )
        except (ValueError, KeyError) as err:
            raise CheckpointError(
                f"checkpoint {self.directory / str(generation)} holds a state of a "
                f"different structure than this experiment builds: {err}"
            ) from err
        return generation, out["state"]

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()
