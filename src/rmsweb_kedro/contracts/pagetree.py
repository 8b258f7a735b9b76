"""The page tree's line grammar, one home: how an observation's accessibility tree text names its interactive
elements. The browser writes it (``web.browser.format_axtree``); everything that reads a recorded tree back (the
browser's :func:`parse_axtree` for a recorded step, the scripted reflector's words for a taken step, evaluate's
step kinds and reference divergences, the reference solver's element counts) parses it here.

One line per node, in page order. An interactive element's line::

    role "name" [id]                      e.g.  link "Help" [2]
    role "name" [id] value="value"        a combobox, or a textbox holding text
    role "name" [id] checked              a ticked checkbox or radio

``role`` has no whitespace; ``name`` and ``value`` are quoted with ``"`` and ``\\`` escaped by a backslash; ``id``
is the element's id, which actions target. Any other line is text the page shows (``heading "Shopwell"``,
``text "..."``): no ``[id]`` right after its closing quote, so it never parses as an element, whatever its text
holds (a quote inside it is escaped).
"""

from __future__ import annotations

import re

from rmsweb_kedro.contracts.schema import Element

#: An element's line: role, the quoted name, the id, and the quoted value when the line carries one.
ELEMENT_LINE = re.compile(r'^(\S+) "((?:[^"\\]|\\.)*)" \[(\d+)\](?: value="((?:[^"\\]|\\.)*)")?')
_ESCAPE = re.compile(r"\\(.)")


def unquote(text: str) -> str:
    """A quoted name or value as the page has it (``\\"`` -> ``"``, ``\\\\`` -> ``\\``)."""
    return _ESCAPE.sub(r"\1", text)


def parse_element_line(line: str) -> Element | None:
    """The element a page-tree line names (id, role, name, value; no tag or box: the text does not hold them), or
    None for a line of text."""
    found = ELEMENT_LINE.match(line)
    if found is None:
        return None
    role, name, element_id, value = found.groups()
    return Element(
        id=int(element_id), role=role, name=unquote(name), value=None if value is None else unquote(value)
    )


def parse_axtree(axtree: str) -> list[Element]:
    """The interactive elements of a page tree's text, in page order (:func:`parse_element_line` of each line)."""
    return [element for line in axtree.splitlines() if (element := parse_element_line(line)) is not None]
