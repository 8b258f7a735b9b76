"""Page scripts are .js files shipped as package data: every one under src/ is matched by pyproject's package-data
(so a non-editable install has it) and loads without its leading comment lines."""

from __future__ import annotations

import tomllib
from pathlib import Path

from rmsweb_kedro.web.page_scripts import load_script

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "rmsweb_kedro"


def test_every_page_script_is_package_data_and_loads() -> None:
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {path for pattern in patterns["rmsweb_kedro"] for path in PACKAGE.glob(pattern)}
    scripts = set(PACKAGE.rglob("*.js"))
    assert scripts and scripts == shipped
    for path in scripts:
        package = ".".join(path.parent.relative_to(PACKAGE.parent).parts)
        text = load_script(package, path.name)
        assert text and not text.startswith("//") and not text.endswith("\n"), path
        assert text in path.read_text()
