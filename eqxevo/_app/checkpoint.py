"""Save, verify and restore a run's strategy state with orbax-checkpoint.

See docs/internals.md ("Checkpoints") for the format and the fallback on damage.
"""

import contextlib
import dataclasses
import gc
import hashlib
import io
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import orbax.checkpoint as ocp

from ._disk import disk_full


@contextlib.contextmanager
def _quiet_orbax() -> Iterator[None]:
    """Silence orbax's absl logging while we call it, and give the user's logging
    configuration back afterwards: it logs every save at INFO, and logs each
    failure it meets (a damaged checkpoint's "Failed to json parse", a full disk
    in a save thread) at ERROR before it comes back to us as an exception or a
    skipped step, which we report in one line."""
    loggers = [logging.getLogger(name) for name in ("absl", "asyncio")]
    previous = [logger.level for logger in loggers]
    for logger, level in zip(loggers, previous, strict=True):
        logger.setLevel(max(level, logging.CRITICAL))
    try:
        yield
    finally:
        for logger, level in zip(loggers, previous, strict=True):
            logger.setLevel(level)


def _await_orbax_threads(before: set[threading.Thread]) -> None:
    """Wait (at most 30 s) until orbax's threads started since `before` have
    ended, and none started for half a second (threads start threads, late)."""
    deadline, quiet_since = time.monotonic() + 30, time.monotonic()
    while time.monotonic() < deadline:
        running = [
            t
            for t in threading.enumerate()
            if t not in before and type(t).__module__.startswith("orbax")
        ]
        for thread in running:
            # orbax's threads raise their error again from `join`
            with contextlib.suppress(Exception):
                thread.join(timeout=max(deadline - time.monotonic(), 0))
        if running:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 0.5:
            break
        time.sleep(0.05)


def saved_generations(directory: str | Path) -> list[int]:
    """Generations of the complete checkpoints in `directory`, oldest first (not
    verified); reads the folder only (nothing created, no lock needed)."""
    if not Path(directory).is_dir():
        return []
    return sorted(ocp.utils.checkpoint_steps(directory))


class CheckpointError(RuntimeError):
    """A checkpoint is missing, damaged, or incompatible with the experiment."""


class _Damaged(Exception):
    """One checkpoint failed verification (internal; the reason is its message)."""


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


def _typed_key(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array) and jnp.issubdtype(
        leaf.dtype, jax.dtypes.prng_key
    )


def _host_leaf(leaf: Any) -> np.ndarray:
    # Typed keys have no bytes of their own: hash their key data.
    if _typed_key(leaf):
        leaf = jr.key_data(leaf)
    return np.ascontiguousarray(np.asarray(leaf))


def _abstract(like: Any) -> Any:
    """What orbax restores a `like` leaf as (typed keys stay typed keys)."""
    if _typed_key(like):
        placed = like.sharding if like.committed else None
        return jax.ShapeDtypeStruct(like.shape, like.dtype, sharding=placed)
    return ocp.utils.to_shape_dtype_struct(like)


def _placed_like(leaf: Any, like: Any) -> Any:
    """A restored leaf placed as `like`'s leaf is: orbax commits every array it
    reads to a device, and a committed argument is another jit cache key than
    the uncommitted arrays of a fresh `initial_state`, so a resumed run would
    compile its programs again. A `like` leaf without a sharding (an
    `eval_shape` struct, a fresh array) gets an uncommitted array back."""
    if isinstance(like, jax.Array) and like.committed:
        return leaf
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        return leaf  # spread over processes: placed where orbax put it
    if not isinstance(like, jax.Array) and getattr(like, "sharding", None):
        return leaf
    if _typed_key(leaf):
        data = jnp.asarray(np.asarray(jr.key_data(leaf)))
        return jr.wrap_key_data(data, impl=jr.key_impl(leaf))
    return jnp.asarray(np.asarray(leaf))


def _leaf_table(tree: Any) -> list[list[Any]]:
    """`[path, shape, dtype]` of every leaf (PRNG keys by their key type)."""
    rows = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        rows.append([jax.tree_util.keystr(path), list(leaf.shape), str(leaf.dtype)])
    return rows


def integrity(state: Any) -> dict[str, Any]:
    """What a checkpoint's integrity record holds for `state`: its leaves' paths,
    shapes and dtypes, and a SHA-256 of their bytes in that order."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(state):
        data = _host_leaf(leaf)
        digest.update(f"{data.dtype.str}{data.shape}".encode())
        digest.update(data.tobytes())
    return {"leaves": _leaf_table(state), "sha256": digest.hexdigest()}


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 160 else text[:157] + "..."


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A checkpoint `restore` passed over: its generation and why."""

    generation: int
    reason: str


class Checkpointer:
    """Checkpoints of one run directory.

    Arguments:
        directory: the run's `checkpoints/` folder (created if missing).
        keep: how many of the most recent checkpoints to keep.

    Attributes:
        skipped: the damaged checkpoints the last `restore` passed over.
    """

    def __init__(self, directory: str | Path, keep: int = 3):
        self.directory = Path(directory).resolve()
        self.keep = keep
        self.skipped: list[Skipped] = []
        self._opened: ocp.CheckpointManager | None = self._open()

    @property
    def _manager(self) -> ocp.CheckpointManager:
        """orbax's manager, opened again after `close` when used again."""
        if self._opened is None:
            self._opened = self._open()
        return self._opened

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> ocp.CheckpointManager:
        with _quiet_orbax():
            return ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=self.keep, create=True
                ),
            )

    def save(self, generation: int, state: Any, experiment: Mapping[str, Any]) -> str:
        """Write the state reached after `generation` generations (waits until done);
        returns the SHA-256 of its arrays (summary.json records it).

        Raises:
            OSError: ENOSPC or EDQUOT (naming the checkpoint's folder) when the
                disk or quota is full; the partial checkpoint is removed and the
                older ones are kept.
        """
        record = integrity(state)
        existed = (self.directory / str(generation)).exists()
        threads = set(threading.enumerate())
        # tensorstore prints to sys.stderr when a failing save's threads call
        # into event loops already closed ("Event loop is closed"): held back,
        # and shown only if the save succeeds after all.
        held = io.StringIO()
        full = None
        try:
            with _quiet_orbax(), contextlib.redirect_stderr(held):
                try:
                    self._manager.save(
                        generation,
                        args=ocp.args.Composite(
                            state=ocp.args.StandardSave(state),
                            experiment=ocp.args.JsonSave(dict(experiment)),
                            integrity=ocp.args.JsonSave(record),
                        ),
                        force=True,
                    )
                    # Waiting keeps "latest checkpoint on disk" and "state we
                    # continue from" in step; a save is small next to a chunk.
                    self._manager.wait_until_finished()
                except Exception:
                    self._discard(generation, existed, threads)
                    raise
        except Exception as err:
            # only its errno is kept: the error's frames must go (below)
            full = getattr(disk_full(err), "errno", None)
            if full is None:
                raise
        if full is not None:
            # Raised outside the `except`: the error orbax raised (its frames hold
            # the failed save's asyncio tasks) is gone, collected here quietly
            # rather than reported at exit ("Task exception was never retrieved").
            with _quiet_orbax():
                gc.collect()
            path = str(self.directory / str(generation))
            raise OSError(full, os.strerror(full), path)
        sys.stderr.write(held.getvalue())
        return record["sha256"]

    def _discard(
        self, generation: int, keep_step: bool, threads: set[threading.Thread]
    ) -> None:
        """Remove what a failed save of `generation` left (its temporary folders,
        and its step folder unless one was there before) once orbax's threads for
        it have ended, and close orbax's manager so it forgets the failed save."""
        with contextlib.suppress(Exception):
            self.close()  # it may raise the failed save's error again
        # The save's other threads still write (and log their errors): wait, so
        # that none prints after us or writes into what we remove.
        _await_orbax_threads(threads)
        for debris in self.directory.glob(f"{generation}.orbax-checkpoint-tmp*"):
            shutil.rmtree(debris, ignore_errors=True)
        if not keep_step:
            shutil.rmtree(self.directory / str(generation), ignore_errors=True)

    def generations(self) -> list[int]:
        """Generations of the complete checkpoints on disk, oldest first (not yet
        verified)."""
        with _quiet_orbax():
            self._manager.reload()
            return sorted(self._manager.all_steps())

    def latest(self) -> int | None:
        """Generation of the newest complete checkpoint (not yet verified), or None."""
        steps = self.generations()
        return steps[-1] if steps else None

    def experiment(self, generation: int) -> dict[str, Any]:
        """The experiment (nested dicts) that wrote a checkpoint."""
        with _quiet_orbax():
            out = self._manager.restore(
                generation,
                args=ocp.args.Composite(experiment=ocp.args.JsonRestore()),
            )
        return dict(out["experiment"])

    def _load(self, generation: int, like: Any) -> Any:
        """Read and verify one checkpoint's state; `_Damaged` says why not."""
        path = self.directory / str(generation)
        abstract = jax.tree.map(_abstract, like)
        expected = _leaf_table(abstract)
        try:
            with _quiet_orbax():
                record = self._manager.restore(
                    generation,
                    args=ocp.args.Composite(integrity=ocp.args.JsonRestore()),
                )["integrity"]
        except Exception as err:  # orbax and tensorstore raise many kinds
            raise _Damaged(
                f"its integrity record is unreadable ({_one_line(err)})"
            ) from err
        if not isinstance(record, Mapping) or "sha256" not in record:
            raise _Damaged("its integrity record is malformed")
        # The record is compared before any array is read, so a state of other
        # shapes is refused naming its first differing leaf.
        if record.get("leaves") != expected:
            saved = {tuple(r[:1]): r for r in record.get("leaves", [])}
            for row in expected:
                other = saved.get(tuple(row[:1]))
                if other != row:
                    raise _Damaged(
                        f"state{row[0]} was saved as {other[2]}{other[1]}, this "
                        f"experiment has {row[2]}{row[1]}"
                        if other
                        else f"state{row[0]} is missing from it"
                    )
            raise _Damaged("its state has another structure than this experiment's")
        try:
            with _quiet_orbax():
                state = self._manager.restore(
                    generation,
                    args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)),
                )["state"]
        except Exception as err:  # a truncated or missing array file, mostly
            raise _Damaged(f"its state cannot be read ({_one_line(err)})") from err
        if jax.tree.structure(state) != jax.tree.structure(abstract):
            raise _Damaged(f"{path} holds a state of another structure")
        if _leaf_table(state) != expected:
            raise _Damaged("its state has other shapes or dtypes than it says")
        if integrity(state)["sha256"] != record["sha256"]:
            raise _Damaged("its checksum does not match the arrays read back")
        state = jax.tree.map(_placed_like, state, like)
        # A folder renamed or copied by hand would resume from the wrong place.
        reached = getattr(state, "generation", None)
        if reached is not None and int(np.max(np.asarray(reached))) != generation:
            raise _Damaged(
                f"its state is at generation {int(np.max(np.asarray(reached)))}, "
                f"not {generation}"
            )
        return state

    def _set_aside(self, generation: int) -> None:
        """Move a damaged checkpoint out of orbax's way (its generation is written
        again when the resumed run reaches it)."""
        source = self.directory / str(generation)
        if not source.exists():
            return
        target_dir = self.directory.parent / "damaged-checkpoints"
        target_dir.mkdir(exist_ok=True)
        target = target_dir / str(generation)
        n = 1
        while target.exists():
            n += 1
            target = target_dir / f"{generation}.{n}"
        shutil.move(str(source), str(target))

    def restore(
        self,
        like: Any,
        experiment: Mapping[str, Any],
        *,
        ignore: tuple[str, ...] = (),
        generation: int | None = None,
    ) -> tuple[int, Any]:
        """Restore the newest good checkpoint (or a given one), verified.

        Arguments:
            like: a state of the expected structure (e.g. `strategy.init(key)`, or
                its `jax.eval_shape`), to check shapes and dtypes against. The
                restored arrays are placed as its leaves are: committed to their
                devices where `like`'s are, else uncommitted like a fresh state
                (so a resumed run reuses the programs a fresh one compiled).
            experiment: the experiment resuming; it must match the one that wrote
                the checkpoint, except for the dotted keys (or key prefixes
                ending in ".") in `ignore`.
            ignore: keys allowed to differ (e.g. "run.generations", "sinks.").
            generation: restore exactly this checkpoint (no fallback).

        Returns:
            `(generation, state)`. Newer checkpoints that failed verification are
            listed in `self.skipped` and moved to `damaged-checkpoints/`.

        Raises:
            CheckpointError: no checkpoint, none that passes verification, or a
                checkpoint written by another experiment.
        """
        self.skipped = []
        threads = set(threading.enumerate())
        try:
            return self._restore(like, experiment, ignore, generation)
        finally:
            if self.skipped or sys.exc_info()[0] is not None:
                self._forget_failures(threads)

    def _forget_failures(self, threads: set[threading.Thread]) -> None:
        """After a restore that met damage: close orbax's manager (opened afresh
        when next used, forgetting the steps moved aside), and collect now the
        failed reads' tensorstore handles, which the errors' reference cycles
        keep. Collected at interpreter exit instead, their callbacks run in
        threads Python is tearing down: "Exception ignored" tracebacks, or an
        abort ("terminate called ... FATAL: exception not rethrown")."""
        with _quiet_orbax(), contextlib.redirect_stderr(io.StringIO()):
            with contextlib.suppress(Exception):  # no pending save to report
                self.close()
            _await_orbax_threads(threads)
            gc.collect()

    def _restore(
        self,
        like: Any,
        experiment: Mapping[str, Any],
        ignore: tuple[str, ...],
        generation: int | None,
    ) -> tuple[int, Any]:
        candidates = self.generations()
        if generation is not None:
            candidates = [generation] if generation in candidates else []
        if not candidates:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        for step in reversed(candidates):
            try:
                saved = self.experiment(step)
            except Exception as err:
                self.skipped.append(
                    Skipped(
                        step, f"its experiment record is unreadable ({_one_line(err)})"
                    )
                )
                continue
            diffs = [
                d
                for d in _differences(saved, dict(experiment))
                if not any(
                    d.startswith(f"{key}:") or (key.endswith(".") and d.startswith(key))
                    for key in ignore
                )
            ]
            # Another experiment is not damage: refuse rather than fall back to
            # an older checkpoint it also wrote.
            if diffs:
                raise CheckpointError(
                    f"checkpoint {self.directory / str(step)} was written by another "
                    "experiment; resume with the run's own config or start a new "
                    "run. Differences:\n  " + "\n  ".join(diffs)
                )
            try:
                state = self._load(step, like)
            except _Damaged as damage:
                self.skipped.append(Skipped(step, str(damage)))
                continue
            if generation is None:
                for bad in self.skipped:
                    self._set_aside(bad.generation)
            return step, state
        reasons = "; ".join(
            f"generation {s.generation}: {s.reason}" for s in self.skipped
        )
        raise CheckpointError(
            f"no checkpoint in {self.directory} passes verification ({reasons}); "
            f"move {self.directory} aside to run it again from generation 0"
        )

    def close(self) -> None:
        """Wait for a save in flight, then close orbax's manager and its threads
        (a later call opens it again); safe to call twice."""
        manager, self._opened = self._opened, None
        if manager is None:
            return
        with _quiet_orbax():
            try:
                manager.wait_until_finished()
            finally:
                manager.close()
