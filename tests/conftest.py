"""Test configuration: strict dtype promotion, seeded keys, a small Hypothesis profile.

beartype checking of every eqxevo function is switched on by
`--jaxtyping-packages=eqxevo,beartype.beartype` in pyproject.toml.
"""

import os
import zlib

import hypothesis
import jax
import jax.random as jr
import pytest

# eqxevo itself must be strict-clean; evosax is not, and eqxevo traces it under
# standard promotion on purpose (see strategy._standard_promotion).
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


@pytest.fixture(autouse=True)
def _no_persistent_cache_in_this_process(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`eqxevo study run` switches on JAX's persistent compilation cache for its
    own process. Called in-process (click's CliRunner) it would do so for this
    test worker for good, pointed at a temporary directory that other processes
    write too; a worker compiled against such a cache crashed in XLA. Studies run
    in child processes keep it (tests/test_study_runner.py)."""
    if request.node.module.__name__.startswith("test_study"):
        monkeypatch.setattr(
            "eqxevo.study.executor.use_compilation_cache", lambda out: None
        )
