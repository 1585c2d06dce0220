"""Sharding over devices and processes: results identical to one device.

The device count of a JAX process is fixed when it starts, so runs on 2 and 4
host devices, and runs of 2 processes joined by `jax.distributed`, happen in
subprocesses (`tests/sharding_worker.py`); the reference is the same scenarios
run here, on one device without a mesh. Compilation is the cost: each scenario
compiles once per mesh and process, so they are few, each folding several cases.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.random as jr
import numpy as np
import pytest
from helpers import Net, sphere
from sharding_worker import BUILTINS, DISTRIBUTED, SCENARIOS, flatten

import eqxevo
from eqxevo import population_mesh, use_cpu_devices
from eqxevo._src.names import ENVS, NETS
from eqxevo._src.sharding import POPULATION_AXIS, check_divisible, topology

WORKER = Path(__file__).with_name("sharding_worker.py")
ROOT = Path(eqxevo.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference():
    """Every scenario on one device, no mesh: name -> list of leaves."""
    return {name: flatten(scenario(None)) for name, scenario in SCENARIOS.items()}


def worker_env(num_devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={num_devices}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    # The worker must import the eqxevo under test (this worktree), not another.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


def check_finished(processes: list[subprocess.Popen], timeout: float = 900) -> None:
    errors = []
    try:
        for process in processes:
            _, stderr = process.communicate(timeout=timeout)
            if process.returncode != 0:
                errors.append(stderr[-5000:])
                break  # the others wait for it forever: stop them below
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert not errors, "worker failed:\n" + "\n".join(errors)


def assert_same_as_reference(
    path: Path, reference, num_devices: int, names=tuple(SCENARIOS)
) -> None:
    saved = np.load(path)
    prefix = f"{num_devices}/"
    ran = {
        k.removeprefix(prefix).rsplit("/", 1)[0]
        for k in saved.files
        if k.startswith(prefix) and k != f"{prefix}errors"
    }
    assert ran == set(names), ran
    for name in names:
        leaves = reference[name]
        for i, want in enumerate(leaves):
            got = saved[f"{num_devices}/{name}/{i}"]
            assert got.dtype == want.dtype and got.shape == want.shape, name
            # bit-identical, NaNs included
            np.testing.assert_array_equal(
                got, want, err_msg=f"{name} leaf {i} on {num_devices} devices"
            )
        assert f"{num_devices}/{name}/{len(leaves)}" not in saved.files, name
    population_error, promoted_error = saved[f"{num_devices}/errors"]
    size = 2 * num_devices + 1
    assert f"population_size={size} must be divisible" in population_error
    assert f"({num_devices})" in population_error
    assert f"num_promoted={num_devices + 1} must be divisible" in promoted_error


def test_the_sharded_builtins_cover_every_environment_and_network():
    assert {env for env, _, _ in BUILTINS.values()} == set(ENVS)
    assert {net for _, net, _ in BUILTINS.values()} == set(NETS)


@pytest.mark.slow
def test_results_are_identical_on_1_2_and_4_devices(reference, tmp_path):
    # One process with 4 host devices runs every scenario on a 4-device mesh, and
    # those of DISTRIBUTED (every kind of fitness, batching and algorithm family)
    # on a 2-device mesh; the reference is 1 device, no mesh.
    out = tmp_path / "out.npz"
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(out)],
        env=worker_env(4),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    check_finished([process])
    assert_same_as_reference(out, reference, num_devices=4)
    assert_same_as_reference(out, reference, num_devices=2, names=DISTRIBUTED)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_give_the_results_of_one(reference, tmp_path):
    # Two processes with two CPU devices each: a global mesh of 4 devices over
    # gloo collectives.
    out = tmp_path / "out.npz"
    coordinator = f"localhost:{free_port()}"
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                str(out),
                "--coordinator",
                coordinator,
                "--num-processes",
                "2",
                "--process-id",
                str(process_id),
            ],
            env=worker_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for process_id in range(2)
    ]
    check_finished(processes)
    assert int(np.load(out)["num_processes"]) == 2
    # The scenarios that carry every kind of traffic between processes (see
    # DISTRIBUTED); the other built-ins' per-device programs are those of the
    # one-process 4-device run above.
    assert_same_as_reference(out, reference, num_devices=4, names=DISTRIBUTED)


def test_a_one_device_mesh_equals_no_mesh(reference):
    got = flatten(SCENARIOS["evaluate"](population_mesh()))
    for g, w in zip(got, reference["evaluate"], strict=True):
        np.testing.assert_array_equal(g, w)


def test_population_mesh_has_one_population_axis_over_every_device():
    mesh = population_mesh()
    assert mesh.axis_names == (POPULATION_AXIS,)
    assert mesh.size == len(jax.devices())
    assert population_mesh(jax.devices()[:1]).size == 1
    with pytest.raises(ValueError, match="at least one device"):
        population_mesh([])


def test_topology_describes_the_mesh():
    info = topology(population_mesh())
    assert info["num_devices"] == len(jax.devices())
    assert info["num_processes"] == 1
    assert info["platform"] == jax.devices()[0].platform
    assert topology(None)["mesh_axes"] is None


def test_indivisible_sizes_get_a_clear_error():
    with pytest.raises(ValueError, match=r"population_size=6 must be divisible.*\(4\)"):
        check_divisible("population_size", 6, 4)
    with pytest.raises(ValueError, match=r"num_promoted=3 .*e\.g\. 2 or 4"):
        check_divisible("num_promoted", 3, 2)
    check_divisible("population_size", 8, 4)
    check_divisible("population_size", 7, 1)


def test_use_cpu_devices_refuses_once_jax_has_started():
    jax.devices()  # the backend is up
    with pytest.raises(RuntimeError, match="before"):
        use_cpu_devices(2)
    with pytest.raises(ValueError, match="num_devices"):
        use_cpu_devices(0)


def test_evolve_rejects_a_mesh_that_is_not_a_mesh(key):
    strategy = eqxevo.Strategy("snes", Net(key=jr.key(0)), 4)
    with pytest.raises(TypeError, match="mesh"):
        eqxevo.evolve(key, strategy, sphere, num_generations=1, mesh="cpu")  # type: ignore[arg-type]


def test_importing_eqxevo_leaves_jax_unstarted():
    # initialize_distributed and use_cpu_devices must run before JAX starts its
    # backends, and evosax starts them when imported: eqxevo imports it lazily.
    code = (
        "import jax._src.xla_bridge as xb, eqxevo\n"
        "assert not xb.backends_are_initialized()\n"
        "eqxevo.use_cpu_devices(3)\n"
        "import jax\n"
        "assert len(jax.devices()) == 3, jax.devices()\n"
        "from eqxevo import generation_keys\n"
        "assert callable(eqxevo.evolve) and eqxevo.Strategy.__name__ == 'Strategy'\n"
    )
    env = worker_env(1)
    env.pop("XLA_FLAGS")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
