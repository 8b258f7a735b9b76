"""What the sites' task templates are written with: :class:`Draft` (one template instance) and the reference
steps the templates share (cookie banner, search, choose, pick, submit, answer...), with their decision points,
longer routes and equivalents (docs/sandbox.md, "Reference solution format")."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rmsweb_kedro.web.sandbox.reference import ReferenceStep, answer_thought, make_step

Pools = dict[str, list[str]]


@dataclass
class Draft:
    """One template instance before it becomes a Task."""

    instruction: str
    params: dict[str, Any]
    steps: list[ReferenceStep]
    judge: dict[str, Any]


#: A task template: (the site's data, a seeded generator, the value pools it may draw from) -> an instance, or
#: None when this draw has none (the generator draws again).
Template = Callable[[Any, random.Random, Pools], Draft | None]


def accept_cookies() -> ReferenceStep:
    return make_step("click", "Dismiss the cookie banner first.", "button", "Accept cookies")


def back(thought: str = "This page does not help; go back.") -> ReferenceStep:
    return make_step("go_back", thought)


def help_detour() -> ReferenceStep:
    return make_step("click", "Maybe the help page explains this.", "link", "Help", recovery=[back()])


def type_in(label: str, text: str, thought: str, submit: bool = False, **decision: Any) -> ReferenceStep:
    return make_step("type", thought, "textbox", label, text=text, submit=submit, **decision)


def choose(label: str, option: str, others: list[str], thought: str) -> ReferenceStep:
    wrong = [
        make_step("select_option", f"Choose {o}.", "combobox", label, option=o) for o in others if o != option
    ][:2]
    return make_step(
        "select_option",
        thought,
        "combobox",
        label,
        option=option,
        decision="choose_option",
        alternatives=wrong,
    )


def pick(role: str, name: str, distractors: list[str], thought: str) -> ReferenceStep:
    wrong = [
        make_step("click", f"Open {d}.", role, d, recovery=[back(f"{d} is not the one I need; go back.")])
        for d in distractors
        if d != name
    ][:2]
    return make_step(
        "click", thought, role, name, decision="pick_item" if wrong else None, alternatives=wrong
    )


def click(role: str, name: str, thought: str) -> ReferenceStep:
    return make_step("click", thought, role, name)


def longer(step: ReferenceStep, kind: str, steps: list[ReferenceStep]) -> ReferenceStep:
    """``step`` with a longer way to the same point that the scripted teacher may take instead (``kind``
    ``longer_route``: ``steps`` replace the step; ``unnecessary_filter``: ``steps`` end with the step itself). Both
    reach a page the reference also reaches by another path, so removing detours (revisited states) keeps them."""
    return {**step, "longer": {"kind": kind, "steps": steps}}


def search(label: str, text: str, thought: str, button: str = "Search", **decision: Any) -> ReferenceStep:
    """Type into a search field and submit with Enter; the longer route types, then clicks the form's button."""
    step = type_in(label, text, thought, True, **decision)
    route = [type_in(label, text, f"Enter {text}."), click("button", button, "Search.")]
    return longer(step, "longer_route", route)


def dead_end_search(label: str, text: str, thought: str) -> ReferenceStep:
    """:func:`search` at a decision point whose wrong alternative is the help page (a detour, always undone)."""
    return search(label, text, thought, decision="dead_end", alternatives=[help_detour()])


def submit(name: str, thought: str) -> ReferenceStep:
    """A click on a form's submit button right after typing into one of that form's text fields: pressing Enter
    there submits the same form (HTML implicit submission), an equivalent the reward accepts (reference.py)."""
    enter = make_step("press", "Press Enter to send the form.", key="Enter")
    return make_step("click", thought, "button", name, equivalents=[enter])


#: The first price on a page, as :func:`pages.money` prints it (a sorted result list's cheapest).
MONEY = r"(\d[\d,]*\.\d\d USD)"


def answer(text: str, read: str | None = None) -> ReferenceStep:
    """The final answer, ``text``; with ``read`` (a pattern whose first group is the answer) the agent reads it off
    the page it is on (reference.py), so a wrong item opened earlier gives that item's value. Without ``read`` the
    answer is fixed (one computed from several pages)."""
    return make_step("answer", answer_thought(text), text=text, read=read)


def done() -> ReferenceStep:
    return make_step("stop", "The task is complete.", status="success")


def answer_task(
    instruction: str, params: dict[str, Any], steps: list[ReferenceStep], value: str, read: str | None = None
) -> Draft:
    """An instance whose checker expects the answer ``value``: ``steps``, then :func:`answer` (``read``: where the
    page shows it)."""
    return Draft(instruction, params, [*steps, answer(value, read)], expect(value))


def named_templates(*templates: Template) -> dict[str, Template]:
    """A site's ``TEMPLATES``: each template under its function's name (``Task.metadata["template"]``)."""
    return {template.__name__: template for template in templates}


def record(collection: str, **match: Any) -> dict[str, Any]:
    return {"checker": "record", "collection": collection, "match": {k: str(v) for k, v in match.items()}}


def expect(value: str) -> dict[str, Any]:
    return {"checker": "answer", "expected": value}


def person(rng: random.Random, pools: Pools) -> tuple[str, str]:
    """A full name and its e-mail address."""
    first, last = rng.choice(pools["first_names"]), rng.choice(pools["last_names"])
    return f"{first} {last}", f"{first}.{last}@example.com".lower()


def first_word_in(items: list[Any], attribute: str, allowed: list[str]) -> list[Any]:
    """Items whose name starts with an allowed pool word (keeps held-out words out of train, and vice versa)."""
    return [i for i in items if getattr(i, attribute).split()[0] in allowed]
