"""An import inside a function is one docs/architecture.md lists, with its reason."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_eqxevo_module(name: str) -> bool:
    path = ROOT / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported(node: ast.Import | ast.ImportFrom, module: str, path: Path) -> set[str]:
    """The modules one import statement reads: `X` of `from X import name`, and
    of `from . import name` the module `name` where it is one."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    if node.module is not None:
        return {base}
    modules = {f"{base}.{alias.name}" for alias in node.names}
    return {name if _is_eqxevo_module(name) else base for name in modules}


def imports_inside_functions() -> set[tuple[str, str]]:
    """(module, imported module) for every import under a function of eqxevo/."""
    found = set()
    for path in sorted((ROOT / "eqxevo").rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found |= {(module, name) for name in _imported(node, module, path)}
    return found


def documented() -> set[tuple[str, str]]:
    """The `module -> imported, ...` entries of docs/architecture.md's "Imports
    inside functions" section."""
    text = (ROOT / "docs/architecture.md").read_text()
    section = text.split("## Imports inside functions\n", 1)[1].split("\n## ", 1)[0]
    entries = set()
    for module, names in re.findall(r"`(eqxevo[\w.]*) -> ([\w., ]+)`", section):
        entries |= {(module, name.strip()) for name in names.split(",")}
    return entries


def test_every_import_inside_a_function_is_documented_and_nothing_else():
    found, listed = imports_inside_functions(), documented()
    assert found, "the scan found no import inside a function"
    missing = sorted(f"{m} -> {n}" for m, n in found - listed)
    stale = sorted(f"{m} -> {n}" for m, n in listed - found)
    assert not missing, (
        "imports inside functions that docs/architecture.md does not list (move "
        f"them to the module's top, or list them with their reason): {missing}"
    )
    assert not stale, f"docs/architecture.md lists imports the code lacks: {stale}"
