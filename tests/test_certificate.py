"""Headroom certificates: every policy on the same held-out lifetimes, h and its
interval, the cache, and the tasks a certificate refuses."""

import json
import math
import re
from importlib import metadata
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from click.testing import CliRunner
from jaxtyping import Array, Int
from scipy import stats

from eqxevo import LifetimeFitness, Strategy, evolve
from eqxevo._app.cli import main
from eqxevo._src.certificate import (
    CERTIFICATE_STREAM,
    Certificate,
    CertificateError,
    Entry,
    certify,
    headroom_interval,
)
from eqxevo._src.envs.params import count
from eqxevo._src.heldout import heldout_genomes, summarize
from eqxevo._src.memoryless_search import SearchBudget, SearchSetting, search_memoryless
from eqxevo._src.references import references, score_references
from eqxevo._src.runs import take
from eqxevo.envs import AbstractEnv, AbstractParams, IndependentBandit
from eqxevo.nets import MLPPolicy

H = 20
TINY = SearchBudget(
    population_size=8,
    generations=4,  # the last quarter is generation 4: candidates at 3 and 4
    seeds=1,
    lifetimes=1,
    width=4,
    depth=1,
    settings=(SearchSetting("snes", (("std_init", 0.3),)),),
)


def test_a_certificate_scores_references_and_the_search_on_the_same_lifetimes():
    env = IndependentBandit(2)
    params = env.default_params()
    params = eqx.tree_at(lambda p: p.episode_length, params, jnp.int32(H))
    key = jr.key(3)
    cert = certify(key, env, params, H, num_episodes=64, budget=TINY, resamples=500)

    # the declared references, oracle (privileged) included, then the search's
    # best and mean genomes, all on the certificate's held-out lifetimes
    refs = references(env, params)
    names = [e.name for e in cert.entries]
    assert names[: len(refs)] == [r.name for r in refs]
    assert [(e.name, e.early) for e in cert.entries if e.evolved] == [
        ("evolved MLP (snes std_init=0.3, seed 0, mean, generation 3)", True),
        ("evolved MLP (snes std_init=0.3, seed 0, best, generation 3)", True),
        ("evolved MLP (snes std_init=0.3, seed 0, mean)", False),
        ("evolved MLP (snes std_init=0.3, seed 0, best)", False),
    ]
    held = jr.fold_in(jr.split(key)[1], CERTIFICATE_STREAM)
    again = score_references(held, LifetimeFitness(env, params, H), refs, 64)
    for entry, scored in zip(cert.entries, again, strict=False):
        np.testing.assert_array_equal(entry.result.values, scored.result.values)

    # h from the entries' means, its interval around it
    means = {e.name: e.result.mean for e in cert.entries}
    kinds = {e.name: e.kind for e in cert.entries}
    floor = max(m for n, m in means.items() if kinds[n] == "no_memory")
    ceiling = max(m for n, m in means.items() if kinds[n] in ("learner", "oracle"))
    assert cert.ceiling.name == "oracle"
    assert cert.floor.result.mean == floor
    assert cert.headroom == pytest.approx(
        (ceiling - floor) / (ceiling - means["random"]), rel=1e-9
    )
    assert cert.headroom_low <= cert.headroom <= cert.headroom_high
    learners = {n: m for n, m in means.items() if kinds[n] == "learner"}
    best = max(learners, key=learners.get)
    stds = {e.name: e.result.std for e in cert.entries}
    assert cert.learner_record() == pytest.approx(
        {
            "name": best,
            "mean": learners[best],
            "headroom": (learners[best] - floor) / (learners[best] - means["random"]),
            "gap_in_std": (learners[best] - floor) / stds[best],
        }
    )
    assert cert.memoryless_genome is not None
    record = cert.summary()
    assert record["provenance"]["budget"]["settings"] == [
        {"algorithm": "snes", "params": {"std_init": 0.3}}
    ]
    assert record["provenance"]["task"]["lifetime"] == H
    # how much the last quarter raised the bound, from which policy
    early = cert.early_floor
    assert early is not None and not (early.evolved and not early.early)
    assert record["late_rise"]["from"] == early.name
    gain = cert.floor.result.mean - early.result.mean
    assert record["late_rise"]["gain"] == pytest.approx(gain, abs=1e-9)
    assert record["still_improving"] == cert.still_improving
    # every library's version is recorded (evosax has no __version__)
    assert record["provenance"]["versions"]["evosax"] == metadata.version("evosax")
    json.dumps(record)  # plain values only


def _entries(values: dict[str, tuple[str, np.ndarray]]) -> list[Entry]:
    return [Entry(n, k, summarize(v)) for n, (k, v) in values.items()]


def test_the_headroom_interval_is_a_paired_percentile_bootstrap():
    rng = np.random.default_rng(0)
    n = 400
    shared = rng.normal(0, 5, n)  # lifetimes' luck, common to every policy
    values = {
        "random": ("random", 10 + shared + rng.normal(0, 1, n)),
        "reflex": ("no_memory", 30 + shared + rng.normal(0, 1, n)),
        "other reflex": ("no_memory", 28 + shared + rng.normal(0, 1, n)),
        "learner": ("learner", 50 + shared + rng.normal(0, 1, n)),
    }
    low, high, h = headroom_interval(_entries(values), 4000, seed=1)
    mean = {name: v.mean() for name, (_, v) in values.items()}
    floor = max(mean["reflex"], mean["other reflex"])
    assert h == pytest.approx(
        (mean["learner"] - floor) / (mean["learner"] - mean["random"]), rel=1e-12
    )
    # a NumPy percentile bootstrap over lifetimes, every policy resampled together
    idx = np.random.default_rng(2).integers(0, n, (4000, n))
    m = {name: v[idx].mean(axis=1) for name, (_, v) in values.items()}
    boot = (m["learner"] - np.maximum(m["reflex"], m["other reflex"])) / (
        m["learner"] - m["random"]
    )
    np_low, np_high = np.percentile(boot, [2.5, 97.5])
    assert low == pytest.approx(np_low, abs=3e-3)
    assert high == pytest.approx(np_high, abs=3e-3)
    # the shared luck cancels: paired, the interval is narrow
    assert high - low < 0.02
    # no spread at all: the interval is the value itself
    flat = {
        k: (kind, np.full(8, c))
        for k, (kind, c) in {
            "random": ("random", 1.0),
            "reflex": ("no_memory", 2.0),
            "learner": ("learner", 5.0),
        }.items()
    }
    low, high, h = headroom_interval(_entries(flat), 200, seed=0)
    assert low == pytest.approx(0.75) and high == pytest.approx(0.75) and h == 0.75


def test_the_early_candidates_are_the_same_runs_state_at_three_quarters():
    # one run, no second search: its genomes at generation 3 of 4 and at 4
    env = IndependentBandit(2)
    params = env.default_params()
    params = eqx.tree_at(lambda p: p.episode_length, params, jnp.int32(H))
    key = jr.key(5)
    found = search_memoryless(key, env, params, H, TINY)
    net_key, run_key = jr.split(jr.fold_in(key, 0))
    mlp = MLPPolicy(env.obs_size, env.action_size, 4, 1, key=net_key)
    strategy = Strategy("snes", mlp, 8, maximize=True, params={"std_init": 0.3})
    fitness = LifetimeFitness(env, params, H, lifetimes=1)
    by_name = {c.name: c for c in found}
    for stop, at in ((3, ", generation 3"), (4, "")):
        state = evolve(run_key, strategy, fitness, num_generations=stop, num_seeds=1)
        want = heldout_genomes(strategy, take(state.state, 0))
        for which in ("mean", "best"):
            got = by_name[f"evolved MLP (snes std_init=0.3, seed 0, {which}{at})"]
            assert got.early == (stop == 3)
            assert eqx.tree_equal(got.genome, want[which])


def _cert(values: dict[str, tuple[str, np.ndarray]], early: set[str] = frozenset()):
    entries = tuple(
        Entry(n, k, summarize(v), n.startswith("net"), n in early)
        for n, (k, v) in values.items()
    )
    return Certificate(entries, 0.6, 0.6, 0.6, None, {})


def test_the_last_quarters_rise_of_the_bound_is_a_paired_test():
    rng = np.random.default_rng(0)
    n = 64
    luck = rng.normal(0, 10, n)  # shared by every policy on a lifetime
    base = {
        "random": ("random", luck),
        "reflex": ("no_memory", 40 + luck + rng.normal(0, 1, n)),
        "learner": ("learner", 100 + luck),
    }
    # the final network beats the early one by 5 (of a span of 100): a rise
    rising = base | {
        "net early": ("no_memory", 45 + luck + rng.normal(0, 1, n)),
        "net end": ("no_memory", 50 + luck + rng.normal(0, 1, n)),
    }
    cert = _cert(rising, {"net early"})
    assert cert.early_floor.name == "net early" and cert.floor.name == "net end"
    gain, p = cert.late_rise()
    diff = cert.floor.result.values - cert.early_floor.result.values
    assert gain == pytest.approx(diff.mean())
    assert p == pytest.approx(stats.ttest_rel(diff, np.zeros(n)).pvalue / 2)
    assert cert.still_improving
    line = cert.lines()[-1]
    assert "still improving when its budget ran out" in line and "net early" in line
    assert cert.summary()["late_rise"]["from"] == "net early"
    # a rise of 1 (1% of the span) is a plateau; so is a bound the end did not set
    flat = base | {
        "net early": ("no_memory", 45 + luck + rng.normal(0, 1, n)),
        "net end": ("no_memory", 46 + luck + rng.normal(0, 1, n)),
    }
    assert not _cert(flat, {"net early"}).still_improving
    held = base | {"net end": ("no_memory", 30 + luck)}
    assert _cert(held).late_rise() == (0.0, 1.0)  # the reflex is the bound
    # a rise of 5 that noise explains is not a rise
    noisy = base | {
        "net early": ("no_memory", 45 + rng.normal(0, 40, n)),
        "net end": ("no_memory", 50 + rng.normal(0, 40, n)),
    }
    assert _cert(noisy, {"net early"}).late_rise()[1] > 0.01
    assert not _cert(noisy, {"net early"}).still_improving
    # nothing to compare with: only the end's networks are memoryless
    alone = {k: v for k, v in rising.items() if k not in ("reflex", "net early")}
    assert all(map(math.isnan, _cert(alone).late_rise()))
    assert not _cert(alone).still_improving
    assert cert.summary()["still_improving"] is True
    assert _cert(alone).summary()["late_rise"] == {
        "gain": None,
        "p": None,
        "from": None,
    }


class Steps(AbstractParams):
    episode_length: Int[Array, ""] = count(4)


class NoReferences(AbstractEnv):
    """A task that declares no references: only random, by default."""

    obs_size: int = 1
    action_size: int = 1

    def default_params(self):
        return Steps()

    def reset(self, key, params):
        del key, params
        return jnp.zeros((1,), jnp.float32), jnp.zeros((), jnp.int32)

    def step(self, key, state, action, params):
        del key, params
        reward = jnp.sum(action).astype(jnp.float32)
        return jnp.zeros((1,), jnp.float32), state + 1, reward, state >= 3, {}


class VectorReward(NoReferences):
    """A task whose reward is a vector: no certificate can be made for it."""

    def step(self, key, state, action, params):
        obs, state, reward, done, info = super().step(key, state, action, params)
        return obs, state, jnp.stack([reward, reward]), done, info


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            VectorReward(2),
            "needs a scalar float reward per step; its step gives "
            "float32 of shape (2,)",
        ),
        (NoReferences(), "NoReferences declares no learner or oracle reference"),
    ],
)
def test_a_task_a_certificate_cannot_measure_is_refused_in_one_line(
    env, message, tmp_path, monkeypatch
):
    with pytest.raises(CertificateError, match=re.escape(message)):
        certify(jr.key(0), env, env.default_params(), 4, num_episodes=4, budget=None)
    # from the command line: one line, nothing written
    monkeypatch.setenv("EQXEVO_CERTIFICATES", str(tmp_path / "certs"))
    name = f"test_certificate:{type(env).__name__}"
    result = CliRunner().invoke(
        main, ["certify", "--set", f"env.name={name}", "--set", "run.lifetime=4"]
    )
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and message.split(";")[0] in result.output
    assert not (tmp_path / "certs").exists()


def test_certify_caches_its_certificate_and_eval_normalises_against_it(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("EQXEVO_CERTIFICATES", str(tmp_path / "certs"))
    task = ["env.name=bandit", f"env.params.episode_length={H}", f"run.lifetime={H}"]
    sets = [a for item in task for a in ("--set", item)]
    runner = CliRunner()
    small = ["--quick", "--population", "8", "--generations", "2", "--episodes", "16"]
    made = runner.invoke(main, ["certify", *sets, *small, "--quiet"])
    assert made.exit_code == 0, made.output
    assert "headroom h = (oracle - " in made.output
    assert "certificate written: " in made.output
    folder = made.output.split("certificate written: ")[1].strip()
    record = json.loads(Path(folder, "certificate.json").read_text())
    assert record["provenance"]["budget"]["population_size"] == 8
    assert record["genome_sha256"]
    cached = runner.invoke(main, ["certify", *sets, *small, "--quiet"])
    assert cached.exit_code == 0, cached.output
    assert cached.output.startswith(f"cached certificate: {folder}\n")

    net = ["net.name=mlp", "strategy.population_size=8", "run.generations=2"]
    ran = runner.invoke(
        main,
        [
            "run",
            *sets,
            *[a for i in net for a in ("--set", i)],
            "--out",
            str(tmp_path / "runs"),
            "--name",
            "r",
            "--quiet",
        ],
    )
    assert ran.exit_code == 0, ran.output
    evaluated = runner.invoke(main, ["eval", str(tmp_path / "runs" / "r")])
    assert evaluated.exit_code == 0, evaluated.output
    lines = evaluated.output.splitlines()
    assert any(
        line.startswith("  certified memoryless MLP (no_memory)") for line in lines
    )
    assert lines[-1].startswith(f"headroom certificate: h = {record['headroom']:.3f}")
    fields = json.loads(
        runner.invoke(main, ["eval", str(tmp_path / "runs" / "r"), "--json"]).output
    )
    assert fields["certificate"]["headroom"] == pytest.approx(record["headroom"])


def test_a_ceiling_without_spread_gives_an_infinite_gap_and_plain_json():
    # CueReward's oracle answers every trial right: the same score every lifetime
    entries = _entries(
        {
            "random": ("random", np.array([0.0, 2.0, -2.0])),
            "constant": ("no_memory", np.array([0.0, 1.0, -1.0])),
            "oracle": ("oracle", np.array([40.0, 40.0, 40.0])),
        }
    )
    low, high, h = headroom_interval(entries, 200, seed=0)
    cert = Certificate(tuple(entries), h, low, high, None, {})
    assert cert.gap_in_learner_std == math.inf
    record = cert.summary()
    assert record["gap_in_learner_std"] is None and record["headroom"] == 1.0
    json.dumps(record, allow_nan=False)
