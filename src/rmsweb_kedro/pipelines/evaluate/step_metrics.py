"""Offline step metrics: how a model's raw reply at one held-out state compares with the reference action.

Pure functions over (reference action text, predicted raw text) pairs, as Mind2Web-style offline evaluation:

- invalid-format rate: replies that do not parse into exactly one action (``actions.parse_action``);
- action-type accuracy: same action type (an invalid reply counts as wrong);
- element accuracy: same target, over the states whose reference acts on an element or a point;
- argument match: same normalised argument (typed text, option, key, URL, answer...), over the states whose
  reference carries one; a reply of another type does not match;
- step success rate: the reply *does* the same thing as the reference (``actions.semantically_equal``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from rmsweb_kedro.actions import (
    ARGUMENT_FIELD,
    TARGETED,
    Action,
    ActionParseError,
    format_action,
    normalized_argument,
    parse_action,
    same_target,
    semantically_equal,
)

#: Per-state score columns (element_match / argument_match are null where the reference has no target / argument).
SCORE_SCHEMA = pl.Schema(
    {
        "valid": pl.Boolean,
        "type_match": pl.Boolean,
        "element_match": pl.Boolean,
        "argument_match": pl.Boolean,
        "success": pl.Boolean,
        "predicted_action": pl.String,  # canonical text of the parsed reply, null when it did not parse
        "parse_error": pl.String,
    }
)
METRICS = (
    "action_type_accuracy",
    "element_accuracy",
    "argument_match",
    "step_success_rate",
    "invalid_format_rate",
)


@dataclass(frozen=True)
class StepScore:
    """One state's comparison. ``element_match``/``argument_match`` are None where the reference has none."""

    valid: bool
    type_match: bool
    element_match: bool | None
    argument_match: bool | None
    success: bool
    predicted: Action | None
    error: str | None = None

    def row(self) -> dict:
        return {
            "valid": self.valid,
            "type_match": self.type_match,
            "element_match": self.element_match,
            "argument_match": self.argument_match,
            "success": self.success,
            "predicted_action": format_action(self.predicted) if self.predicted else None,
            "parse_error": self.error,
        }


def _has_argument(action: Action) -> bool:
    return ARGUMENT_FIELD[action.type] is not None


def score_step(reference: str | Action, predicted_raw: str | None) -> StepScore:
    """Compare a model reply with the reference action. A reference that does not parse is a data error."""
    if isinstance(reference, str):
        try:
            reference = parse_action(reference)
        except ActionParseError as err:
            raise ValueError(f"reference action {reference!r} does not parse: {err.reason}") from None
    targeted = reference.type in TARGETED
    try:
        predicted = parse_action(predicted_raw or "")
    except ActionParseError as err:
        return StepScore(
            valid=False,
            type_match=False,
            element_match=False if targeted else None,
            argument_match=False if _has_argument(reference) else None,
            success=False,
            predicted=None,
            error=err.reason,
        )
    same_type = predicted.type == reference.type
    return StepScore(
        valid=True,
        type_match=same_type,
        element_match=(predicted.type in TARGETED and same_target(predicted, reference))
        if targeted
        else None,
        argument_match=(same_type and normalized_argument(predicted) == normalized_argument(reference))
        if _has_argument(reference)
        else None,
        success=semantically_equal(predicted, reference),
        predicted=predicted,
    )


def score_frame(pairs: Iterable[tuple[str, str | None]]) -> pl.DataFrame:
    """One :data:`SCORE_SCHEMA` row per (reference action text, predicted raw text) pair."""
    return pl.DataFrame([score_step(ref, pred).row() for ref, pred in pairs], schema=SCORE_SCHEMA)


def rates(scores: pl.DataFrame) -> dict[str, float | int | None]:
    """The five rates of a :data:`SCORE_SCHEMA` table (None where no state counts towards one), and its size."""

    def mean(values: pl.Series) -> float | None:
        values = values.drop_nulls()
        return values.cast(pl.Float64).mean() if len(values) else None

    return {
        "n_states": scores.height,
        "action_type_accuracy": mean(scores["type_match"]),
        "element_accuracy": mean(scores["element_match"]),
        "argument_match": mean(scores["argument_match"]),
        "step_success_rate": mean(scores["success"]),
        "invalid_format_rate": mean(~scores["valid"]),
    }


def step_metrics(pairs: Iterable[tuple[str, str | None]]) -> dict[str, float | int | None]:
    """:func:`rates` of :func:`score_frame` over (reference action text, predicted raw text) pairs."""
    return rates(score_frame(pairs))
