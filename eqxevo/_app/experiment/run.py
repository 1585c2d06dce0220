"""One run through `evolve` into its run directory: `Run` owns a run from open to
finish (runs of a study included); `run_experiment` and `resume_run` drive one.
"""

import contextlib
import datetime
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from eqxevo._src.evolve import Chunk, compile_chunk, evolve
from eqxevo._src.fitness import SpreadWatch
from eqxevo._src.heldout import (
    evaluate_run,
    heldout_cost,
    heldout_fields,
    heldout_genomes,
    heldout_record,
)
from eqxevo._src.memory import format_bytes
from eqxevo._src.qd.map_elites import MapElites
from eqxevo._src.runs import best_run

from .. import config as config_module
from ..checkpoint import integrity
from ..config import Experiment
from ..interrupts import StopRequest, exit_code
from ..metrics import (
    Progress,
    TensorBoardSink,
    WandbSink,
    format_seconds,
    history_records,
)
from .build import Built, build
from .certify import certificate_bands
from .resources import (
    ResourceError,
    available_memory,
    check_fits,
    chunk_bytes,
    exhausted,
    state_bytes,
    too_big,
)
from .rundir import GENOME_FILES, RunDir, RunDirError, sha256


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C/SIGTERM after saving what it had.

    Attributes:
        message: one line for the user (the checkpoint and how to resume).
        exit_code: 130 (Ctrl-C) or 143 (SIGTERM).
        generation: the generation of the newest checkpoint, or None.
    """

    def __init__(self, message: str, exit_code: int, generation: int | None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.generation = generation


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


class Run:
    """One run and its directory: opened (new or resumed), fed each chunk,
    finished. `eqxevo run` drives one; a study drives one per run of a program.

    Attributes:
        built: the run's objects; `built.experiment` is what config.toml holds.
        dir: its `RunDir`.
        generation, state: where it starts (state None: from the beginning).
        notes: lines the user must see (a reused directory, damaged checkpoints).
    """

    def __init__(
        self,
        built: Built,
        run_dir: str | Path,
        *,
        resume: bool,
        mesh: Mesh | None = None,
        share: int = 1,
        extra: dict[str, Any] | None = None,
    ):
        """Open the run: build it, prepare or check its directory, restore its
        newest good checkpoint when resuming.

        Arguments:
            built: the run's experiment, built (`build`): every config error is
                raised before anything is written.
            run_dir: its directory.
            resume: continue the run there (from its newest good checkpoint, or
                from the start if it has none); else start a new run, reusing a
                directory whose earlier run saved no checkpoint.
            mesh: the devices its generations (and held-out lifetimes) split over.
            share: how many runs one program runs this one with (a study's): the
                summary counts this run's share of the program's time.
            extra: fields summary.json adds (a study's cell and seed).

        Raises:
            RunDirError: a new run where a run with checkpoints is, a resumed run
                without a directory, or one whose config differs in keys that
                would change its trajectory.
            LockedError: another live process writes the directory.
            CheckpointError: no checkpoint passes verification, or one was
                written by another experiment.
        """
        self.built = built
        self.dir = RunDir(run_dir)
        self.mesh = mesh
        self.share = share
        # Said once while it runs: fitness without spread (fitness.SpreadWatch).
        # `run_experiment` says it on its progress; a study's run on stderr.
        self.spread = SpreadWatch()
        self.say: Callable[[str], None] = lambda text: print(
            f"eqxevo: run {self.dir.path}: {text}", file=sys.stderr, flush=True
        )
        # One writer per directory, from before its first file is touched until
        # `close`.
        self.lock = self.dir.lock(resume=resume)
        try:
            self._open(resume, extra)
        except BaseException:
            if hasattr(self, "checkpoints"):
                self.checkpoints.close()
            self.lock.release()
            raise

    def _open(self, resume: bool, extra: dict[str, Any] | None) -> None:
        self.notes = self.dir.open(self.built.experiment, resume=resume)
        run = self.built.experiment.run
        self.record = config_module.to_dict(self.built.experiment)
        self.checkpoints = self.dir.checkpointer(run.keep_checkpoints)
        self.generation, self.state = 0, None
        if resume and self.checkpoints.latest() is not None:
            like = jax.eval_shape(self.built.initial_state)
            self.generation, self.state = self.checkpoints.restore(
                like, self.record, ignore=config_module.RESUMABLE_CHANGES
            )
            for bad in self.checkpoints.skipped:
                self.notes.append(
                    f"checkpoint at generation {bad.generation} is damaged "
                    f"({bad.reason}); resuming from generation {self.generation} "
                    "(the newest good one)"
                )
        self.summary = {}
        if resume:
            try:
                self.summary = self.dir.read_summary()
            except RunDirError as err:  # rebuilt from the checkpoint and metrics
                self.notes.append(f"{err}; writing it again from the run's files")
        self._check_restored()
        # `saved`: the newest checkpoint's generation (None: nothing to resume yet);
        # `recorded`: metrics.jsonl holds the generations below it.
        self.saved = self.generation if self.state is not None else None
        self.recorded = self.generation
        # Records past the checkpoint are work the resumed run repeats (same bits).
        self.dir.metrics.truncate(self.generation)
        # An earlier segment's end-of-run evaluation is no evaluation point of a
        # run extended with --set run.generations: its metrics then equal those
        # of a run planned this long from the start.
        self.dir.metrics.drop_fields(
            "heldout_", lambda r: not self.evaluation_due(r["generation"] + 1)
        )
        self.summary.update(extra or {})
        # A segment still "running" on disk was killed before it could say so.
        for segment in self.summary.setdefault("segments", []):
            if segment.get("status") == "running":
                segment["status"] = "killed"  # it never wrote its end
        self.segment: dict[str, Any] = {}
        self.sinks: list[Any] = []
        self._appending = False
        self._started = self._running = time.perf_counter()

    def _check_restored(self) -> None:
        """The newest checkpoint, when restored, is the one summary.json recorded
        writing (not one copied in from another run of the same experiment); from
        here summary.json records the one restored (also when it was rebuilt, so
        that the next resume has a record to check)."""
        if self.state is None:
            return
        recorded = self.summary.get("checkpoint")
        digest = integrity(self.state)["sha256"]
        if (
            isinstance(recorded, dict)
            # not an older one (a fallback), nor summary.json lagging a kill
            and recorded.get("generation") == self.generation
            and digest != recorded.get("sha256")
        ):
            raise RunDirError(
                f"{self.dir.path}/checkpoints/{self.generation} is not the checkpoint "
                "this run wrote (its SHA-256 differs from summary.json's)"
            )
        self.summary["checkpoint"] = {"generation": self.generation, "sha256": digest}

    # -- the run's course ---------------------------------------------------------

    @property
    def total(self) -> int:
        return self.built.experiment.run.generations

    @property
    def complete(self) -> bool:
        return self.generation >= self.total

    def evaluation_due(self, generations: int) -> bool:
        """Whether the run evaluates held out after this many generations."""
        every = self.built.experiment.run.eval_every
        return generations == self.total or bool(every and generations % every == 0)

    def describe(self) -> str:
        """The one line a stop prints: the newest checkpoint and how to resume."""
        if self.saved is None:
            return "no checkpoint yet: nothing to resume"
        return (
            f"checkpoint at generation {self.saved} saved; "
            f"`eqxevo resume {self.dir.path}`"
        )

    def begin(self) -> None:
        """Start a segment of the run (summary.json counts each) and its sinks."""
        devices = self.mesh.devices.flat if self.mesh else jax.devices()[:1]
        self.segment = {
            "started": _now(),
            "from_generation": self.generation,
            "to_generation": self.generation,
            "status": "running",
            "platform": jax.default_backend(),
            "devices": [str(d) for d in devices],
            "host": platform.node(),
        }
        self.summary["segments"].append(self.segment)
        self._started = self._running = time.perf_counter()
        settings = self.built.experiment.sinks
        if settings.tensorboard:
            self.sinks.append(TensorBoardSink(self.dir.path / "tensorboard"))
        if settings.wandb:
            self.sinks.append(
                WandbSink(
                    self.dir.path,
                    project=settings.wandb_project,
                    name=self.dir.path.name,
                    config=self.record,
                    mode=settings.wandb_mode,
                )
            )

    def running(self) -> None:
        """Mark the end of compilation: throughput counts from here."""
        self._running = time.perf_counter()

    def _account(self, generation: int) -> None:
        now = time.perf_counter()
        ran = generation - self.segment["from_generation"]
        self.segment["to_generation"] = generation
        self.segment["wall_time_s"] = round((now - self._started) / self.share, 3)
        self.segment["run_time_s"] = round((now - self._running) / self.share, 3)
        self.segment["agent_steps"] = ran * self.built.agent_steps_per_generation

    def save(self, generation: int, state: Any) -> None:
        """Checkpoint `state` at `generation`; summary.json counts the segment up
        to here, should the process be killed before it ends."""
        digest = self.checkpoints.save(generation, state, self.record)
        self.saved = generation
        self.summary["checkpoint"] = {"generation": generation, "sha256": digest}
        self._account(generation)
        self.dir.write_summary(self.summary)

    def heldout(self, generation: int, state: Any) -> list[dict[str, Any]]:
        """Evaluate held out after `generation` generations (`eqxevo._src.heldout`);
        summary.json keeps the newest evaluation."""
        began = time.perf_counter()
        settings = self.built.options(self.mesh).evaluation()
        results = evaluate_run(
            self.built.key,
            self.built.heldout_fitness,
            self.built.strategy,
            state,
            self.built.experiment.run.eval_episodes,
            num_seeds=self.built.num_seeds,
            settings=settings,
        )
        spent = time.perf_counter() - began
        self.segment["heldout_s"] = round(self.segment.get("heldout_s", 0.0) + spent, 3)
        self.summary["heldout"] = heldout_record(results, generation)
        return results

    def chunk(self, generation: int, history: dict[str, Any], state: Any) -> list[Any]:
        """Take a finished chunk: its records (with the held-out fields where an
        evaluation is due), sinks, and a checkpoint when one is due. Returns the
        records."""
        # Held-out fields join the records of the generation evaluated, before they
        # are written, so metrics.jsonl never holds a record twice.
        records = history_records(history)
        notice = self.spread.notice(records)
        if notice is not None:
            self.say(notice)
        if self.evaluation_due(generation):
            for seed, result in enumerate(self.heldout(generation, state)):
                for r in records:
                    if r["generation"] == generation - 1 and r.get("seed", 0) == seed:
                        r.update(heldout_fields(result))
        first = min(r["generation"] for r in records)
        if self._appending or self.recorded > first:
            # An interrupt cut an append short, or this chunk is taken again
            # (a study's runs after an interrupt): its records are written once.
            self.dir.metrics.truncate(first)
        self._appending = True
        self.dir.metrics.append(records)
        self.recorded = generation
        self._appending = False
        for sink in self.sinks:
            sink.write(records)
        self.generation, self.state = generation, state
        # Due when the chunk crossed a multiple of `checkpoint_every` (chunks
        # need not end on one: their lengths follow `run.chunk_seconds`).
        every = self.built.experiment.run.checkpoint_every
        if generation // every > (self.saved or 0) // every:
            self.save(generation, state)
        return records

    def finish(self, status: str) -> dict[str, Any]:
        """End the segment with `status` ("complete": it ran to its end or to
        `run.generations`; "stopped": a signal; "failed": an error): the last
        checkpoint, the genomes, fitness.png and summary.json; then `close`.
        Returns the summary."""
        try:
            return self._finish(status)
        finally:
            self.close()

    def finish_complete(self) -> dict[str, Any]:
        """Write the results of a run whose last checkpoint is its end (killed
        before it finished, or its summary.json lost): genomes, figure, the
        held-out record (the same lifetimes, the same numbers) and summary.json."""
        self.begin()
        if "heldout" not in self.summary:
            self.heldout(self.generation, self.state)
        return self.finish("complete")

    def close(self) -> None:
        """Let the directory go (the checkpointer, then the writer lock); once."""
        if self.lock.held:
            try:
                self.checkpoints.close()
            finally:
                self.lock.release()

    def _finish(self, status: str) -> dict[str, Any]:
        for sink in self.sinks:
            sink.close()
        ran = self.generation - self.segment["from_generation"]
        if ran > 0 and self.saved != self.generation:
            try:
                self.save(self.generation, self.state)
            except Exception:
                # An interrupt inside the chunk's own save of this generation can
                # leave orbax unwilling to write it again: the run then resumes
                # from its previous checkpoint, losing nothing but time.
                if status == "complete":
                    raise
        self._account(self.generation)
        steps, seconds = self.segment["agent_steps"], self.segment["run_time_s"]
        self.segment["agent_steps_per_s"] = steps / seconds if seconds > 0 else 0.0
        self.segment["status"] = status
        if self.state is not None:
            self._save_results(self.state)
        self.summary["generations"] = self.generation
        self.summary["complete"] = self.complete and status == "complete"
        self.summary["interrupted"] = status != "complete"
        return self.dir.write_summary(self.summary)

    def _save_results(self, state: Any) -> None:
        strategy = self.built.strategy
        best_seed, state, fitness = best_run(strategy, state)
        if best_seed is not None:  # several seeds: the genomes of the best one
            self.summary["best_seed"] = best_seed
        seed = best_seed or 0
        # the genomes held-out evaluation scores: `eqxevo eval` scores them again
        checksums = self.summary["checksums"] = {}
        for which, genome in heldout_genomes(strategy, state).items():
            if genome is not None:
                self.dir.save_genome(which, genome)
                name = GENOME_FILES[which]
                checksums[name] = sha256(self.dir.path / name)
        self.dir.plot(self.built.experiment, certificate_bands(self.built.experiment))
        if isinstance(strategy, MapElites):  # archive.png, and its QD metrics
            archive, contents = strategy.archive, state.inner.archive
            self.summary.update(
                self.dir.plot_archive(self.built.experiment, archive, contents)
            )
        last = [r for r in self.dir.metrics.read() if r.get("seed", 0) == seed][-1:]
        self.summary["best_fitness"] = float(fitness) if np.isfinite(fitness) else None
        self.summary["final_mean_fitness"] = last[0].get("mean") if last else None
        self.summary["final_best_fitness"] = last[0].get("best") if last else None


# -- `eqxevo run` and `eqxevo resume` ---------------------------------------------


def _say(notes: Iterable[str], stream: Any) -> None:
    """Print notes the user must see (even with quiet): fallbacks, reuse."""
    for note in notes:
        print(note, file=stream if stream is not None else sys.stderr, flush=True)


def _prepare(the_run: Run, progress: Progress) -> Any:
    """The state to start from (allocated once it is known to fit) and the
    compiled chunk program, checked against the memory available."""
    built, mesh = the_run.built, the_run.mesh
    state = the_run.state
    if state is None:
        # A population-based state holds P genomes: check it fits before it is
        # allocated.
        check_fits(built, state_bytes(built), mesh)
        state = built.initial_state()
    run = built.experiment.run
    started = time.perf_counter()
    compiled = compile_chunk(
        built.key,
        built.strategy,
        built.fitness,
        state=state,
        num_seeds=built.num_seeds,
        options=built.options(mesh),
    )
    the_run.segment["compile_s"] = round(time.perf_counter() - started, 3)
    needed = chunk_bytes(compiled, mesh)
    if needed is not None:
        the_run.segment["memory_estimate_bytes"] = needed
        available, where = available_memory(mesh)
        progress.say(
            f"compiled in {format_seconds(the_run.segment['compile_s'])}; XLA "
            f"estimates {format_bytes(needed)} for a chunk"
            + (
                f" ({format_bytes(available)} available on {where})"
                if available
                else ""
            )
        )
        check_fits(built, needed, mesh)
    progress.say(heldout_cost(built.strategy, run.eval_episodes, run.eval_every))
    return state


def run_experiment(
    experiment: Experiment,
    run_dir: str | Path,
    *,
    resume: bool = False,
    quiet: bool = False,
    stream: Any = None,
    mesh: Mesh | None = None,
    handle_signals: bool = False,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Run (or resume) an experiment in `run_dir`; returns the run summary.

    Arguments:
        experiment: the experiment (its effective config is what is written).
        run_dir: the run directory. A new run may reuse a directory whose
            earlier run saved no checkpoint.
        resume: continue from the newest good checkpoint in `run_dir`.
        quiet: no progress output.
        stream: where progress goes (default stderr).
        mesh: `eqxevo.population_mesh()` splits each generation over devices;
            results do not depend on it.
        handle_signals: take over SIGINT/SIGTERM (`eqxevo._app.interrupts`): the
            first stops after the running chunk with a checkpoint (or at once
            when there is nothing to save), the second exits at once. Off, a
            KeyboardInterrupt still saves the last finished chunk.
        stop: a `StopRequest` the caller installed already (the CLI does, before
            it imports anything heavy); implies `handle_signals`.

    Raises:
        RunDirError: a new run in a folder that holds a run with checkpoints, or
            a resume of a folder without a run.
        CheckpointError: no checkpoint passes verification, or it was written by
            another experiment.
        LockedError: another live process writes the directory (a resume is
            told so even while that process is still starting its run).
        ResourceError: the run does not fit the device's memory.
        RunInterrupted: after saving, when stopped by a signal.
    """
    the_run = Run(build(experiment), run_dir, resume=resume, mesh=mesh)
    if the_run.complete:
        if the_run.summary.get("complete"):
            the_run.close()
        else:  # killed after its last checkpoint, or summary.json was lost
            the_run.finish_complete()
        the_run.notes.append(
            f"{the_run.dir.path} is complete at generation {the_run.generation} "
            f"(run.generations = {the_run.total}): nothing to run; extend it with "
            "--set run.generations=N"
        )
        _say(the_run.notes, stream)
        return the_run.summary
    _say(the_run.notes, stream)
    if stop is None:
        stop = StopRequest(the_run.describe, stream=stream)
        installed = stop if handle_signals else contextlib.nullcontext()
    else:
        stop.describe = the_run.describe
        installed = contextlib.nullcontext()  # the caller's, already installed
    interrupted: int | None = None
    failed = True
    built = the_run.built
    with (
        installed,
        Progress(
            the_run.total,
            built.agent_steps_per_generation,
            start=the_run.generation,
            quiet=quiet,
            stream=stream,
        ) as progress,
    ):
        the_run.begin()
        the_run.say = progress.say

        def on_chunk(chunk: Chunk) -> bool:
            with stop.lock:
                records = the_run.chunk(chunk.generation, chunk.history, chunk.state)
                progress.update(records, at=evolve_at + chunk.seconds)
                stop.work_done = True
            return stop.requested

        try:
            state = _prepare(the_run, progress)
            the_run.running()
            evolve_at = time.perf_counter()
            progress.start_running(evolve_at)
            evolve(
                built.key,
                built.strategy,
                built.fitness,
                num_generations=the_run.total - the_run.generation,
                num_seeds=built.num_seeds,
                callback=on_chunk,
                state=state,
                options=built.options(the_run.mesh),
            )
            failed = False
        except KeyboardInterrupt:
            interrupted, failed = 2, False  # SIGINT: Python's handler (no signals)
        except jax.errors.JaxRuntimeError as err:
            if not exhausted(err):
                raise
            raise ResourceError(
                "the device ran out of memory during the run ("
                + " ".join(str(err).split())[:200]
                + "). "
                + too_big(
                    built, the_run.segment.get("memory_estimate_bytes", 0), the_run.mesh
                )
            ) from None
        finally:
            if stop.requested:
                interrupted = stop.signum
            status = "failed" if failed else "stopped" if interrupted else "complete"
            summary = the_run.finish(status)
    if interrupted:
        raise RunInterrupted(the_run.describe(), exit_code(interrupted), the_run.saved)
    return summary


def resume_run(
    run_dir: str | Path, overrides: Iterable[str] = (), **kwargs: Any
) -> Any:
    """Continue a run from its newest good checkpoint (see `run_experiment`);
    `overrides` may change only `config.RESUMABLE_CHANGES`."""
    directory = RunDir(run_dir)
    directory.require(writer=True)
    config_module.check_resumable(overrides)
    experiment = directory.read_config(overrides)
    return run_experiment(experiment, run_dir, resume=True, **kwargs)


__all__ = ["Run", "RunInterrupted", "resume_run", "run_experiment"]
