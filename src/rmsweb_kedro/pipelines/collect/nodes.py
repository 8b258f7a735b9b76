"""Nodes of the collect pipeline: pick tasks, collect attempts, publish raw trajectory files, summarise."""

from __future__ import annotations

import json
import logging
import statistics
from typing import Any

import polars as pl

from rmsweb_kedro.agents.endpoint import Credentials
from rmsweb_kedro.pipelines.collect.collector import CollectParams, collect, partition_name
from rmsweb_kedro.reporting import figure_panels
from rmsweb_kedro.rollouts import trajectory_row
from rmsweb_kedro.schema import Trajectory, tasks_from_frame, tasks_to_frame

logger = logging.getLogger(__name__)

LOG_SCHEMA = pl.Schema(
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
        "partition": pl.String,
        "trajectory": pl.String,  # the schema.Trajectory as JSON
    }
)


def select_collection_tasks(sandbox_tasks: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """The tasks to collect on: ``split`` (all when null), at most ``max_tasks`` drawn (seeded) round-robin over
    sites so a cap keeps every site and every template."""
    p = CollectParams(**params)
    tasks = sandbox_tasks if p.split is None else sandbox_tasks.filter(pl.col("split") == p.split)
    if p.max_tasks is not None and tasks.height > p.max_tasks:
        shuffled = tasks.sort("id").sample(
            fraction=1.0, shuffle=True, seed=p.seed
        )  # every template, not the first
        ranked = shuffled.with_columns(pl.int_range(pl.len()).over("site").alias("_rank"))
        tasks = ranked.sort("_rank", "site", maintain_order=True).head(p.max_tasks).drop("_rank").sort("id")
    logger.info(
        "collect: %d tasks (split %s) over sites %s", tasks.height, p.split, sorted(set(tasks["site"]))
    )
    return tasks_to_frame(tasks_from_frame(tasks))


def collect_trajectories(
    tasks: pl.DataFrame,
    params: dict[str, Any],
    sandbox_seed: int,
    raw_root: str,
    rollouts: dict[str, Any] | None = None,
    credentials: Credentials | None = None,
) -> pl.DataFrame:
    """Run every mode's attempts in the sandbox (resuming from the journal) on the ``rollouts`` backend; one log
    row per attempt, failed ones and environment errors included, each with its full trajectory. ``credentials``:
    Kedro's (``endpoint_credentials``), for OpenAI-compatible roles."""
    config = CollectParams(**params)
    rows = [
        trajectory_row(trajectory)
        | {
            "partition": partition_name(trajectory.mode, trajectory.task_id, trajectory.attempt),
            "trajectory": json.dumps(trajectory.model_dump(mode="json"), ensure_ascii=False),
        }
        for trajectory in collect(
            tasks_from_frame(tasks), config, sandbox_seed, raw_root, rollouts, credentials
        )
    ]
    return pl.DataFrame(rows, schema=LOG_SCHEMA)


def publish_raw_trajectories(collection_log: pl.DataFrame, params: dict[str, Any]) -> dict[str, str]:
    """Every attempt of the corpus modes as a raw trajectory file (one schema.Trajectory JSON line). A successful
    retry keeps the reflection that preceded it as metadata; whether training prompts show it is the
    ``reflections_in_training_prompt`` flag, recorded in each file (off by default: the student acts without it)."""
    p = CollectParams(**params)
    partitions = {}
    for row in collection_log.filter(pl.col("mode").is_in(p.corpus_modes)).iter_rows(named=True):
        trajectory = Trajectory.model_validate_json(row["trajectory"])
        trajectory.metadata["reflections_in_training_prompt"] = p.reflections_in_training_prompt
        if trajectory.success and trajectory.reflections:
            trajectory.metadata["helpful_reflection"] = trajectory.reflections[-1]
        partitions[row["partition"]] = trajectory.model_dump_json() + "\n"
    logger.info("collect: %d raw trajectory files for modes %s", len(partitions), p.corpus_modes)
    return partitions


def _summary(attempts: pl.DataFrame) -> dict[str, Any]:
    judged = attempts.filter(pl.col("success").is_not_null())
    per_task = judged.group_by("task_id").agg(
        pl.col("success").any().alias("solved"),
        pl.col("attempt").filter(pl.col("success")).min().alias("solved_at"),
    )
    winners = judged.filter(pl.col("success"))
    steps = winners["n_steps"].to_list()
    verified = winners.height
    tokens = int(attempts["prompt_tokens"].sum() + attempts["completion_tokens"].sum())
    return {
        "tasks": per_task.height,
        "attempts": attempts.height,
        "env_errors": int((attempts["termination"] == "env_error").sum()),
        "model_errors": int((attempts["termination"] == "model_error").sum()),
        "verified_trajectories": verified,
        "yield": per_task["solved"].mean() if per_task.height else None,
        "attempts_per_success": attempts.height / verified if verified else None,
        "mean_attempt_of_success": per_task["solved_at"].mean() if verified else None,
        "mean_steps_success": statistics.fmean(steps) if steps else None,
        "median_steps_success": statistics.median(steps) if steps else None,
        "tokens_per_verified": tokens / verified if verified else None,
        "cost_usd_per_verified": float(attempts["cost_usd"].sum()) / verified if verified else None,
        "yield_by_attempt": [
            per_task.filter(pl.col("solved_at") <= k).height / per_task.height if per_task.height else None
            for k in range(1, int(attempts["attempt"].max() or 0) + 1)
        ],
    }


def collection_stats(collection_log: pl.DataFrame, params: dict[str, Any]) -> dict[str, Any]:
    """Yield (share of tasks with a verified success), attempts per success, mean/median steps of successful
    trajectories, tokens and cost per verified trajectory: per mode, and per mode and site."""
    p = CollectParams(**params)
    stats: dict[str, Any] = {
        "settings": {
            "attempts_R": p.attempts,
            "max_steps": p.max_steps,
            "seed": p.seed,
            "teacher": p.teacher.model_dump(mode="json"),
            "judge": p.judge.kind,
            "reflector": p.reflector.kind,
            "corpus_modes": p.corpus_modes,
        },
        "modes": {},
    }
    for mode in p.modes:
        attempts = collection_log.filter(pl.col("mode") == mode)
        stats["modes"][mode] = {
            **_summary(attempts),
            "sites": {
                site: _summary(attempts.filter(pl.col("site") == site))
                for site in sorted(set(attempts["site"]))
            },
        }
    return stats


def plot_collection(stats: dict[str, Any]) -> Any:
    """Yield by attempt budget, and mean steps of successful trajectories, per mode."""
    figure, (left, right) = figure_panels(2, panel_size=(5, 4))
    modes = stats["modes"]
    for mode, summary in modes.items():
        curve = summary["yield_by_attempt"]
        left.plot(range(1, len(curve) + 1), curve, marker="o", label=mode)
    left.set_xlabel("attempts allowed")
    left.set_ylabel("yield (tasks with a verified success)")
    left.set_ylim(0, 1.05)
    left.legend(fontsize=8)
    names = list(modes)
    right.bar(names, [modes[m]["mean_steps_success"] or 0 for m in names], color="tab:green")
    right.set_ylabel("mean steps of successful trajectories")
    right.tick_params(axis="x", labelsize=8)
    figure.suptitle(f"Collection, R={stats['settings']['attempts_R']}")
    figure.tight_layout()
    return figure
