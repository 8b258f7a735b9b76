"""Page scripts: the JavaScript the browser env evaluates in pages and the sandbox sites put into their documents,
kept as ``.js`` files (package data) next to the code that uses them and read once per process."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def load_script(package: str, name: str) -> str:
    """The text of the file ``name`` of ``package``, without its leading ``//`` lines (they say why the script
    exists) and its final newline: exactly what goes to the page."""
    lines = resources.files(package).joinpath(name).read_text(encoding="utf-8").splitlines()
    while lines and lines[0].startswith("//"):
        lines.pop(0)
    return "\n".join(lines)
