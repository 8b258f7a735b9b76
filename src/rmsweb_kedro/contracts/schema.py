"""Data contracts: Task, Observation, Step, Trajectory, and the polars schemas of the tables built from them that
pass between stages (tasks, trajectories, steps, quarantine, collection_log, states), with the one conversion of
each record to its row. Tables derived further keep their schema beside the code that computes them (scoring's
scored states, mining's critical states, evaluate's predictions and episodes, the report's tables);
docs/data_contracts.md describes them all.

Raw trajectory files (``data/01_raw/trajectories/**.jsonl``) hold one :class:`Trajectory` a line, as JSON.
Screenshot paths in a file are relative to that file's folder and must stay inside the raw data folder.
"""

from __future__ import annotations

from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from rmsweb_kedro.contracts.actions import (
    INT32_MAX,
    INT64_MAX,
    Action,
    ActionParseError,
    ActionType,
    format_action,
    parse_action,
)

#: ``file``: a task file a researcher brings (tasks/files.py); ``proposed``: written by the task proposer.
TaskSource = Literal["sandbox", "webvoyager", "online_mind2web", "webtailbench", "user", "file", "proposed"]
Level = Literal["easy", "medium", "hard"]
Split = Literal["train", "val", "test"]
#: ``webgym``: WebGym's evaluator, chosen for tasks carrying a rubric beside a reference answer (judges.choice).
JudgeKind = Literal[
    "sandbox_checker", "webvoyager", "webjudge", "rubric", "reference_answer", "webgym", "none"
]
CollectionMode = Literal["single", "independent_retries", "reflection_retries", "policy", "user"]
#: ``time_limit``: the attempt's wall time ran out; ``critical_point``: a live episode stopped before an irreversible
#: step (paying, submitting personal data, sending a message), counted apart in summaries. Three ends are the
#: environment's, never judged as the agent's: ``env_error`` (a crash or timeout that persisted), ``blocked`` (the
#: site refused the browser: a captcha, an anti-bot page, HTTP 403/429 on the page, a login wall; the kind in
#: ``metadata["blocked"]``) and ``judge_error`` (the judge could not judge: ``metadata["judge_error"]``).
Termination = Literal[
    "stop",
    "answer",
    "max_steps",
    "env_error",
    "model_error",
    "time_limit",
    "critical_point",
    "blocked",
    "judge_error",
]
#: The ends that are the environment's: no verdict, ``success`` null, counted apart in every summary.
ENV_TERMINATIONS = ("env_error", "blocked", "judge_error")
#: What blocked a browser (``Observation.blocked``, ``metadata["blocked"]`` of a ``blocked`` trajectory): a
#: challenge widget shown on the page, an anti-bot interstitial, a refusing status, a login wall (web.browser
#: ``block_kind``).
BlockKind = Literal["captcha", "anti_bot", "http_403", "http_429", "login_wall"]

#: Online-Mind2Web's difficulty bands by reference length (steps).
LEVEL_BOUNDS = {"easy": (1, 5), "medium": (6, 10), "hard": (11, 10_000)}


def level_for_length(reference_length: int) -> Level:
    """Online-Mind2Web's difficulty band: easy <= 5 steps, medium 6-10, hard >= 11."""
    return "easy" if reference_length <= 5 else "medium" if reference_length <= 10 else "hard"


class _Record(BaseModel):
    # allow_inf_nan=False: JSON's NaN/Infinity (or 1e400) in a cost, a box or a coordinate is refused, never stored
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


#: ``JudgeSpec.config["rubric_rule"]`` of a rubric of facts that must all hold (WebGym's evaluator), not points to a
#: threshold: written by ``tasks/rubrics.py``, read by ``judges/choice.py``.
EVERY_FACT = "every_fact"


class JudgeSpec(_Record):
    """How a task is judged. ``config`` holds what that judge needs (checker name and expected values, a
    reference answer, a rubric...)."""

    kind: JudgeKind
    config: dict[str, Any] = Field(default_factory=dict)


class Task(_Record):
    """One web task, from the sandbox or a public benchmark, interchangeable downstream."""

    id: str = Field(min_length=1)
    source: TaskSource
    site: str = Field(min_length=1)
    start_url: str = Field(min_length=1)
    instruction: str = Field(min_length=1)
    level: Level | None = None
    reference_length: int | None = Field(default=None, ge=0, le=INT32_MAX)
    split: Split | None = None
    judge: JudgeSpec = Field(default_factory=lambda: JudgeSpec(kind="none"))
    #: A reference solution when one is known (sandbox): canonical action texts, targets given by
    #: role and name since element ids exist only in a live observation; see the sandbox docs.
    reference_solution: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Element(_Record):
    """An interactive element of an observation: the id actions target, its role, accessible name, value."""

    id: int = Field(ge=0, le=INT32_MAX)
    role: str
    name: str = ""
    value: str | None = None
    tag: str | None = None
    bbox: tuple[float, float, float, float] | None = None  # x, y, width, height in page pixels


class Observation(_Record):
    """What the agent sees after reset/step: URL, title, accessibility tree with element ids, screenshot."""

    url: str
    title: str = ""
    axtree: str = ""
    elements: list[Element] = Field(default_factory=list)
    screenshot: str | None = None  # path of a PNG file
    tabs: list[str] = Field(default_factory=list)
    error: str | None = None  # the last action's error, if any (never an exception)
    env_error: bool = False  # True when the environment itself failed (crash, timeout), not the agent
    #: the page offset of the viewport when observed: element boxes are in page pixels, the screenshot is the viewport
    scroll: tuple[float, float] = (0.0, 0.0)
    #: The site refused the browser on this page (web.browser detects it): the episode ends ``blocked``.
    blocked: BlockKind | None = None


class Usage(_Record):
    prompt_tokens: int = Field(default=0, ge=0, le=INT64_MAX)
    completion_tokens: int = Field(default=0, ge=0, le=INT64_MAX)

    def __add__(self, other: Usage) -> Usage:
        """The tokens of both: ``usage = usage + reply.usage`` sums an episode's or a judge's calls."""
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


PromptSource = Literal["official", "project", "none"]


class JudgedBy(_Record):
    """The judge spec every verdict carries: what produced it, so a number can be reproduced and a reader can tell
    a benchmark's own protocol from an approximation of it.

    ``prompt_source``: ``official`` (the benchmark's prompt texts, fetched at a pinned commit, used verbatim),
    ``project`` (the project's own wording: the fallback when the official files are absent, or a benchmark that
    publishes none) or ``none`` (a programmatic judge, no prompt). ``prompt_ref`` says where the texts came from
    (``owner/repo@commit:path`` or the project's prompt version); ``prompt_sha256`` hashes the texts used.
    """

    kind: JudgeKind
    protocol: str = Field(min_length=1)  # e.g. "online-mind2web/webjudge", "sandbox/checker"
    model: str | None = None  # the judge model; None for a programmatic judge
    prompt_source: PromptSource
    prompt_ref: str | None = None
    prompt_sha256: str | None = None
    thresholds: dict[str, Any] = Field(default_factory=dict)

    @property
    def official(self) -> bool:
        """Whether a number judged this way may be called the benchmark's official protocol: its own prompts, or
        no prompt at all (a programmatic checker is its own protocol)."""
        return self.prompt_source != "project"


class Verdict(_Record):
    """A judge's decision, with what is needed to reproduce it: the judge's name and its spec (``judged_by``,
    filled by every judge of the project; None only in records written before it existed)."""

    success: bool
    reason: str = ""
    judge: str = ""  # e.g. "sandbox-checker/v1", "webjudge/o4-mini/official-1a2b3c4d"
    judged_by: JudgedBy | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class Step(_Record):
    """One step of an attempt: the observation it acted on, the thought and action, the raw model text."""

    index: int = Field(ge=0, le=INT32_MAX)
    url: str
    screenshot: str | None = None  # relative to the trajectory file's folder
    axtree: str | None = None
    thought: str | None = None
    action: Action | None = None  # None when the model output did not parse
    raw_output: str | None = None
    error: str | None = None
    #: Other actions that would have done what ``action`` did here, as the environment established them (the
    #: sandbox's declared equivalents, web/sandbox/reference.py); they become the state's reference set.
    equivalent_actions: list[Action] = Field(default_factory=list)
    #: The box (x, y, width, height) of the element the action targets, in the step's screenshot pixels (the
    #: viewer draws it); None when the action targets no element or the record predates it.
    target_box: tuple[float, float, float, float] | None = None
    # The screenshot file the step acted on, as the running episode holds it (absolute, maybe in a temporary
    # folder): a later step's live prompt shows it (prompts.PromptConfig.history_screenshots). Private, so never
    # in a record, whose ``screenshot`` is relative to its file or absent.
    _observed_screenshot: str | None = PrivateAttr(default=None)

    @property
    def observed_screenshot(self) -> str | None:
        """The screenshot file this step acted on while its episode runs (``observed``); None in a record."""
        return self._observed_screenshot

    def observed(self, screenshot: str | None) -> Step:
        """This step, remembering the file of the screenshot it acted on (``run_episode`` calls it)."""
        self._observed_screenshot = screenshot
        return self

    @field_validator("action", mode="before")
    @classmethod
    def _action_text(cls, value: Any) -> Any:
        # Hand-written files may give the action in its text form, "click(12)", instead of its JSON object.
        return parse_action(value) if isinstance(value, str) else value

    @field_validator("equivalent_actions", mode="before")
    @classmethod
    def _equivalent_texts(cls, value: Any) -> Any:
        return [parse_action(v) if isinstance(v, str) else v for v in value or []]

    @field_validator("screenshot")
    @classmethod
    def _relative_inside(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.strip():
            raise ValueError("screenshot path is empty")
        if value.startswith(("/", "\\")) or (len(value) > 1 and value[1] == ":"):
            raise ValueError(
                f"screenshot path {value!r} is absolute; it must be relative to the trajectory file"
            )
        if ".." in value.replace("\\", "/").split("/"):
            raise ValueError(f"screenshot path {value!r} escapes the data folder")
        return value


class Trajectory(_Record):
    """One attempt at one task: every step, the reflections it was conditioned on and the judge's verdict."""

    id: str = Field(min_length=1)
    task_id: str = Field(min_length=1)
    site: str = ""
    instruction: str = ""
    attempt: int = Field(default=1, ge=1, le=INT32_MAX)
    mode: CollectionMode = "single"
    reflections: list[str] = Field(default_factory=list)
    success: bool | None = None
    verdict: Verdict | None = None
    termination: Termination | None = None
    steps: list[Step]
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = Field(default=0.0, ge=0)
    producer: str = ""  # who acted: "scripted-teacher/seed=3", a model name, a checkpoint path
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("steps")
    @classmethod
    def _indices_in_order(cls, steps: list[Step]) -> list[Step]:
        seen: set[int] = set()
        for position, step in enumerate(steps):
            if step.index in seen:
                raise ValueError(f"step index {step.index} appears twice (again at position {position})")
            seen.add(step.index)
            if step.index != position:
                raise ValueError(
                    f"step indices must run 0, 1, 2, ... in order; position {position} has index {step.index}"
                )
        return steps


_ENDING = {ActionType.ANSWER: "answer", ActionType.STOP: "stop"}


def trajectory_fault(trajectory: Trajectory) -> tuple[str, str] | None:
    """``(field, reason)`` of the first cross-field invariant ``trajectory`` breaks (docs/data_contracts.md,
    "Invariants across fields"), or None. Checked at ingest, where a record comes from a file; the field checks
    (types, ranges, finite numbers, step order) are the models' own."""
    t, steps = trajectory, trajectory.steps
    if t.verdict is not None and t.success is not None and t.success != t.verdict.success:
        return "success", (
            f"success is {t.success} but verdict.success is {t.verdict.success}: a record must agree with its own "
            "verdict (give one, or make them equal)"
        )
    success = t.success if t.success is not None else (t.verdict.success if t.verdict else None)
    if success and not steps:
        return "steps", "the trajectory is marked successful but has no steps: a success is reached by acting"
    if t.termination in ENV_TERMINATIONS and (t.success is not None or t.verdict is not None):
        return "termination", (
            f"termination {t.termination} (the environment's end) carries a success or a verdict: an environment "
            "outcome is never the agent's success or failure (success and verdict must be null)"
        )
    for step in steps[:-1]:
        if step.action is not None and step.action.type in _ENDING:
            return f"steps.{step.index}.action", (
                f"{step.action.type.value} ends an episode, but step {step.index} is followed by "
                f"{len(steps) - 1 - step.index} more step(s)"
            )
    last = steps[-1].action if steps else None
    ending = _ENDING.get(last.type) if last is not None else None
    if t.termination in ("answer", "stop") and ending != t.termination:
        return "termination", (
            f"termination is {t.termination!r} but the last step's action is "
            f"{format_action(last) if last else 'missing'}: an episode ends by {t.termination} with that action"
        )
    # a judge_error (or blocked) record keeps the agent's steps, its own end in metadata: any last action fits
    if ending is not None and t.termination not in (None, ending, *ENV_TERMINATIONS):
        return "termination", (
            f"the last step's action {format_action(last)} ends the episode by {ending}, but termination is "
            f"{t.termination!r}"
        )
    return None


# ---------------------------------------------------------------- tables (polars)

TRAJECTORY_SCHEMA = pl.Schema(
    {
        "trajectory_id": pl.String,
        "task_id": pl.String,
        "site": pl.String,
        "instruction": pl.String,
        "attempt": pl.Int32,
        "mode": pl.String,
        "reflections": pl.List(pl.String),
        "success": pl.Boolean,
        "judge": pl.String,
        "judge_reason": pl.String,
        "termination": pl.String,
        "n_steps": pl.Int32,
        "prompt_tokens": pl.Int64,
        "completion_tokens": pl.Int64,
        "cost_usd": pl.Float64,
        "producer": pl.String,
        "source_file": pl.String,
    }
)

STEP_SCHEMA = pl.Schema(
    {
        "trajectory_id": pl.String,
        "task_id": pl.String,
        "index": pl.Int32,
        "url": pl.String,
        "screenshot": pl.String,  # relative to the raw trajectories folder (posix)
        "axtree": pl.String,
        "thought": pl.String,
        "action": pl.String,  # canonical text (actions.format_action); null when unparsed
        "action_type": pl.String,
        "element": pl.Int32,
        "raw_output": pl.String,
        "error": pl.String,
        "equivalent_actions": pl.List(pl.String),  # canonical texts (Step.equivalent_actions)
    }
)

QUARANTINE_SCHEMA = pl.Schema(
    {
        "source_file": pl.String,
        "line": pl.Int64,  # 1-based; 0 when the whole file is at fault
        "record_id": pl.String,
        "field": pl.String,
        "reason": pl.String,
        "raw": pl.String,  # the offending text, cut to a bound
    }
)

#: ``collection_log`` (the collect stage's, read by evaluate and ablations): one row per attempt of every mode,
#: failed ones and environment errors too.
COLLECTION_LOG_SCHEMA = pl.Schema(
    {
        "mode": pl.String,
        "task_id": pl.String,
        "site": pl.String,
        "attempt": pl.Int32,
        "success": pl.Boolean,  # null: environment error, never judged
        "termination": pl.String,
        "n_steps": pl.Int32,
        "prompt_tokens": pl.Int64,
        "completion_tokens": pl.Int64,
        "cost_usd": pl.Float64,
        "reflections_seen": pl.Int32,
        "reflection_after": pl.String,
        "partition": pl.String,  # the raw_trajectories partition, <mode>/<task id>__a<attempt>
        "trajectory": pl.String,  # the Trajectory as JSON
    }
)

TASK_SCHEMA = pl.Schema(
    {
        "id": pl.String,
        "source": pl.String,
        "site": pl.String,
        "start_url": pl.String,
        "instruction": pl.String,
        "level": pl.String,
        "reference_length": pl.Int32,
        "split": pl.String,
        "judge": pl.String,  # JudgeSpec as JSON
        "reference_solution": pl.String,  # JSON list or null
        "metadata": pl.String,  # JSON
    }
)


def trajectory_row(trajectory: Trajectory, source_file: str | None = None) -> dict[str, Any]:
    """The columns a trajectory gives every table of trajectories or episodes (``trajectories``, ``collection_log``,
    evaluate's ``online_episodes``, ``live_results``, mining's rollouts); each table keeps the ones its schema names
    and adds its own. ``source_file``: the raw file it was read from (``trajectories``)."""
    verdict = trajectory.verdict
    return {
        "trajectory_id": trajectory.id,
        "task_id": trajectory.task_id,
        "site": trajectory.site,
        "instruction": trajectory.instruction,
        "mode": trajectory.mode,
        "attempt": trajectory.attempt,
        "reflections": trajectory.reflections,
        "reflections_seen": len(trajectory.reflections),
        "reflection_after": trajectory.metadata.get("reflection_after"),
        # a hand-written file may give the verdict alone
        "success": trajectory.success
        if trajectory.success is not None
        else (verdict.success if verdict else None),
        "judge": verdict.judge if verdict else None,
        "judged_by": verdict.judged_by.model_dump_json() if verdict and verdict.judged_by else None,
        "judge_reason": verdict.reason if verdict else None,
        "termination": trajectory.termination,
        "critical_point": trajectory.metadata.get("critical_point"),
        "blocked": trajectory.metadata.get("blocked"),
        "n_steps": len(trajectory.steps),
        "prompt_tokens": trajectory.usage.prompt_tokens,
        "completion_tokens": trajectory.usage.completion_tokens,
        "cost_usd": trajectory.cost_usd,
        "wall_s": trajectory.metadata.get("wall_s", 0.0),
        "producer": trajectory.producer,
        "source_file": source_file,
    }


def step_row(trajectory: Trajectory, step: Step, screenshot_prefix: str = "") -> dict[str, Any]:
    """The ``steps`` table row of one step; ``screenshot_prefix`` is the file's folder in the raw root."""
    action = step.action
    return {
        "trajectory_id": trajectory.id,
        "task_id": trajectory.task_id,
        "index": step.index,
        "url": step.url,
        "screenshot": f"{screenshot_prefix}{step.screenshot}" if step.screenshot else None,
        "axtree": step.axtree,
        "thought": step.thought,
        "action": format_action(action) if action else None,
        "action_type": action.type.value if action else None,
        "element": action.element if action else None,
        "raw_output": step.raw_output,
        "error": step.error,
        "equivalent_actions": [format_action(a) for a in step.equivalent_actions],
    }


#: The steps of the episodes evaluate, mining and live run (``online_steps``, ``mining_online_steps``,
#: ``live_steps``): the ``steps`` columns, the targeted element's box and the episode's own columns; ``screenshot``
#: is relative to the stage's episodes folder.
EPISODE_STEP_SCHEMA = pl.Schema(
    {**STEP_SCHEMA, "target_box": pl.List(pl.Float64), "model": pl.String, "run": pl.Int32}
)


def episode_step_rows(
    trajectory: Trajectory, model: str | None = None, run: int | None = None, screenshot_prefix: str = ""
) -> list[dict[str, Any]]:
    """The ``EPISODE_STEP_SCHEMA`` rows of one episode (screenshots as the steps record them, after
    ``screenshot_prefix``)."""
    return [
        step_row(trajectory, step, screenshot_prefix)
        | {"target_box": list(step.target_box) if step.target_box else None, "model": model, "run": run}
        for step in trajectory.steps
    ]


def task_row(task: Task) -> dict[str, Any]:
    """The ``tasks`` table row of one task (nested fields as JSON text)."""
    import json

    return {
        "id": task.id,
        "source": task.source,
        "site": task.site,
        "start_url": task.start_url,
        "instruction": task.instruction,
        "level": task.level,
        "reference_length": task.reference_length,
        "split": task.split,
        "judge": task.judge.model_dump_json(),
        "reference_solution": json.dumps(task.reference_solution)
        if task.reference_solution is not None
        else None,
        "metadata": json.dumps(task.metadata),
    }


def task_from_row(row: dict[str, Any]) -> Task:
    """Inverse of :func:`task_row`."""
    import json

    fields = dict(row)
    fields["judge"] = JudgeSpec.model_validate_json(fields["judge"])
    fields["reference_solution"] = (
        json.loads(fields["reference_solution"]) if fields.get("reference_solution") else None
    )
    fields["metadata"] = json.loads(fields.get("metadata") or "{}")
    return Task(**fields)


def tasks_to_frame(tasks: list[Task]) -> pl.DataFrame:
    """A ``tasks`` table with :data:`TASK_SCHEMA`."""
    return pl.DataFrame([task_row(t) for t in tasks], schema=TASK_SCHEMA)


def tasks_from_frame(frame: pl.DataFrame) -> list[Task]:
    """Tasks back from a ``tasks`` table."""
    return [task_from_row(row) for row in frame.iter_rows(named=True)]


# ---------------------------------------------------------------- policy states (the joint of sft_data, mining,
# salvage_ds and offline evaluation): what a policy saw at one step and what the reference did there.

STATE_SCHEMA = pl.Schema(
    {
        "state_id": pl.String,  # "<trajectory_id>:<step index>"
        "task_id": pl.String,
        "trajectory_id": pl.String,
        "step_index": pl.Int32,
        "site": pl.String,
        "instruction": pl.String,
        "previous_actions": pl.List(pl.String),  # canonical action texts, oldest first
        # beside previous_actions, one entry a past step (null where it had none): what the context policy can show
        # (prompts.PromptConfig); absent in older tables: [] (no thought, no screenshot)
        "previous_thoughts": pl.List(pl.String),
        "previous_screenshots": pl.List(pl.String),  # relative to the raw trajectories folder, as screenshot
        "url": pl.String,
        "axtree": pl.String,
        "screenshot": pl.String,  # path relative to the raw trajectories folder, or null
        "reference_thought": pl.String,
        "reference_action": pl.String,  # canonical action text
        # other actions that do the same here (canonical texts; the environment established them); with
        # reference_action they are the state's reference set (reference_set). Absent in older tables: [].
        "equivalent_actions": pl.List(pl.String),
    }
)
#: STATE_SCHEMA columns that older tables may lack, and the value they get (conform_states).
STATE_DEFAULTS: dict[str, Any] = {
    "equivalent_actions": [],
    "previous_thoughts": [],
    "previous_screenshots": [],
}


def conform_states(states: pl.DataFrame, name: str) -> pl.DataFrame:
    """``states`` with the STATE_SCHEMA columns in order (and any further columns after them): a column of
    :data:`STATE_DEFAULTS` it lacks gets its default, any other missing column is an error naming the table."""
    missing = [c for c in STATE_SCHEMA.names() if c not in states.columns and c not in STATE_DEFAULTS]
    if missing:
        raise ValueError(f"{name}: missing STATE_SCHEMA columns {missing}")
    defaults = [
        pl.lit(value, dtype=STATE_SCHEMA[column]).alias(column)
        for column, value in STATE_DEFAULTS.items()
        if column not in states.columns
    ]
    states = states.with_columns(defaults) if defaults else states
    rest = [c for c in states.columns if c not in STATE_SCHEMA]
    return states.select(*STATE_SCHEMA.names(), *rest)


def reference_set(state: dict[str, Any]) -> list[Action]:
    """The actions that are right at a STATE row: ``reference_action`` first, then ``equivalent_actions``. A text
    that does not parse is a data error naming the state and the field."""
    texts = [("reference_action", state.get("reference_action"))]
    texts += [("equivalent_actions", text) for text in state.get("equivalent_actions") or []]
    actions = []
    for field, text in texts:
        try:
            actions.append(parse_action(text))
        except (ActionParseError, TypeError) as err:
            raise ValueError(
                f"state {state.get('state_id')!r}: field {field} {text!r} does not parse: {err}"
            ) from None
    return actions
