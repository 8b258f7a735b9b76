"""The page tree's line grammar (contracts/pagetree.py): what parses as an element, what must not, and the round trip
through the browser's writer. Real sandbox pages walk through it in tests/web/test_browser.py."""

from __future__ import annotations

import pytest

from rmsweb_kedro.contracts.pagetree import parse_axtree, parse_element_line
from rmsweb_kedro.web.browser import format_axtree


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('link "Help" [2]', (2, "link", "Help", None)),
        ('combobox "Sort by" [11] value="Relevance"', (11, "combobox", "Sort by", "Relevance")),
        ('textbox "Search" [4] value="blue \\"scarf\\""', (4, "textbox", "Search", 'blue "scarf"')),
        ('checkbox "Free delivery" [8] checked', (8, "checkbox", "Free delivery", None)),
        ('link "Say \\"hi\\" \\\\ bye" [9]', (9, "link", 'Say "hi" \\ bye', None)),
        ('button "" [0]', (0, "button", "", None)),
        ('menuitem-radio "[3]" [5]', (5, "menuitem-radio", "[3]", None)),
    ],
)
def test_an_element_line_parses_to_its_id_role_name_and_value(line: str, expected: tuple) -> None:
    element = parse_element_line(line)
    assert element is not None
    assert (element.id, element.role, element.name, element.value) == expected


@pytest.mark.parametrize(
    "line",
    [
        'heading "Shopwell"',  # text the page shows: no id
        'text "Order \\" [12] placed"',  # an escaped quote then " [12]" inside text is still text
        '  link "Help" [2]',  # indented: the writer never indents
        'link "Help" [x]',  # the id is a number
        'link "Help" [-2]',
        'link "Help" 2',
        'link "Help"[2]',  # one space before the id
        "link Help [2]",  # unquoted name
        'link "Help [2]',  # unterminated name
        '"Help" [2]',  # no role
        "",
    ],
)
def test_lines_that_are_not_elements_do_not_parse(line: str) -> None:
    assert parse_element_line(line) is None


def test_a_tree_written_by_the_browser_reads_back_as_its_elements() -> None:
    """format_axtree -> parse_axtree keeps id, role, name and the value the line carries (a combobox's, a
    textbox's text); text lines between them are passed over."""
    items = [
        {"kind": "heading", "text": 'A "quoted" [1] heading'},
        {"kind": "element", "id": 1, "role": "link", "name": "Help \\ me", "value": None, "tag": "a"},
        {"kind": "text", "text": 'price [2] "x"'},
        {"kind": "element", "id": 2, "role": "combobox", "name": "Sort", "value": 'a "b"', "tag": "select"},
        {"kind": "element", "id": 3, "role": "textbox", "name": "Search", "value": "shoes", "tag": "input"},
        {"kind": "element", "id": 4, "role": "checkbox", "name": "Sale", "value": "true", "tag": "input"},
        {"kind": "element", "id": 5, "role": "textbox", "name": "Empty", "value": "", "tag": "input"},
    ]
    text, elements = format_axtree([{**item, "bbox": [0, 0, 1, 1]} for item in items])
    parsed = parse_axtree(text)
    assert [(e.id, e.role, e.name) for e in parsed] == [(e.id, e.role, e.name) for e in elements]
    # a line carries a combobox's value and a textbox's text, no other
    assert [e.value for e in parsed] == [None, 'a "b"', "shoes", None, None]
    assert parse_axtree("") == []
