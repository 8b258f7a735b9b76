"""Play a task's reference solution in a BrowserEnv and check the result: the suite's self-test.

:func:`play_reference` drives one env directly (every step, the final ``answer``/``stop`` included, goes to the
page: the browser tests use it); :class:`ReferenceAgent` is the same plan as an agent, so the ``solve`` command
runs the whole suite through the rollout engine like every other episode."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.contracts.actions import format_action
from rmsweb_kedro.contracts.schema import Observation, Step, Task, Verdict
from rmsweb_kedro.web.sandbox.checkers import check
from rmsweb_kedro.web.sandbox.reference import TargetNotFound, resolve_step
from rmsweb_kedro.web.sandbox.server import SandboxServer

if TYPE_CHECKING:
    from rmsweb_kedro.web.browser import BrowserEnv


@dataclass
class ReferenceRun:
    task_id: str
    verdict: Verdict
    actions: list[str] = field(default_factory=list)
    error: str | None = None  # the first step that could not be resolved or failed in the page
    axtree_chars: list[int] = field(default_factory=list)  # per observation, for prompt-size figures
    interactive_elements: list[int] = field(default_factory=list)


def play_reference(
    env: BrowserEnv, server: SandboxServer, task: Task, screenshot_dir: str | Path | None = None
) -> ReferenceRun:
    """Reset on the task, resolve and perform every reference step, then run the task's checker."""
    observation = env.reset(task, screenshot_dir)
    run = ReferenceRun(task.id, Verdict(success=False), error=observation.error)
    for index, step in enumerate(task.reference_solution or []):
        run.axtree_chars.append(len(observation.axtree))
        run.interactive_elements.append(len(observation.elements))
        if run.error:
            break
        try:
            action = resolve_step(step, observation)
        except TargetNotFound as err:
            run.error = f"step {index}: {err}"
            break
        run.actions.append(format_action(action))
        observation = env.step(action)
        if observation.error:
            run.error = f"step {index} {run.actions[-1]}: {observation.error}"
    run.verdict = check(task, server.session_state(env.session_id), env.final_answer)
    return run


class ReferenceAgent:
    """Acts a task's reference solution, each step resolved against the observation. A step that cannot be
    resolved, or whose predecessor failed in the page, ends the episode (``Decision.fatal``: ``model_error``) with
    the reason in the step's ``error``; the checker then judges what the page holds."""

    name = "reference-solution"

    def act(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> Decision:
        index = len(history)
        if history and history[-1].error:
            return Decision(action=None, error=f"step {index - 1}: {history[-1].error}", fatal=True)
        steps = task.reference_solution or []
        if index >= len(steps):
            return Decision(
                action=None, error="the reference solution ended without answer or stop", fatal=True
            )
        try:
            action = resolve_step(steps[index], observation)
        except TargetNotFound as err:
            return Decision(action=None, error=f"step {index}: {err}", fatal=True)
        return Decision(action=action, thought=steps[index].get("thought"), raw_output=format_action(action))
