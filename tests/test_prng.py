"""`eqxevo.fast_cpu_prng`: what the unrolled threefry lowering keeps and changes.

The lowering is registered for a whole process, so both sides run in child
processes (`tests/prng_worker.py`), one with the call and one without; this
process never calls it.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import eqxevo
import eqxevo._src.bits

WORKER = Path(__file__).with_name("prng_worker.py")
ROOT = Path(eqxevo.__file__).resolve().parents[1]
ALGORITHMS = ("SNES", "CMA_ES", "Sep_CMA_ES", "SimpleGA")
L0_ALGORITHMS = ("CMA_ES", "Sep_CMA_ES")  # prng_worker.py's


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    # the children import the eqxevo under test (this worktree), not another
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """What the worker saved with the unrolled lowering and with JAX's default."""
    folder = tmp_path_factory.mktemp("prng")
    modes = ("unrolled", "default")
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(folder / f"{mode}.npz"), mode],
            env=child_env(),
            cwd=WORKER.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode in modes
    ]
    errors = []
    for process in processes:
        _, stderr = process.communicate(timeout=600)
        if process.returncode != 0:
            errors.append(stderr[-5000:])
    assert not errors, "worker failed:\n" + "\n".join(errors)
    return tuple(np.load(folder / f"{mode}.npz") for mode in modes)


@pytest.mark.slow
def test_children_used_different_lowerings(both):
    unrolled, default = both
    assert int(default["while_loops"]) >= 1  # JAX's rolled 5-trip loop
    assert int(unrolled["while_loops"]) == 0


def test_unrolled_threefry_gives_identical_random_draws(both):
    unrolled, default = both
    names = [k for k in default.files if k.startswith("random/")]
    assert len(names) == 5
    for name in names:
        np.testing.assert_array_equal(unrolled[name], default[name], err_msg=name)


@pytest.mark.parametrize("algorithm", L0_ALGORITHMS)
def test_unrolled_threefry_gives_identical_l0_runs(both, algorithm):
    unrolled, default = both
    names = [k for k in default.files if k.startswith(f"l0/{algorithm}/")]
    assert len(names) > 10
    for name in names:
        got, want = unrolled[name], default[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)  # NaNs equal


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_unrolled_threefry_first_generation_agrees_to_float_rounding(both, algorithm):
    # Not bit for bit: with other kernels around it, XLA:CPU may compile the
    # fitness's float arithmetic (exp, log1p, sin, tanh, max) differently, by an
    # ulp; the population (from the same random bits) is the same, so the first
    # generation's statistics agree to float32 rounding.
    unrolled, default = both
    for statistic in ("best", "mean", "min", "max"):
        name = f"stranger/{algorithm}/first/{statistic}"
        np.testing.assert_allclose(
            unrolled[name], default[name], rtol=1e-6, err_msg=name
        )


def test_import_leaves_jax_threefry_lowering_alone(both):
    # In both children: importing eqxevo (and what the worker imports besides)
    # left JAX's CPU lowering registered; only `fast_cpu_prng()` replaced it.
    unrolled, default = both
    for saved in both:
        assert str(saved["lowering/at_import"]) == "default"
        assert not bool(saved["active/at_import"])
    assert str(unrolled["lowering/called"]) == "unrolled"
    assert bool(unrolled["active/called"])
    assert str(default["lowering/called"]) == "default"
    assert not bool(default["active/called"])


def test_missing_private_api_warns_once_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(eqxevo._src.bits, "_threefry", lambda: None)
    monkeypatch.setattr(eqxevo._src.bits, "_warned", False)
    with pytest.warns(RuntimeWarning, match="keeping JAX's default threefry"):
        assert eqxevo.fast_cpu_prng() is False
    assert eqxevo.fast_cpu_prng() is False  # no second warning (they are errors)
    assert eqxevo._src.bits.fast_cpu_prng_active() is False
