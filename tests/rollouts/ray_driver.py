"""A rollout driver on a local Ray, run by tests/rollouts/test_ray.py as a subprocess inside a loopback-only network
namespace (``ray_command``): ``python -m tests.rollouts.ray_driver SETTINGS_JSON``.

SETTINGS: ``journal`` (path), ``task_ids``, ``browsers``, ``delay_s`` (a pause before each decision, so a test can
kill the driver mid-run), ``kill_marker`` (a path: the agent of ``kill_task`` kills its own actor process once,
mid-episode, and leaves the file so the retry plays on).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from rmsweb_kedro.agents.scripted import SandboxJudge, ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.rollouts import EpisodeSpec, Journal, Roles, RolloutConfig, run_rollouts
from rmsweb_kedro.web.sandbox import SandboxParams, generate_tasks

FINGERPRINT = "ray-test"
#: Odd seeds take every wrong decision (the episode fails), even ones none: both outcomes, whatever the backend.
WRONG = TeacherImperfections(mistake_probs={"choose_option": 1.0, "pick_item": 1.0}, self_correct_prob=0.0)
RIGHT = TeacherImperfections(mistake_probs={}, self_correct_prob=0.0)
#: A local Ray small enough for CI: 2 CPUs, half a CPU per browser actor, a minimal object store.
LOCAL_RAY = RolloutConfig(backend="ray", num_cpus=2, object_store_mb=80, cpus_per_browser=0.5)


def episodes(task_ids: list[str]) -> list[EpisodeSpec]:
    """The seeded episodes both backends run: the scripted teacher, seed by task (see WRONG)."""
    tasks = {t.id: t for t in generate_tasks(SandboxParams())}
    return [
        EpisodeSpec(
            key=task_id, task=tasks[task_id], max_steps=20, seed=position, trajectory_id=f"ray__{task_id}"
        )
        for position, task_id in enumerate(task_ids)
    ]


class Teacher:
    """The scripted teacher, slowed down and, on ``kill_task``, killing its own process once (a dying actor)."""

    def __init__(self, seed: int, delay_s: float = 0.0, kill_marker: str | None = None, kill_task: str = ""):
        self.inner = ScriptedTeacher(seed=seed, imperfections=WRONG if seed % 2 else RIGHT)
        self.name = self.inner.name
        self.delay_s, self.kill_marker, self.kill_task = delay_s, kill_marker, kill_task

    def act(self, task, observation, history, reflections):
        time.sleep(self.delay_s)
        if self.kill_marker and task.id == self.kill_task and len(history) == 1:
            marker = Path(self.kill_marker)
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.act(task, observation, history, reflections)


def roles(delay_s: float = 0.0, kill_marker: str | None = None, kill_task: str = "") -> Roles:
    return Roles(
        agent=lambda seed: Teacher(seed, delay_s, kill_marker, kill_task),
        judge=lambda server: SandboxJudge(server.session_state),
    )


def main(settings: dict) -> None:
    specs = episodes(settings["task_ids"])
    run_rollouts(
        specs,
        roles(settings.get("delay_s", 0.0), settings.get("kill_marker"), settings["task_ids"][0]),
        LOCAL_RAY,
        browsers=settings["browsers"],
        sandbox_seed=0,
        journal=Journal(settings["journal"], FINGERPRINT),
        progress=None,
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
