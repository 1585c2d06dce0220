"""The public API is what eqxevo and its faces export (eqxevo/__init__.py and
the modules beside it); docs/architecture.md lists it. Everything else lives in
the private packages eqxevo/_src (the library) and eqxevo/_app (the application)."""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "eqxevo",
    "eqxevo.nets",
    "eqxevo.envs",
    "eqxevo.agents",
    "eqxevo.experiment",
    "eqxevo.study",
    "eqxevo.testing",
    "eqxevo.qd",
)
BUDGET = 130
"""At most this many public names across the faces (the goal: about 120; 125
before quality-diversity's five)."""


def _file(package: str) -> Path:
    if package == "eqxevo":
        return ROOT / "eqxevo" / "__init__.py"
    return ROOT / (package.replace(".", "/") + ".py")


def exported(package: str) -> set[str]:
    """Names a face exports: `from .m import X as X`, and the names it loads on
    first use (a `_LAZY` table, or `name == "X"` in a module `__getattr__`)."""
    tree = ast.parse(_file(package).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names |= {
                a.asname
                for a in node.names
                if a.asname == a.name and not a.name.startswith("__")
            }
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets
        ):
            assert isinstance(node.value, ast.Dict)
            names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            for compare in ast.walk(node):
                if isinstance(compare, ast.Compare) and isinstance(
                    compare.comparators[0], ast.Constant
                ):
                    names.add(compare.comparators[0].value)
    return names


def documented() -> dict[str, set[str]]:
    """The lists under docs/architecture.md's "Public API" heading."""
    text = (ROOT / "docs/architecture.md").read_text()
    section = text.split("## Public API", 1)[1].split("\n## ", 1)[0]
    out = {}
    pattern = r"^- `(eqxevo[\w.]*)`: (.+?)(?=^- `|\Z)"
    for match in re.finditer(pattern, section, re.M | re.S):
        out[match[1]] = set(re.findall(r"`(\w+)`", match[2]))
    return out


def test_every_face_is_listed_in_the_docs_and_nothing_else():
    listed = documented()
    assert set(listed) == set(PACKAGES)
    for package in PACKAGES:
        got, want = exported(package), listed[package]
        assert got == want, (
            f"{package}: exported but not listed {sorted(got - want)}; listed but "
            f"not exported {sorted(want - got)} (docs/architecture.md, Public API)"
        )


def test_the_public_api_stays_small():
    total = sum(len(exported(p)) for p in PACKAGES)
    assert total <= BUDGET, f"{total} public names (budget {BUDGET})"


def test_every_other_module_is_private():
    # A module a user can import is either a face or sits under a name that says
    # it is private: moving it breaks nobody.
    faces = {_file(p) for p in PACKAGES} | {ROOT / "eqxevo" / "__main__.py"}
    public = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "eqxevo").rglob("*.py"))
        if path not in faces
        and not any(part.startswith("_") for part in path.relative_to(ROOT).parts[1:-1])
        and not path.name.startswith("_")
    ]
    assert not public, f"modules neither a face nor private: {public}"
    assert {p.name for p in (ROOT / "eqxevo").iterdir() if p.is_dir()} <= {
        "_src",
        "_app",
        "__pycache__",
    }


def test_the_library_never_imports_the_application():
    # eqxevo/_src is the library: it imports nothing from eqxevo/_app nor a face.
    offenders = []
    for path in sorted((ROOT / "eqxevo" / "_src").rglob("*.py")):
        package = list(path.relative_to(ROOT).parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module.startswith("eqxevo") and not module.startswith("eqxevo._src"):
                offenders.append(f"{path.relative_to(ROOT)}: {module}")
    assert not offenders, offenders


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    missing = []
    for name in sorted(exported(package)):
        if package == "eqxevo.envs" and name == "GymnaxEnv":
            continue  # the optional gymnax adapter: tests/test_envs_gymnax.py
        try:
            getattr(module, name)
        except AttributeError:
            missing.append(name)
    assert not missing, f"{package} exports names it cannot give: {missing}"


def test_no_module_imports_another_modules_private_names():
    # `from .x import _y` or `x._y`: a protocol other modules use is public
    offenders = []
    for path in sorted((ROOT / "eqxevo").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                offenders += [
                    f"{path.relative_to(ROOT)}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not offenders, offenders
