"""Reference-solution steps: how they are written (targets by role and name) and how one becomes an Action
against a live observation (role + name -> element id). See docs/sandbox.md for the format."""

from __future__ import annotations

from typing import Any

from rmsweb_kedro.actions import TARGETED, Action, ActionType, format_action, normalize_text
from rmsweb_kedro.schema import Element, Observation

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
    **arguments: Any,
) -> ReferenceStep:
    """One reference step; ``arguments`` are Action fields (text, submit, option, key, seconds, status...)."""
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
    return step


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
    return Action(type=action_type, **fields)
