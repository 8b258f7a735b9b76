"""Argument-swap augmentation: copies of a training state in which the action's argument is replaced, everywhere in
the state, by another string.

A policy must copy arguments (a city, a name, a date, a price) from the task or the page into its action. A small
model trained on a few hundred states learns the strings instead: asked for "Torfen" it types "Marvin", a city it
saw in training (the failure that dominated the tiny default's val errors). Replacing the argument consistently in
the instruction, the page text, the previous actions and thoughts, the thought and the action keeps each copy a correct
demonstration while making memorised strings useless, so copying is what gets learned. The replacement is another
training argument of the same action type (so the prior between known strings is broken) or, as often, a fresh
string of the same shape (letters for letters, digits for digits: strings the model has never seen, like a val
task's). Only arguments that occur in the instruction or the page text are swapped; text observations only (a
screenshot would still show the old string, see :func:`swap_argument`).
"""

from __future__ import annotations

import random
import string
from typing import Any

from rmsweb_kedro.contracts.actions import (
    ACTION_SPACE,
    Action,
    ActionParseError,
    ActionType,
    format_action,
    parse_action,
)
from rmsweb_kedro.contracts.seeding import seeded_rng

#: The action types whose main argument (``Action.argument``) is a string the policy copies from the task or the
#: page (evaluation's first wrong step asks the same of a wrong argument).
COPIED_ARGUMENT_TYPES = frozenset({ActionType.TYPE, ActionType.SELECT_OPTION, ActionType.ANSWER})
_MIN_LENGTH = 2  # single characters occur everywhere: swapping them would garble the page text


def copied_argument(state: dict[str, Any]) -> tuple[Action, str] | None:
    """The reference action and its string argument when the argument occurs in the instruction or the page."""
    try:
        action = parse_action(state["reference_action"])
    except ActionParseError:
        return None
    value = action.argument if action.type in COPIED_ARGUMENT_TYPES else None
    if not value or len(value) < _MIN_LENGTH:
        return None
    if value not in (state.get("instruction") or "") and value not in (state.get("axtree") or ""):
        return None
    return action, value


def same_shape(value: str, rng: random.Random) -> str:
    """A random string shaped like ``value``: each letter a letter of the same case, each digit a digit."""

    def draw(char: str) -> str:
        if char.isdigit():
            return rng.choice(string.digits)
        if char.isupper():
            return rng.choice(string.ascii_uppercase)
        if char.islower():
            return rng.choice(string.ascii_lowercase)
        return char

    return "".join(draw(char) for char in value)


def swap_argument(state: dict[str, Any], replacement: str) -> dict[str, Any]:
    """``state`` with its copied argument replaced by ``replacement`` in every text field (the screenshot path is
    kept: augment only states whose prompt does not show the screenshot)."""
    found = copied_argument(state)
    if found is None:
        raise ValueError(
            f"state {state.get('state_id')!r}: its action has no argument copied from the task or page"
        )
    action, value = found
    swapped = dict(state)
    for field in ("instruction", "axtree", "reference_thought"):
        if swapped.get(field):
            swapped[field] = swapped[field].replace(value, replacement)
    for field in ("previous_actions", "previous_thoughts", "equivalent_actions"):
        swapped[field] = [t.replace(value, replacement) if t else t for t in state.get(field) or []]
    swapped["reference_action"] = format_action(
        action.model_copy(update={ACTION_SPACE[action.type].argument: replacement})
    )
    return swapped


def augment_states(
    states: list[dict[str, Any]], copies: int, pool_share: float, seed: int
) -> list[dict[str, Any]]:
    """``copies`` swapped copies of every state with a copied argument (state ids get ``#swap<k>``); the
    replacement is another state's argument of the same action type with probability ``pool_share``, else a
    fresh string of the same shape. The originals are not included."""
    rng = seeded_rng(seed)
    found = [(state, copied_argument(state)) for state in states]
    pools: dict[ActionType, list[str]] = {}
    for _, hit in found:
        if hit is not None:
            pools.setdefault(hit[0].type, []).append(hit[1])
    augmented = []
    for state, hit in found:
        if hit is None:
            continue
        action, value = hit
        text = f"{state.get('instruction')}\n{state.get('axtree')}"
        others = [v for v in set(pools[action.type]) if v not in text and value not in v]  # no second source
        for k in range(copies):
            use_pool = others and rng.random() < pool_share
            replacement = rng.choice(sorted(others)) if use_pool else same_shape(value, rng)
            swapped = swap_argument(state, replacement)
            swapped["state_id"] = f"{state['state_id']}#swap{k}"
            augmented.append(swapped)
    return augmented
