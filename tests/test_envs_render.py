"""The deprecated `eqxevo.envs.render` hands on `eqxevo.plots`' pictures."""

import importlib
import sys

import pytest

from eqxevo import plots


def test_the_old_module_warns_and_hands_on_the_plots(monkeypatch):
    monkeypatch.delitem(sys.modules, "eqxevo.envs.render", raising=False)
    with pytest.warns(DeprecationWarning, match=r"import eqxevo\.plots instead"):
        render = importlib.import_module("eqxevo.envs.render")
    assert render.render_policy is plots.render_policy
    assert render.render_trajectory is plots.render_trajectory
    with pytest.raises(AttributeError, match="no attribute 'plot_fitness'"):
        render.plot_fitness  # noqa: B018
