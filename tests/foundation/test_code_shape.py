"""The code reads in screens: short functions, and a Salvage-DS trainer split into modules one can hold in mind.

A function's length is its lines from ``def`` to its last line, docstring and comments included (decorators not);
a nested function counts on its own and inside the function around it. The rules:

(a) no function over :data:`LONG_FUNCTION` lines in the wings of :data:`SHORT_WINGS` (the training loop and its
    trainers, episodes, measures): split it into named phases;
(b) elsewhere a function over :data:`LONG_FUNCTION` lines says why in its docstring, with the words
    :data:`SAYS_WHY` ("Long because it wires ...", as a pipeline's ``create_pipeline`` may), or is split;
(c) no module of the Salvage-DS training code (``training/salvage_ds*.py``, or any module of a
    ``training/salvage_ds/`` package) over :data:`LONG_SALVAGE_MODULE` lines.

Fast (the package's ASTs, no imports of it beyond its path). Each failure prints the longest function of every
wing, so the figures travel with the message."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import rmsweb_kedro

PACKAGE = Path(rmsweb_kedro.__file__).parent
LONG_FUNCTION = 80
SHORT_WINGS = ("training", "episodes", "measures")
SAYS_WHY = "Long because"
LONG_SALVAGE_MODULE = 550


@dataclass(frozen=True)
class Function:
    path: str  # relative to the package, e.g. training/loop.py
    line: int
    name: str
    lines: int
    docstring: str

    @property
    def wing(self) -> str:
        """The top-level unit it lives in (``training``, ``settings``)."""
        return self.path.split("/", 1)[0].removesuffix(".py")

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name} ({self.lines} lines)"


def functions_of(source: str, path: str) -> list[Function]:
    """Every function and method of a module's ``source``, nested ones included."""
    return [
        Function(
            path, node.lineno, node.name, node.end_lineno - node.lineno + 1, ast.get_docstring(node) or ""
        )
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


@cache
def functions() -> tuple[Function, ...]:
    """Every function of the package."""
    return tuple(
        function
        for path in sorted(PACKAGE.rglob("*.py"))
        for function in functions_of(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE).as_posix())
    )


def longest_per_wing() -> str:
    """The longest function of every wing, longest first: the figures each failure prints."""
    longest: dict[str, Function] = {}
    for function in functions():
        if function.wing not in longest or function.lines > longest[function.wing].lines:
            longest[function.wing] = function
    ranked = sorted(longest.values(), key=lambda f: (-f.lines, f.wing))
    return "longest function per wing:\n" + "\n".join(f"  {f.wing:<18} {f}" for f in ranked)


def fail(found: list[Function], rule: str) -> None:
    """Fail listing ``found`` (longest first) under ``rule``, then the longest function of every wing; the message
    alone (no traceback, no repr of the values)."""
    listing = "\n".join(f"  {f}" for f in sorted(found, key=lambda f: -f.lines))
    pytest.fail(f"{len(found)} function(s) {rule}:\n{listing}\n{longest_per_wing()}", pytrace=False)


def test_no_long_function_in_the_training_episodes_and_measures_wings():
    long = [f for f in functions() if f.wing in SHORT_WINGS and f.lines > LONG_FUNCTION]
    if long:
        fail(long, f"over {LONG_FUNCTION} lines in {', '.join(SHORT_WINGS)}: split them into named phases")


def test_a_long_function_elsewhere_says_why():
    unexplained = [
        f
        for f in functions()
        if f.wing not in SHORT_WINGS and f.lines > LONG_FUNCTION and SAYS_WHY not in f.docstring
    ]
    if unexplained:
        fail(
            unexplained,
            f"over {LONG_FUNCTION} lines without {SAYS_WHY!r} in the docstring: split them or say why",
        )


def salvage_ds_modules() -> dict[str, int]:
    """Lines of each module of the Salvage-DS training code: ``training/salvage_ds*.py`` and the modules of a
    ``training/salvage_ds/`` package."""
    training = PACKAGE / "training"
    paths = [*training.glob("salvage_ds*.py"), *(training / "salvage_ds").rglob("*.py")]
    return {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(paths)
    }


def test_the_salvage_ds_trainer_is_split_into_short_modules():
    modules = salvage_ds_modules()
    assert modules, "no Salvage-DS training code found under training/: the rule (c) looks in the wrong place"
    long = {path: lines for path, lines in modules.items() if lines > LONG_SALVAGE_MODULE}
    if long:
        pytest.fail(
            f"Salvage-DS training modules over {LONG_SALVAGE_MODULE} lines: {long}; all its modules: {modules}\n"
            + longest_per_wing(),
            pytrace=False,
        )
