"""The documentation site (mkdocs.yml: docs/ and the API reference in docs/api/)
builds without a warning, and its API reference covers the public API."""

import os
import re
import subprocess
import sys
from pathlib import Path

from test_public_api import PACKAGES, documented

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api"


def _page(package: str) -> Path:
    return API / ("eqxevo.md" if package == "eqxevo" else f"{package[7:]}.md")


def test_the_docs_site_builds_strict(tmp_path):
    # --strict turns every warning into a failure: a broken link or anchor in
    # docs/ (mkdocs.yml's validation), a docstring griffe cannot parse, an API
    # entry that names nothing.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner
    command = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        str(tmp_path / "site"),
        "--config-file",
        str(ROOT / "mkdocs.yml"),
    ]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not re.search(r"^(WARNING|ERROR)", output, re.M), output
    assert (tmp_path / "site" / "api" / "nets" / "index.html").exists()


def test_the_api_reference_has_an_entry_for_every_public_name():
    # One `::: path` per name on its package's page (docs/api/<package>.md);
    # the path may be where the name is defined (a name loaded on first use, or
    # one that shares its module's name), so only its last part is compared.
    wanted = documented()
    assert set(wanted) == set(PACKAGES)
    for package, names in wanted.items():
        paths = re.findall(r"^::: ([\w.]+)", _page(package).read_text(), re.M)
        entries = {p.rsplit(".", 1)[1] for p in paths if p != package}
        assert entries == names, (
            f"{_page(package).relative_to(ROOT)}: missing {sorted(names - entries)}, "
            f"not public {sorted(entries - names)}"
        )
