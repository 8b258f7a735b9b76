"""The evaluation of a policy, the library part: offline step metrics on held-out states, online success in the
sandbox, and the tables that compare models (one row per model; success with its Wilson interval).

Models are checkpoint datasets' values (a directory path or a ``(model, processor)`` pair) acted through the policy
:class:`EvaluateParams` ``policy`` asks for (``hf``, in this process, or ``openai``, served: at an endpoint, or
on a vLLM server started for the model and stopped after, ``policy.server``; agents.factory.build_policy and
managed_policy) and scored offline by :func:`~rmsweb_kedro.measures.scoring.score_states`; online episodes run
in the real sandbox through :func:`~rmsweb_kedro.episodes.rollouts.run_rollouts`, judged by the sandbox checker. Used by the
``evaluate`` pipeline (and, namespaced, by ``ablations``) and by ``live`` (the policy, the episode table and its
success summary). A library module: typed configs, no catalog names, no ``params:``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.agents.factory import PolicySpec, managed_policy
from rmsweb_kedro.contracts.schema import EPISODE_STEP_SCHEMA, episode_step_rows, trajectory_row
from rmsweb_kedro.contracts.seeding import draw_states, draw_up_to, seeded_rng
from rmsweb_kedro.judges.choice import JudgeSpecConfig
from rmsweb_kedro.measures.reporting import wilson_interval
from rmsweb_kedro.measures.scoring import STEP_METRICS, STEP_SCHEMA, step_rates
from rmsweb_kedro.models.endpoint import EndpointConfig

logger = logging.getLogger(__name__)


class _Params(BaseModel):  # every block of ``params:evaluate`` (conf/base/parameters_evaluate.yml)
    model_config = ConfigDict(extra="forbid")


class OfflineParams(_Params):
    max_states: int | None = Field(
        default=None, ge=1, description="held-out states scored, drawn with the seed (None: all)"
    )


class OnlineParams(_Params):
    enabled: bool = True  # false: no online episodes (the comparison's online columns stay empty)
    splits: list[str] = Field(default_factory=lambda: ["test"])
    held_out_sites: list[str] = Field(default_factory=lambda: ["hotels"])
    max_tasks: int | None = Field(default=5, ge=1, description="tasks of the splits on the training sites")
    max_held_out_tasks: int | None = Field(default=1, ge=0, description="tasks of the held-out sites")
    runs: int = Field(default=2, ge=1, description="runs over the same tasks, averaged")
    #: a model of several training seeds (``rmsweb_models``): how many of its seeds run online, the first in seed
    #: order (None: every one); offline, every seed is scored
    max_seeds: int | None = Field(default=None, ge=1)
    max_steps: int = Field(default=14, ge=1)
    greedy: bool = True
    temperature: float = Field(default=1.0, gt=0)
    headless: bool = True
    sandbox_seed: int = 0
    n_envs: int = Field(
        default=1,
        ge=1,
        description="browsers (params:rollouts backend; sampled runs are reproducible with 1 only)",
    )
    #: the episodes' screenshots are kept under ``episodes_root`` (``<model>/r<run>/<task id>/step_NNN.png``, as
    #: ``online_steps`` names them) for the viewer; false: taken to a temporary folder and dropped
    keep_screenshots: bool = True
    episodes_root: str = "data/07_model_output/evaluate/episodes"
    #: the judge of tasks without a programmatic checker (judges.choice: sandbox tasks keep the sandbox checker
    #: unless this names an LLM judge); an LLM judge needs its endpoint (the API key from ``api_key_env``)
    judge: JudgeSpecConfig = Field(default_factory=JudgeSpecConfig)


class CostModel(_Params):
    """US dollars per million tokens of the evaluated policy (a served model's price; 0 for free local runs)."""

    prompt_usd_per_million: float = Field(default=0.0, ge=0)
    completion_usd_per_million: float = Field(default=0.0, ge=0)


#: Claim keys measured between any two models, paired: ``online_success_points`` (first minus second, online
#: episodes paired by (task, run)), ``steps_on_solved_pct`` (% fewer steps of first on the episodes both solved) and
#: ``offline_step_points`` (first minus second, step success on the held-out states, paired by state).
PAIRED_MEASURES = frozenset({"online_success_points", "steps_on_solved_pct", "offline_step_points"})


class Claim(_Params):
    key: str  # what this run measures for it (a key of evaluation_report.measures, or of PAIRED_MEASURES)
    claim: str
    paper: str  # the paper's figure, as published
    paper_low: float | None = None  # the published range in the measure's unit, for the direction check
    paper_high: float | None = None
    #: the two models a PAIRED_MEASURES key compares, first against second (labels of online_episodes' model)
    models: tuple[str, str] | None = None

    @model_validator(mode="after")
    def _models_with_paired_keys(self) -> Claim:
        if (self.key in PAIRED_MEASURES) != (self.models is not None):
            raise ValueError(
                f"claim {self.key!r}: `models` [first, second] goes with the keys {sorted(PAIRED_MEASURES)} "
                "and only with them"
            )
        return self


class EvaluateParams(_Params):
    """``params:evaluate``: how models are acted, which states and tasks score them, and the report's claims."""

    policy: PolicySpec = Field(default_factory=PolicySpec)
    #: policy.kind openai: the endpoint serving each evaluated model (base, sft, rmsweb); a model not named here
    #: is reached at policy.endpoint.
    served: dict[str, EndpointConfig] = Field(default_factory=dict)
    #: policy.server: the managed servers' logs, ``<server_logs>/<model>_<offline|online>.log``
    server_logs: str = "data/07_model_output/evaluate/servers"
    offline: OfflineParams = Field(default_factory=OfflineParams)
    online: OnlineParams = Field(default_factory=OnlineParams)
    cost: CostModel = Field(default_factory=CostModel)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    power: float = Field(
        default=0.8, gt=0, lt=1, description="power of the claims' minimum detectable effect (`mde`)"
    )
    seed: int = 0
    bootstrap_resamples: int = Field(
        default=2000,
        ge=100,
        description="resamples of the report's paired bootstrap intervals (seeded with seed)",
    )
    claims: list[Claim] = Field(default_factory=list)
    figures: dict[str, str] = Field(default_factory=dict)  # plot name -> file name beside the report

    @model_validator(mode="after")
    def _servers_from_one_place(self) -> EvaluateParams:
        if self.policy.server is not None and self.served:
            raise ValueError(
                "evaluate.served names servers you run and evaluate.policy.server starts one per model: set one "
                f"of them (served has {sorted(self.served)})"
            )
        return self


# ---------------------------------------------------------------- models of several training seeds


def seed_label(model_name: str, seed: int) -> str:
    """The label of training seed ``seed``'s model of ``model_name`` (``rmsweb_s0``): one model a seed in every
    table, pooled where a claim names ``model_name`` (measures.report)."""
    return f"{model_name}_s{seed}"


def seed_of(label: str, model_name: str) -> int | None:
    """The training seed of ``label`` if it is a seed's label of ``model_name`` (:func:`seed_label`), else None."""
    prefix = f"{model_name}_s"
    rest = label.removeprefix(prefix)
    return int(rest) if label.startswith(prefix) and rest.isdigit() else None


def seed_models(model: Any, model_name: str) -> Iterator[tuple[str, Any]]:
    """``(label, model)`` pairs of a checkpoint dataset's value: ``(model_name, model)`` for one model; for a
    model of several training seeds (``{seed: model}``, or ``{seed: load}`` as ``SeedCheckpointsDataset``
    loads it), each seed's in seed order, labelled :func:`seed_label`, loaded only when its turn comes."""
    if not isinstance(model, dict):
        yield model_name, model
        return
    for seed in sorted(model):
        loaded = model[seed]
        yield seed_label(model_name, int(seed)), loaded() if callable(loaded) else loaded


# ---------------------------------------------------------------- policy


def load_policy(
    model: Any, config: EvaluateParams, greedy: bool = True, model_name: str | None = None
) -> Any:
    """The policy ``evaluate.policy`` asks for over a checkpoint dataset's value (a directory path, or a
    ``(model, processor)`` pair; agents.factory.build_policy), or served (``openai``: at ``served[model_name]``,
    else ``policy.endpoint``); an object that already acts (any :class:`~rmsweb_kedro.agents.base.Agent`: a
    scripted teacher as a ceiling) is evaluated as it is."""
    if hasattr(model, "act"):
        return model
    from rmsweb_kedro.agents.factory import build_policy

    spec = config.policy
    if spec.kind == "openai" and model_name in config.served:
        spec = spec.model_copy(update={"endpoint": config.served[model_name]})
    return build_policy(spec, model, greedy=greedy, temperature=config.online.temperature)


@contextmanager
def acting_policy(
    model: Any, config: EvaluateParams, model_name: str, part: str, greedy: bool = True
) -> Iterator:
    """:func:`load_policy` for the ``with`` block; with ``policy.server`` the model's checkpoint served by a vLLM
    server started for the block and stopped after (agents.factory.managed_policy; its log
    ``<server_logs>/<model_name>_<part>.log``)."""
    if hasattr(model, "act"):
        yield model
        return
    log = Path(config.server_logs) / f"{model_name}_{part}.log"
    where = "evaluate.policy.server"
    with managed_policy(config.policy, model, name=model_name, log_path=log, where=where) as (
        spec,
        checkpoint,
    ):
        yield load_policy(checkpoint, config.model_copy(update={"policy": spec}), greedy, model_name)


# ---------------------------------------------------------------- offline


def predict_offline(
    states: pl.DataFrame, model: Any, config: EvaluateParams, model_name: str
) -> pl.DataFrame:
    """The model's greedy reply at each held-out state (up to ``offline.max_states``, drawn with the seed),
    scored against the reference action by :func:`~rmsweb_kedro.measures.scoring.score_states` (the step-metric columns of
    :data:`~rmsweb_kedro.measures.scoring.STEP_SCHEMA`)."""
    from rmsweb_kedro.measures.scoring import ScoringConfig, score_states

    drawn = draw_states(states, config.offline.max_states, config.seed)
    scoring = ScoringConfig(max_new_tokens=config.policy.max_new_tokens, batch_size=config.policy.batch_size)
    with acting_policy(model, config, model_name, "offline") as policy:
        scored = score_states(drawn.to_dicts(), policy, scoring)
    logger.info("offline %s: %d states scored", model_name, scored.height)
    kinds = [step_kind(*row) for row in drawn.select("reference_action", "axtree", "instruction").iter_rows()]
    meta = drawn.select("task_id", "site", "reference_action", pl.Series("step_kind", kinds, dtype=pl.String))
    return (
        pl.concat([scored, meta], how="horizontal")
        .with_columns(pl.lit(model_name).alias("model"))
        .select(OFFLINE_PREDICTION_SCHEMA.names())
    )


OFFLINE_PREDICTION_SCHEMA = pl.Schema(
    {
        "model": pl.String,
        "state_id": pl.String,
        "task_id": pl.String,
        "site": pl.String,
        "reference_action": pl.String,
        "step_kind": pl.String,  # what the state asks for (step_kind)
        "reply": pl.String,
        **STEP_SCHEMA,
    }
)


def step_kind(reference_action: str, axtree: str, instruction: str) -> str:
    """What a held-out state asks for: the reference action's type and, for an action on an element, the
    element's role (``click button``, ``type textbox``, ``select_option combobox``); a link the task names is
    ``click link the task names``: picking the restaurant, job or product the task asks for out of a list, where
    the policy must match a name rather than follow the page."""
    from rmsweb_kedro.contracts.actions import parse_action
    from rmsweb_kedro.contracts.pagetree import parse_axtree

    action = parse_action(reference_action)
    element = next((e for e in parse_axtree(axtree) if e.id == action.element), None)
    if element is None:
        return action.type.value
    if element.role == "link" and element.name and element.name in instruction:
        return f"{action.type.value} link the task names"
    return f"{action.type.value} {element.role}"


def step_kind_rates(predictions: pl.DataFrame, confidence: float) -> pl.DataFrame:
    """Offline step success per model and :func:`step_kind`, with its Wilson interval (states: how many of the
    held-out states ask for it), the kinds in order of how many states ask for them: where step accuracy is lost."""
    order = {model: i for i, model in enumerate(predictions["model"].unique(maintain_order=True))}
    counted = (
        predictions.group_by("model", "step_kind")
        .agg(pl.len().alias("states"), pl.col("step_success").sum().alias("successes"))
        .sort(pl.col("model").replace_strict(order), "states", "step_kind", descending=[False, True, False])
    )
    bounds = [wilson_interval(k, n, confidence) for k, n in counted.select("successes", "states").iter_rows()]
    return counted.select(
        "model",
        "step_kind",
        "states",
        (pl.col("successes") / pl.col("states")).alias("step_success_rate"),
        pl.Series("success_low", [low for low, _ in bounds], dtype=pl.Float64),
        pl.Series("success_high", [high for _, high in bounds], dtype=pl.Float64),
    )


def offline_metrics(predictions: pl.DataFrame) -> pl.DataFrame:
    """The five offline rates per model, in the order the models were evaluated."""
    models = predictions["model"].unique(maintain_order=True).to_list()
    rows = [{"model": m, **step_rates(predictions.filter(pl.col("model") == m))} for m in models]
    return pl.DataFrame(
        rows, schema={"model": pl.String, "n_states": pl.Int64} | dict.fromkeys(STEP_METRICS, pl.Float64)
    )


# ---------------------------------------------------------------- online

EPISODE_SCHEMA = pl.Schema(
    {
        "model": pl.String,
        "run": pl.Int32,
        "task_id": pl.String,
        "site": pl.String,
        "level": pl.String,
        "split": pl.String,
        "held_out": pl.Boolean,
        "success": pl.Boolean,  # null when the environment failed (neither success nor failure)
        # greedy decoding on the sandbox: the runs of a task repeat one episode (distinct_episodes); null: live
        # sites, whose runs are episodes of their own
        "greedy": pl.Boolean,
        "termination": pl.String,
        "n_steps": pl.Int32,
        "prompt_tokens": pl.Int64,
        "completion_tokens": pl.Int64,
        "cost_usd": pl.Float64,
        "wall_s": pl.Float64,
        "judge": pl.String,
        "judged_by": pl.String,  # schema.JudgedBy as JSON: kind, protocol, model, prompt source/ref/hash, thresholds
        "judge_reason": pl.String,
        # where a failed sandbox episode first left its task's reference solution (reference_divergence)
        "diverged_at": pl.Int32,  # step index; null: succeeded, no reference, or never left it
        "divergence_action": pl.String,  # what the policy did there ("<invalid>": its output did not parse)
        "divergence_reference": pl.String,  # what the reference does on that page
        "divergence_mode": pl.String,  # mining.FailureMode value, or "reference_not_on_page"
        # a wrong argument's string: expected (another field differs), in_task_or_page, first_word_only, elsewhere
        "divergence_argument": pl.String,
    }
)


def select_online_tasks(tasks: list, online: OnlineParams, seed: int) -> list:
    """Tasks of ``online.splits``: up to ``max_tasks`` on the training sites and ``max_held_out_tasks`` on the
    held-out sites, drawn with the seed (the same tasks for every model and run)."""
    pool = sorted((t for t in tasks if t.split in online.splits), key=lambda t: t.id)
    seen = [t for t in pool if t.site not in online.held_out_sites]
    held_out = [t for t in pool if t.site in online.held_out_sites]
    rng = seeded_rng(seed)  # one stream: the held-out sites' draw follows the training sites' one
    chosen = draw_up_to(seen, online.max_tasks, rng, key=lambda t: t.id)
    return chosen + draw_up_to(held_out, online.max_held_out_tasks, rng, key=lambda t: t.id)


def run_online(
    tasks: pl.DataFrame,
    model: Any,
    config: EvaluateParams,
    model_name: str,
    rollouts: dict[str, Any] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``online.runs`` runs of the model on the chosen tasks (of the ``tasks`` table) in real Chromium: one row per
    episode, and one row per step of each (:data:`~rmsweb_kedro.contracts.schema.EPISODE_STEP_SCHEMA`; screenshots kept under
    ``online.episodes_root`` when ``online.keep_screenshots``).

    Episodes run through :func:`~rmsweb_kedro.episodes.rollouts.run_rollouts` (``online.n_envs`` browsers on the
    ``rollouts`` backend), never on the calling thread, so a Playwright session it may hold never collides."""
    from rmsweb_kedro.contracts.schema import tasks_from_frame
    from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Roles, run_rollouts
    from rmsweb_kedro.judges.choice import judge_factory

    online = config.online
    nothing = pl.DataFrame(schema=EPISODE_SCHEMA), pl.DataFrame(schema=EPISODE_STEP_SCHEMA)
    if not online.enabled:
        return nothing
    chosen = select_online_tasks(tasks_from_frame(tasks), online, config.seed)
    if not chosen:
        logger.warning("online %s: no task in splits %s", model_name, online.splits)
        return nothing
    root = Path(online.episodes_root).resolve()
    episodes = [
        EpisodeSpec(
            key=f"{model_name}/r{run}/{task.id}",
            task=task,
            max_steps=online.max_steps,
            seed=config.seed + 1000 * run + position,  # sampled decoding differs by run; greedy does not
            trajectory_id=f"evaluate__{model_name}__r{run}__{task.id}",
            screenshot_dir=str(root / model_name / f"r{run}" / task.id) if online.keep_screenshots else None,
            relative_to=str(root) if online.keep_screenshots else None,
            metadata={"run": run},
        )
        for run in range(online.runs)
        for position, task in enumerate(chosen)
    ]
    with acting_policy(model, config, model_name, "online", greedy=online.greedy) as policy:
        trajectories = run_rollouts(
            episodes,
            Roles(agent=_seeded(policy), judge=judge_factory(online.judge)),
            rollouts,
            browsers=online.n_envs,
            browser={"headless": online.headless},
            sandbox_seed=online.sandbox_seed,
            progress=f"online {model_name}",
        )
    rows = [
        episode_row(trajectory, spec.task, model_name, spec.metadata["run"], config)
        | reference_divergence(spec.task, trajectory)
        for spec, (trajectory,) in zip(episodes, trajectories, strict=True)
    ]
    steps = [
        row
        for spec, (trajectory,) in zip(episodes, trajectories, strict=True)
        for row in episode_step_rows(trajectory, model_name, spec.metadata["run"])
    ]
    return pl.DataFrame(rows, schema=EPISODE_SCHEMA), pl.DataFrame(steps, schema=EPISODE_STEP_SCHEMA)


def argument_origin(value: str, expected: str | None, instruction: str, axtree: str) -> str:
    """Where a typed or chosen string could have come from, against the ``expected`` one: ``expected`` (the same
    string: another field differs, e.g. ``submit``), ``in_task_or_page`` (copied, from the wrong place),
    ``first_word_only`` (its first word is there, the rest is not) or ``elsewhere`` (written from memory)."""
    seen = f"{instruction}\n{axtree}"
    if value == expected:
        return "expected"
    if value in seen:
        return "in_task_or_page"
    words = value.split()
    return "first_word_only" if len(words) > 1 and words[0] in seen else "elsewhere"


def reference_divergence(task: Any, trajectory: Any) -> dict[str, Any]:
    """Where a failed episode first left its task's reference solution (sandbox tasks carry one): the step, the
    action taken, the reference action there (resolved on the page the episode saw, its declared equivalents
    accepted: ``actions.matches_any``), the failure mode (``mining.classify_failure``) and, for a wrong string
    argument, where the string came from (:func:`argument_origin`). A longer way a reference step offers
    (``longer_route``, ``unnecessary_filter``: docs/sandbox.md) is followed as that step: it reaches the same page,
    so the step after it is where the episode may leave the reference. All null for a success, an environment
    failure, a task without a reference, or an episode that never left it."""
    from rmsweb_kedro.contracts.actions import format_action, matches_any
    from rmsweb_kedro.contracts.pagetree import parse_axtree
    from rmsweb_kedro.contracts.schema import Observation
    from rmsweb_kedro.measures.mining import FailureMode, classify_failure
    from rmsweb_kedro.trajectories.augmentation import COPIED_ARGUMENT_TYPES
    from rmsweb_kedro.web.sandbox.reference import TargetNotFound, resolve_equivalents, resolve_step

    def resolved(reference: dict[str, Any], page: Observation) -> list[Any]:
        try:
            return [resolve_step(reference, page), *resolve_equivalents(reference, page)]
        except TargetNotFound:
            return []

    found = dict.fromkeys(
        ("diverged_at", "divergence_action", "divergence_reference", "divergence_mode", "divergence_argument")
    )
    plan = task.reference_solution or []
    if trajectory.success is not False or trajectory.termination == "env_error" or not plan:
        return found
    position, pending = 0, []  # pending: the rest of the longer way the policy took for plan[position]
    for step in trajectory.steps:
        if position == len(plan):
            break
        axtree = step.axtree or ""
        page = Observation(url=step.url, axtree=axtree, elements=parse_axtree(axtree))
        way = pending or [plan[position]]
        references = resolved(way[0], page)
        longer = [] if pending else (plan[position].get("longer") or {}).get("steps") or []
        taken = way if matches_any(step.action, references) else None
        if taken is None and longer and matches_any(step.action, resolved(longer[0], page)):
            taken = longer
        if taken is not None:
            pending = taken[1:]
            position += not pending
            continue
        found.update(
            diverged_at=step.index,
            divergence_action=format_action(step.action) if step.action else "<invalid>",
            divergence_reference=format_action(references[0]) if references else None,
        )
        if not references:
            found["divergence_mode"] = "reference_not_on_page"
            return found
        history = [s.action for s in trajectory.steps[: step.index] if s.action]
        mode = classify_failure(step.action, references, history, state_url=step.url)
        found["divergence_mode"] = mode.value
        copied = mode is FailureMode.WRONG_ARGUMENT and step.action.type in COPIED_ARGUMENT_TYPES
        if copied and step.action.argument:  # an empty string comes from nowhere in particular
            found["divergence_argument"] = argument_origin(
                step.action.argument, references[0].argument, task.instruction, axtree
            )
        return found
    return found


def _seeded(policy: Any) -> Any:
    """The agent factory of ``policy``: seeds torch with the episode's seed (sampled decoding), same policy."""

    def agent(seed: int) -> Any:
        import torch

        # torch's global generator, not contracts.seeding: a local policy's sampled decoding draws from it
        torch.manual_seed(seed)
        return policy

    return agent


def episode_row(trajectory: Any, task: Any, model_name: str, run: int, config: EvaluateParams) -> dict:
    """The ``online_episodes`` row of one judged attempt (cost: the endpoint's, plus the cost model's)."""
    usage, cost = trajectory.usage, config.cost
    priced = (
        usage.prompt_tokens * cost.prompt_usd_per_million
        + usage.completion_tokens * cost.completion_usd_per_million
    )
    return trajectory_row(trajectory) | {
        "model": model_name,
        "run": run,
        "level": task.level,
        "split": task.split,
        "held_out": task.site in config.online.held_out_sites,
        "greedy": config.online.greedy,
        "cost_usd": trajectory.cost_usd + priced / 1e6,
    }


def distinct_episodes(judged: pl.DataFrame, outcomes: tuple[str, ...] = ("success",)) -> pl.DataFrame:
    """The rows that are distinct episodes: greedy decoding in the deterministic sandbox repeats a task's episode
    in every run, so its greedy rows of one model and task with the same outcome(s) are one episode (the first
    run's row); other rows (sampled decoding, live sites: ``greedy`` false or null) are each their own.
    ``outcomes``: the outcome columns a repeat must share (a paired table: both models')."""
    if "greedy" not in judged.columns:
        return judged
    greedy = pl.col("greedy").fill_null(False)
    if "greedy_b" in judged.columns:  # a paired table: a pair repeats only if both sides were greedy
        greedy = greedy & pl.col("greedy_b").fill_null(False)
    repeats = judged.filter(greedy).unique(["model", "task_id", *outcomes], keep="first", maintain_order=True)
    return pl.concat([repeats, judged.filter(~greedy)])


def success_summary(episodes: pl.DataFrame, confidence: float) -> dict[str, Any]:
    """Success rate over judged episodes (the mean over runs) with its Wilson interval over the distinct episodes
    (:func:`distinct_episodes`: greedy repeats of a task count once, so three greedy runs do not narrow it), the
    spread of the per-run rates, and the steps, tokens, cost and wall time per task. ``env_errors``: the episodes
    not judged, the environment's (a crash, a site that blocked the browser, a judge that could not judge), of which
    ``blocked`` and ``judge_errors`` say how many were which; episodes stopped at a critical point (live sites) are
    judged as any other and also counted apart."""
    judged = episodes.filter(pl.col("success").is_not_null())
    wins = int(judged["success"].sum()) if judged.height else 0
    distinct = distinct_episodes(judged)
    low, high = wilson_interval(
        int(distinct["success"].sum()) if distinct.height else 0, distinct.height, confidence
    )
    per_run = judged.group_by("run").agg(pl.col("success").cast(pl.Float64).mean()).get_column("success")
    solved = judged.filter(pl.col("success"))
    return {
        "episodes": episodes.height,
        "env_errors": episodes.height - judged.height,
        "blocked": int((episodes["termination"] == "blocked").sum()),
        "judge_errors": int((episodes["termination"] == "judge_error").sum()),
        "critical_points": int((episodes["termination"] == "critical_point").sum()),
        "distinct_episodes": distinct.height,
        "success_rate": wins / judged.height if judged.height else None,
        "success_low": low,
        "success_high": high,
        "run_std": float(per_run.std()) if per_run.len() > 1 else None,
        "steps_on_solved": float(solved["n_steps"].mean()) if solved.height else None,
        "tokens_per_task": float((episodes["prompt_tokens"] + episodes["completion_tokens"]).mean())
        if episodes.height
        else None,
        "cost_per_task_usd": float(episodes["cost_usd"].mean()) if episodes.height else None,
        "wall_s_per_task": float(episodes["wall_s"].mean()) if episodes.height else None,
    }


def paired_table(
    rows: pl.DataFrame,
    first: str,
    second: str,
    on: tuple[str, ...] = ("task_id", "run"),
    outcome: str = "success",
) -> pl.DataFrame:
    """Two models' outcomes on the same items, one row a pair: the ``on`` columns, ``outcome`` (``first``'s) and
    ``<outcome>_b`` (``second``'s). Rows are paired by ``on`` (online episodes: ``(task_id, run)``, ``success``;
    offline predictions: ``state_id``, ``step_success``); a pair where either outcome is null (an environment
    error: not judged) is left out. Greedy repeats (:func:`distinct_episodes`) are one pair: a task whose greedy
    runs gave both models the same outcomes counts once, not once a run."""
    extra = [c for c in ("greedy",) if c in rows.columns and c not in on]
    judged = rows.filter(pl.col(outcome).is_not_null()).select("model", *on, outcome, *extra)
    pairs = judged.filter(pl.col("model") == first).join(
        judged.filter(pl.col("model") == second), on=list(on), suffix="_b"
    )
    if extra and "task_id" in on:
        pairs = distinct_episodes(pairs, (outcome, f"{outcome}_b"))
    return pairs.select(*on, outcome, f"{outcome}_b")


def paired_outcomes(
    rows: pl.DataFrame,
    first: str,
    second: str,
    on: tuple[str, ...] = ("task_id", "run"),
    outcome: str = "success",
) -> tuple[int, int, int, int]:
    """The paired 2x2 table of two models' outcomes on the same items (:func:`paired_table`), ``(both succeed,
    only first, only second, neither)``: the counts sum to the pairs judged for both."""
    pairs = paired_table(rows, first, second, on, outcome)
    a, b = pairs[outcome], pairs[f"{outcome}_b"]
    return int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()), int((~a & ~b).sum())


def online_breakdown(episodes: pl.DataFrame, confidence: float) -> pl.DataFrame:
    """Success per model by site group (training sites vs held-out sites), by sandbox split (val, test), by site and
    by level, with intervals."""
    frame = episodes.with_columns(
        pl.when(pl.col("held_out"))
        .then(pl.lit("held-out site"))
        .otherwise(pl.lit("training sites"))
        .alias("sites")
    )
    rows = []
    for model in frame["model"].unique(maintain_order=True).to_list():
        mine = frame.filter(pl.col("model") == model)
        for by in ("sites", "split", "site", "level"):
            for (group,), part in sorted(mine.group_by(by), key=lambda item: str(item[0][0])):
                summary = success_summary(part, confidence)
                rows.append(
                    {"model": model, "by": by, "group": str(group)}
                    | {k: summary[k] for k in ("episodes", "env_errors", "blocked", "judge_errors")}
                    | {
                        k: summary[k]
                        for k in ("success_rate", "success_low", "success_high", "steps_on_solved")
                    }
                )
    return pl.DataFrame(
        rows,
        schema={
            "model": pl.String,
            "by": pl.String,
            "group": pl.String,
            "episodes": pl.Int64,
            "env_errors": pl.Int64,
            "blocked": pl.Int64,
            "judge_errors": pl.Int64,
            "success_rate": pl.Float64,
            "success_low": pl.Float64,
            "success_high": pl.Float64,
            "steps_on_solved": pl.Float64,
        },
    )


def compare_models(offline: pl.DataFrame, episodes: pl.DataFrame, confidence: float) -> pl.DataFrame:
    """One row per model: the offline rates and the online summary (success with its interval, steps on solved
    tasks, tokens, cost and wall time per task)."""
    models = list(dict.fromkeys(offline["model"].to_list() + episodes["model"].to_list()))
    rows = []
    for model in models:
        row: dict[str, Any] = {"model": model}
        mine = offline.filter(pl.col("model") == model)
        row |= {m: (mine[m][0] if mine.height else None) for m in ("n_states", *STEP_METRICS)}
        row |= success_summary(episodes.filter(pl.col("model") == model), confidence)
        rows.append(row)
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA)


COMPARISON_SCHEMA = pl.Schema(
    {"model": pl.String, "n_states": pl.Int64}
    | dict.fromkeys(STEP_METRICS, pl.Float64)
    | {"episodes": pl.Int64, "env_errors": pl.Int64, "blocked": pl.Int64, "judge_errors": pl.Int64}
    | {"distinct_episodes": pl.Int64}
    | dict.fromkeys(
        [
            "success_rate",
            "success_low",
            "success_high",
            "run_std",
            "steps_on_solved",
            "tokens_per_task",
            "cost_per_task_usd",
            "wall_s_per_task",
        ],
        pl.Float64,
    )  # fmt: skip
)
