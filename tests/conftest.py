"""Test configuration: strict dtype promotion, seeded keys, a small Hypothesis profile.

beartype checking of every eqxevo function is switched on by
`--jaxtyping-packages=eqxevo,beartype.beartype` in pyproject.toml.
"""

import gc
import os
import shutil
import tempfile
import zlib
from pathlib import Path

# One persistent compilation cache for the whole session, set before JAX is
# imported: the test workers and the CLIs the tests start share compiled programs
# (the same executables, so the same bits). Made by the first process (pytest's
# own), inherited by the rest, removed at the end.
_CACHE_MADE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _CACHE_MADE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="eqxevo-tests-")
# Headroom certificates go to a folder of the session's own, never the user's
# cache (`eqxevo certify`, `eqxevo eval` and run figures look them up); tests
# that make certificates point this at their own folder.
_CERTIFICATES_MADE = "EQXEVO_CERTIFICATES" not in os.environ
if _CERTIFICATES_MADE:
    os.environ["EQXEVO_CERTIFICATES"] = tempfile.mkdtemp(prefix="eqxevo-certs-")
# Every program, not only those compiling for a second or more (JAX's default):
# the suite's programs are small, compiled again in each module (caches are
# cleared between modules, below) and in every CLI the tests start.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import hypothesis  # noqa: E402
import jax  # noqa: E402
import jax.random as jr  # noqa: E402
import pytest  # noqa: E402

# eqxevo itself must be strict-clean; evosax is not, and eqxevo traces it under
# standard promotion on purpose (see strategy.base.standard_promotion).
jax.config.update("jax_numpy_dtype_promotion", "strict")

hypothesis.settings.register_profile(
    "eqxevo",
    # Compilation dominates: few, small examples; no deadline (first calls compile).
    max_examples=int(os.environ.get("EQXEVO_HYPOTHESIS_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[
        hypothesis.HealthCheck.too_slow,
        hypothesis.HealthCheck.function_scoped_fixture,
        hypothesis.HealthCheck.data_too_large,
    ],
    print_blob=True,
)
hypothesis.settings.load_profile("eqxevo")


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A per-test seed (override with EQXEVO_TEST_SEED); printed for reruns."""
    value = int(
        os.environ.get("EQXEVO_TEST_SEED", zlib.crc32(request.node.nodeid.encode()))
    )
    print(f"test seed: {value} (rerun with EQXEVO_TEST_SEED={value})")
    return value


@pytest.fixture
def key(seed: int) -> jax.Array:
    return jr.key(seed)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Free each test module's compiled programs when it ends.

    XLA:CPU maps every compiled program's code into the process. A test worker
    that kept every program of the suite reached 47,000 memory maps, near
    Linux's `vm.max_map_count` (65,530), and a worker past it crashed inside
    XLA's compiler (a segmentation fault or an abort while compiling, in
    whichever test came next)."""
    yield
    jax.clear_caches()
    gc.collect()


FAST_TIER = {
    line
    for line in (Path(__file__).with_name("fast_tier.txt")).read_text().splitlines()
    if line and not line.startswith("#")
}
"""The node ids (relative to tests/) of the fast tier, `pytest -m fast`."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fast tier's tests are marked `fast` (tests/fast_tier.txt). Files
    holding `slow` tests run first, each file's tests kept together,
    so `pytest -n auto` does not end with one worker alone on a long test.
    `--dist worksteal` (pyproject.toml) gives each worker a contiguous half and
    moves tests from the end of the busier one's queue, so a module's tests
    mostly run in one worker: its module fixtures and compiled programs made
    once (xdist's default, `load`, deals the first tests round-robin)."""
    for item in items:
        if item.nodeid.removeprefix("tests/") in FAST_TIER:
            item.add_marker(pytest.mark.fast)
    slow = {
        item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")
    }
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the main process cleans
        return
    if _CACHE_MADE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
    if _CERTIFICATES_MADE:
        shutil.rmtree(os.environ["EQXEVO_CERTIFICATES"], ignore_errors=True)
