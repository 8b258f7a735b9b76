"""The package reads as its map: the wings import only downward, in the one order written in ``pyproject.toml``
(``[tool.importlinter]``, checked by import-linter, a maintained tool), every top-level unit has its place in it, and
a module over 700 lines says in its docstring why it is one module."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

import rmsweb_kedro

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(rmsweb_kedro.__file__).parent
CONTRACT = next(
    c
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    if c["type"] == "layers"
)
LONG = 700


def test_the_wings_import_only_downward():
    # its own process: lint-imports configures logging with dictConfig, which disables every existing logger
    lint = subprocess.run(
        [Path(sys.executable).parent / "lint-imports", "--no-cache", "--no-logo", ROOT / "pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "Contracts: 1 kept, 0 broken." in lint.stdout


def test_the_layer_check_finds_an_upward_import():
    """The same layers on the real import graph with one upward import added: the check names it (so a green
    import-linter run above means something)."""
    graph = grimp.build_graph("rmsweb_kedro")
    layers = CONTRACT["layers"]
    assert not graph.find_illegal_dependencies_for_layers(layers=layers, containers={"rmsweb_kedro"})
    graph.add_import(importer="rmsweb_kedro.contracts.schema", imported="rmsweb_kedro.training.loop")
    (found,) = graph.find_illegal_dependencies_for_layers(layers=layers, containers={"rmsweb_kedro"})
    assert (found.importer, found.imported) == ("rmsweb_kedro.contracts", "rmsweb_kedro.training")


def test_every_top_level_unit_has_its_place_and_there_are_few():
    units = {
        p.stem if p.suffix == ".py" else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()
    }
    assert units - {"__main__"} == set(CONTRACT["layers"])
    assert len(units) <= 20


def test_a_long_module_says_why_it_is_one():
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().count("\n")
        if lines > LONG:
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            long[str(path.relative_to(PACKAGE))] = "One module because" in docstring
    assert all(long.values()), long
