"""The fast tier (`pytest -m fast`, tests/fast_tier.txt) holds tests of every test
file, and only tests that exist and are not marked slow."""

import ast
from pathlib import Path

from conftest import FAST_TIER

TESTS = Path(__file__).resolve().parent


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    }


def _slow(node: ast.FunctionDef) -> bool:
    return any(ast.unparse(d) == "pytest.mark.slow" for d in node.decorator_list)


def test_every_test_file_has_tests_in_the_fast_tier():
    # tests/ mirrors the modules, so a tier with tests of every file exercises
    # every module (a file whose tests are all slow, test_study_executor.py,
    # tests a module the study runner's tests run too)
    files = {
        path.name
        for path in TESTS.glob("test_*.py")
        if not all(_slow(f) for f in _functions(path).values())
    }
    tiered = {node_id.split("::")[0] for node_id in FAST_TIER}
    assert files <= tiered, f"no test in tests/fast_tier.txt: {sorted(files - tiered)}"


def test_every_fast_tier_entry_is_a_test_not_marked_slow():
    wrong = []
    for node_id in sorted(FAST_TIER):
        file, name = node_id.split("::")[:2]
        functions = _functions(TESTS / file) if (TESTS / file).exists() else {}
        function = functions.get(name.split("[")[0])
        if function is None:
            wrong.append(f"{node_id}: no such test")
        elif _slow(function):
            wrong.append(f"{node_id}: marked slow")
    assert not wrong, wrong
