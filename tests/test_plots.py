import jax.random as jr
import numpy as np
import pytest
from test_metrics import chunk

from eqxevo import record
from eqxevo._app.figures import (
    ReferenceBand,
    fitness_figure,
    plot_fitness,
    render_trajectory,
    trajectory_figure,
)
from eqxevo._app.metrics import history_records
from eqxevo.agents import BraitenbergAgent, ForagerAgent
from eqxevo.envs import Chemotaxis, Foraging
from eqxevo.experiment import render_policy

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ENV = Chemotaxis()
PARAMS = ENV.default_params()


@pytest.fixture(scope="module")
def trajectory():
    return record(jr.key(0), BraitenbergAgent(), ENV, PARAMS, 40)


def test_render_writes_a_png_of_the_path_over_the_field(tmp_path, trajectory):
    path = render_trajectory(
        trajectory, ENV, PARAMS, tmp_path / "pictures" / "l0.png", resolution=16
    )
    assert path == tmp_path / "pictures" / "l0.png"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_render_policy_draws_one_panel_per_field(tmp_path, key, trajectory):
    from matplotlib.image import imread

    env = Foraging(num_resources=3, patches_per_resource=2)
    params = env.default_params()
    one = render_policy(
        key, ForagerAgent(3), env, params, 30, tmp_path / "l2.png", resolution=16
    )
    single = render_trajectory(
        trajectory, ENV, PARAMS, tmp_path / "l0.png", resolution=16
    )
    # Three panels make a wider picture than one, at the same height.
    wide, narrow = imread(one), imread(single)
    assert wide.shape[0] == narrow.shape[0] and wide.shape[1] > 2 * narrow.shape[1]


def test_render_rejects_environments_without_an_arena(tmp_path, key):
    from test_rollout import ENV, PARAMS, Accumulator

    trajectory = record(key, Accumulator(), ENV, PARAMS, 3)
    with pytest.raises(TypeError, match="arena"):
        render_trajectory(trajectory, ENV, PARAMS, tmp_path / "x.png")


def test_render_rejects_a_time_index_out_of_range(tmp_path, trajectory):
    with pytest.raises(ValueError, match="time_index"):
        render_trajectory(trajectory, ENV, PARAMS, tmp_path / "x.png", time_index=41)


@pytest.mark.parametrize("seeds", [None, 3])
def test_plot_fitness_writes_a_png(tmp_path, seeds):
    path = plot_fitness(
        history_records(chunk(list(range(6)), seeds)), tmp_path / "f.png"
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _assert_labels(ax, xlabel, ylabel, legend):
    assert (ax.get_xlabel(), ax.get_ylabel()) == (xlabel, ylabel)
    assert _legend_texts(ax) == legend


def test_fitness_figure_has_labels_a_title_and_integer_ticks():
    records = history_records(chunk(list(range(6))))
    (ax,) = fitness_figure(records, title="run r: chemotaxis").axes
    assert ax.get_title() == "run r: chemotaxis"
    legend = ["best so far (training)", "best of the generation", "population mean"]
    _assert_labels(ax, "generation", "fitness (higher is better)", legend)
    ticks = ax.get_xticks()
    assert np.all(ticks == np.round(ticks))  # whole generations only


def test_reference_bands_are_labelled_lines_with_their_intervals():
    from eqxevo._app.study.plots import learning_curves

    bands = [
        ReferenceBand(
            "certified memoryless bound: reflex (10.0, 95% CI)", 10.0, 9.0, 11.0
        ),
        ReferenceBand(
            "best learner or oracle: oracle (20.0, 95% CI)", 20.0, 19.5, 21.0
        ),
    ]
    records = history_records(chunk(list(range(6))))
    (ax,) = fitness_figure(records, bands=bands).axes
    assert _legend_texts(ax)[-2:] == [b.label for b in bands]
    drawn = [a for a in ax.get_children() if a.get_gid() == "reference band"]
    spans = sorted(
        (round(a.get_y(), 6), round(a.get_y() + a.get_height(), 6))
        for a in drawn
        if a not in ax.lines
    )
    assert spans == [(9.0, 11.0), (19.5, 21.0)]
    lines = {float(a.get_ydata()[0]) for a in drawn if a in ax.lines}
    assert lines == {10.0, 20.0}
    curve = {"cell": (np.arange(5.0), np.full(5, np.nan), np.full(5, np.nan))}
    (ax,) = learning_curves(curve, 2, references=bands).axes
    assert _legend_texts(ax) == ["cell", *[b.label for b in bands]]


def test_fitness_band_across_seeds_is_a_95_percent_ci_and_says_so():
    from scipy import stats

    records = history_records(chunk(list(range(4)), seeds=3))
    for r in records:  # seeds differ: 0, 1, 2 added to every value
        r["best_so_far"] += r["seed"]
    fig = fitness_figure(records)
    (ax,) = fig.axes
    texts = _legend_texts(ax)
    assert "best so far (training) (mean of 3 seeds)" in texts
    assert texts[-1] == "band: 95% CI of the mean over 3 seeds (t)"
    band = ax.collections[0].get_paths()[0].vertices
    low, high = band[:, 1].min(), band[:, 1].max()
    values = np.array([0.0, 1.0, 2.0])
    half = stats.t.ppf(0.975, 2) * stats.sem(values)
    # generation 0 has values 0, 1, 2 (mean 1); generation 3 has 3, 4, 5
    assert low == pytest.approx(1.0 - half) and high == pytest.approx(4.0 + half)


def test_trajectory_figure_labels_axes_colour_bars_and_markers(trajectory):
    fig = trajectory_figure(trajectory, ENV, PARAMS, resolution=16)
    panel, colourbar = fig.axes
    legend = [
        "path (broken at episode ends)",
        "start",
        "end",
        "sources/patches at the end",
    ]
    _assert_labels(panel, "x (arena units)", "y (arena units)", legend)
    assert colourbar.get_ylabel() == "concentration (field value)"
    assert fig.get_suptitle().startswith("Chemotaxis: fitness ")


# -- MAP-Elites archives ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["grid", "cvt", "grid 3d"])
def test_an_archive_heatmap_is_labelled_and_says_its_coverage(tmp_path, kind):
    import jax.numpy as jnp

    from eqxevo._app.figures import archive_figure, save_figure
    from eqxevo._src.qd.archive import Archive

    archive = {
        "grid": lambda: Archive.grid((8, 6), 0.0, 1.0),
        "cvt": lambda: Archive.cvt(40, [0.0, 0.0], [1.0, 1.0], key=jr.key(0)),
        "grid 3d": lambda: Archive.grid((4, 4, 3), 0.0, 1.0),
    }[kind]()
    d = archive.descriptor_size
    points = jr.uniform(jr.key(1), (30, d))
    contents, _ = archive.insert(
        archive.init(1), jnp.ones((30, 1)), jnp.sum(points, -1), points
    )
    figure = archive_figure(archive, contents, labels=("x (m)", "y (m)"), title="arm")
    ax = figure.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x (m)", "y (m)")
    filled = int(jnp.sum(contents.filled))
    coverage = 100 * filled / archive.num_cells
    assert ax.get_title() == (
        f"arm\ncoverage {coverage:.1f}% of {archive.num_cells} cells, QD score "
        f"{float(jnp.sum(jnp.where(contents.filled, contents.fitness, 0))):.4g}"
    )
    assert figure.axes[1].get_ylabel() == "elite fitness"
    path = save_figure(figure, tmp_path / "archive.png")
    assert path.stat().st_size > 1000


def test_an_archive_heatmap_needs_two_descriptor_dimensions():
    from eqxevo._app.figures import archive_figure
    from eqxevo._src.qd.archive import Archive

    archive = Archive.grid((5,), 0.0, 1.0)
    with pytest.raises(ValueError, match="needs at least 2 descriptor dimensions"):
        archive_figure(archive, archive.init(1))
