"""Reference-solution steps: how they are written (targets by role and name) and how one becomes an Action
against a live observation (role + name -> element id). See docs/sandbox.md for the format.

A step may carry ``equivalents``: other actions that do exactly what the step does at the state the reference
reaches (the reward and the step metrics accept them as well). The sandbox declares one kind, the one it can
establish from HTML itself: pressing Enter while the focus is in a text field of a form submits that form through
its submit button (HTML's implicit submission), so a click on the submit button of a form whose field the step
before typed into (without submitting) has ``press("Enter")`` as an equivalent (``steps.submit``).

An ``answer`` step may carry ``read``: a regular expression whose first group is the answer as the page shows it.
Its text is then read off the observation the step acts on, like a click's element id, so an agent that opened a
plausible wrong item answers what that item's page says (and fails), instead of an answer it could not have seen.
tests/web checks every declared equivalent in Chromium: played in the step's place it reaches the same page and the
task's checker still passes."""

from __future__ import annotations

import re
from typing import Any

from rmsweb_kedro.contracts.actions import TARGETED, Action, ActionType, format_action, normalize_text
from rmsweb_kedro.contracts.schema import Element, Observation

ReferenceStep = dict[str, Any]
_PLACEHOLDER = 987654321  # an element id no page has; replaced by "{id}" in the canonical text


class TargetNotFound(LookupError):
    """The observation has no element with the step's role and name."""


def make_step(
    action: str,
    thought: str,
    role: str | None = None,
    name: str | None = None,
    decision: str | None = None,
    alternatives: list[ReferenceStep] | None = None,
    recovery: list[ReferenceStep] | None = None,
    equivalents: list[ReferenceStep] | None = None,
    read: str | None = None,
    **arguments: Any,
) -> ReferenceStep:
    """One reference step; ``arguments`` are Action fields (text, submit, option, key, seconds, status...);
    ``equivalents``: steps that do the same at this state; ``read``: where an answer's text is on the page
    (module docstring)."""
    action_type = ActionType(action)
    step: ReferenceStep = {"action": action_type.value}
    if action_type in TARGETED:
        if role is None or name is None:
            raise ValueError(f"a {action} step needs a target role and name")
        step["target"] = {"role": role, "name": name}
    step.update(arguments)
    template = Action(
        type=action_type, element=_PLACEHOLDER if action_type in TARGETED else None, **arguments
    )
    step["canonical"] = format_action(template).replace(str(_PLACEHOLDER), "{id}", 1)
    step["thought"] = thought
    if decision:
        step["decision"] = decision
        step["alternatives"] = alternatives or []
    if recovery:
        step["recovery"] = recovery
    if equivalents:
        step["equivalents"] = equivalents
    if read:
        if action_type is not ActionType.ANSWER or re.compile(read).groups < 1:
            raise ValueError(f"read= is for answer steps, a pattern with one group; got {action} {read!r}")
        step["read"] = read
    return step


def answer_thought(text: str) -> str:
    """The thought of an answer step: what the page said."""
    return f"The page says {text}."


def read_answer(pattern: str, observation: Observation) -> str:
    """The first group of ``pattern``'s first match in the observation's accessibility tree; raises
    TargetNotFound when the page does not show it."""
    found = re.search(pattern, observation.axtree or "")
    if found is None:
        raise TargetNotFound(f"no text matching {pattern!r} on {observation.url}")
    return found.group(1)


def find_element(observation: Observation, role: str, name: str) -> Element:
    """The first element (DOM order) with this role and normalised name; raises TargetNotFound."""
    wanted = normalize_text(name)
    for element in observation.elements:
        if element.role == role and normalize_text(element.name) == wanted:
            return element
    raise TargetNotFound(f'no {role} named "{name}" on {observation.url}')


def resolve_step(step: ReferenceStep, observation: Observation) -> Action:
    """The Action a reference step means on this observation (its target resolved to an element id)."""
    action_type = ActionType(step["action"])
    fields = {
        k: step[k]
        for k in ("text", "submit", "option", "key", "direction", "amount", "url", "seconds", "status")
        if k in step
    }
    if action_type in TARGETED:
        target = step["target"]
        fields["element"] = find_element(observation, target["role"], target["name"]).id
    if step.get("read"):
        fields["text"] = read_answer(step["read"], observation)
    return Action(type=action_type, **fields)


def resolve_equivalents(step: ReferenceStep, observation: Observation) -> list[Action]:
    """The Actions the step's ``equivalents`` mean on this observation (those whose target is on the page)."""
    resolved = []
    for equivalent in step.get("equivalents") or []:
        try:
            resolved.append(resolve_step(equivalent, observation))
        except TargetNotFound:
            continue
    return resolved
