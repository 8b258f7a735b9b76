"""The collection loop: every (mode, task) pair gets up to R attempts, stopping at the first verified success;
``reflection_retries`` conditions each retry on the reflections written after the failed attempts before it.

Episodes run through :func:`rmsweb_kedro.rollouts.run_rollouts` on N browsers (threads, or a Ray cluster by
``params:rollouts``). Resumable: each finished attempt is journaled; a re-run with the same settings skips the
(mode, task, attempt) triples the journal holds, so a ``kill -9`` loses only the episodes in flight.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.endpoint import Credentials
from rmsweb_kedro.agents.factory import JudgeSpecConfig, ReflectorSpec, TeacherSpec
from rmsweb_kedro.rollouts import (
    Attempts,
    EpisodeSettings,
    EpisodeSpec,
    Journal,
    Roles,
    RolloutConfig,
    fingerprint,
    run_rollouts,
)
from rmsweb_kedro.schema import Task, Trajectory

logger = logging.getLogger(__name__)

Mode = Literal["single", "independent_retries", "reflection_retries"]
#: The fields a collection journal entry is found by (entries of earlier runs have them too).
JOURNAL_KEY = ("mode", "task_id", "attempt")


class CollectParams(BaseModel):
    """``params:collect`` (conf/base/parameters_collect.yml)."""

    model_config = ConfigDict(extra="forbid")

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


def collect(
    tasks: list[Task],
    params: CollectParams,
    sandbox_seed: int,
    raw_root: str | Path,
    rollouts: RolloutConfig | dict[str, Any] | None = None,
    credentials: Credentials | None = None,
) -> list[Trajectory]:
    """Run the collection (resuming from the journal) and return every attempt of these tasks and modes, ordered
    by (mode, task id, attempt). ``credentials``: Kedro's, for the endpoints the roles name."""
    from rmsweb_kedro.agents.factory import build_judge, build_reflector, teacher_factory

    raw_root = Path(raw_root)
    judge_spec, reflector_spec = params.judge, params.reflector
    roles = Roles(
        agent=teacher_factory(params.teacher, credentials),
        judge=lambda server: build_judge(judge_spec, server.session_state, credentials),
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
        sandbox_seed=sandbox_seed,
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
