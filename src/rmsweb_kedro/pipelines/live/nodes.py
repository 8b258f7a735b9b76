"""Nodes of the ``live`` pipeline: the benchmark tasks chosen, the policy run on their real websites and judged
(:func:`rmsweb_kedro.episodes.live.run_live`, judges by task kind: :mod:`rmsweb_kedro.judges.choice`), and a summary
per benchmark. Parameters: ``params:live`` (conf/base/parameters_live.yml); the policy acts with
``params:evaluate.policy``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.schema import (
    EPISODE_STEP_SCHEMA,
    episode_step_rows,
    tasks_from_frame,
    tasks_to_frame,
    trajectory_row,
)
from rmsweb_kedro.contracts.seeding import draw_up_to, seeded_rng
from rmsweb_kedro.episodes.critical import CriticalPoints
from rmsweb_kedro.episodes.live import protocol_label, run_live
from rmsweb_kedro.episodes.rollouts import Journal, Roles, fingerprint
from rmsweb_kedro.episodes.submission import SubmissionSchema
from rmsweb_kedro.judges.choice import JudgeSpecConfig, judge_factory
from rmsweb_kedro.measures.evaluation import EPISODE_SCHEMA, EvaluateParams, load_policy, success_summary
from rmsweb_kedro.measures.reporting import with_counts
from rmsweb_kedro.models.endpoint import Credentials, EndpointConfig

logger = logging.getLogger(__name__)


class LiveParams(BaseModel):
    """``params:live`` (conf/base/parameters_live.yml): benchmark tasks on the real web, LLM judges."""

    model_config = ConfigDict(extra="forbid")

    benchmarks: list[str] = Field(default_factory=lambda: ["webvoyager", "online_mind2web", "webtailbench"])
    max_tasks_per_benchmark: int | None = Field(
        default=None, ge=1, description="drawn with the seed; null: all"
    )
    seed: int = 0
    runs: int = Field(
        default=1, ge=1, description="independent runs over the tasks (output_dir/run_<k> when > 1)"
    )
    max_steps: int = Field(default=30, ge=1)
    max_steps_by_benchmark: dict[str, int] = Field(default_factory=dict)  # a benchmark's own step limit
    n_envs: int = Field(default=1, ge=1, description="browsers at once (threads, or Ray actors)")
    judge: EndpointConfig | None = None  # one OpenAI-compatible endpoint for every LLM judge
    judge_models: dict[str, str] = Field(default_factory=dict)  # judge kind -> model, same endpoint otherwise
    official_prompts: str | None = "data/01_raw/benchmarks"  # where `tasks.benchmarks download` put prompts/
    submission_schema: SubmissionSchema = "v1"  # Online-Mind2Web's result.json schema
    rubric_threshold: float = Field(default=0.8, gt=0, le=1)  # WebTailBench: success when earned/total >= it
    output_dir: str = "data/07_model_output/live"
    resume: bool = False  # true: episodes already in <output_dir>/journal.jsonl (same settings) are not rerun
    model_label: str = "rmsweb"
    confidence: float = Field(default=0.95, gt=0, lt=1)  # Wilson interval of each benchmark's success rate
    critical_points: CriticalPoints = Field(default_factory=CriticalPoints)
    browser: dict[str, Any] = Field(default_factory=dict)  # BrowserConfig overrides (headless, viewport, ...)


# ---------------------------------------------------------------- the ``live`` pipeline's nodes


def select_live_tasks(
    webvoyager: Any, online_mind2web: Any, webtailbench: Any, params: dict[str, Any]
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``(live_tasks, load report)`` from the benchmark datasets (``LoadResult``s): the tasks of
    ``live.benchmarks``, at most ``live.max_tasks_per_benchmark`` each (drawn with ``live.seed``); the report
    counts rows in, accepted and quarantined per file and lists the quarantined rows."""
    config = LiveParams.model_validate(params)
    results = {"webvoyager": webvoyager, "online_mind2web": online_mind2web, "webtailbench": webtailbench}
    chosen, report = [], {}
    for name, result in results.items():
        report[name] = {**result.counts(), "file": result.source_file, "quarantine": result.quarantine}
        if name not in config.benchmarks:
            continue
        tasks = sorted(result.tasks, key=lambda t: t.id)
        rng = seeded_rng(config.seed)  # each benchmark's draw from the seed afresh
        tasks = draw_up_to(tasks, config.max_tasks_per_benchmark, rng, key=lambda t: t.id)
        chosen += tasks
        report[name]["selected"] = len(tasks)
    logger.info("live: %d tasks from %s", len(chosen), config.benchmarks)
    return tasks_to_frame(chosen), report


LIVE_RESULT_SCHEMA_EXTRA = {
    "benchmark": pl.String,
    "score": pl.Float64,
    "judge_protocol": pl.String,
    "judge_prompt_source": pl.String,  # official, project (the fallback wording) or none (programmatic)
}


def run_live_tasks(
    live_tasks: pl.DataFrame,
    model: Any,
    params: dict[str, Any],
    policy: dict[str, Any],
    rollouts: dict[str, Any] | None = None,
    credentials: Credentials | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The policy (a checkpoint dataset's value, acted as evaluate's ``policy`` settings say) on every live task,
    ``live.n_envs`` browsers on the ``rollouts`` backend, judged by each task's judge over the ``live.judge``
    endpoint; files under ``live.output_dir`` (trajectories.jsonl, screenshots, Online-Mind2Web's submission
    folder). One row per task: the ``online_episodes`` columns plus ``benchmark`` and the rubric ``score``
    (WebTailBench); and ``live_steps``, one row per step of each (screenshots relative to ``live.output_dir``).
    ``credentials``: Kedro's (``endpoint_credentials``), for the judge endpoint."""
    live = LiveParams.model_validate(params)
    if live.judge is None:
        raise ValueError("live.judge: an OpenAI-compatible endpoint {base_url, model, credentials} is needed")
    tasks = tasks_from_frame(live_tasks)
    schema = pl.Schema({**EPISODE_SCHEMA, **LIVE_RESULT_SCHEMA_EXTRA})
    if not tasks:
        return pl.DataFrame(schema=schema), pl.DataFrame(schema=EPISODE_STEP_SCHEMA)
    acting = load_policy(model, EvaluateParams.model_validate({"policy": policy}), greedy=True)
    spec = JudgeSpecConfig(
        kind="webjudge",  # tasks without a judge of their own (the benchmarks' tasks all name one)
        endpoint=live.judge,
        official_prompts=None if live.official_prompts is None else str(live.official_prompts),
        rubric_threshold=live.rubric_threshold,
    )
    per_kind = {
        kind: live.judge.model_copy(update={"model": name}) for kind, name in live.judge_models.items()
    }
    judges = judge_factory(spec, credentials, per_kind)

    decisive = live.model_dump(mode="json", include={"max_steps", "max_steps_by_benchmark", "judge",
                                                     "judge_models", "official_prompts", "rubric_threshold",
                                                     "model_label", "critical_points"})  # fmt: skip
    rows, steps = [], []
    for run in range(live.runs):
        out = Path(live.output_dir) / f"run_{run}" if live.runs > 1 else Path(live.output_dir)
        trajectories = run_live(
            tasks,
            Roles(agent=lambda _seed: acting, judge=judges),
            out,
            live.max_steps,
            browser=live.browser,
            browsers=live.n_envs,
            rollouts=rollouts,
            critical_points=live.critical_points,
            journal=Journal(out / "journal.jsonl", fingerprint(decisive)) if live.resume else None,
            step_limits=live.max_steps_by_benchmark,
            submission_schema=live.submission_schema,
        )
        for task, trajectory in zip(tasks, trajectories, strict=True):
            verdict = trajectory.verdict
            spec = verdict.judged_by if verdict else None
            rows.append(
                trajectory_row(trajectory)
                | {"model": live.model_label, "run": run, "level": task.level, "split": task.split,
                   "held_out": True, "benchmark": task.source,
                   "score": verdict.details.get("score") if verdict else None,
                   "judge_protocol": spec.protocol if spec else None,
                   "judge_prompt_source": spec.prompt_source if spec else None}
            )  # fmt: skip
            prefix = f"{out.relative_to(live.output_dir).as_posix()}/screenshots/".removeprefix("./")
            steps += episode_step_rows(trajectory, live.model_label, run, prefix)
    return pl.DataFrame(rows, schema=schema), pl.DataFrame(steps, schema=EPISODE_STEP_SCHEMA)


def summarize_live(results: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """Per benchmark: tasks, environment outcomes (``env_errors``: not judged; of them ``blocked`` by the site and
    ``judge_errors``), critical points reached, successes (k/n) and success rate with
    its Wilson interval, the spread of the per-run rates, steps on solved tasks, tokens and cost per task (judges'
    cost included), and whether the number follows the benchmark's official protocol (``protocol``)."""
    confidence = LiveParams.model_validate(params).confidence
    rows = [
        {"benchmark": name, **success_summary(part, confidence)}
        for (name,), part in sorted(results.group_by("benchmark"), key=lambda item: item[0][0])
    ]
    frame = pl.DataFrame(
        rows,
        schema={"benchmark": pl.String, "episodes": pl.Int64, "env_errors": pl.Int64, "blocked": pl.Int64,
                "judge_errors": pl.Int64, "critical_points": pl.Int64}
        | dict.fromkeys(["success_rate", "success_low", "success_high", "run_std", "steps_on_solved",
                         "tokens_per_task", "cost_per_task_usd", "wall_s_per_task"], pl.Float64),
    )  # fmt: skip
    protocols = [protocol_label(results, name) for name in frame["benchmark"]]
    return with_counts(frame).with_columns(protocol=pl.Series(protocols, dtype=pl.String))
