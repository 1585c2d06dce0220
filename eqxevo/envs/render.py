"""Deprecated: pictures of a lifetime moved to `eqxevo.plots`."""

from .._deprecated import moved

moved("eqxevo.envs.render", "eqxevo.plots")

from ..plots import (  # noqa: E402
    render_policy as render_policy,
    render_trajectory as render_trajectory,
)
