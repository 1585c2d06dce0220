"""Every figure eqxevo draws: fitness curves of a run, pictures of a lifetime,
MAP-Elites archives.

See docs/internals.md ("Figures").
"""

import dataclasses
import os
import pathlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from eqxevo._src._checks import int_at_least
from eqxevo._src._types import PRNGKey
from eqxevo._src.envs.arena import AbstractArenaEnv
from eqxevo._src.envs.base import EnvParams
from eqxevo._src.nets.base import AbstractPolicy
from eqxevo._src.qd.archive import Archive, ArchiveState
from eqxevo._src.trajectory import Trajectory, record


def _seed_band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds (axis 0) and its 95% confidence interval (Student's t,
    scipy.stats), per generation; NaN where fewer than two seeds have a value."""
    from scipy import stats

    count = np.sum(np.isfinite(values), axis=0)
    safe = np.where(count > 0, count, 1)
    mean = np.nansum(values, axis=0) / safe
    mean = np.where(count > 0, mean, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        sem = stats.sem(values, axis=0, nan_policy="omit")
    sem = np.asarray(np.ma.filled(sem, np.nan), dtype=float)
    df = np.maximum(count - 1, 1)
    half = np.where(count > 1, stats.t.ppf(0.975, df) * sem, np.nan)
    return mean, mean - half, mean + half


HELDOUT_LABELS = {
    "mean": "distribution mean",
    "best": "best-so-far genome",
}
"""What each held-out series of a run evaluates (`heldout_<genome>_*` fields)."""


def save_figure(figure: Any, path: str | Path, **kwargs: Any) -> Path:
    """Write `figure` to `path` whole or not at all: a temporary name in the same
    folder, then a rename (a full disk or a kill leaves the old figure)."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        figure.savefig(tmp, **kwargs)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


@dataclasses.dataclass(frozen=True)
class ReferenceBand:
    """A reference drawn across a fitness figure: its held-out mean as a dashed
    line and its 95% CI as a band (a task's certified memoryless bound, its
    learner or oracle; `eqxevo._app.experiment.certify.certificate_bands`)."""

    label: str
    mean: float
    low: float
    high: float
    color: str = "0.4"


def draw_bands(ax: Any, bands: Sequence[ReferenceBand]) -> list[tuple[Any, str]]:
    """Draw `bands` on `ax`; their legend entries."""
    from matplotlib.patches import Patch

    entries = []
    for band in bands:
        span = ax.axhspan(band.low, band.high, color=band.color, alpha=0.15, lw=0)
        line = ax.axhline(band.mean, color=band.color, ls="--", lw=1.0)
        span.set(gid="reference band", zorder=0)
        line.set(gid="reference band", zorder=1)
        handle = Patch(facecolor=band.color, alpha=0.3, edgecolor=band.color, ls="--")
        entries.append((handle, band.label))
    return entries


def plot_fitness(
    records: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    title: str | None = None,
    bands: Sequence[ReferenceBand] = (),
) -> Path:
    """Fitness per generation, led by held-out evaluations.

    Held-out evaluations (`heldout_mean_*`, `heldout_best_*` fields, where the
    run made them) are points with 95% CI error bars over their lifetimes; the
    training statistics follow as lines: best so far (training), best and
    mean of each generation. With several seeds each line (and held-out point)
    is the mean over seeds and the band (error bar) its 95% confidence
    interval (Student's t over seeds); the legend says so.

    Arguments:
        records: `metrics.jsonl` records (`eqxevo._app.metrics.history_records`).
        path: where to write the PNG.
        title: the figure's title (default "fitness per generation").
        bands: references drawn across the figure, on the held-out scale (the
            task's certified memoryless bound and its learner or oracle).

    Returns:
        The path written.
    """
    return save_figure(fitness_figure(records, title=title, bands=bands), path)


def fitness_figure(
    records: Sequence[Mapping[str, Any]],
    *,
    title: str | None = None,
    bands: Sequence[ReferenceBand] = (),
) -> Any:
    """The `plot_fitness` figure, a matplotlib `Figure` (drawn on its Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    seeds = sorted({r.get("seed", 0) for r in records})
    generations = sorted({r["generation"] for r in records})
    index = {g: i for i, g in enumerate(generations)}

    def grid(name: str) -> np.ndarray:
        # seeds x generations; NaN where a record lacks the value (held-out
        # evaluations run only every few generations).
        out = np.full((len(seeds), len(generations)), np.nan)
        for r in records:
            value = r.get(name)
            out[seeds.index(r.get("seed", 0)), index[r["generation"]]] = (
                np.nan if value is None else value
            )
        return out

    # A Figure on its own Agg canvas: no pyplot state, the user's backend intact.
    fig = Figure(figsize=(7, 4.4), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    x = np.asarray(generations)
    entries: list[tuple[Any, str]] = []  # legend: held-out first
    for genome, color in (("mean", "black"), ("best", "tab:red")):
        values = grid(f"heldout_{genome}_mean")
        points = np.any(np.isfinite(values), axis=0)
        if not points.any():
            continue
        episodes = int(np.nanmax(grid(f"heldout_{genome}_episodes")))
        what = HELDOUT_LABELS[genome]
        if len(seeds) == 1:
            centre = values[0, points]
            low = grid(f"heldout_{genome}_ci_low")[0, points]
            high = grid(f"heldout_{genome}_ci_high")[0, points]
            label = f"held-out: {what} (95% CI, {episodes} lifetimes)"
        else:
            centre, low, high = _seed_band(values[:, points])
            label = (
                f"held-out: {what} (mean of {len(seeds)} seeds, 95% CI over seeds; "
                f"{episodes} lifetimes each)"
            )
        # No interval (one lifetime, one seed): no bar rather than a NaN one.
        low = np.where(np.isfinite(low), low, centre)
        high = np.where(np.isfinite(high), high, centre)
        handle = ax.errorbar(
            x[points],
            centre,
            yerr=np.stack([centre - low, high - centre]),
            fmt="o-",
            color=color,
            ms=4,
            lw=1.2,
            capsize=3,
            zorder=3,
        )
        entries.append((handle, label))
    colors = {"best_so_far": "tab:blue", "best": "tab:green", "mean": "tab:orange"}
    labels = {
        "best_so_far": "best so far (training)",
        "best": "best of the generation",
        "mean": "population mean",
    }
    banded = False
    for name, color in colors.items():
        values = grid(name)
        if np.all(np.isnan(values)):
            continue
        marker = "o" if len(x) == 1 else None  # one generation: a line is invisible
        if len(seeds) == 1:
            (line,) = ax.plot(x, values[0], color=color, lw=1.5, marker=marker)
            entries.append((line, labels[name]))
        else:
            centre, low, high = _seed_band(values)
            (line,) = ax.plot(x, centre, color=color, marker=marker)
            entries.append((line, f"{labels[name]} (mean of {len(seeds)} seeds)"))
            ax.fill_between(x, low, high, color=color, alpha=0.2, lw=0)
            banded = True
    if banded:
        from matplotlib.patches import Patch

        entries.append(
            (
                Patch(color="0.6", alpha=0.4, lw=0),
                f"band: 95% CI of the mean over {len(seeds)} seeds (t)",
            )
        )
    entries += draw_bands(ax, bands)
    handles, names = zip(*entries, strict=True) if entries else ((), ())
    ax.legend(list(handles), list(names), loc="best", fontsize=8)
    ax.set_xlabel("generation")
    ax.set_ylabel("fitness (higher is better)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.set_title(title or "fitness per generation", fontsize=10, wrap=True)
    return fig


# -- pictures of a lifetime --------------------------------------------------


def _check_env(env: Any) -> AbstractArenaEnv:
    if not isinstance(env, AbstractArenaEnv):
        raise TypeError(
            "pictures need an arena environment (Chemotaxis, Foraging, LongHorizon or "
            "another AbstractArenaEnv) to draw fields and paths; got "
            f"{type(env).__name__}"
        )
    return env


def render_trajectory(
    trajectory: Trajectory,
    env: AbstractArenaEnv,
    env_params: EnvParams,
    path: str | os.PathLike[str],
    *,
    time_index: int = -1,
    resolution: int = 120,
    title: str | None = None,
    dpi: int = 100,
) -> pathlib.Path:
    """Draw a recorded lifetime's path over the field(s) and write a PNG.

    Arguments:
        trajectory: from `eqxevo.record` (one genome).
        env, env_params: the environment and params it was recorded in.
        path: where to write the PNG (parent folders are created).
        time_index: which entry of `trajectory.env_states` the fields and
            landmarks are drawn at (default: the last).
        resolution: grid points per side for the fields.
        title: the figure's title (default: the environment and the fitness).
        dpi: resolution of the PNG.

    Returns:
        The path written.
    """
    figure = trajectory_figure(
        trajectory,
        env,
        env_params,
        time_index=time_index,
        resolution=resolution,
        title=title,
    )
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(figure, out, format="png", dpi=dpi)


def trajectory_figure(
    trajectory: Trajectory,
    env: AbstractArenaEnv,
    env_params: EnvParams,
    *,
    time_index: int = -1,
    resolution: int = 120,
    title: str | None = None,
) -> Any:
    """The `render_trajectory` figure, a matplotlib `Figure` (see there)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    env = _check_env(env)
    resolution = int_at_least("resolution", resolution, 2)
    num_states = int(jtu.tree_leaves(trajectory.env_states)[0].shape[0])
    if not -num_states <= time_index < num_states:
        raise ValueError(
            f"time_index must be in [-{num_states}, {num_states}); got {time_index}"
        )
    state = jtu.tree_map(lambda x: x[time_index], trajectory.env_states)
    half = float(env.arena_half(env_params))
    axis = jnp.linspace(-half, half, resolution, dtype=jnp.float32)
    xs, ys = jnp.meshgrid(axis, axis)
    points = jnp.stack([xs.ravel(), ys.ravel()], axis=-1)
    fields = np.asarray(env.fields(state, env_params, points))
    positions = np.asarray(jax.vmap(env.position)(trajectory.env_states))
    landmarks = np.asarray(env.landmarks(state))
    dones = np.asarray(trajectory.dones)
    # Entry t + 1 is the state after step t; a done at step t (or a death with
    # rebirth elsewhere, L4's "died") ends the segment.
    ends = dones | np.asarray(trajectory.info.get("died", np.zeros_like(dones)), bool)
    breaks = set((np.flatnonzero(ends) + 2).tolist())
    # A jump longer than a quarter of the arena is a respawn, not a path: break
    # there too, so no line crosses the arena.
    jumps = np.linalg.norm(np.diff(positions, axis=0), axis=-1)
    breaks |= set((np.flatnonzero(jumps > half / 2) + 1).tolist())
    segments = np.split(positions, sorted(breaks))

    names = env.field_labels(state)
    figure = Figure(figsize=(4.2 * len(names), 4.4), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    for k, (ax, name) in enumerate(zip(axes, names, strict=True)):
        image = ax.imshow(
            fields[:, k].reshape(resolution, resolution),
            origin="lower",
            extent=(-half, half, -half, half),
            cmap="viridis",
        )
        bar = figure.colorbar(image, ax=ax, shrink=0.8)
        bar.set_label(f"{name} (field value)")
        for n, segment in enumerate(segments):
            if len(segment):
                ax.plot(
                    segment[:, 0],
                    segment[:, 1],
                    color="white",
                    lw=0.9,
                    label="path (broken at episode ends)" if n == 0 else None,
                )
        ax.plot(*positions[0], "o", color="lime", ms=7, label="start")
        ax.plot(*positions[-1], "x", color="red", ms=8, mew=2, label="end")
        ax.plot(
            landmarks[k, :, 0],
            landmarks[k, :, 1],
            "*",
            color="white",
            mec="black",
            ms=10,
            label="sources/patches" + (" at the end" if time_index == -1 else ""),
        )
        ax.set_xlim(-half, half)
        ax.set_ylim(-half, half)
        ax.set_aspect("equal")
        ax.set_xlabel("x (arena units)")
        ax.set_ylabel("y (arena units)")
        ax.set_title(name, fontsize=10)
        ax.legend(
            loc="upper left",
            fontsize=7,
            framealpha=0.6,
            facecolor="0.3",
            labelcolor="white",
        )
    if title is None:
        steps = int(dones.shape[0])
        title = (
            f"{type(env).__name__}: fitness {float(trajectory.fitness):.4g} over "
            f"{steps} steps"
        )
    figure.suptitle(title, fontsize=10, wrap=True)
    return figure


def render_policy(
    key: PRNGKey,
    policy: AbstractPolicy,
    env: AbstractArenaEnv,
    env_params: EnvParams,
    num_steps: int,
    path: str | os.PathLike[str],
    **kwargs: Any,
) -> pathlib.Path:
    """Record one lifetime of `policy` and draw it (`record` + `render_trajectory`).

    Keyword arguments go to `render_trajectory`. Returns the path written.
    """
    trajectory = record(key, policy, _check_env(env), env_params, num_steps)
    return render_trajectory(trajectory, env, env_params, path, **kwargs)


__all__ = [
    "ReferenceBand",
    "draw_bands",
    "fitness_figure",
    "plot_fitness",
    "render_policy",
    "render_trajectory",
    "save_figure",
    "trajectory_figure",
]


def archive_figure(
    archive: Archive,
    contents: ArchiveState,
    *,
    labels: Sequence[str] = ("descriptor 0", "descriptor 1"),
    title: str = "",
) -> Any:
    """A MAP-Elites archive as a heatmap of its elites' fitness over the first
    two descriptor dimensions (a grid's cells as squares, a CVT's as points at
    their centroids; empty cells left blank; over more dimensions, each square
    shows the best elite of the cells above it). The title gives the coverage
    and the QD score."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if archive.descriptor_size < 2:
        raise ValueError(
            f"an archive heatmap needs at least 2 descriptor dimensions; this "
            f"archive has {archive.descriptor_size}"
        )
    fitness = np.asarray(contents.fitness, np.float64)
    filled = np.isfinite(fitness)
    metrics = {k: float(v) for k, v in archive.metrics(contents).items()}
    lo, hi = np.asarray(archive.lower), np.asarray(archive.upper)
    figure = Figure(figsize=(5.6, 4.6))
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    if archive.shape is not None:
        grid = np.where(filled, fitness, -np.inf).reshape(archive.shape)
        grid = grid.reshape(*archive.shape[:2], -1).max(axis=-1)
        grid = np.where(np.isfinite(grid), grid, np.nan)
        image = ax.imshow(
            grid.T,
            origin="lower",
            extent=(lo[0], hi[0], lo[1], hi[1]),
            aspect="auto",
            cmap="viridis",
            interpolation="nearest",
        )
    else:
        centroids = np.asarray(archive.centroids)
        ax.scatter(*centroids[~filled, :2].T, s=4, color="0.85", label="empty")
        image = ax.scatter(
            *centroids[filled, :2].T, c=fitness[filled], s=8, cmap="viridis"
        )
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
    figure.colorbar(image, ax=ax, label="elite fitness")
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    summary = (
        f"coverage {100 * metrics['coverage']:.1f}% of {archive.num_cells} cells, "
        f"QD score {metrics['qd_score']:.4g}"
    )
    ax.set_title(f"{title}\n{summary}" if title else summary, fontsize=10)
    figure.tight_layout()
    return figure
