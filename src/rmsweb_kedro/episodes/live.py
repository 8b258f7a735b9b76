"""Live runs, the library part: a policy on real websites (benchmark tasks), judged by the judge each task's
``judge.kind`` asks for (:mod:`rmsweb_kedro.judges.choice`), the Online-Mind2Web tasks also written as that
benchmark's submission folder. Episodes run through :func:`~rmsweb_kedro.episodes.rollouts.run_rollouts` (threads or a Ray
cluster) and stop at critical points (paying, submitting personal data, sending a message:
``termination="critical_point"``, counted apart); a site that refuses the browser ends an episode ``blocked`` and a
judge that cannot judge ends it ``judge_error``, both counted apart.

Judges by ``task.judge.kind`` (one OpenAI-compatible endpoint serves them all unless a model is named per kind):
``webvoyager`` -> WebVoyager's auto-evaluation, ``webjudge`` -> Online-Mind2Web's WebJudge, ``rubric`` -> the
WebTailBench rubric verifier, ``reference_answer`` -> GAIA's exact-match scoring (no model). The submission
folder's contract: :mod:`rmsweb_kedro.episodes.submission`. Used by the ``live`` pipeline.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import polars as pl

from rmsweb_kedro.contracts.schema import Step, Task, Trajectory
from rmsweb_kedro.episodes.critical import CriticalPoints
from rmsweb_kedro.episodes.episode import EpisodeSettings
from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Journal, Roles, run_rollouts
from rmsweb_kedro.episodes.submission import SubmissionSchema, write_submission

logger = logging.getLogger(__name__)


def run_live(
    tasks: list[Task],
    roles: Roles,
    out_dir: str | Path,
    max_steps: int = 30,
    *,
    browser: Any = None,
    browsers: int = 1,
    rollouts: dict[str, Any] | None = None,
    critical_points: CriticalPoints | None = None,
    journal: Journal | None = None,
    step_limits: dict[str, int] | None = None,
    submission_schema: SubmissionSchema = "v1",
) -> list[Trajectory]:
    """One attempt per task (``roles``: the agent and ``judges.choice.judge_factory``) within its benchmark's step limit
    (``step_limits`` by task source, else ``max_steps``), judged by each task's judge, on the ``rollouts`` backend;
    trajectories go to ``<out>/trajectories.jsonl`` (one schema.Trajectory a line, the ``raw_trajectories``
    format) with their screenshots, and each Online-Mind2Web attempt to that benchmark's submission folder
    (:mod:`rmsweb_kedro.episodes.submission`, schema ``submission_schema``)."""
    out = Path(out_dir)
    shots_root = out / "screenshots"
    submission = out / "online_mind2web"
    episodes = [
        EpisodeSpec(
            key=task.id,
            task=task,
            max_steps=(step_limits or {}).get(task.source, max_steps),
            trajectory_id=f"live__{task.id}",
            screenshot_dir=str(shots_root / task.id),
            relative_to=str(shots_root),
            metadata={"benchmark": task.metadata.get("benchmark", task.source)},
        )  # fmt: skip
        for task in tasks
    ]
    results = run_rollouts(
        episodes,
        roles,
        rollouts,
        browsers=browsers,
        browser=browser,
        journal=journal,
        settings=EpisodeSettings(critical=critical_points),
        progress="live",
    )
    trajectories = [trajectory for (trajectory,) in results]
    for task, trajectory in zip(tasks, trajectories, strict=True):
        # The task's screenshot folder holds every page the episode saw, in order (an episode empties it first).
        pages = sorted((shots_root / task.id).glob("*.png"))
        try:
            write_submission(trajectory, task, pages, submission, submission_schema)
        except ValueError as err:  # a page missing from the episode: recorded, the run goes on
            logger.error("live %s: no submission folder: %s", task.id, err)
            trajectory.metadata["submission_error"] = str(err)
        logger.info("live %s: success=%s (%s)", task.id, trajectory.success, trajectory.termination)
    # Screenshot paths in the file are relative to its folder, as raw trajectory files require.
    lines = [
        t.model_copy(update={"steps": [_under(s, "screenshots") for s in t.steps]}) for t in trajectories
    ]
    (out / "trajectories.jsonl").write_text(
        "".join(t.model_dump_json() + "\n" for t in lines), encoding="utf-8"
    )
    return trajectories


def _under(step: Step, prefix: str) -> Step:
    return step.model_copy(update={"screenshot": f"{prefix}/{step.screenshot}"}) if step.screenshot else step


def protocol_label(results: pl.DataFrame, benchmark: str) -> str:
    """``official protocol`` only when every judged episode of ``benchmark`` used the benchmark's own prompts (or
    a programmatic check); otherwise the number is not called official, and the label says why."""
    sources = set(results.filter(pl.col("benchmark") == benchmark)["judge_prompt_source"].drop_nulls())
    if not sources:
        return "not judged"
    if "project" in sources:
        return "project wording, not the official protocol (fetch the official prompts: docs/evaluate.md)"
    return "official protocol"
