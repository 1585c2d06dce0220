"""Headroom certificates: how much room a task leaves for memory, measured on
held-out lifetimes (docs/environments.md, "Headroom certificates").
"""

import dataclasses
import datetime
import math
import platform
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ._checks import positive_int
from ._types import Genome, PRNGKey
from .envs.base import AbstractEnv, EnvParams
from .evaluate import EvalSettings
from .heldout import HeldOut, heldout_evaluate
from .memoryless_search import (
    DEFAULT_BUDGET,
    LATE_P,
    STILL_IMPROVING,
    Progress,
    SearchBudget,
    search_memoryless,
)
from .references import Reference, Scored, references, score_references
from .rollout import LifetimeFitness
from .version import __version__

CERTIFICATE_STREAM = 0x43455254
"""`fold_in` data of a certificate's held-out lifetimes ("CERT"): its search
never sees them."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One policy a certificate scored on its held-out lifetimes.

    Attributes:
        name: "taste learner", "evolved MLP (snes std_init=0.1, seed 0, best)".
        kind: a reference kind (`eqxevo._src.references.KINDS`).
        result: its held-out evaluation (per-lifetime values in `result.values`).
        evolved: True for a searched memoryless network, False for a declared
            reference.
        early: a searched network taken when three quarters of the search's
            generations had run (`memoryless_search.Candidate`).
    """

    name: str
    kind: str
    result: HeldOut
    evolved: bool = False
    early: bool = False


class CertificateError(ValueError):
    """A certificate cannot be made: what is missing, in one line."""


@dataclasses.dataclass(frozen=True)
class Certificate:
    """A task's headroom certificate (see `certify`).

    Attributes:
        entries: every policy scored, on the same held-out lifetimes.
        headroom: h = (ceiling - floor) / (ceiling - random).
        headroom_low, headroom_high: its 95% bootstrap interval (over lifetimes,
            every policy resampled together; `scipy.stats.bootstrap`).
        memoryless_genome: the evolved network among the floor's candidates with
            the best held-out mean (None when no search ran).
        provenance: budget, seeds, settings, lifetimes and versions.
    """

    entries: tuple[Entry, ...]
    headroom: float
    headroom_low: float
    headroom_high: float
    memoryless_genome: Genome | None
    provenance: dict[str, Any]

    @property
    def early_floor(self) -> Entry | None:
        """The bound without the search's last quarter: the best memoryless
        policy that is not a network taken at the end (None where there is
        none)."""
        pool = [
            e
            for e in self.entries
            if e.kind == "no_memory" and not (e.evolved and not e.early)
        ]
        return max(pool, key=lambda e: e.result.mean) if pool else None

    def late_rise(self) -> tuple[float, float]:
        """`(gain, p)`: how much the search's last quarter of generations raised
        the bound on the held-out lifetimes (`floor` minus `early_floor`), and
        the one-sided p-value of the paired t-test over lifetimes; `(0, 1)` where
        the bound did not move, NaNs where there is no `early_floor`."""
        early, floor = self.early_floor, self.floor
        if early is None:
            return math.nan, math.nan
        if early is floor:
            return 0.0, 1.0
        diff = floor.result.values - early.result.values
        gain = float(diff.mean())
        if np.ptp(diff) == 0:  # no spread: t is undefined
            return gain, 0.0 if gain > 0 else 1.0
        from scipy import stats  # heavy: not at the CLI's import time

        test: Any = stats.ttest_1samp(diff, 0.0, alternative="greater")
        return gain, float(test.pvalue)

    @property
    def still_improving(self) -> bool:
        """The search's last quarter raised the bound by more than
        `STILL_IMPROVING` x (ceiling - random), with p below `LATE_P`: more
        generations may raise it further (the bound may be low, h high)."""
        gain, p = self.late_rise()
        span = self.ceiling.result.mean - self.random.result.mean
        return bool(gain > STILL_IMPROVING * span and p < LATE_P)  # False for NaN

    def best(self, kinds: Sequence[str]) -> Entry:
        """The entry of `kinds` with the highest held-out mean."""
        return max(
            (e for e in self.entries if e.kind in kinds), key=lambda e: e.result.mean
        )

    @property
    def random(self) -> Entry:
        """The random reference."""
        return self.best(("random",))

    @property
    def floor(self) -> Entry:
        """The best memoryless policy found: the certified memoryless bound."""
        return self.best(("no_memory",))

    @property
    def ceiling(self) -> Entry:
        """The best learner or oracle."""
        return self.best(("learner", "oracle"))

    @property
    def gap_in_learner_std(self) -> float:
        """(ceiling - floor) in standard deviations of the ceiling's per-lifetime
        score (inf where the ceiling scores the same on every lifetime)."""
        ceiling = self.ceiling.result
        return _in_std(ceiling.mean - self.floor.result.mean, ceiling.std)

    @property
    def learner(self) -> Entry | None:
        """The best learner (a policy that learns, told nothing), if any."""
        learners = [e for e in self.entries if e.kind == "learner"]
        return max(learners, key=lambda e: e.result.mean) if learners else None

    def learner_record(self) -> dict[str, Any] | None:
        """The best learner against the bound: its mean, its headroom
        `(learner - floor) / (learner - random)` and the gap in standard
        deviations of its score (None without a learner)."""
        learner = self.learner
        if learner is None:
            return None
        r, floor = learner.result, self.floor.result.mean
        span = r.mean - self.random.result.mean
        return {
            "name": learner.name,
            "mean": r.mean,
            "headroom": (r.mean - floor) / span if span > 0 else math.nan,
            "gap_in_std": _in_std(r.mean - floor, r.std),
        }

    def summary(self) -> dict[str, Any]:
        """The certificate as plain values (certificate.json; no genome; a
        non-finite number as None)."""
        early = self.early_floor
        return _json_numbers(
            {
                "headroom": self.headroom,
                "headroom_ci": [self.headroom_low, self.headroom_high],
                "random": self.random.result.mean,
                "floor": {"name": self.floor.name, "mean": self.floor.result.mean},
                "ceiling": {
                    "name": self.ceiling.name,
                    "mean": self.ceiling.result.mean,
                },
                "gap_in_learner_std": self.gap_in_learner_std,
                "learner": self.learner_record(),
                "entries": [
                    {"name": e.name, "kind": e.kind, "evolved": e.evolved}
                    | e.result.summary()
                    for e in self.entries
                ],
                "provenance": self.provenance,
                "late_rise": dict(zip(("gain", "p"), self.late_rise(), strict=True))
                | {"from": None if early is None else early.name},
                "still_improving": self.still_improving,
            }
        )

    def lines(self) -> list[str]:
        """The certificate in words, one policy a line, best first per kind."""
        n = self.floor.result.num_episodes
        width = max(len(e.name) for e in self.entries) + 2
        out = [f"policies on the same {n} held-out lifetimes (mean ± 95% CI):"]
        for kind in ("random", "no_memory", "learner", "oracle"):
            ranked = sorted(
                (e for e in self.entries if e.kind == kind),
                key=lambda e: -e.result.mean,
            )
            for e in ranked:
                r = e.result
                half = (r.ci_high - r.ci_low) / 2
                out.append(
                    f"  {kind:<9} {e.name.ljust(width)} {r.mean:.6g} ± {half:.2g}"
                )
        out.append(
            f"headroom h = ({self.ceiling.name} - {self.floor.name}) / "
            f"({self.ceiling.name} - random) = {self.headroom:.3f} "
            f"[{self.headroom_low:.3f}, {self.headroom_high:.3f}] (95% CI)"
        )
        out.append(
            f"the certified memoryless bound is {self.gap_in_learner_std:.2f} "
            f"standard deviations of {self.ceiling.name}'s score below it"
        )
        learner = self.learner_record()
        if learner is not None and learner["name"] != self.ceiling.name:
            out.append(
                f"against the best learner ({learner['name']}): h = "
                f"{learner['headroom']:.3f}, the bound {learner['gap_in_std']:.2f} "
                "standard deviations of its score below it"
            )
        if self.still_improving:
            gain, p = self.late_rise()
            early = self.early_floor
            assert early is not None  # still_improving needs it
            out.append(
                "the memoryless search was still improving when its budget ran "
                f"out: its last quarter raised the bound by {gain:.4g} (p = {p:.2g}; "
                f"from {early.name}): it may be low and h high; certify again "
                "with more --generations"
            )
        return out


def _in_std(gap: float, std: float) -> float:
    """`gap / std`; +-inf (or NaN for no gap) where `std` is 0."""
    if std > 0:
        return gap / std
    return math.copysign(math.inf, gap) if gap else math.nan


def _json_numbers(value: Any) -> Any:
    """`value` with every non-finite float as None (JSON has neither)."""
    if isinstance(value, dict):
        return {k: _json_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_numbers(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def check_task(env: AbstractEnv, params: EnvParams, refs: Sequence[Reference]) -> None:
    """What a certificate needs of a task, or a `CertificateError` naming what is
    missing: a scalar float reward, a random reference, and a learner or oracle."""
    name = type(env).__name__

    def reward(key: PRNGKey) -> Any:
        _, state = env.reset(key, params)
        action = jnp.zeros((env.action_size,), jnp.float32)
        return env.step(key, state, action, params)[2]

    shape = jax.eval_shape(reward, jr.key(0))
    if shape.shape != () or not jnp.issubdtype(shape.dtype, jnp.floating):
        raise CertificateError(
            f"{name}: a certificate needs a scalar float reward per step; its step "
            f"gives {shape.dtype} of shape {shape.shape}"
        )
    kinds = {r.kind for r in refs}
    if "random" not in kinds:
        raise CertificateError(
            f"{name} declares no random reference (eqxevo._src.references.references): "
            "a certificate measures headroom against random"
        )
    if not kinds & {"learner", "oracle"}:
        raise CertificateError(
            f"{name} declares no learner or oracle reference "
            "(eqxevo._src.references.references): a certificate needs one to measure "
            "headroom against"
        )


def certify(
    key: PRNGKey,
    env: AbstractEnv,
    params: EnvParams,
    num_steps: int,
    *,
    reset_on_done: bool = True,
    num_episodes: int = 256,
    budget: SearchBudget | None = DEFAULT_BUDGET,
    settings: EvalSettings | None = None,
    progress: Progress | None = None,
    resamples: int = 2000,
) -> Certificate:
    """A task's headroom certificate: random, the best memoryless policy found
    and the best learner or oracle, on the same `num_episodes` held-out
    lifetimes of `num_steps` steps, and the headroom

        h = (ceiling - floor) / (ceiling - random)

    with its 95% bootstrap interval. The floor (the certified memoryless bound)
    is the best held-out mean over the environment's references of kind
    "no_memory" and the memoryless MLPs `search_memoryless` evolves with
    `budget` (on training lifetimes; the held-out ones are
    `fold_in(fold_in(key, CERTIFICATE_STREAM), e)`). Picking the best of many
    candidates on the held-out lifetimes can only raise the floor: h errs low.

    Arguments:
        key: the certificate's key (search and held-out lifetimes).
        env, params, num_steps: the task (environment, params, lifetime T).
        reset_on_done: as `rollout`'s.
        num_episodes: held-out lifetimes.
        budget: the memoryless search; None: the declared references only.
        settings: devices and block size of evaluation.
        progress: called with a line of text now and then.
        resamples: bootstrap resamples of the interval.

    Raises:
        CertificateError: a non-scalar reward, no random reference, or no
            learner or oracle.
    """
    positive_int("num_steps", num_steps)
    positive_int("num_episodes", num_episodes)
    refs = references(env, params)
    check_task(env, params, refs)
    search_key, held_key = jr.split(key)
    held_key = jr.fold_in(held_key, CERTIFICATE_STREAM)
    fitness = LifetimeFitness(env, params, num_steps, reset_on_done)
    if progress is not None:
        progress(f"scoring {len(refs)} references on {num_episodes} lifetimes")
    scored: list[Scored] = list(
        score_references(held_key, fitness, refs, num_episodes, settings=settings)
    )
    entries = [Entry(s.name, s.kind, s.result) for s in scored]
    genomes: dict[str, Genome] = {}
    if budget is not None:
        found = search_memoryless(
            search_key,
            env,
            params,
            num_steps,
            budget,
            reset_on_done=reset_on_done,
            settings=settings,
            progress=progress,
        )
        for found_one in found:
            result = heldout_evaluate(
                held_key,
                fitness,
                found_one.genome,
                num_episodes,
                filter_spec=found_one.filter_spec,
                settings=settings,
            )
            entries.append(
                Entry(found_one.name, "no_memory", result, True, found_one.early)
            )
            genomes[found_one.name] = found_one.genome
    usable = [e for e in entries if e.result.num_nonfinite == 0]
    if not any(e.kind == "no_memory" for e in usable):
        raise CertificateError(
            f"{type(env).__name__}: no memoryless policy to certify (no reference "
            "of kind 'no_memory' and no search budget)"
        )
    low, high, h = headroom_interval(usable, resamples, seed=0)
    evolved = [e for e in usable if e.evolved]
    best_evolved = max(evolved, key=lambda e: e.result.mean) if evolved else None
    provenance = {
        "task": {
            "env": type(env).__name__,
            "params": _plain(params),
            "lifetime": num_steps,
            "reset_on_done": reset_on_done,
        },
        "episodes": num_episodes,
        "budget": None if budget is None else budget.as_record(),
        "memoryless_genome": None if best_evolved is None else best_evolved.name,
        "versions": versions(),
        "device": jax.devices()[0].device_kind,
        "made": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    return Certificate(
        tuple(usable),
        h,
        low,
        high,
        None if best_evolved is None else genomes[best_evolved.name],
        provenance,
    )


def headroom_interval(
    entries: Sequence[Entry], resamples: int, *, seed: int
) -> tuple[float, float, float]:
    """`(low, high, h)`: the headroom of `entries` and its 95% percentile
    bootstrap interval, lifetimes resampled with every policy together (the
    maxima taken inside each resample)."""
    from scipy import stats  # heavy: not at the CLI's import time

    kinds = [e.kind for e in entries]
    values = [np.asarray(e.result.values, np.float64) for e in entries]
    floor = np.array([k == "no_memory" for k in kinds])
    ceiling = np.array([k in ("learner", "oracle") for k in kinds])
    rand = np.array([k == "random" for k in kinds])

    def statistic(*samples: np.ndarray, axis: int = -1) -> Any:
        means = np.stack([np.mean(s, axis=axis) for s in samples])
        top = np.max(means[ceiling], axis=0)
        return (top - np.max(means[floor], axis=0)) / (
            top - np.max(means[rand], axis=0)
        )

    h = float(statistic(*values))
    if len(values[0]) < 2 or not math.isfinite(h):
        return math.nan, math.nan, h
    result = stats.bootstrap(
        values,
        statistic,
        paired=True,
        vectorized=True,
        n_resamples=resamples,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return float(interval.low), float(interval.high), h


def versions() -> dict[str, str]:
    """The versions a certificate was made with (evosax has no `__version__`:
    the installed distributions' metadata is the one source for all of them)."""
    return {
        "eqxevo": __version__,
        "jax": version("jax"),
        "equinox": version("equinox"),
        "evosax": version("evosax"),
        "python": platform.python_version(),
    }


def _plain(params: Any) -> Any:
    """Params as plain numbers (scalars) for the provenance."""
    out: dict[str, Any] = {}
    leaves = jax.tree_util.tree_leaves_with_path(eqx.filter(params, eqx.is_array))
    for path, leaf in leaves:
        value = np.asarray(leaf)
        name = jax.tree_util.keystr(path).lstrip(".")
        out[name] = value.item() if value.ndim == 0 else value.tolist()
    return out


__all__ = [
    "CERTIFICATE_STREAM",
    "Certificate",
    "CertificateError",
    "Entry",
    "certify",
    "check_task",
    "headroom_interval",
    "versions",
]
