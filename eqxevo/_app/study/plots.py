"""A study's figures, labelled for a paper: learning curves with CI bands, final
fitness per cell, a performance profile (each returns its `Figure`).
"""

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..figures import ReferenceBand, draw_bands, save_figure


def _figure(width: float = 7.5, height: float = 4.5, ncols: int = 1) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(1, ncols, squeeze=False)[0]


def _save(fig: Any, path: str | Path | None) -> Any:
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig


def learning_curves(
    bands: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    seeds: int,
    path: str | Path | None = None,
    *,
    ylabel: str = "population mean fitness",
    references: Sequence[ReferenceBand] = (),
) -> Any:
    """One line per cell: the mean over seeds per generation, shaded by its 95%
    BCa bootstrap CI (`eqxevo._app.study.intervals.curve_band`); references
    across it as labelled bands.

    Arguments:
        bands: `{cell: (mean, ci_low, ci_high)}`, each `(generations,)`.
        seeds: seeds per cell (for the legend).
        path: PNG to write (None: only return the figure).
        references: the task's certified memoryless bound and best learner or
            oracle (`eqxevo._app.figures.ReferenceBand`), on the fitness scale.
    """
    fig, (ax,) = _figure()
    reference_entries = draw_bands(ax, references)
    for cell, (mean, low, high) in bands.items():
        x = np.arange(mean.size)
        (line,) = ax.plot(x, mean, lw=1.6, label=cell)
        if np.isfinite(low).any():
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xlabel("generation")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel.capitalize()} per generation")
    ax.grid(alpha=0.3)
    # No band at all: too few seeds for a CI (`intervals.MIN_RUNS_FOR_CI`).
    banded = any(np.isfinite(low).any() for _, low, _ in bands.values())
    handles, labels = ax.get_legend_handles_labels()
    handles += [h for h, _ in reference_entries]
    labels += [label for _, label in reference_entries]
    ax.legend(
        handles,
        labels,
        title=f"mean ± 95% CI over {seeds} seeds"
        if banded
        else f"mean over {seeds} seeds (n too small for a CI)",
        fontsize=8,
        title_fontsize=8,
        loc="best",
    )
    return _save(fig, path)


def final_fitness(
    cells: Any,
    summary: Any,
    metrics: Sequence[tuple[str, str]],
    path: str | Path | None = None,
) -> Any:
    """One panel per metric: every run as a dot, and per cell the mean with its
    95% BCa bootstrap CI.

    Arguments:
        cells: the cells table (one row per complete run).
        summary: the summary table (one row per cell).
        metrics: `(column, label)` pairs, one panel each.
        path: PNG to write (None: only return the figure).
    """
    names = list(summary["cell"])
    fig, axes = _figure(
        max(4.0, 1.2 * len(names) + 2.0) * len(metrics), 4.5, len(metrics)
    )
    rng = np.random.default_rng(0)  # horizontal jitter of the dots only
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        for i, cell in enumerate(names):
            values = cells.loc[cells["cell"] == cell, metric].dropna().to_numpy()
            ax.scatter(
                i + rng.uniform(-0.12, 0.12, values.size),
                values,
                s=14,
                color="0.45",
                zorder=2,
                label="one run" if i == 0 else None,
            )
        row = summary.set_index("cell").loc[names]
        mean = row[f"{metric}_mean"].to_numpy(np.float64)
        low = row[f"{metric}_ci_low"].to_numpy(np.float64)
        high = row[f"{metric}_ci_high"].to_numpy(np.float64)
        ax.errorbar(
            np.arange(len(names)),
            mean,
            yerr=np.stack([mean - low, high - mean]),
            fmt="o",
            color="tab:red",
            capsize=5,
            zorder=3,
            label="mean, 95% bootstrap CI"
            if np.isfinite(low).any()
            else "mean (n too small for a CI)",
        )
        ax.set_xticks(np.arange(len(names)), names, rotation=20, ha="right")
        ax.set_xlabel("cell")
        ax.set_ylabel(label)
        ax.set_title(f"{label.capitalize()} per cell")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    return _save(fig, path)


def performance_profile(
    cells: Any,
    metric: str,
    label: str,
    path: str | Path | None = None,
) -> Any:
    """Fraction of each cell's runs scoring above tau (a performance profile,
    Agarwal et al. 2021): the empirical survival function, shaded by its
    pointwise 95% CI (`scipy.stats.ecdf`, Greenwood's formula)."""
    from scipy import stats

    scores = {
        cell: group[metric].dropna().to_numpy(np.float64)
        for cell, group in cells.groupby("cell", sort=False)
    }
    scores = {k: v for k, v in scores.items() if v.size}
    fig, (ax,) = _figure()
    if scores:
        everything = np.concatenate(list(scores.values()))
        span = max(float(np.ptp(everything)), 1e-9)
        taus = np.linspace(
            everything.min() - 0.05 * span, everything.max() + 0.05 * span, 201
        )
        for cell, values in scores.items():
            sf = stats.ecdf(values).sf
            profile = sf.evaluate(taus)
            (line,) = ax.step(taus, profile, where="post", lw=1.6, label=cell)
            if values.size > 1:
                with warnings.catch_warnings():
                    # Greenwood's CI is undefined (NaN) where the estimate is 0
                    # or 1: scipy warns, and no band is drawn there.
                    warnings.filterwarnings(
                        "ignore",
                        message="The confidence interval is undefined",
                        category=RuntimeWarning,
                    )
                    ci = sf.confidence_interval(0.95)
                low, high = ci.low.evaluate(taus), ci.high.evaluate(taus)
                low = np.where(np.isnan(low), profile, low)
                high = np.where(np.isnan(high), profile, high)
                ax.fill_between(
                    taus, low, high, step="post", color=line.get_color(), alpha=0.15
                )
    ax.set_xlabel(f"{label} (τ)")
    ax.set_ylabel("fraction of runs with score > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Performance profile: {label}")
    ax.grid(alpha=0.3)
    ax.legend(title="pointwise 95% CI (Greenwood)", fontsize=8, title_fontsize=8)
    return _save(fig, path)


__all__ = ["final_fitness", "learning_curves", "performance_profile"]
