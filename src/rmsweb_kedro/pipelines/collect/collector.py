"""The collection loop: every (mode, task) pair gets up to R attempts, stopping at the first verified success;
``reflection_retries`` conditions each retry on the reflections written after the failed attempts before it.

Resumable: each finished attempt is appended (flushed and fsync'd) to a journal as one JSON line; a re-run with
the same settings skips the (mode, task, attempt) triples the journal holds, so a ``kill -9`` loses only the
episodes in flight. Episodes run on N browsers at once (``web.browser.run_parallel``: one thread and one
BrowserEnv each).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.factory import JudgeSpecConfig, ReflectorSpec, TeacherSpec
from rmsweb_kedro.episodes import final_answer, run_episode
from rmsweb_kedro.schema import Task, Trajectory, Usage

logger = logging.getLogger(__name__)

Mode = Literal["single", "independent_retries", "reflection_retries"]


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
    credentials_file: str = "conf/local/credentials.yml"
    progress: bool = True
    teacher: TeacherSpec = Field(default_factory=TeacherSpec)
    reflector: ReflectorSpec = Field(default_factory=ReflectorSpec)
    judge: JudgeSpecConfig = Field(default_factory=JudgeSpecConfig)
    browser: dict[str, Any] = Field(default_factory=dict)

    def fingerprint(self) -> str:
        """What decides an attempt's outcome; a journal entry with another fingerprint is not reused."""
        decisive = self.model_dump(include={"attempts", "max_steps", "seed", "teacher", "reflector", "judge"})
        return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:12]


def partition_name(mode: str, task_id: str, attempt: int) -> str:
    """The raw_trajectories partition of one attempt: ``<mode>/<task id>__a<attempt>``."""
    return f"{mode}/{task_id}__a{attempt}"


def attempt_seed(seed: int, attempt: int) -> int:
    """The teacher's seed for attempt k, shared by all modes: attempt k of every mode draws the same imperfections
    except where a reflection rules one out (paired comparison of the modes)."""
    return seed * 1000 + attempt


class Journal:
    """Append-only JSON lines of finished attempts; a torn last line (killed mid-write) is skipped on load."""

    def __init__(self, path: str | Path, fingerprint: str):
        self.path = Path(path)
        self.fingerprint = fingerprint
        self._lock = threading.Lock()

    def load(self) -> dict[tuple[str, str, int], dict[str, Any]]:
        entries: dict[tuple[str, str, int], dict[str, Any]] = {}
        if not self.path.exists():
            return entries
        with self.path.open("rb+") as file:  # a line torn by a kill must not swallow the next entry
            if file.seek(0, os.SEEK_END) and (file.seek(-1, os.SEEK_END), file.read(1))[1] != b"\n":
                file.write(b"\n")
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                logger.warning(
                    "%s line %d: torn entry (an episode in flight when the run stopped); redone",
                    self.path,
                    number,
                )
                continue
            if entry.get("fingerprint") == self.fingerprint:
                entries[(entry["mode"], entry["task_id"], entry["attempt"])] = entry
        return entries

    def append(self, entry: dict[str, Any]) -> None:
        line = json.dumps({**entry, "fingerprint": self.fingerprint}, ensure_ascii=False) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line)
                file.flush()
                os.fsync(file.fileno())


def journal_entry(trajectory: Trajectory, partition: str) -> dict[str, Any]:
    return {
        "mode": trajectory.mode,
        "task_id": trajectory.task_id,
        "attempt": trajectory.attempt,
        "partition": partition,
        "success": trajectory.success,
        "reflection_after": trajectory.metadata.get("reflection_after"),
        "trajectory": trajectory.model_dump(mode="json"),
    }


def collect(
    tasks: list[Task], params: CollectParams, sandbox_seed: int, raw_root: str | Path
) -> list[dict[str, Any]]:
    """Run the collection (resuming from the journal) and return every journal entry of these tasks and modes."""
    from tqdm.auto import tqdm

    from rmsweb_kedro.agents.factory import build_judge, build_reflector, teacher_factory
    from rmsweb_kedro.web.browser import BrowserConfig, run_parallel
    from rmsweb_kedro.web.sandbox import SandboxServer

    journal = Journal(params.journal_path, params.fingerprint())
    done = journal.load()
    raw_root = Path(raw_root)
    make_teacher = teacher_factory(params.teacher, params.credentials_file)
    reflector = build_reflector(params.reflector, params.credentials_file)
    items = [(mode, task) for task in tasks for mode in params.modes]
    resumed = sum(1 for key in done if key[0] in params.modes)
    logger.info(
        "collect: %d tasks x %d modes, R=%d, %d envs; %d attempts already in %s",
        len(tasks),
        len(params.modes),
        params.attempts,
        params.n_envs,
        resumed,
        journal.path,
    )

    with SandboxServer(port=0, seed=sandbox_seed) as server:
        judge = build_judge(params.judge, server.session_state, params.credentials_file)
        config = BrowserConfig(**{**params.browser, "host_resolver_rules": server.host_resolver_rules})
        bar = tqdm(total=len(items), desc="collect", unit="task", disable=not params.progress)
        tally = {"attempts": 0, "verified": 0}
        tally_lock = threading.Lock()

        def work(env: Any, item: tuple[str, Task]) -> list[dict[str, Any]]:
            mode, task = item
            budget = 1 if mode == "single" else params.attempts
            reflections: list[str] = []
            entries = []
            for attempt in range(1, budget + 1):
                entry = done.get((mode, task.id, attempt))
                if entry is None:
                    entry = _attempt(
                        env,
                        task,
                        mode,
                        attempt,
                        budget,
                        reflections,
                        judge,
                        reflector,
                        make_teacher,
                        params,
                        raw_root,
                    )
                    journal.append(entry)
                    with tally_lock:
                        tally["attempts"] += 1
                        tally["verified"] += bool(entry["success"])
                entries.append(entry)
                if entry["success"]:
                    break
                if mode == "reflection_retries" and entry["reflection_after"]:
                    reflections.append(entry["reflection_after"])
            with tally_lock:
                bar.update(1)
                bar.set_postfix(tally)
            return entries

        results = run_parallel(work, items, params.n_envs, config)
        bar.close()
    failed = [
        (item, result)
        for item, result in zip(items, results, strict=True)
        if isinstance(result, BaseException)
    ]
    for (mode, task), error in failed:
        logger.error("collect: %s on %s stopped: %s: %s", mode, task.id, type(error).__name__, error)
    # Entries in the journal order the attempts (mode, task, attempt): re-read so resumed ones are included.
    wanted = {t.id for t in tasks}
    return [e for key, e in sorted(journal.load().items()) if key[0] in params.modes and key[1] in wanted]


def _attempt(
    env: Any,
    task: Task,
    mode: str,
    attempt: int,
    budget: int,
    reflections: list[str],
    judge: Any,
    reflector: Any,
    make_teacher: Any,
    params: CollectParams,
    raw_root: Path,
) -> dict[str, Any]:
    partition = partition_name(mode, task.id, attempt)
    keep = params.keep_screenshots and mode in params.corpus_modes
    trajectory = run_episode(
        env,
        task,
        make_teacher(attempt_seed(params.seed, attempt)),
        judge,
        params.max_steps,
        list(reflections) if mode == "reflection_retries" else [],
        attempt=attempt,
        mode=mode,  # type: ignore[arg-type]
        trajectory_id=f"{task.id}__{mode}__a{attempt}__s{params.seed}",
        screenshot_dir=raw_root / partition if keep else None,
        relative_to=raw_root / mode if keep else None,
        env_retries=params.env_retries,
        max_unparsed=params.max_unparsed,
    )
    if mode == "reflection_retries" and trajectory.success is False and attempt < budget:
        text, usage = reflector.reflect(
            task, trajectory.steps, trajectory.verdict, final_answer(trajectory.steps)
        )
        trajectory.metadata["reflection_after"] = text
        trajectory.metadata["reflector"] = getattr(reflector, "name", type(reflector).__name__)
        trajectory.usage = Usage(
            prompt_tokens=trajectory.usage.prompt_tokens + usage.prompt_tokens,
            completion_tokens=trajectory.usage.completion_tokens + usage.completion_tokens,
        )
        trajectory.cost_usd += getattr(reflector, "cost_of", lambda _usage: 0.0)(usage)
    return journal_entry(trajectory, partition)
