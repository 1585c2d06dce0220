"""Headroom certificates of experiments' tasks, cached on disk with their
provenance (`eqxevo certify`; docs/environments.md, "Headroom certificates").
"""

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax.random as jr

from eqxevo._src._types import Genome
from eqxevo._src.certificate import Certificate, CertificateError, certify, versions
from eqxevo._src.memoryless_search import SearchBudget
from eqxevo._src.nets.mlp import MLPPolicy

from .. import config as config_module
from ..config import Experiment
from ..figures import ReferenceBand
from ..lock import WriterLock
from .build import Built, build
from .rundir import RunDirError, atomic_file, read_json, sha256, write_atomic

CACHE_VARIABLE = "EQXEVO_CERTIFICATES"
"""Environment variable naming the certificates' folder (default
`~/.cache/eqxevo/certificates`)."""

CERTIFICATE_FILE = "certificate.json"
GENOME_FILE = "memoryless_genome.eqx"


def cache_root(root: str | Path | None = None) -> Path:
    """The folder that holds certificates: `root`, else `$EQXEVO_CERTIFICATES`,
    else `$XDG_CACHE_HOME/eqxevo/certificates` (`~/.cache/...`)."""
    if root is not None:
        return Path(root)
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "eqxevo" / "certificates"


def task_record(experiment: Experiment) -> dict[str, Any]:
    """What a certificate's task is: the environment (name, every option and
    param, as the effective config writes them), the lifetime, whether episodes
    reset, and eqxevo's version (a task's rules may change between versions)."""
    return {
        "env": config_module.to_dict(experiment)["env"],
        "lifetime": experiment.run.lifetime,
        "reset_on_done": experiment.run.reset_on_done,
        "eqxevo": versions()["eqxevo"],
    }


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def task_folder(experiment: Experiment, root: str | Path | None = None) -> Path:
    """The folder of every certificate of `experiment`'s task."""
    slug = experiment.env.name.replace(":", "-").replace("/", "-")
    return cache_root(root) / f"{slug}-{_digest(task_record(experiment))}"


@dataclasses.dataclass(frozen=True)
class Stored:
    """A certificate on disk: its folder, its record (certificate.json) and its
    memoryless genome (None when its search found none)."""

    path: Path
    record: dict[str, Any]
    genome: Genome | None

    @property
    def headroom(self) -> float:
        """h (NaN where it is undefined)."""
        h = self.record["headroom"]
        return math.nan if h is None else float(h)

    @property
    def floor(self) -> float:
        return float(self.record["floor"]["mean"])


def _skeleton(built: Built, budget: dict[str, Any]) -> MLPPolicy:
    env = built.env
    return MLPPolicy(
        env.obs_size, env.action_size, budget["width"], budget["depth"], key=jr.key(0)
    )


def read_certificate(path: Path, built: Built) -> Stored:
    """The certificate in folder `path`, its genome checked against the SHA-256
    its record holds.

    Raises:
        RunDirError: the record or the genome is missing, cut short or damaged.
    """
    record = read_json(path / CERTIFICATE_FILE)
    if not record:
        raise RunDirError(f"{path} holds no {CERTIFICATE_FILE}")
    genome = None
    if record.get("genome_sha256"):
        file = path / GENOME_FILE
        if not file.exists() or sha256(file) != record["genome_sha256"]:
            raise RunDirError(
                f"{file} is missing or damaged: its SHA-256 differs from the one "
                f"{CERTIFICATE_FILE} recorded"
            )
        like = _skeleton(built, record["provenance"]["budget"])
        genome = eqx.tree_deserialise_leaves(file, like)
    return Stored(path, record, genome)


def _best_folder(experiment: Experiment, root: str | Path | None) -> Path | None:
    """The folder of the stored certificate of `experiment`'s task with the
    highest memoryless bound (the best memoryless policy any search found), or
    None; unreadable records are passed over."""
    best, floor = None, -float("inf")
    for path in sorted(task_folder(experiment, root).glob(f"*/{CERTIFICATE_FILE}")):
        try:
            mean = float(read_json(path)["floor"]["mean"])
        except (RunDirError, KeyError, TypeError, ValueError):
            continue
        if mean > floor:
            best, floor = path.parent, mean
    return best


def find_certificate(built: Built, root: str | Path | None = None) -> Stored | None:
    """The stored certificate of `built`'s task with the highest memoryless bound,
    or None (a damaged one is passed over)."""
    folder = _best_folder(built.experiment, root)
    if folder is None:
        return None
    try:
        return read_certificate(folder, built)
    except RunDirError:
        return None


def certificate_bands(
    experiment: Experiment, root: str | Path | None = None
) -> list[ReferenceBand]:
    """The task's certified memoryless bound and its best learner or oracle, as
    bands for a fitness figure (their held-out means and 95% CIs on the
    certificate's lifetimes); none without a certificate."""
    folder = _best_folder(experiment, root)
    if folder is None:
        return []
    record = read_json(folder / CERTIFICATE_FILE)
    entries = {e["name"]: e for e in record.get("entries", [])}
    bands = []
    for role, what, color in (
        ("floor", "certified memoryless bound", "tab:purple"),
        ("ceiling", "best learner or oracle", "tab:olive"),
    ):
        entry = entries.get(record[role]["name"])
        if entry is None or entry.get("mean") is None:
            continue
        mean = float(entry["mean"])
        low = entry.get("ci_low")
        high = entry.get("ci_high")
        bands.append(
            ReferenceBand(
                f"{what}: {entry['name']} ({mean:.4g}, 95% CI)",
                mean,
                mean if low is None else float(low),
                mean if high is None else float(high),
                color,
            )
        )
    return bands


def certify_experiment(
    experiment: Experiment,
    *,
    budget: SearchBudget | None,
    num_episodes: int = 256,
    seed: int = 0,
    root: str | Path | None = None,
    force: bool = False,
    settings: Any = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Stored, Certificate | None]:
    """The certificate of `experiment`'s task (environment, params, lifetime) for
    this budget, episodes and seed: read from the cache, or made (`certify`) and
    written there, whole or not at all, by one writer.

    Returns:
        `(stored, made)`: `made` is the new certificate, None when it was read
        from the cache.

    Raises:
        CertificateError: the task cannot be certified (nothing is written).
        LockedError: another process is making the same certificate.
    """
    built = build(experiment)
    record = {
        "task": task_record(built.experiment),
        "budget": None if budget is None else budget.as_record(),
        "episodes": num_episodes,
        "seed": seed,
    }
    folder = task_folder(built.experiment, root) / _digest(record)
    if not force and (folder / CERTIFICATE_FILE).exists():
        try:
            return read_certificate(folder, built), None
        except RunDirError:
            pass  # damaged: made again below
    certificate = certify(
        jr.fold_in(jr.key(seed), 0x43455254),
        built.env,
        built.env_params,
        built.experiment.run.lifetime,
        reset_on_done=built.experiment.run.reset_on_done,
        num_episodes=num_episodes,
        budget=budget,
        settings=settings,
        progress=progress,
    )
    folder.mkdir(parents=True, exist_ok=True)
    with WriterLock(folder, "certificate").acquire():
        summary = certificate.summary()
        summary["task"] = record["task"]
        summary["seed"] = seed
        summary["genome_sha256"] = None
        if certificate.memoryless_genome is not None:
            with atomic_file(folder / GENOME_FILE, "wb") as f:
                eqx.tree_serialise_leaves(f, certificate.memoryless_genome)
            summary["genome_sha256"] = sha256(folder / GENOME_FILE)
        # The record last: a folder without it holds no certificate.
        write_atomic(folder / CERTIFICATE_FILE, json.dumps(summary, indent=2) + "\n")
    return Stored(folder, summary, certificate.memoryless_genome), certificate


__all__ = [
    "CACHE_VARIABLE",
    "CertificateError",
    "Stored",
    "cache_root",
    "certificate_bands",
    "certify_experiment",
    "find_certificate",
    "read_certificate",
    "task_folder",
    "task_record",
]
