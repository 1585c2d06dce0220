"""`eqxevo study tune`: each arm's search settings chosen on the tuning seeds, with
Optuna (docs/studies.md, "Tuning").

- Batches: trials `b*K .. b*K+K-1` of every arm are proposed together, run as
  study runs (one per trial, axis value and tuning seed) in as few compiled
  programs as their shapes allow (trials that differ only in array values share
  one), then recorded. Batch b+1 is proposed only after batch b is recorded.
- Proposals are a function of the recorded trials and the trial's number alone:
  trial n's sampler is seeded with (`tune.seed`, arm, n) and sees the trials of
  the earlier batches. A tune stopped anywhere (Ctrl-C, SIGTERM, SIGKILL, a
  pre-empted job) proposes the same trials again when run again, and every run
  resumes from its checkpoints: the same trials, scores and chosen settings as
  a tune never stopped.
- The record is Optuna's journal, OUT/tune/optuna.jsonl (one study per arm,
  one line per finished trial; `optuna-dashboard` reads it), written by the
  study folder's one writer. OUT/tune/chosen.json holds each arm's best trial
  once every trial is recorded; `eqxevo study run` sets it over the arms.
- A trial's score is the mean held-out fitness of its runs (`heldout_mean`).
"""

import dataclasses
import json
import math
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..experiment.rundir import RunDirError, read_json, write_atomic
from ..lock import WriterLock
from .executor import AbstractExecutor, LocalExecutor, use_compilation_cache
from .group import build_run, group
from .progress import StudyProgress
from .runner import heldout_columns, is_done, read_summary, run_dir
from .spec import (
    Study,
    StudyError,
    Trial,
    from_dict,
    require,
    variant_cells,
    with_seed,
)
from .tuning import Tune

JOURNAL = "optuna.jsonl"
CHOSEN = "chosen.json"
SETTINGS = "tune.json"


def tune_dir(out: str | Path) -> Path:
    """OUT/tune: the tuning runs, Optuna's journal and the chosen settings."""
    return Path(out) / "tune"


@dataclasses.dataclass(frozen=True)
class Proposal:
    """Trial `number` of `arm`: its settings and its runs."""

    arm: str
    number: int
    params: dict[str, Any]
    runs: tuple[Trial, ...]


# -- Optuna ---------------------------------------------------------------------------


def _optuna() -> Any:
    optuna = require("optuna", "eqxevo study tune")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class _OneWriter:
    """A journal lock that is always free: Optuna's lock protocol (acquire and
    release; its base class is private), for a file with one writer."""

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        return None


def _storage(path: Path) -> Any:
    """Optuna's journal in `path`; a line cut short by a kill is dropped first
    (the study folder's lock makes this process its one writer, so Optuna's own
    file lock is not needed: a killed holder would leave it stale)."""
    optuna = _optuna()
    journal = optuna.storages.journal
    if path.exists():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with path.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
            print(
                f"eqxevo: {path}: dropped its last line, cut short by a kill (that "
                "trial is run and recorded again)",
                file=sys.stderr,
                flush=True,
            )

    backend = journal.JournalFileBackend(str(path), lock_obj=_OneWriter())
    return optuna.storages.JournalStorage(backend)


def _seed(tune: Tune, arm: str, number: int) -> int:
    """Trial `number` of `arm`'s sampler seed."""
    entropy = [tune.seed, zlib.crc32(arm.encode()), number]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def _sampler(tune: Tune, arm: str, number: int) -> Any:
    samplers = _optuna().samplers
    seed = _seed(tune, arm, number)
    if tune.sampler == "random":
        return samplers.RandomSampler(seed=seed)
    return samplers.TPESampler(seed=seed)


def _records(storage: Any, arm: str) -> list[Any]:
    """The recorded trials of `arm`, in number order."""
    optuna = _optuna()
    if arm not in {s.study_name for s in storage.get_all_studies()}:
        optuna.create_study(study_name=arm, storage=storage, direction="maximize")
    study = optuna.load_study(study_name=arm, storage=storage)
    return sorted(study.get_trials(deepcopy=False), key=lambda t: t.user_attrs["trial"])


def propose(tune: Tune, arm: str, records: list[Any], numbers: range) -> list[dict]:
    """The settings of trials `numbers` of `arm`, from the recorded trials of the
    earlier batches (`records`) and each trial's own seed."""
    optuna = _optuna()
    distributions = {d.key: d.distribution() for d in tune.spaces[arm]}
    first = numbers.start - numbers.start % tune.batch
    history = optuna.create_study(direction="maximize")
    history.add_trials([t for t in records if t.user_attrs["trial"] < first])
    out = []
    for number in numbers:
        # The trials asked before this one in its batch are unfinished, and the
        # samplers ignore unfinished trials: each proposal sees the earlier
        # batches alone, whichever of its batch were asked before it.
        history.sampler = _sampler(tune, arm, number)
        asked = history.ask(distributions)
        out.append(dict(asked.params))
    return out


def _record(storage: Any, proposal: Proposal, scores: list[float], tune: Tune) -> None:
    optuna = _optuna()
    study = optuna.load_study(study_name=proposal.arm, storage=storage)
    value = float(np.mean(scores)) if scores else math.nan
    finite = math.isfinite(value)
    study.add_trial(
        optuna.trial.create_trial(
            params=proposal.params,
            distributions={d.key: d.distribution() for d in tune.spaces[proposal.arm]},
            value=value if finite else None,
            state=optuna.trial.TrialState.COMPLETE
            if finite
            else optuna.trial.TrialState.FAIL,
            user_attrs={
                "trial": proposal.number,
                "scores": [
                    {"values": r.cell.values, "seed": r.seed, "score": s}
                    for r, s in zip(proposal.runs, scores, strict=True)
                ],
            },
        )
    )


# -- the runs -------------------------------------------------------------------------


def trial_runs(study: Study, arm: str, number: int, params: dict) -> tuple[Trial, ...]:
    """The runs of trial `number` of `arm`: every axis value x tuning seed."""
    assert study.tune is not None
    cells = variant_cells(study, arm, params, f"{arm}+t{number:04d}")
    return tuple(
        Trial(cell, seed, with_seed(cell.experiment, seed))
        for cell in cells
        for seed in study.tune.seeds
    )


def _score(path: Path) -> float:
    value = heldout_columns(read_summary(path)).get("heldout_mean")
    return math.nan if value is None else float(value)


def _settings(study: Study) -> dict[str, Any]:
    """What the tuning depends on: the tune table (less the budget, which may
    grow), the experiment, the arms and the axes."""
    tune = dict(study.data["study"]["tune"])
    tune.pop("trials", None)
    return {
        "tune": tune,
        "experiment": study.experiment_data,
        "arms": study.arms,
        "axes": study.axes,
    }


def _check_settings(folder: Path, study: Study) -> bool:
    """Whether `folder` holds a tune of `study` already (False: none yet).

    Raises:
        StudyError: it holds a tune of another study; names what differs.
    """
    settings = json.loads(json.dumps(_settings(study)))
    try:
        saved = read_json(folder / SETTINGS)
    except RunDirError:
        saved = {}
    if saved and saved != settings:
        changed = sorted(k for k in settings if saved.get(k) != settings[k])
        raise StudyError(
            f"{folder} holds a tune of another study (it differs in "
            f"{', '.join(changed)}); restore the study file, or use another --out"
        )
    return bool(saved)


def tune(
    study: Study,
    out: str | Path,
    executor: AbstractExecutor | None = None,
    *,
    compilation_cache: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """Tune every arm of `study` (module docstring); returns OUT/tune/chosen.json.

    Arguments:
        executor: where the trials' programs run (default: `LocalExecutor()`,
            this process).
        compilation_cache: share compiled programs through OUT/.jax_cache
            (`use_compilation_cache`; the CLI's choice).
        quiet: no progress output.

    Raises:
        StudyError: the study has no [study.tune], OUT/tune holds the tune of
            another study, or a run fails to build (before it runs).
        LockedError: another live process writes the study folder.
        KeyboardInterrupt: a stop request, after saving every running run.
    """
    if study.tune is None:
        raise StudyError(
            f"study {study.name!r} declares no [study.tune]: add its seeds, trial "
            "budget and search space (docs/studies.md, Tuning)"
        )
    settings = study.tune
    folder = tune_dir(out)
    chosen = read_chosen(out)
    if _check_settings(folder, study) and chosen.get("trials") == settings.trials:
        return chosen  # finished: nothing to build, run or write
    # Before anything is written: the first batch's experiments are checked, and
    # one run of each arm is built.
    for arm in study.arms:
        numbers = range(min(settings.batch, settings.trials))
        runs = [
            trial_runs(study, arm, n, p)
            for n, p in zip(numbers, propose(settings, arm, [], numbers), strict=True)
        ]
        build_run(runs[0][0])
    folder.mkdir(parents=True, exist_ok=True)
    with WriterLock(out, "study folder"):
        if not _check_settings(folder, study):
            write_atomic(
                folder / SETTINGS, json.dumps(_settings(study), indent=2) + "\n"
            )
        if compilation_cache:
            use_compilation_cache(out)
        storage = _storage(folder / JOURNAL)
        for start in range(0, settings.trials, settings.batch):
            numbers = range(start, min(start + settings.batch, settings.trials))
            _batch(study, storage, numbers, folder, executor, quiet)
        chosen = _choose(study, storage)
        write_atomic(folder / CHOSEN, json.dumps(chosen, indent=2) + "\n")
    return chosen


def _batch(
    study: Study,
    storage: Any,
    numbers: range,
    folder: Path,
    executor: AbstractExecutor | None,
    quiet: bool,
) -> None:
    """Propose, run and record trials `numbers` of every arm (those not recorded)."""
    assert study.tune is not None
    todo: list[Proposal] = []
    for arm in study.arms:
        records = _records(storage, arm)
        recorded = {t.user_attrs.get("trial"): t for t in records}
        for number, params in zip(
            numbers, propose(study.tune, arm, records, numbers), strict=True
        ):
            if number in recorded:
                if recorded[number].params != params:
                    raise StudyError(
                        f"{folder / JOURNAL}: trial {number} of arm {arm!r} was "
                        f"recorded with {recorded[number].params}, not the "
                        f"{params} proposed now; the journal belongs to another "
                        "tune: use another --out"
                    )
                continue
            todo.append(
                Proposal(arm, number, params, trial_runs(study, arm, number, params))
            )
    if not todo:
        return
    runs = [r for p in todo for r in p.runs]
    pending = [r for r in runs if not is_done(folder, r)]
    if pending:
        programs = group([build_run(r) for r in pending], study.max_runs_per_program)
        total = sum(r.experiment.run.generations for r in runs)
        done = len(runs) - len(pending)
        reached = sum(r.experiment.run.generations for r in runs if r not in pending)
        if not quiet:
            print(
                f"tune: trials {numbers.start}-{numbers.stop - 1} of "
                f"{study.tune.trials} per arm: {len(pending)} runs in "
                f"{len(programs)} program{'s' * (len(programs) != 1)}",
                file=sys.stderr,
                flush=True,
            )
        with StudyProgress(len(runs), done, total, reached, quiet=quiet) as progress:
            (executor or LocalExecutor()).run(programs, folder, progress)
    for proposal in todo:
        scores = [_score(run_dir(folder, r)) for r in proposal.runs]
        _record(storage, proposal, scores, study.tune)


def _choose(study: Study, storage: Any) -> dict[str, Any]:
    """Each arm's best recorded trial (the lowest number among equals)."""
    assert study.tune is not None
    arms = {}
    for arm in study.arms:
        records = [t for t in _records(storage, arm) if t.value is not None]
        records = [t for t in records if t.user_attrs["trial"] < study.tune.trials]
        if not records:
            raise StudyError(
                f"arm {arm!r}: no trial of the tune has a finite held-out score"
            )
        best = max(records, key=lambda t: (t.value, -t.user_attrs["trial"]))
        arms[arm] = {
            "settings": dict(best.params),
            "trial": best.user_attrs["trial"],
            "score": best.value,
            "scores": best.user_attrs["scores"],
            "trials": len(records),
        }
    tune = study.tune
    return {
        "study": study.name,
        "seeds": list(tune.seeds),
        "trials": tune.trials,
        "batch": tune.batch,
        "sampler": tune.sampler,
        "seed": tune.seed,
        "arms": arms,
    }


def read_chosen(out: str | Path) -> dict[str, Any]:
    """OUT/tune/chosen.json ({} when the tune has not finished)."""
    try:
        return read_json(tune_dir(out) / CHOSEN)
    except RunDirError:
        return {}


def with_tuned(study: Study, out: str | Path) -> Study:
    """`study` with the settings its tune in OUT chose (`study.tuned`); `study`
    itself when it declares no tune or already has them.

    Raises:
        StudyError: the study declares a tune that has not finished in OUT, or
            finished with another budget.
    """
    if study.tune is None or study.tuned:
        return study
    chosen = read_chosen(out)
    if not chosen:
        raise StudyError(
            f"study {study.name!r} declares [study.tune] and {tune_dir(out)} holds "
            "no finished tune: run `eqxevo study tune FILE --out "
            f"{out}` first"
        )
    if chosen.get("trials") != study.tune.trials or set(chosen["arms"]) != set(
        study.arms
    ):
        raise StudyError(
            f"{tune_dir(out) / CHOSEN} was chosen with {chosen.get('trials')} trials "
            f"per arm for arms {', '.join(chosen['arms'])}; the study file asks for "
            f"{study.tune.trials} for {', '.join(study.arms)}: run `eqxevo study "
            f"tune FILE --out {out}` again"
        )
    data = json.loads(json.dumps(study.data))
    data["study"]["tuned"] = {a: c["settings"] for a, c in chosen["arms"].items()}
    return from_dict(data)


def tuning_lines(study: Study, out: str | Path) -> list[str]:
    """The report's account of how each arm's settings were chosen: its tuning
    budget, seeds and chosen settings (or that the arms were not tuned)."""
    if study.tune is None:
        return [
            "The arms were not tuned: each ran with the settings the study file "
            "gives it (no [study.tune]); a difference between arms may be one of "
            "their settings, not of the arms."
        ]
    chosen = read_chosen(out)
    tune = study.tune
    seeds = ", ".join(map(str, tune.seeds))
    lines = [
        f"Each arm's settings were chosen by `eqxevo study tune` (Optuna, "
        f"{tune.sampler} sampler, seed {tune.seed}) from {tune.trials} trials per "
        f"arm, {tune.batch} at a time, each scored by its mean held-out fitness "
        f"on the tuning seeds {seeds}, which the study never evaluates; the arms "
        "were then evaluated on the study's own seeds.",
        "",
        "| arm | trials | chosen trial | tuning score | settings |",
        "|---|---|---|---|---|",
    ]
    for arm in study.arms:
        entry = chosen.get("arms", {}).get(arm)
        if entry is None:
            lines.append(f"| {arm} | not tuned yet | | | |")
            continue
        settings = ", ".join(
            f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
            for k, v in entry["settings"].items()
        )
        lines.append(
            f"| {arm} | {entry['trials']} | {entry['trial']} | "
            f"{entry['score']:.4g} | {settings} |"
        )
    return lines


__all__ = [
    "Proposal",
    "propose",
    "read_chosen",
    "trial_runs",
    "tune",
    "tune_dir",
    "tuning_lines",
    "with_tuned",
]
