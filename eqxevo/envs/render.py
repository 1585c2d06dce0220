"""Pictures of a lifetime: the agent's path over the arena's field(s), as a PNG.

    trajectory = eqxevo.record(policy, env, params, key, 1000)
    render_trajectory(trajectory, env, params, "path.png")
    # or in one call:
    render_policy(policy, env, params, key, 1000, "path.png")

One panel per field (L0 has one, L2 and L4 one per resource type). The field is
drawn as it was at `time_index` (by default the end of the lifetime: patches
deplete and sources drift), the path is white and broken where an episode
ended or the body died, the start is a green circle, the end a red cross, and the
sources or patches at `time_index` are white stars. Matplotlib draws on its Agg
canvas directly: no display and no global pyplot state are needed.
"""

import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from .._types import PRNGKey
from ..nets.base import AbstractPolicy
from ..rollout import Trajectory, record
from .arena import AbstractArenaEnv
from .base import EnvParams


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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    env = _check_env(env)
    if not isinstance(resolution, int) or resolution < 2:
        raise ValueError(f"resolution must be an int >= 2; got {resolution!r}")
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
    breaks = np.flatnonzero(ends) + 2
    segments = np.split(positions, breaks)

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
        figure.colorbar(image, ax=ax, shrink=0.8)
        for segment in segments:
            if len(segment):
                ax.plot(segment[:, 0], segment[:, 1], color="white", lw=0.9)
        ax.plot(*positions[0], "o", color="lime", ms=7, label="start")
        ax.plot(*positions[-1], "x", color="red", ms=8, mew=2, label="end")
        ax.plot(landmarks[k, :, 0], landmarks[k, :, 1], "*", color="white", ms=10)
        ax.set_xlim(-half, half)
        ax.set_ylim(-half, half)
        ax.set_aspect("equal")
        ax.set_title(name)
    if title is None:
        steps = int(dones.shape[0])
        title = (
            f"{type(env).__name__}: fitness {float(trajectory.fitness):.4g} over "
            f"{steps} steps"
        )
    figure.suptitle(title)
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png", dpi=dpi)
    return out


def render_policy(
    policy: AbstractPolicy,
    env: AbstractArenaEnv,
    env_params: EnvParams,
    key: PRNGKey,
    num_steps: int,
    path: str | os.PathLike[str],
    **kwargs: Any,
) -> pathlib.Path:
    """Record one lifetime of `policy` and draw it (`record` + `render_trajectory`).

    Keyword arguments go to `render_trajectory`. Returns the path written.
    """
    trajectory = record(policy, _check_env(env), env_params, key, num_steps)
    return render_trajectory(trajectory, env, env_params, path, **kwargs)


__all__ = ["render_policy", "render_trajectory"]
