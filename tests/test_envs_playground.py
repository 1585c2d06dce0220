"""The MuJoCo Playground adapter: the protocol, names and config overrides, MJX's
JAX implementation, truncation, non-finite states, no files written, and
observation normalisation by default."""

import pytest
from helpers import check_physics_step

from eqxevo import LifetimeFitness
from eqxevo._app import config
from eqxevo._src.registry import lookup_env
from eqxevo.envs import PlaygroundEnv
from eqxevo.experiment import build
from eqxevo.testing import check_env

pytest.importorskip("mujoco_playground", reason="the playground extra is in dev")


@pytest.fixture(scope="module")
def cartpole():
    return PlaygroundEnv("CartpoleBalance", episode_length=3)


def test_playground_environment_meets_the_protocol(cartpole):
    check_env(cartpole, num_steps=4)
    assert (cartpole.obs_size, cartpole.action_size) == (5, 1)
    assert cartpole.action_center == (0.0,) and cartpole.action_scale == (1.0,)


def test_runs_on_mjx_jax_implementation_never_warp(cartpole):
    from mujoco.mjx import Impl

    assert cartpole.inner_env.mjx_model.impl == Impl.JAX


def test_episodes_truncate_and_a_non_finite_state_ends_one(cartpole):
    rewards = check_physics_step(cartpole, action_size=1, episode_length=3)
    assert all(0.0 <= r <= 1.0 for r in rewards)  # the suite's rewards
    # the suite's episode length is the default
    assert PlaygroundEnv("CartpoleBalance").episode_length == 1000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "CartpoleBalanse"}, "did you mean 'playground:CartpoleBalance'"),
        ({"name": "Go1JoystickFlatTerrain"}, "needs MuJoCo Menagerie"),
        ({"name": "CartpoleBalance", "impl": "warp"}, "impl must be 'jax'"),
        ({"name": "CartpoleBalance", "vision": True}, "pixel observations"),
        ({"name": "CartpoleBalance", "no_such_key": 1}, "has no config key"),
        ({"name": "CartpoleBalance", "sim_dt": [0.01]}, "numbers, booleans"),
        ({"name": "CartpoleBalance", "episode_length": 0}, "an int >= 1"),
    ],
)
def test_bad_input_is_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        PlaygroundEnv(**kwargs)
    assert "\n" not in str(err.value)


def test_loading_a_model_that_warns_writes_no_file_and_prints_nothing(
    tmp_path, monkeypatch, capfd
):
    # CheetahRun's model uses an attribute MuJoCo's compiler deprecates: MuJoCo
    # would print it from C and append it to MUJOCO_LOG.TXT in the working
    # directory.
    monkeypatch.chdir(tmp_path)
    env = PlaygroundEnv("CheetahRun", ctrl_dt=0.02, sim_dt=0.01)
    assert (env.obs_size, env.action_size) == (17, 6)
    assert list(tmp_path.iterdir()) == []
    assert "WARNING" not in capfd.readouterr().out


def test_config_names_playground_environments_and_normalises_by_default():
    constructor, fixed = lookup_env("playground:CartpoleBalance")
    assert constructor is PlaygroundEnv and fixed == {"name": "CartpoleBalance"}
    with pytest.raises(ValueError, match="did you mean 'playground:WalkerWalk'"):
        lookup_env("playground:WalkerWalck")
    built = build(
        config.load(
            None,
            [
                "env.name=playground:CartpoleBalance",
                "env.options.episode_length=5",
                "run.lifetime=5",
            ],
        )
    )
    assert isinstance(built.fitness, LifetimeFitness)
    assert built.fitness.normalize_obs


def test_a_missing_extra_is_one_line_with_the_install_command(monkeypatch, capsys):
    from eqxevo._src.envs import playground
    from eqxevo._src.envs.physics import quiet_import

    def load():
        print("a library's import-time chatter")
        import no_such_physics_library  # noqa: F401  # pyright: ignore

    def missing():
        return quiet_import(load, playground.INSTALL, "MuJoCo Playground environments")

    monkeypatch.setattr(playground, "_registry", missing)
    with pytest.raises(ValueError, match=r'pip install "eqxevo\[playground\]"') as err:
        lookup_env("playground:CartpoleBalance")
    assert "\n" not in str(err.value)
    assert capsys.readouterr().out == ""
