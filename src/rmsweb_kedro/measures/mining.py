"""Failure-mode mining, the pure part: the failure taxonomy, de-duplication, competence, the selection of critical
states and the first divergence of a failed rollout from a successful reference.

Everything here works on Actions and polars tables; the nodes in ``pipelines/mining`` add the model and the browser.

The taxonomy is a closed set assigned by rules from action semantics (``actions.semantically_equal`` and
``actions.normalized_argument``), first matching rule wins:

=====================  ======================================================================================
``environment_error``  the environment itself failed on this state (crash, timeout): not the policy's fault
``invalid_format``     the model's output does not parse as one action
``premature_end``      the policy answers or stops where the reference still acts
``never_stops``        the reference answers or stops here; the policy acts on
``repeats_itself``     the policy repeats one of its last ``repeat_window`` actions (a loop)
``off_task_navigation`` the policy navigates (goto, go_back) where the reference does not, or goes to another site
``wrong_action_type``  another kind of action than the reference's
``wrong_element``      the reference's action type on another element (or point)
``wrong_argument``     the reference's action on the right element with another text, option, url, key, ...
=====================  ======================================================================================

A sample that is semantically equal to the reference has no failure mode (``None``). A whole failed episode has an
:class:`EpisodeFailure` (how it ended: step limit, unparseable output, wrong answer, wrong final state, or the
environment's error), the same taxonomy seen at the episode's end.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import polars as pl

from rmsweb_kedro.contracts.actions import (
    Action,
    ActionParseError,
    ActionType,
    format_action,
    matches_any,
    normalize_url,
    parse_action,
    same_target,
    semantically_equal,
)
from rmsweb_kedro.contracts.schema import (
    ENV_TERMINATIONS,
    STATE_SCHEMA,
    Observation,
    Step,
    Task,
    Trajectory,
    conform_states,
    reference_set,
)
from rmsweb_kedro.contracts.seeding import draw_up_to, seeded_rng


class FailureMode(StrEnum):
    ENVIRONMENT_ERROR = "environment_error"
    INVALID_FORMAT = "invalid_format"
    PREMATURE_END = "premature_end"
    NEVER_STOPS = "never_stops"
    REPEATS_ITSELF = "repeats_itself"
    OFF_TASK_NAVIGATION = "off_task_navigation"
    WRONG_ACTION_TYPE = "wrong_action_type"
    WRONG_ELEMENT = "wrong_element"
    WRONG_ARGUMENT = "wrong_argument"


class EpisodeFailure(StrEnum):
    """The taxonomy's episode side: why a failed episode failed, from how it ended (a checker or judge knows that
    the outcome was wrong, not at which step). The evaluation report counts failed episodes by it; the judge
    agreement stratifies its sample by it."""

    # the environment failed: neither success nor failure (the step side's mode of the same name)
    ENVIRONMENT_ERROR = FailureMode.ENVIRONMENT_ERROR.value
    MODEL_ERROR = "model_error"  # the policy's outputs did not parse, or its endpoint failed
    STEP_LIMIT = "step_limit"  # never finished within the step limit
    WRONG_ANSWER = "wrong_answer"  # answered, and the answer does not match
    WRONG_STATE = "wrong_state"  # stopped, and the site's state does not hold the expected record
    OTHER = "other"  # ended another way (e.g. stopped at a critical point) and was judged a failure


#: A judged failure's mode by its ``termination``; any other termination is ``OTHER``.
_ENDINGS = {
    "max_steps": EpisodeFailure.STEP_LIMIT,
    "model_error": EpisodeFailure.MODEL_ERROR,
    "answer": EpisodeFailure.WRONG_ANSWER,
    "stop": EpisodeFailure.WRONG_STATE,
}


def classify_episode(success: bool | None, termination: str | None) -> EpisodeFailure | None:
    """The mode of an episode by its verdict (``success``; None: the environment failed) and how it ended, or None
    for a success."""
    if success is None:
        return EpisodeFailure.ENVIRONMENT_ERROR
    if success:
        return None
    return _ENDINGS.get(termination or "", EpisodeFailure.OTHER)


TERMINAL = frozenset({ActionType.ANSWER, ActionType.STOP})
NAVIGATION = frozenset({ActionType.GOTO, ActionType.GO_BACK})

#: The columns mining adds to STATE_SCHEMA in ``critical_states``.
MINED_COLUMNS = pl.Schema(
    {
        "source": pl.String,  # "offline" (a corpus state) or "online" (a state reached by a policy rollout)
        # SFT trained on the state (offline: it is in sft_states_train; online: its task's reference is), or not
        # (the probe pool, sft_states_probe, held out of SFT)
        "in_sft": pl.Boolean,
        "n_copies": pl.Int32,  # identical states folded into this row by de-duplication
        "n_samples": pl.Int32,  # K sampled actions scored for competence (0: not probed)
        "competence": pl.Float64,  # share of the K samples semantically equal to the reference; null: not probed
        "greedy_action": pl.String,  # canonical text, or null when the greedy output did not parse
        "step_success": pl.Boolean,  # the greedy action does what the reference does
        "failure_mode": pl.String,  # a FailureMode value, or null when no sample was wrong
        "sampled_actions": pl.List(pl.String),  # canonical texts; "<invalid: reason>" for unparsed outputs
        "selection": pl.String,  # "critical", "ballast" (rl_corpus: mined) or "full" (rl_corpus: full)
        # why the state is in the mined set: an Origin value (null: a routine state not kept, or rl_corpus: full)
        "origin": pl.String,
    }
)
CRITICAL_STATE_SCHEMA = pl.Schema({**STATE_SCHEMA, **MINED_COLUMNS})

#: What makes two states identical: the policy would see the same prompt and be asked for the same action.
DEDUP_KEY = ("instruction", "previous_actions", "axtree", "reference_action")


def _host(url: str) -> str:
    return normalize_url(url).split("/", 1)[0]


def _as_references(reference: Action | Sequence[Action]) -> list[Action]:
    return [reference] if isinstance(reference, Action) else list(reference)


def classify_failure(
    sample: Action | None,
    reference: Action | Sequence[Action],
    previous_actions: Sequence[Action] = (),
    *,
    state_url: str | None = None,
    env_error: bool = False,
    repeat_window: int = 1,
) -> FailureMode | None:
    """The failure mode of ``sample`` (None: it did not parse) against ``reference`` (one action, or the set of
    actions that are right there: the first is the one a wrong sample is compared with), or None when it is right.

    ``previous_actions`` are the policy's earlier actions in the episode, oldest first; ``state_url`` is the page the
    state was on (an off-site ``goto`` is recognised against it and against the reference's url).
    """
    if env_error:
        return FailureMode.ENVIRONMENT_ERROR
    if sample is None:
        return FailureMode.INVALID_FORMAT
    references = _as_references(reference)
    if matches_any(sample, references):
        return None
    reference = references[0]
    if sample.type in TERMINAL and reference.type not in TERMINAL:
        return FailureMode.PREMATURE_END
    if reference.type in TERMINAL and sample.type not in TERMINAL:
        return FailureMode.NEVER_STOPS
    recent = previous_actions[-repeat_window:] if repeat_window > 0 else ()
    if any(semantically_equal(sample, earlier) for earlier in recent):
        return FailureMode.REPEATS_ITSELF
    if sample.type in NAVIGATION and reference.type not in NAVIGATION:
        return FailureMode.OFF_TASK_NAVIGATION
    if sample.type == ActionType.GOTO:
        allowed_hosts = {_host(u) for u in (state_url, reference.url) if u}
        if _host(sample.url or "") not in allowed_hosts:
            return FailureMode.OFF_TASK_NAVIGATION
    if sample.type != reference.type:
        return FailureMode.WRONG_ACTION_TYPE
    if not same_target(sample, reference):
        return FailureMode.WRONG_ELEMENT
    return FailureMode.WRONG_ARGUMENT


def reference_action(state: dict[str, Any]) -> Action:
    """The parsed reference action of a STATE row; a clear error naming the state when it does not parse."""
    try:
        return parse_action(state["reference_action"])
    except ActionParseError as err:
        raise ValueError(
            f"state {state['state_id']}: field reference_action {state['reference_action']!r} does not parse: "
            f"{err.reason}"
        ) from None


def parse_history(texts: Iterable[str] | None) -> list[Action]:
    """Earlier actions from their canonical texts; a text that does not parse cannot be repeated, so it is skipped."""
    history = []
    for text in texts or ():
        try:
            history.append(parse_action(text))
        except ActionParseError:
            continue
    return history


# ---------------------------------------------------------------- competence


@dataclass(frozen=True)
class Sample:
    """One sampled policy output: the parsed action, or None and the parse error."""

    action: Action | None
    error: str | None = None

    @property
    def label(self) -> str:
        """The canonical action text, or ``<invalid: reason>``."""
        return str(self.action) if self.action is not None else f"<invalid: {self.error or 'no action'}>"


@dataclass(frozen=True)
class StateScore:
    """What probing found on one state."""

    n_samples: int
    competence: float
    greedy_action: str | None
    step_success: bool  # the greedy action's
    failure_mode: FailureMode | None
    sampled_actions: list[str]


def score_state(
    samples: Sequence[Sample],
    greedy: Sample,
    reference: Action | Sequence[Action],
    previous_actions: Sequence[Action] = (),
    *,
    state_url: str | None = None,
    repeat_window: int = 1,
) -> StateScore:
    """Competence (share of ``samples`` semantically equal to ``reference``, or to one of a set of references) and
    the failure mode of the greedy action when it is wrong, else of the most frequent wrong sample (ties: the first
    sampled); None if none is wrong.
    """
    if not samples:
        raise ValueError("competence needs at least one sample (K >= 1)")
    references = _as_references(reference)

    def right(action: Action | None) -> bool:
        return matches_any(action, references)

    def mode(sample: Sample) -> FailureMode | None:
        return classify_failure(
            sample.action, references, previous_actions, state_url=state_url, repeat_window=repeat_window
        )

    correct = sum(right(s.action) for s in samples)
    failure = mode(greedy)
    if failure is None:
        wrong = Counter(s.label for s in samples if not right(s.action))
        if wrong:
            majority = wrong.most_common(1)[0][0]
            failure = mode(next(s for s in samples if s.label == majority))
    return StateScore(
        n_samples=len(samples),
        competence=correct / len(samples),
        greedy_action=str(greedy.action) if greedy.action is not None else None,
        step_success=right(greedy.action),
        failure_mode=failure,
        sampled_actions=[s.label for s in samples],
    )


# ---------------------------------------------------------------- de-duplication and selection


def _keyed(states: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    missing = [c for c in DEDUP_KEY if c not in states.columns]
    if missing:
        raise ValueError(f"states table lacks the de-duplication columns {missing}")
    # a list column as one string; the unit separator cannot occur in canonical action texts
    keyed = states.with_columns(pl.col("previous_actions").list.join("\x1f").alias("_history"))
    return keyed, ["instruction", "_history", "axtree", "reference_action"]


def with_in_sft(states: pl.DataFrame) -> pl.DataFrame:
    """``states`` with ``in_sft``; a table from before the probe pool existed lacks it, and every state it holds was
    one SFT trained on (mining probed sft_states_train only), so it gets true."""
    return states if "in_sft" in states.columns else states.with_columns(pl.lit(True).alias("in_sft"))


def corpus_states(trained: pl.DataFrame, held_out: pl.DataFrame) -> pl.DataFrame:
    """The states mining probes: STATE rows of ``trained`` (SFT trained on them: ``in_sft`` true) then of
    ``held_out`` (the probe pool, held out of SFT: ``in_sft`` false). Trained rows come first, so that
    de-duplication keeps a trained copy of a state in both (SFT did see it) and, with no probe pool, the corpus is
    the trained states in their order."""
    parts = [
        conform_states(frame, name).select(STATE_SCHEMA.names()).with_columns(pl.lit(flag).alias("in_sft"))
        for frame, name, flag in ((trained, "sft_states_train", True), (held_out, "sft_states_probe", False))
    ]
    return pl.concat(parts)


def deduplicate_states(states: pl.DataFrame) -> pl.DataFrame:
    """One row per identical state (:data:`DEDUP_KEY`), the first in table order, with ``n_copies`` counting them."""
    keyed, key = _keyed(states)
    return (
        keyed.with_columns(
            pl.len().over(key, mapping_strategy="group_to_rows").cast(pl.Int32).alias("n_copies")
        )
        .unique(subset=key, keep="first", maintain_order=True)
        .drop("_history")
    )


def unseen_states(states: pl.DataFrame, known: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``states`` identical (:data:`DEDUP_KEY`) to no row of ``known``."""
    keyed, key = _keyed(states)
    known_keys = _keyed(known)[0].select(key).unique()
    return keyed.join(known_keys, on=key, how="anti", nulls_equal=True).drop("_history")


# ---------------------------------------------------------------- origins: why a state is critical


class Origin(StrEnum):
    """Why a state is in the mined set (its ``origin``): the three ways a probed state is critical, in precedence
    order (the first of ``mining.critical`` that applies names it), and the routine states kept beside them."""

    ONLINE_DIVERGENCE = "online_divergence"  # the policy's own online episode went wrong here (source online)
    GREEDY_WRONG = "greedy_wrong"  # its greedy action, the one evaluation takes, is wrong
    SAMPLES_SPREAD = "samples_spread"  # greedy right, but the K samples' competence is below the threshold
    BALLAST = "ballast"  # a routine state kept (ballast_share)


#: The critical origins in precedence order; ``mining.critical`` chooses which of them count.
CRITICAL_ORIGINS = (Origin.ONLINE_DIVERGENCE, Origin.GREEDY_WRONG, Origin.SAMPLES_SPREAD)


def probed_state() -> pl.Expr:
    """Probed (competence not null) and not failed by the environment: a state that is critical or routine."""
    return pl.col("competence").is_not_null() & (
        pl.col("failure_mode").fill_null("") != FailureMode.ENVIRONMENT_ERROR.value
    )


def critical_origin(critical: Iterable[str], competence_threshold: float) -> pl.Expr:
    """The origin of a probed state that is critical: the first of ``critical`` (in the precedence of
    :data:`CRITICAL_ORIGINS`) that applies; null for a routine state and an unprobed one.

    - ``online_divergence``: a state of a failed online rollout (``source`` online: ``divergence_states``), where
      the policy's greedy action in its own episode was none of the right ones;
    - ``greedy_wrong``: the probe's greedy reply is wrong (``step_success`` false: ``actions.matches_any`` over the
      state's reference set; null, greedy unknown, does not apply);
    - ``samples_spread``: the share of the K samples that are right is below ``competence_threshold``."""
    applies = {
        Origin.ONLINE_DIVERGENCE: pl.col("source") == "online",
        Origin.GREEDY_WRONG: ~pl.col("step_success"),
        Origin.SAMPLES_SPREAD: pl.col("competence") < competence_threshold,
    }
    wanted = set(critical)
    origin = pl.lit(None, pl.String)
    for name in reversed([o for o in CRITICAL_ORIGINS if o in wanted]):
        origin = pl.when(applies[name]).then(pl.lit(name.value)).otherwise(origin)
    return pl.when(probed_state()).then(origin).otherwise(pl.lit(None, pl.String))


def with_origins(states: pl.DataFrame, critical: Iterable[str], competence_threshold: float) -> pl.DataFrame:
    """``states`` (probe columns and ``source``) with ``origin`` (:func:`critical_origin`), replacing one they had:
    the column follows the parameters it is read with (an ablation's ``mining.critical`` on the same probes)."""
    return states.with_columns(critical_origin(critical, competence_threshold).alias("origin"))


def is_critical() -> pl.Expr:
    """A state with a critical origin (``origin`` set, and not ``ballast``)."""
    return pl.col("origin").is_not_null() & (pl.col("origin") != Origin.BALLAST.value)


def select_states(
    scored: pl.DataFrame,
    *,
    critical: Iterable[str],
    competence_threshold: float,
    ballast_share: float,
    cap: int | None,
    seed: int,
) -> pl.DataFrame:
    """The mined RL set: every critical probed state (``origin``: :func:`critical_origin`), by precedence of its
    origin and then hardest first (competence, state id), plus routine probed states drawn at random (origin
    ``ballast``) so they make ``ballast_share`` of the set; at most ``cap`` rows, split in the same proportion (the
    cap keeps online divergences before greedy-wrong states before spread samples). ``selection`` says critical
    or ballast. Unprobed states and the environment's failures are never selected."""
    if not 0.0 <= ballast_share < 1.0:
        raise ValueError(f"mining.ballast_share must be in [0, 1), got {ballast_share}")
    probed = with_origins(scored.filter(probed_state()), critical, competence_threshold)
    rank = pl.col("origin").replace_strict(
        {o.value: i for i, o in enumerate(CRITICAL_ORIGINS)}, default=None, return_dtype=pl.Int32
    )
    chosen = probed.filter(is_critical()).sort(rank, "competence", "state_id", maintain_order=True)
    routine = probed.filter(~is_critical())
    n_critical = chosen.height
    if cap is not None and n_critical > cap - round(cap * ballast_share):
        n_critical = cap - round(cap * ballast_share)
    n_ballast = min(routine.height, round(n_critical * ballast_share / (1.0 - ballast_share)))
    rows = draw_up_to(range(routine.height), n_ballast, seeded_rng(seed))
    return pl.concat(
        [
            chosen.head(n_critical).with_columns(pl.lit("critical").alias("selection")),
            routine[rows].with_columns(
                pl.lit("ballast").alias("selection"), pl.lit(Origin.BALLAST.value).alias("origin")
            ),
        ]
    )


#: States by whether SFT trained on them (``in_sft`` true) or they were held out of it (the probe pool).
IN_SFT = {"in_sft": True, "not_in_sft": False}


def origin_report(probed: pl.DataFrame, mined: pl.DataFrame) -> dict[str, Any]:
    """Per origin (:class:`Origin`), ``states``: the probed states of that origin (``ballast``: the routine probed
    states it is drawn from), and ``selected``: of them, those in the mined set (the RL corpus; fewer than
    ``states`` where ``cap`` binds); the same per ``in_sft`` group (:data:`IN_SFT`). ``probed`` and ``mined``
    carry ``origin``; over origins the ``selected`` counts add up to the mined set's rows (``rl_corpus: mined``)."""
    routine = probed_state() & pl.col("origin").is_null()

    def counts(frame: pl.DataFrame, kept: pl.DataFrame) -> dict[str, int]:
        return {"states": frame.height, "selected": kept.height}

    report: dict[str, Any] = {}
    for origin in Origin:
        mine = routine if origin == Origin.BALLAST else pl.col("origin") == origin.value
        states = with_in_sft(probed).filter(mine)
        kept = with_in_sft(mined).filter(pl.col("origin") == origin.value)
        report[origin.value] = counts(states, kept) | {
            group: counts(states.filter(pl.col("in_sft") == flag), kept.filter(pl.col("in_sft") == flag))
            for group, flag in IN_SFT.items()
        }
    return report


def in_sft_report(offline: pl.DataFrame, online: pl.DataFrame, mined: pl.DataFrame) -> dict[str, Any]:
    """Critical states by whether SFT trained on them (:data:`IN_SFT`): for each source (offline corpus states,
    online states of rollouts on the group's tasks) the states, the probed ones, the critical ones (a critical
    ``origin``), their share of the probed and the mean competence; and the mined set's rows by selection."""

    def stats(frame: pl.DataFrame) -> dict[str, Any]:
        probed = frame.filter(pl.col("competence").is_not_null())
        critical = int(probed.filter(is_critical()).height)
        return {
            "states": frame.height,
            "probed": probed.height,
            "critical": critical,
            "critical_share": critical / probed.height if probed.height else None,
            "mean_competence": float(probed["competence"].mean()) if probed.height else None,
        }

    offline, online, mined = with_in_sft(offline), with_in_sft(online), with_in_sft(mined)
    report: dict[str, Any] = {}
    for group, flag in IN_SFT.items():
        mine = pl.col("in_sft") == flag
        report[group] = {
            "offline": stats(offline.filter(mine)),
            "online": stats(online.filter(mine)),
            "selected": dict(mined.filter(mine).group_by("selection").len().sort("selection").iter_rows()),
        }
    return report


def concentration(corpus: pl.DataFrame, mined: pl.DataFrame) -> dict[str, Any]:
    """How concentrated the RL set is: share of routine states (no critical ``origin``) and mean competence in the
    probed corpus against the mined set, counted per state and weighted by duplicate copies (where the critical
    states came from is :func:`origin_report`'s and :func:`in_sft_report`'s)."""

    def stats(frame: pl.DataFrame) -> dict[str, Any]:
        probed = frame.filter(pl.col("competence").is_not_null())
        if probed.is_empty():
            return {"states": frame.height, "probed": 0, "share_routine": None, "mean_competence": None}
        routine = probed.select(~is_critical()).to_series()
        weights = probed["n_copies"].cast(pl.Float64)
        return {
            "states": frame.height,
            "probed": probed.height,
            "share_routine": float(routine.mean()),
            "share_routine_weighted": float((weights * routine.cast(pl.Float64)).sum() / weights.sum()),
            "mean_competence": float(probed["competence"].mean()),
        }

    corpus_stats, mined_stats = stats(corpus), stats(mined)
    ratio = None
    if corpus_stats["share_routine"] is not None and mined_stats["share_routine"] is not None:
        critical_corpus = 1.0 - corpus_stats["share_routine"]
        critical_mined = 1.0 - mined_stats["share_routine"]
        ratio = critical_mined / critical_corpus if critical_corpus > 0 else math.inf
    return {"corpus": corpus_stats, "mined": mined_stats, "critical_enrichment": ratio}


def failure_mode_table(probed: pl.DataFrame, env_failed: int) -> pl.DataFrame:
    """Per source (offline, online) and failure mode, every mode listed with zeros included: the number of critical
    states among ``probed`` (a critical ``origin``), how many of them SFT trained on (``n_in_sft``) and
    how many it did not (``n_not_in_sft``: the probe pool), their share of the source's critical states and their
    mean competence. ``env_failed`` online rollouts the environment failed leave no state; they are the online
    ``environment_error`` count (their ``in_sft`` columns are null)."""
    critical = with_in_sft(probed).filter(is_critical())
    grid = pl.DataFrame(
        [(source, mode.value) for source in ("offline", "online") for mode in FailureMode],
        schema={"source": pl.String, "failure_mode": pl.String},
        orient="row",
    )
    counts = critical.group_by("source", "failure_mode").agg(
        pl.len().alias("n_states"),
        pl.col("in_sft").eq(True).sum().alias("n_in_sft"),
        pl.col("in_sft").eq(False).sum().alias("n_not_in_sft"),
        pl.col("competence").mean().alias("mean_competence"),
    )
    if env_failed:
        env_row = {
            "source": "online",
            "failure_mode": FailureMode.ENVIRONMENT_ERROR.value,
            "n_states": env_failed,
        }
        counts = pl.concat([counts, pl.DataFrame([env_row])], how="diagonal_relaxed")
    groups = ("n_in_sft", "n_not_in_sft")
    table = grid.join(counts, on=["source", "failure_mode"], how="left").with_columns(
        # a mode with no critical state has zero of each group; the environment's row has no states to tell
        *(
            pl.when(pl.col("n_states").is_null()).then(0).otherwise(pl.col(c)).cast(pl.Int64).alias(c)
            for c in groups
        ),
        pl.col("n_states").fill_null(0).cast(pl.Int64),
    )
    return table.with_columns(
        (pl.col("n_states") / pl.col("n_states").sum().over("source")).fill_nan(0.0).alias("share")
    ).select("source", "failure_mode", "n_states", *groups, "share", "mean_competence")


# ---------------------------------------------------------------- online: divergences from a reference

_SPACE = re.compile(r"\s+")


def page_key(url: str, axtree: str | None) -> tuple[str, str]:
    """A page state as alignment sees it: the url without scheme and host (rollouts and references may run on
    servers at different ports) and the accessibility tree with whitespace folded."""
    path = normalize_url(url).partition("/")[2]
    return path, _SPACE.sub(" ", axtree or "").strip()


def reference_index(references: pl.DataFrame) -> dict[tuple[str, str], list[Action]]:
    """Page state -> the actions that are right there, from successful reference states (STATE rows) of one task:
    each state's reference set (its reference action first, then the actions the environment established as
    equivalent: ``schema.reference_set``), in table order, each action once."""
    index: dict[tuple[str, str], list[Action]] = {}
    for row in references.iter_rows(named=True):
        actions = index.setdefault(page_key(row["url"], row["axtree"]), [])
        for action in reference_set(row):
            if not matches_any(action, actions):
                actions.append(action)
    return index


def divergences(
    steps: Sequence[Step], index: dict[tuple[str, str], list[Action]], first_only: bool = True
) -> list[tuple[int, list[Action]]]:
    """The steps of a rollout on a page state a reference also reached where the rollout's action is none of the
    actions right there (the reference's or an equivalent one): (step index, those actions, the reference's
    first of them). Steps on pages no reference saw are passed over (the rollout may come back). ``first_only``: the first
    such step alone (its history is the reference's up to the wrong action); else the first on each aligned page
    (later ones follow the policy's own earlier mistakes: on-policy states; a loop on one page counts once)."""
    found, pages = [], set()
    for step in steps:
        key = page_key(step.url, step.axtree)
        right = index.get(key)
        if right and key not in pages and not matches_any(step.action, right):
            found.append((step.index, right))
            pages.add(key)
            if first_only:
                break
    return found


def state_row(
    task: Task,
    trajectory: Trajectory,
    index: int,
    reference: Action | Sequence[Action],
    thought: str | None = None,
    screenshot_prefix: str = "",
) -> dict[str, Any]:
    """The STATE row of step ``index`` of ``trajectory`` (its observation and the actions before it, as the
    policy's prompt shows them: ``prompts.state_from_live``) with ``reference`` as the action to take (or the
    actions right there: the first is the reference action, the others its ``equivalent_actions``). The step's
    screenshot (relative to the trajectory's screenshot folder) gets ``screenshot_prefix`` in front, the way from
    the prompt's ``image_root`` to that folder, so the row carries its image like a corpus state (and the earlier
    steps' screenshots alike)."""
    from rmsweb_kedro.contracts.prompts import state_from_live

    step = trajectory.steps[index]
    observation = Observation(url=step.url, axtree=step.axtree or "")
    row = state_from_live(task, observation, trajectory.steps[:index])
    references = _as_references(reference)
    row.update(
        state_id=f"{trajectory.id}:{index}",
        trajectory_id=trajectory.id,
        step_index=index,
        screenshot=f"{screenshot_prefix}{step.screenshot}" if step.screenshot else None,
        previous_screenshots=[
            f"{screenshot_prefix}{s.screenshot}" if s.screenshot else None for s in trajectory.steps[:index]
        ],
        reference_thought=thought,
        reference_action=format_action(references[0]),
        equivalent_actions=[format_action(a) for a in references[1:]],
    )
    return {name: row.get(name) for name in STATE_SCHEMA.names()}


def divergence_states(
    rollouts: Sequence[Trajectory],
    tasks: dict[str, Task],
    references: pl.DataFrame,
    screenshot_prefix: str = "",
    first_only: bool = True,
) -> tuple[pl.DataFrame, dict[str, int]]:
    """STATE rows for the divergences of each failed rollout from the successful references of its task
    (``references``: STATE rows; :func:`divergences`, the first alone with ``first_only``), built from the
    rollout's observation and history, with the actions right there (screenshots as :func:`state_row`); and
    counts of what happened to the rollouts (``diverged``: rollouts with one; ``divergence_states``: the rows).
    Rollouts the environment failed are counted, never blamed."""
    by_task = {task_id: reference_index(group) for (task_id,), group in references.group_by("task_id")}
    counts = Counter({"rollouts": len(rollouts)})
    rows = []
    for rollout in rollouts:
        if rollout.termination in ENV_TERMINATIONS:  # env_error, blocked, judge_error: never the policy's
            counts[rollout.termination] += 1
            continue
        if rollout.success:
            counts["success"] += 1
            continue
        counts["failure"] += 1
        if rollout.task_id not in by_task:
            counts["no_reference"] += 1
            continue
        found = divergences(rollout.steps, by_task[rollout.task_id], first_only)
        if not found:
            counts["no_aligned_divergence"] += 1
            continue
        for index, right in found:
            rows.append(state_row(tasks[rollout.task_id], rollout, index, right, None, screenshot_prefix))
        counts["diverged"] += 1
        counts["divergence_states"] += len(found)
    return pl.DataFrame(rows, schema=STATE_SCHEMA), dict(counts)


def rollout_failure_modes(
    states: pl.DataFrame, rollouts: Sequence[Trajectory], repeat_window: int = 1
) -> list[str]:
    """For each divergence state (rows of :func:`divergence_states`), the failure mode of the action its rollout
    took there (the policy's greedy action in its own episode) against the state's reference set."""
    by_id = {rollout.id: rollout for rollout in rollouts}
    modes = []
    for state in states.iter_rows(named=True):
        step = by_id[state["trajectory_id"]].steps[state["step_index"]]
        mode = classify_failure(
            step.action,
            reference_set(state),
            parse_history(state["previous_actions"]),
            state_url=state["url"],
            repeat_window=repeat_window,
        )
        modes.append(mode.value if mode else None)
    return modes
