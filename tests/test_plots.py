import jax.random as jr
import pytest
from test_metrics import chunk

from eqxevo import record
from eqxevo.agents import BraitenbergAgent, ForagerAgent
from eqxevo.envs import Chemotaxis, Foraging
from eqxevo.metrics import history_records
from eqxevo.plots import plot_fitness, render_policy, render_trajectory

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
