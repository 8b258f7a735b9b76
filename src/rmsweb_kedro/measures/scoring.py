"""The one way a policy is scored on states: STATE rows and a policy (``hf`` or ``openai``, agents.base.Policy) in,
one table out. SFT's before/after accuracy, mining's probes, Salvage-DS's competence evaluation and evaluate's
offline metrics all call :func:`score_states`, so one metric has one name and one number everywhere.

Per state (:data:`SCORED_SCHEMA`): the greedy reply and what it does against the reference action(s): the step
metrics of Mind2Web-style offline evaluation, and, with ``k`` > 0 sampled replies, competence and the failure mode.

=========================  ============================================================================================
``valid``                  the greedy reply parses into exactly one action (``actions.parse_reply``)
``type_match``             its action type is a reference's (an invalid reply: false)
``element_match``          it acts on the reference's element or point; null where the reference targets none
``argument_match``         same type and the same normalised argument (text, option, key, url, answer...); null
                           where the reference carries none
``step_success``           it *does* what a reference does (``actions.matches_any``)
``competence``             share of the ``k`` sampled replies that do what a reference does (null when k = 0)
``valid_rate``             share of the ``k`` sampled replies that parse (null when k = 0)
``failure_mode``           ``mining.classify_failure`` of the greedy reply when it is wrong, else of the most frequent
                           wrong sample; null when none is wrong; ``environment_error`` when the policy's server
                           failed on the greedy reply (then the state counts in no rate)
``sample_error``           the policy's server failed on the sampled replies: competence and valid rate are null,
                           the greedy reply's metrics still count
=========================  ============================================================================================

Over a table (:func:`rates`): ``n_states`` and the means ``action_type_accuracy``, ``element_accuracy``,
``argument_match``, ``step_success_rate``, ``invalid_format_rate`` (:data:`STEP_METRICS`; :func:`step_rates`), and
``competence`` and ``valid_rate`` (:data:`SAMPLE_METRICS`), each over the states it applies to (None where none).

Reproducible: states are scored ``batch_size`` at a time, the ``k`` samples of a batch drawn with ``seed + first
state's index`` (when ``seed`` is set; else from the caller's random state), so the same states, policy and seed
give the same table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.base import PolicySample
from rmsweb_kedro.contracts.actions import (
    ARGUMENT_FIELD,
    TARGETED,
    Action,
    ActionParseError,
    format_action,
    matches_any,
    normalized_argument,
    parse_action,
    same_target,
)
from rmsweb_kedro.contracts.schema import reference_set
from rmsweb_kedro.measures.mining import (
    FailureMode,
    Sample,
    classify_failure,
    parse_history,
    score_state,
)

STEP_METRICS = (
    "action_type_accuracy",
    "element_accuracy",
    "argument_match",
    "step_success_rate",
    "invalid_format_rate",
)
SAMPLE_METRICS = ("competence", "valid_rate")

#: The step-metric columns of one scored reply (element_match / argument_match null where the reference has none).
STEP_SCHEMA = pl.Schema(
    {
        "valid": pl.Boolean,
        "type_match": pl.Boolean,
        "element_match": pl.Boolean,
        "argument_match": pl.Boolean,
        "step_success": pl.Boolean,
        "predicted_action": pl.String,  # canonical text of the parsed reply, null when it did not parse
        "parse_error": pl.String,
        "failure_mode": pl.String,  # a mining.FailureMode value; null when the reply is right
    }
)
#: One row per scored state.
SCORED_SCHEMA = pl.Schema(
    {
        "state_id": pl.String,
        "reply": pl.String,  # the greedy reply's text
        **STEP_SCHEMA,
        "n_samples": pl.Int32,  # k sampled replies (0: greedy only)
        "sampled_actions": pl.List(pl.String),  # canonical texts; "<invalid: reason>" for unparsed replies
        "competence": pl.Float64,
        "valid_rate": pl.Float64,
        "env_error": pl.String,  # the policy's server failed on the greedy reply (the state counts in no rate)
        "sample_error": pl.String,  # it failed on the sampled replies (competence, valid_rate null)
        "prompt_tokens": pl.Int64,  # of the greedy request
        "completion_tokens": pl.Int64,  # of every reply of the state
    }
)


class ScoringConfig(BaseModel):
    """How states are scored (the policy's own settings say how it is reached and prompted)."""

    model_config = ConfigDict(extra="forbid")

    k: int = Field(default=0, ge=0, description="sampled replies per state (0: greedy only)")
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=48, gt=0)
    batch_size: int = Field(default=16, gt=0, description="states a policy call (each sampled k times)")
    seed: int | None = Field(
        default=None, description="the samples of a batch draw with seed + its first index"
    )
    repeat_window: int = Field(default=1, ge=0, description="failure mode repeats_itself: the last N actions")


# ---------------------------------------------------------------- one reply against the references


@dataclass(frozen=True)
class StepScore:
    """One reply's step metrics. ``element_match``/``argument_match`` are None where the reference has none."""

    valid: bool
    type_match: bool
    element_match: bool | None
    argument_match: bool | None
    step_success: bool
    predicted: Action | None
    error: str | None = None
    failure_mode: FailureMode | None = None

    def row(self) -> dict:
        return {
            "valid": self.valid,
            "type_match": self.type_match,
            "element_match": self.element_match,
            "argument_match": self.argument_match,
            "step_success": self.step_success,
            "predicted_action": format_action(self.predicted) if self.predicted else None,
            "parse_error": self.error,
            "failure_mode": self.failure_mode.value if self.failure_mode else None,
        }


def _has_argument(action: Action) -> bool:
    return ARGUMENT_FIELD[action.type] is not None


def step_score(
    references: Sequence[Action],
    predicted: Action | None,
    error: str | None = None,
    previous_actions: Sequence[Action] = (),
    **context: Any,
) -> StepScore:
    """A parsed reply (None: it did not parse, ``error`` says why) against the reference action(s): right when it
    does what any reference does; type, element and argument compared with the first reference (the one whose
    target and argument the state records); its failure mode by ``mining.classify_failure`` (``previous_actions``
    and ``context``: its ``state_url`` and ``repeat_window``)."""
    first = references[0]
    mode = classify_failure(predicted, references, previous_actions, **context)
    targeted, with_argument = first.type in TARGETED, _has_argument(first)
    if predicted is None:
        return StepScore(
            valid=False,
            type_match=False,
            element_match=False if targeted else None,
            argument_match=False if with_argument else None,
            step_success=False,
            predicted=None,
            error=error or "no action",
            failure_mode=mode,
        )
    same_type = predicted.type == first.type
    return StepScore(
        valid=True,
        type_match=same_type,
        element_match=(predicted.type in TARGETED and same_target(predicted, first)) if targeted else None,
        argument_match=(same_type and normalized_argument(predicted) == normalized_argument(first))
        if with_argument
        else None,
        step_success=matches_any(predicted, references),
        predicted=predicted,
        failure_mode=mode,
    )


def score_step(reference: str | Action, reply: str | None) -> StepScore:
    """A reply's raw text against one reference action (its text or Action). A reference that does not parse is a
    data error."""
    if isinstance(reference, str):
        try:
            reference = parse_action(reference)
        except ActionParseError as err:
            raise ValueError(f"reference action {reference!r} does not parse: {err.reason}") from None
    try:
        predicted, error = parse_action(reply or ""), None
    except ActionParseError as err:
        predicted, error = None, err.reason
    return step_score([reference], predicted, error)


# ---------------------------------------------------------------- rates


def _mean(values: pl.Series) -> float | None:
    values = values.drop_nulls()
    return float(values.cast(pl.Float64).mean()) if len(values) else None


def step_rates(scores: pl.DataFrame) -> dict[str, float | int | None]:
    """``n_states`` and the :data:`STEP_METRICS` of a table with :data:`STEP_SCHEMA` columns (None where no state
    counts towards one); states whose server failed (``env_error``) count in none."""
    if "env_error" in scores.columns:
        scores = scores.filter(pl.col("env_error").is_null())
    return {
        "n_states": scores.height,
        "action_type_accuracy": _mean(scores["type_match"]),
        "element_accuracy": _mean(scores["element_match"]),
        "argument_match": _mean(scores["argument_match"]),
        "step_success_rate": _mean(scores["step_success"]),
        "invalid_format_rate": _mean(~scores["valid"]),
    }


def rates(scored: pl.DataFrame) -> dict[str, float | int | None]:
    """:func:`step_rates` and the :data:`SAMPLE_METRICS` of a :data:`SCORED_SCHEMA` table."""
    judged = scored.filter(pl.col("env_error").is_null())
    return step_rates(judged) | {name: _mean(judged[name]) for name in SAMPLE_METRICS}


def step_metrics(pairs: Iterable[tuple[str, str | None]]) -> dict[str, float | int | None]:
    """:func:`step_rates` over (reference action text, reply text) pairs."""
    rows = [score_step(reference, reply).row() for reference, reply in pairs]
    return step_rates(pl.DataFrame(rows, schema=STEP_SCHEMA))


# ---------------------------------------------------------------- scoring a policy


def _sample(reply: PolicySample) -> Sample:
    return Sample(reply.action, reply.error)


def score_state_replies(
    state: dict[str, Any],
    greedy: PolicySample,
    sampled: Sequence[PolicySample],
    references: Sequence[Action],
    repeat_window: int = 1,
) -> dict[str, Any]:
    """The :data:`SCORED_SCHEMA` row of one state from its greedy reply and its sampled replies."""
    replies = [greedy, *sampled]
    context = {
        "previous_actions": parse_history(state.get("previous_actions")),
        "state_url": state.get("url"),
        "repeat_window": repeat_window,
    }
    row: dict[str, Any] = {
        "state_id": state["state_id"],
        "reply": greedy.text,
        **step_score(references, greedy.action, greedy.error, **context).row(),
        "n_samples": len(sampled),
        "sampled_actions": [_sample(s).label for s in sampled],
        "competence": None,
        "valid_rate": None,
        "env_error": greedy.error if greedy.fatal else None,
        "sample_error": next((r.error for r in sampled if r.fatal), None),
        "prompt_tokens": greedy.prompt_tokens,
        "completion_tokens": sum(r.completion_tokens or 0 for r in replies),
    }
    if row["env_error"] is not None:
        return row | {"failure_mode": FailureMode.ENVIRONMENT_ERROR.value}
    if (
        sampled and row["sample_error"] is None
    ):  # failed samples never drop the greedy reply's metrics  # the greedy reply's mode when it is wrong, else the most frequent wrong sample's
        score = score_state([_sample(s) for s in sampled], _sample(greedy), references, **context)
        row |= {
            "competence": score.competence,
            "valid_rate": sum(s.action is not None for s in sampled) / len(sampled),
            "failure_mode": score.failure_mode.value if score.failure_mode else None,
        }
    return row


def score_states(
    states: Sequence[dict[str, Any]],
    policy: Any,
    config: ScoringConfig | dict | None = None,
    *,
    references: Sequence[Sequence[Action]] | None = None,
    progress: bool = False,
) -> pl.DataFrame:
    """Score ``policy`` (an agents.base.Policy) on ``states`` (STATE rows as dicts): one :data:`SCORED_SCHEMA`
    row per state, in order. ``references`` (one list per state) overrides ``schema.reference_set`` of each; a reference
    that does not parse raises naming the state."""
    from tqdm.auto import tqdm

    config = ScoringConfig.model_validate(config or {})
    references = [reference_set(state) for state in states] if references is None else list(references)
    if len(references) != len(states):
        raise ValueError(f"{len(references)} reference sets for {len(states)} states")
    rows = []
    bar = tqdm(total=len(states), desc="scoring states", unit="state", disable=not progress)
    generation = {"max_new_tokens": config.max_new_tokens, "logprobs": False}
    for start in range(0, len(states), config.batch_size):
        chunk = list(states[start : start + config.batch_size])
        sampled: list[list[PolicySample]] = [[] for _ in chunk]
        if config.k:
            seed = None if config.seed is None else config.seed + start
            sampled = policy.sample(
                chunk, n=config.k, greedy=False, temperature=config.temperature, top_p=config.top_p,
                seed=seed, **generation,
            )  # fmt: skip
        greedy = policy.sample(chunk, n=1, greedy=True, **generation)
        for index, (state, (best,), samples) in enumerate(zip(chunk, greedy, sampled, strict=True)):
            rows.append(
                score_state_replies(state, best, samples, references[start + index], config.repeat_window)
            )
        bar.update(len(chunk))
    bar.close()
    return pl.DataFrame(rows, schema=SCORED_SCHEMA)
