"""Run one benchmark function in a fresh Python process, with its own device count
and JAX configuration; the harness's own process never changes JAX's."""

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax

from eqxevo._src._checks import positive_int
from eqxevo._src.sharding import use_cpu_devices


class ChildFailed(RuntimeError):
    """A benchmark child process exited with an error (its traceback is above)."""


@dataclasses.dataclass(frozen=True)
class Child:
    """What `call` returns.

    Attributes:
        result: the function's return value, through JSON.
        startup_s: seconds from the child's start to calling the function
            (importing the function's module, configuring JAX).
        process_s: seconds the child process ran, seen from the parent.
    """

    result: Any
    startup_s: float
    process_s: float


def call(
    target: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    num_devices: int = 1,
    jax_config: Mapping[str, Any] | None = None,
) -> Child:
    """Call `target` (`"package.module:function"`) with `kwargs` in a child process.

    Arguments:
        target: the function, importable in a fresh process.
        kwargs: its keyword arguments (JSON-able).
        num_devices: CPU devices the child exposes (`eqxevo.use_cpu_devices`).
        jax_config: `jax.config` options the child sets before anything runs
            (e.g. `{"jax_compilation_cache_dir": path}`).

    Raises:
        ChildFailed: the child exited with an error.
    """
    if ":" not in target:
        raise ValueError(f"target must be 'package.module:function'; got {target!r}")
    positive_int("num_devices", num_devices)
    with tempfile.TemporaryDirectory(prefix="eqxevo-bench-") as folder:
        out = Path(folder) / "result.json"
        spec = {
            "target": target,
            "kwargs": dict(kwargs or {}),
            "num_devices": num_devices,
            "jax_config": dict(jax_config or {}),
            "out": str(out),
        }
        env = dict(os.environ)
        # the child imports this eqxevo, installed or not
        root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "eqxevo._app.bench.spawn", json.dumps(spec)],
            env=env,
            check=False,
        )
        process_s = time.perf_counter() - start
        if done.returncode != 0:
            raise ChildFailed(
                f"{target} on {num_devices} device(s) exited with status "
                f"{done.returncode} (its traceback is above)"
            )
        payload = json.loads(out.read_text())
    return Child(payload["result"], payload["startup_s"], process_s)


def _child(argument: str) -> None:
    start = time.perf_counter()
    spec = json.loads(argument)

    # before the target's module is imported: it may start JAX's backends
    use_cpu_devices(spec["num_devices"])
    for name, value in spec["jax_config"].items():
        jax.config.update(name, value)
    module, name = spec["target"].split(":", 1)
    function = getattr(importlib.import_module(module), name)
    startup_s = time.perf_counter() - start
    result = function(**spec["kwargs"])
    Path(spec["out"]).write_text(
        json.dumps({"result": result, "startup_s": startup_s}, default=str)
    )


if __name__ == "__main__":
    _child(sys.argv[1])


__all__ = ["Child", "ChildFailed", "call"]
