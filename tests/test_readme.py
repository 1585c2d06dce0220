"""The README's quick start and examples stay true."""

import re
from pathlib import Path

import numpy as np
from helpers import tree_equal

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_quick_start_is_exactly_two_commands():
    block = README.split("<!-- quickstart")[1]
    commands = next(c for c in _blocks("bash") if c in block).strip().splitlines()
    assert len(commands) == 2
    assert "eqxevo run" in commands[0] and "pip install ." in commands[0]
    assert '".[dev]"' in commands[1] and "pytest" in commands[1]


def test_readme_example_and_hand_written_loop_agree():
    example, loop = _blocks("python")[:2]
    namespace: dict = {}
    exec(compile(example, "README example", "exec"), namespace)
    result = namespace["result"]
    assert result.history["best"].shape == (300,)
    # evolution beats a constant predictor by a wide margin
    assert -float(result.best_fitness) < 0.1 * float(np.var(namespace["ys"]))
    exec(compile(loop, "README loop", "exec"), namespace)
    assert tree_equal(namespace["state"], result.state)


def test_every_test_the_docs_name_exists():
    # docs/reproducibility.md and the others name the test behind each promise
    # (`test_file.py::test_name`, or a name prefix ending in "_"); a renamed or
    # folded test must not leave a promise pointing at nothing.
    root = Path(__file__).resolve().parent.parent
    named = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for file, name in re.findall(r"(test_\w+\.py)::(test_\w+)", doc.read_text()):
            named.append((doc.name, file, name))
    assert len(named) > 20
    missing = []
    for doc, file, name in named:
        path = root / "tests" / file
        source = path.read_text() if path.exists() else ""
        pattern = rf"def {re.escape(name)}" + ("" if name.endswith("_") else r"\(")
        if not re.search(pattern, source):
            missing.append(f"{doc}: {file}::{name}")
    assert missing == []
