"""Trajectory collection (docs/collect.md): every (mode, task) pair gets up to R attempts, stopping at the first
verified success; ``reflection_retries`` conditions each retry on the reflections written after the failed attempts
before it. Then the collection log (one row per attempt), the raw trajectory files of the corpus modes, and the
yield/cost summary.

Episodes run through :func:`rmsweb_kedro.episodes.rollouts.run_rollouts` on N browsers (threads, or a Ray cluster by
``params:rollouts``). Resumable: each finished attempt is journaled; a re-run with the same settings skips the
(mode, task, attempt) triples the journal holds, so a ``kill -9`` loses only the episodes in flight.
"""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.factory import ReflectorSpec, TeacherSpec
from rmsweb_kedro.contracts.schema import COLLECTION_LOG_SCHEMA, Task, Trajectory, trajectory_row
from rmsweb_kedro.contracts.seeding import shuffled
from rmsweb_kedro.episodes.episode import EpisodeSettings
from rmsweb_kedro.episodes.rollouts import (
    Attempts,
    EpisodeSpec,
    Journal,
    Roles,
    RolloutConfig,
    fingerprint,
    run_rollouts,
)
from rmsweb_kedro.judges.choice import JudgeSpecConfig
from rmsweb_kedro.models.endpoint import Credentials

logger = logging.getLogger(__name__)

Mode = Literal["single", "independent_retries", "reflection_retries"]
#: The fields a collection journal entry is found by (entries of earlier runs have them too).
JOURNAL_KEY = ("mode", "task_id", "attempt")


class CollectParams(BaseModel):
    """``params:collect`` (conf/base/parameters_collect.yml)."""

    model_config = ConfigDict(extra="forbid")

    #: the raw trajectories folder: screenshots go beside the files (``raw_trajectories`` in the catalog)
    raw_root: str = "data/01_raw/trajectories"
    #: the sandbox world served to the attempts (the one the tasks were generated for)
    sandbox_seed: int = 0
    split: str | None = "train"
    max_tasks: int | None = Field(default=None, ge=1)
    modes: list[Mode] = Field(default_factory=lambda: ["reflection_retries"])
    corpus_modes: list[Mode] = Field(default_factory=lambda: ["reflection_retries"])
    attempts: int = Field(default=3, ge=1, description="R: the attempt budget of the retry modes")
    max_steps: int = Field(default=25, ge=1)
    n_envs: int = Field(default=2, ge=1)
    seed: int = 0
    env_retries: int = Field(default=2, ge=0)
    max_unparsed: int = Field(default=3, ge=1)
    reflections_in_training_prompt: bool = False
    keep_screenshots: bool = True
    journal_path: str = "data/02_intermediate/collect/journal.jsonl"
    progress: bool = True
    teacher: TeacherSpec = Field(default_factory=TeacherSpec)
    reflector: ReflectorSpec = Field(default_factory=ReflectorSpec)
    judge: JudgeSpecConfig = Field(default_factory=JudgeSpecConfig)
    browser: dict[str, Any] = Field(default_factory=dict)

    def fingerprint(self) -> str:
        """What decides an attempt's outcome; a journal entry with another fingerprint is not reused."""
        return fingerprint(
            self.model_dump(include={"attempts", "max_steps", "seed", "teacher", "reflector", "judge"})
        )


def partition_name(mode: str, task_id: str, attempt: int) -> str:
    """The raw_trajectories partition of one attempt: ``<mode>/<task id>__a<attempt>``."""
    return f"{mode}/{task_id}__a{attempt}"


def attempt_seed(seed: int, attempt: int) -> int:
    """The teacher's seed for attempt k, shared by all modes: attempt k of every mode draws the same imperfections
    except where a reflection rules one out (paired comparison of the modes)."""
    return seed * 1000 + attempt


def select_tasks(tasks: pl.DataFrame, params: CollectParams) -> pl.DataFrame:
    """The tasks to collect on (a ``tasks`` table): ``split`` (all when null), at most ``max_tasks`` drawn (seeded)
    round-robin over task templates (``metadata.template``; the site for tasks without one), so a cap gives every
    template the same share: a site's rare template is not left with one or two tasks."""
    if params.split is not None:
        tasks = tasks.filter(pl.col("split") == params.split)
    if params.max_tasks is not None and tasks.height > params.max_tasks:
        # shuffled first, so each template's share is a seeded draw, not its first ids
        order = shuffled(tasks.sort("id"), params.seed)
        template = pl.col("metadata").str.json_path_match("$.template").fill_null(pl.col("site"))
        ranked = order.with_columns(template.alias("_template")).with_columns(
            pl.int_range(pl.len()).over("_template").alias("_rank")
        )
        tasks = (
            ranked.sort("_rank", "_template", maintain_order=True)
            .head(params.max_tasks)
            .drop("_rank", "_template")
            .sort("id")
        )
    logger.info(
        "collect: %d tasks (split %s) over sites %s", tasks.height, params.split, sorted(set(tasks["site"]))
    )
    return tasks


def collect(
    tasks: list[Task],
    params: CollectParams,
    rollouts: RolloutConfig | dict[str, Any] | None = None,
    credentials: Credentials | None = None,
) -> list[Trajectory]:
    """Run the collection (resuming from the journal) and return every attempt of these tasks and modes, ordered
    by (mode, task id, attempt). ``credentials``: Kedro's, for the endpoints the roles name."""
    from rmsweb_kedro.agents.factory import build_reflector, teacher_factory
    from rmsweb_kedro.judges.choice import judge_factory

    raw_root = Path(params.raw_root)
    judge_spec, reflector_spec = params.judge, params.reflector
    roles = Roles(
        agent=teacher_factory(params.teacher, credentials),
        judge=judge_factory(judge_spec, credentials),
        reflector=lambda: build_reflector(reflector_spec, credentials),
    )
    items = [(mode, task) for task in tasks for mode in params.modes]
    chains = [_attempts(mode, task, params, raw_root) for mode, task in items]
    logger.info(
        "collect: %d tasks x %d modes, R=%d, %d envs, journal %s",
        len(tasks),
        len(params.modes),
        params.attempts,
        params.n_envs,
        params.journal_path,
    )
    results = run_rollouts(
        chains,
        roles,
        rollouts,
        browsers=params.n_envs,
        browser=params.browser,
        sandbox_seed=params.sandbox_seed,
        journal=Journal(params.journal_path, params.fingerprint(), key=JOURNAL_KEY),
        settings=EpisodeSettings(env_retries=params.env_retries, max_unparsed=params.max_unparsed),
        progress="collect" if params.progress else None,
    )
    attempts = [trajectory for chain in results for trajectory in chain]
    return sorted(attempts, key=lambda t: (t.mode, t.task_id, t.attempt))


def _attempts(mode: str, task: Task, params: CollectParams, raw_root: Path) -> Attempts:
    """The attempts of one (mode, task): R of them (``single``: one), stopping at the first verified success;
    ``reflection_retries`` conditions each on the reflections after the failed ones before it."""
    budget = 1 if mode == "single" else params.attempts
    keep = params.keep_screenshots and mode in params.corpus_modes

    def make(attempt: int, reflections: list[str]) -> EpisodeSpec:
        partition = partition_name(mode, task.id, attempt)
        return EpisodeSpec(
            key=partition,
            task=task,
            max_steps=params.max_steps,
            seed=attempt_seed(params.seed, attempt),
            attempt=attempt,
            mode=mode,  # type: ignore[arg-type]
            reflections=list(reflections) if mode == "reflection_retries" else [],
            trajectory_id=f"{task.id}__{mode}__a{attempt}__s{params.seed}",
            screenshot_dir=str(raw_root / partition) if keep else None,
            relative_to=str(raw_root / mode) if keep else None,
            reflect=mode == "reflection_retries" and attempt < budget,
        )

    return Attempts(make, budget)


def collection_log(attempts: list[Trajectory]) -> pl.DataFrame:
    """The ``collection_log`` table: one row per attempt, with its raw-file partition and the full trajectory."""
    rows = [
        trajectory_row(trajectory)
        | {
            "partition": partition_name(trajectory.mode, trajectory.task_id, trajectory.attempt),
            "trajectory": json.dumps(trajectory.model_dump(mode="json"), ensure_ascii=False),
        }
        for trajectory in attempts
    ]
    return pl.DataFrame(rows, schema=COLLECTION_LOG_SCHEMA)


def raw_files(log: pl.DataFrame, params: CollectParams) -> dict[str, str]:
    """Every attempt of the corpus modes as a raw trajectory file's text (one schema.Trajectory JSON line) by
    partition. A successful retry keeps the reflection that preceded it as metadata; whether training prompts show
    it is the ``reflections_in_training_prompt`` flag, recorded in each file (off by default)."""
    files = {}
    for row in log.filter(pl.col("mode").is_in(params.corpus_modes)).iter_rows(named=True):
        trajectory = Trajectory.model_validate_json(row["trajectory"])
        trajectory.metadata["reflections_in_training_prompt"] = params.reflections_in_training_prompt
        if trajectory.success and trajectory.reflections:
            trajectory.metadata["helpful_reflection"] = trajectory.reflections[-1]
        files[row["partition"]] = trajectory.model_dump_json() + "\n"
    logger.info("collect: %d raw trajectory files for modes %s", len(files), params.corpus_modes)
    return files


def summarize(log: pl.DataFrame, params: CollectParams) -> dict[str, Any]:
    """The ``collection_stats``: the collection's settings and, per mode and per mode and site, the yield, attempts
    per success, mean/median steps of successful trajectories, tokens and cost per verified trajectory."""
    stats: dict[str, Any] = {
        "settings": {
            "attempts_R": params.attempts,
            "max_steps": params.max_steps,
            "seed": params.seed,
            "teacher": params.teacher.model_dump(mode="json"),
            "judge": params.judge.kind,
            "reflector": params.reflector.kind,
            "corpus_modes": params.corpus_modes,
        },
        "modes": {},
    }
    for mode in params.modes:
        attempts = log.filter(pl.col("mode") == mode)
        stats["modes"][mode] = {
            **_summary(attempts),
            "sites": {
                site: _summary(attempts.filter(pl.col("site") == site))
                for site in sorted(set(attempts["site"]))
            },
        }
    return stats


def _summary(attempts: pl.DataFrame) -> dict[str, Any]:
    """The summary of some ``collection_log`` rows; the environment's outcomes (``success`` null: ``env_errors``,
    ``blocked`` by the site, ``judge_errors``) count as attempts but are never judged."""
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
        "blocked": int((attempts["termination"] == "blocked").sum()),
        "judge_errors": int((attempts["termination"] == "judge_error").sum()),
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
