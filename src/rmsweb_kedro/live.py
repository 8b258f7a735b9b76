"""Live runs, the library part: a policy on real websites (benchmark tasks), judged by the judge each task's
``judge.kind`` asks for, the Online-Mind2Web tasks also written as that benchmark's submission folder. Episodes run
through :func:`~rmsweb_kedro.rollouts.run_rollouts` (threads or a Ray cluster) and stop at critical points (paying,
submitting personal data, sending a message: ``termination="critical_point"``, counted apart).

Judges by ``task.judge.kind`` (one OpenAI-compatible endpoint serves them all unless a model is named per kind):
``webvoyager`` -> WebVoyager's auto-evaluation, ``webjudge`` -> Online-Mind2Web's WebJudge, ``rubric`` -> the
WebTailBench rubric verifier, ``reference_answer`` -> GAIA's exact-match scoring (no model). The submission
folder's contract: :mod:`rmsweb_kedro.tasks.benchmarks.submission`. Used by the ``live`` pipeline.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import polars as pl

from rmsweb_kedro.rollouts import CriticalPoints, EpisodeSettings, EpisodeSpec, Journal, Roles, run_rollouts
from rmsweb_kedro.schema import Step, Task, Trajectory, Usage, Verdict
from rmsweb_kedro.tasks.benchmarks.submission import SubmissionSchema, write_submission

logger = logging.getLogger(__name__)


#: The judge kinds of the benchmarks' tasks (the sandbox checker needs the sandbox, not a live site).
LIVE_JUDGE_KINDS = ("webvoyager", "webjudge", "rubric", "reference_answer")


class JudgeByKind:
    """The :class:`~rmsweb_kedro.agents.base.Judge` each task's ``judge.kind`` asks for, built once per kind by
    :func:`~rmsweb_kedro.agents.factory.build_judge`.
    ``endpoint`` serves every LLM judge unless ``endpoints`` names one for its kind (the benchmarks ask for
    different judge models); ``official_prompts`` is the folder ``tasks.benchmarks download`` wrote into."""

    name = "live-judges"

    def __init__(
        self,
        endpoint: Any,
        rubric_threshold: float = 0.8,
        official_prompts: str | Path | None = None,
        endpoints: dict[str, Any] | None = None,
    ):
        self.endpoint = endpoint
        self.endpoints = endpoints or {}
        self.rubric_threshold = rubric_threshold
        self.official_prompts = official_prompts
        self._judges: dict[str, Any] = {}
        self._last = threading.local()  # the endpoint of this thread's last verdict, for cost_of

    def for_task(self, task: Task) -> Any:
        kind = task.judge.kind
        if kind not in self._judges:
            from rmsweb_kedro.agents.factory import JudgeSpecConfig, build_judge

            if kind not in LIVE_JUDGE_KINDS:
                raise ValueError(f"task {task.id!r}: no live judge for judge kind {kind!r}")
            prompts = None if self.official_prompts is None else str(self.official_prompts)
            spec = JudgeSpecConfig(
                kind=kind, official_prompts=prompts, rubric_threshold=self.rubric_threshold
            )
            self._judges[kind] = build_judge(spec, endpoint=self.endpoints.get(kind, self.endpoint))
        return self._judges[kind]

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        judge = self.for_task(task)
        self._last.endpoint = getattr(judge, "endpoint", None)
        return judge.judge(task, steps, final_answer, context)

    def cost_of(self, usage: Usage) -> float:
        endpoint = getattr(self._last, "endpoint", None)
        return endpoint.cost(usage) if endpoint is not None else 0.0


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
    """One attempt per task (``roles``: the agent and :class:`JudgeByKind`) within its benchmark's step limit
    (``step_limits`` by task source, else ``max_steps``), judged by each task's judge, on the ``rollouts`` backend;
    trajectories go to ``<out>/trajectories.jsonl`` (one schema.Trajectory a line, the ``raw_trajectories``
    format) with their screenshots, and each Online-Mind2Web attempt to that benchmark's submission folder
    (:mod:`rmsweb_kedro.tasks.benchmarks.submission`, schema ``submission_schema``)."""
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
