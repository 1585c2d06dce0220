import textwrap

import jax.numpy as jnp
import optax
import pytest
from evosax.algorithms import SNES, algorithms

import eqxevo
from eqxevo import PresetError
from eqxevo._src.presets import load_preset, preset_dir, preset_names
from eqxevo._src.registry import lookup_strategy

REQUIRED_PRESETS = {
    "snes",
    "open_es",
    "cma_es",
    "sep_cma_es",
    "pgpe",
    "simple_ga",
    "differential_evolution",
}


def test_required_presets_ship_and_load():
    assert set(preset_names()) >= REQUIRED_PRESETS
    for name in preset_names():
        preset = load_preset(preset_dir() / f"{name}.toml")
        assert preset.paper, f"preset {name} must cite its paper"
        assert preset.cls in algorithms.values()


def test_strategies_lists_every_algorithm_and_preset():
    rows = eqxevo.strategies()
    names = {r.name for r in rows}
    assert set(algorithms) <= names
    assert names >= REQUIRED_PRESETS
    assert {r.family for r in rows} == {"distribution", "population", "stein"}


def test_resolve_accepts_every_form(tmp_path, monkeypatch):
    assert lookup_strategy("CMA_ES").cls is algorithms["CMA_ES"]
    assert lookup_strategy(SNES).cls is SNES
    instance = SNES(population_size=4, solution=jnp.zeros(3))
    assert lookup_strategy(instance).instance is instance
    assert lookup_strategy("snes").source.startswith("preset:")
    path = tmp_path / "mine.toml"
    path.write_text('algorithm = "SNES"\npaper = "x"\n[params]\nstd_init = 0.3\n')
    assert lookup_strategy(str(path)).params == {"std_init": 0.3}
    module = tmp_path / "my_es.py"
    module.write_text(
        textwrap.dedent(
            """
            from evosax.algorithms import SNES
            class MySNES(SNES):
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    resolved = lookup_strategy("my_es:MySNES")
    assert resolved.cls.__name__ == "MySNES" and issubclass(resolved.cls, SNES)


def test_preset_builds_optax_and_evosax_objects():
    preset = load_preset(preset_dir() / "open_es.toml")
    assert isinstance(preset.kwargs["optimizer"], optax.GradientTransformation)
    assert callable(preset.kwargs["std_schedule"])
    assert preset.kwargs["std_schedule"](0) == pytest.approx(0.05)
    pgpe = load_preset(preset_dir() / "pgpe.toml")
    assert isinstance(pgpe.kwargs["optimizer"], optax.GradientTransformation)


def test_unknown_algorithm_names_close_matches():
    with pytest.raises(ValueError, match=r"'CMA_ES'.*strategies\(\)"):
        lookup_strategy("CMA-ES")
    with pytest.raises(ValueError, match=r"'snes'|'SNES'"):
        lookup_strategy("Snes")
    with pytest.raises(ValueError, match="algorithm=3"):
        lookup_strategy(3)


def test_import_spec_must_name_an_evosax_subclass(tmp_path, monkeypatch):
    (tmp_path / "not_es.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="not a subclass"):
        lookup_strategy("not_es:Thing")
    with pytest.raises(ValueError, match="no 'Missing'"):
        lookup_strategy("not_es:Missing")
    with pytest.raises(ValueError, match="cannot import"):
        lookup_strategy("no_such_module_xyz:Thing")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("algorithm = [", "is not valid TOML"),
        ('algorithm = "SNEZ"', "did you mean SNES"),
        ('algorithm = "SNES"\ncolour = 1', r"unknown keys \['colour'\]"),
        (
            'algorithm = "SNES"\n[kwargs]\nlearning = 1',
            r"\['learning'\] are not arguments",
        ),
        (
            'algorithm = "SNES"\n[params]\nstd_init = "big"',
            "params.std_init must be a number",
        ),
        (
            'algorithm = "SNES"\n[kwargs]\noptimizer = { optax = "nope" }',
            "no public function",
        ),
        ('algorithm = "SNES"\n[kwargs]\noptimizer = { lr = 1 }', "must name an optax"),
        (
            'algorithm = "SNES"\n[kwargs]\nfitness_shaping_fn = "zscore"',
            "is not one of",
        ),
    ],
)
def test_malformed_preset_is_reported_with_file_and_key(tmp_path, text, match):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PresetError, match=match) as info:
        load_preset(path)
    assert str(path) in str(info.value)
