"""One attempt at one task: drive a browser environment with an agent, judge the outcome, return a Trajectory.

Collection, evaluation and mining all run episodes through :func:`run_episode`. The environment is anything with
``reset(task, screenshot_dir=...) -> Observation`` and ``step(action) -> Observation`` (the sandbox's
``BrowserEnv``); the agent and judge follow :mod:`rmsweb_kedro.agents.base`.

Environment failures (an exception from the env, or an observation flagged ``env_error``: a crash, a page-load
timeout) restart the attempt from scratch a few times; if they persist, the trajectory ends with
``termination="env_error"`` and no verdict, so it never counts as the agent's success or failure. So do blocks (an
observation flagged ``blocked``: a captcha or anti-bot page, HTTP 403/429 on the page, a login wall), retried
``block_retries`` times, then ``termination="blocked"`` with the kind in ``metadata["blocked"]``; and a judge that
could not judge (its verdict marked ``details["judge_error"]``: ``judges.choice``) gives
``termination="judge_error"``, no verdict, the judge and its error in ``metadata["judge_error"]``.

Two more ends, both judged: ``time_limit`` (the attempt's wall time ran out before the next decision) and
``critical_point`` (live sites: the next action would pay, submit personal data, send a message or make another
irreversible change; it is recorded as the last step, not performed). Episodes are run in batches, on threads or a
Ray cluster, by :mod:`rmsweb_kedro.episodes.rollouts`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rmsweb_kedro.agents.base import Agent, Judge
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import (
    CollectionMode,
    Element,
    Observation,
    Step,
    Task,
    Termination,
    Trajectory,
    Usage,
)

logger = logging.getLogger(__name__)


class Env(Protocol):
    def reset(self, task: Task, screenshot_dir: str | None = None) -> Observation: ...

    def step(self, action: Any) -> Observation: ...


class EnvironmentFailure(RuntimeError):
    """The environment, not the agent, failed (raised inside an attempt, then retried)."""


class Blocked(RuntimeError):
    """The site refused the browser (raised inside an attempt, then retried); ``kind``: an ``Observation.blocked``,
    ``run``: the try so far (its steps up to the blocked page, the agent's usage and cost)."""

    def __init__(self, kind: str, url: str, run: _Try):
        super().__init__(f"{kind} at {url}")
        self.kind, self.url, self.run = kind, url, run


def final_answer(steps: list[Step]) -> str | None:
    """The text of the attempt's last ``answer(...)`` action, if any."""
    answers = [s.action.text for s in steps if s.action is not None and s.action.type == ActionType.ANSWER]
    return answers[-1] if answers else None


def _relative(path: str | None, root: Path | None) -> str | None:
    if not path or root is None:
        return None
    rel = os.path.relpath(Path(path).resolve(), root.resolve())
    return None if rel.startswith("..") else Path(rel).as_posix()


def _checked(observation: Observation, doing: str, run: _Try) -> Observation:
    if observation.env_error:
        raise EnvironmentFailure(f"{doing}: {observation.error or 'environment error'}")
    if observation.blocked:
        raise Blocked(observation.blocked, observation.url, run)
    return observation


def target_element(action: Action, observation: Observation) -> Element | None:
    """The observation's element an action targets: by id, or the smallest one containing its point (page
    pixels); None for an action on no element."""
    if action.element is not None:
        return next((e for e in observation.elements if e.id == action.element), None)
    if action.x is None or action.y is None:
        return None
    inside = [
        e
        for e in observation.elements
        if e.bbox
        and e.bbox[0] <= action.x <= e.bbox[0] + e.bbox[2]
        and e.bbox[1] <= action.y <= e.bbox[1] + e.bbox[3]
    ]
    return min(inside, key=lambda e: e.bbox[2] * e.bbox[3], default=None)


def target_box(action: Action | None, observation: Observation) -> tuple[float, float, float, float] | None:
    """The targeted element's box in the observation's screenshot pixels (its page box less the scroll)."""
    element = target_element(action, observation) if action is not None else None
    if element is None or element.bbox is None:
        return None
    x, y, width, height = element.bbox
    return (x - observation.scroll[0], y - observation.scroll[1], width, height)


#: ``critical(action, observation) -> reason or None``: whether performing ``action`` on this page is a critical
#: point (see :class:`rmsweb_kedro.episodes.critical.CriticalPoints`).
CriticalCheck = Callable[[Action, Observation], "str | None"]


@dataclass
class EpisodeSettings:
    """How an episode is played, the same for every episode of a run: :func:`run_episode`'s rules
    (``rollouts.run_rollouts`` hands every browser of a run one)."""

    #: Restarts of the attempt after an environment failure, then ``termination="env_error"``.
    env_retries: int = 2
    #: Unparseable replies in a row that end the attempt (``model_error``).
    max_unparsed: int = 3
    #: Wall time of each try from its first observation, checked before each decision (``time_limit``).
    time_limit_s: float | None = None
    #: Stops the attempt before an action it names (``critical_point``, the reason in ``metadata``):
    #: ``critical.CriticalPoints``.
    critical: CriticalCheck | None = None
    #: Restarts after a blocked page, then ``blocked``. None: ``params:rollouts``' ``block_retries`` under
    #: ``run_rollouts``, 1 for :func:`run_episode` called alone.
    block_retries: int | None = None


@dataclass
class _Try:
    """One try of an attempt: its steps, how it ended, the agent's usage and cost, every screenshot (absolute)."""

    steps: list[Step] = field(default_factory=list)
    termination: Termination = "max_steps"
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    screenshots: list[str] = field(default_factory=list)
    critical_point: str | None = None


def _play(
    env: Env,
    task: Task,
    agent: Agent,
    max_steps: int,
    reflections: list[str],
    shots: Path,
    relative_to: Path | None,
    settings: EpisodeSettings,
) -> _Try:
    """One try; its wall-time limit counts from the first observation (a slow browser start is not the agent's)."""
    try:
        observation = env.reset(task, screenshot_dir=str(shots))
    except Exception as err:  # a crashed browser or server: the environment's failure, never the agent's
        raise EnvironmentFailure(f"reset: {type(err).__name__}: {err}") from err
    run = _Try(screenshots=[observation.screenshot] if observation.screenshot else [])
    observation = _checked(observation, "reset", run)
    deadline = None if settings.time_limit_s is None else time.monotonic() + settings.time_limit_s
    steps = run.steps
    unparsed_in_a_row = 0
    while len(steps) < max_steps:
        if deadline is not None and time.monotonic() > deadline:
            run.termination = "time_limit"
            return run
        decision = agent.act(task, observation, steps, reflections)
        run.usage, run.cost = run.usage + decision.usage, run.cost + decision.cost_usd
        step = Step(
            index=len(steps),
            url=observation.url,
            screenshot=_relative(observation.screenshot, relative_to),
            axtree=observation.axtree,
            thought=decision.thought,
            action=decision.action,
            raw_output=decision.raw_output or None,
            error=decision.error,
            equivalent_actions=decision.equivalents,
            target_box=target_box(decision.action, observation),
        ).observed(observation.screenshot)  # the later steps' live prompts may show it, kept or not
        steps.append(step)
        if decision.fatal:
            run.termination = "model_error"
            return run
        if decision.action is None:
            unparsed_in_a_row += 1
            if unparsed_in_a_row >= settings.max_unparsed:
                run.termination = "model_error"
                return run
            continue
        unparsed_in_a_row = 0
        if decision.action.type in (ActionType.ANSWER, ActionType.STOP):
            run.termination = "answer" if decision.action.type == ActionType.ANSWER else "stop"
            return run
        if settings.critical is not None and (reason := settings.critical(decision.action, observation)):
            run.termination, run.critical_point = "critical_point", reason
            return run
        try:
            observation = env.step(decision.action)
        except Exception as err:
            raise EnvironmentFailure(f"step {step.index}: {type(err).__name__}: {err}") from err
        observation = _checked(observation, f"step {step.index} {decision.action}", run)
        if observation.screenshot:
            run.screenshots.append(observation.screenshot)
        step.error = step.error or observation.error
    return run


def _judged(record: Trajectory, run: _Try, env: Env, task: Task, judge: Judge) -> None:
    """Judge a try that ran to its end and write it into ``record``: its steps, termination, verdict, usage and
    cost (the judge's added); a judge that could not judge leaves no verdict (``judge_error``)."""
    steps = run.steps
    context = {
        "screenshots": run.screenshots,
        "session_id": getattr(env, "session_id", None),
        "env": env,
    }
    verdict, judge_usage = judge.judge(task, steps, final_answer(steps), context)
    judge_cost = getattr(judge, "cost_of", lambda _usage: 0.0)(judge_usage)
    record.steps, record.termination, record.verdict = steps, run.termination, verdict
    record.success = verdict.success
    record.usage, record.cost_usd = run.usage + judge_usage, run.cost + judge_cost
    if run.critical_point:
        record.metadata["critical_point"] = run.critical_point
    if verdict.details.get("judge_error"):  # the judge's failure, never the agent's
        record.metadata["judge_error"] = {
            "judge": verdict.judge,
            "error": str(verdict.details.get("error", verdict.reason)),
            "agent_termination": run.termination,
        }
        record.termination, record.success, record.verdict = "judge_error", None, None
    record.metadata.pop("blocked", None)


def _gave_up(record: Trajectory, blocked: bool) -> None:
    """End ``record`` without a verdict after its last retry: ``blocked`` (the last try's steps kept) or
    ``env_error`` (no steps)."""
    ended = "blocked" if blocked else "env_error"
    record.termination, record.success, record.verdict = ended, None, None
    if ended == "env_error":
        record.steps, record.usage, record.cost_usd = [], Usage(), 0.0
        record.metadata.pop("blocked", None)


def run_episode(
    env: Env,
    task: Task,
    agent: Agent,
    judge: Judge,
    max_steps: int,
    reflections: list[str] | None = None,
    *,
    attempt: int = 1,
    mode: CollectionMode = "single",
    trajectory_id: str | None = None,
    screenshot_dir: str | Path | None = None,
    relative_to: str | Path | None = None,
    metadata: dict[str, Any] | None = None,
    settings: EpisodeSettings | None = None,
) -> Trajectory:
    """Run one attempt of ``agent`` on ``task`` in ``env`` and judge it, by the rules of ``settings``
    (:class:`EpisodeSettings`; its defaults without one).

    Screenshots go to ``screenshot_dir`` (emptied first: it belongs to this attempt) and steps record them relative
    to ``relative_to`` (the folder of the trajectory file); without ``screenshot_dir`` they go to a temporary folder
    (the judge still sees them) and steps record none. An unparseable reply is a recorded step (``action=None``,
    ``error``) and the attempt goes on; ``max_unparsed`` of them in a row, or a role whose endpoint is down
    (``Decision.fatal``), end it with ``termination="model_error"``, judged as a failure. Environment failures
    restart the attempt up to ``env_retries`` times, then end it ``env_error`` (no steps); a blocked page restarts
    it ``block_retries`` times, then ends it ``blocked`` (the last try's steps kept); both with ``success=None`` and
    no verdict. A judge error ends it ``judge_error`` (the agent's own end in ``metadata["judge_error"]``).
    ``time_limit`` and ``critical_point`` end it as :class:`EpisodeSettings` says, judged.
    """
    settings = settings or EpisodeSettings()
    block_retries = 1 if settings.block_retries is None else settings.block_retries
    reflections = list(reflections or [])
    temporary = tempfile.TemporaryDirectory(prefix="episode-") if screenshot_dir is None else None
    # steps name their screenshots (relative to relative_to) only when they are kept, in screenshot_dir
    root = Path(relative_to) if relative_to is not None and temporary is None else None
    shots = Path(temporary.name if temporary else screenshot_dir)  # type: ignore[arg-type]
    record = Trajectory(
        id=trajectory_id or f"{task.id}__{mode}__a{attempt}",
        task_id=task.id,
        site=task.site,
        instruction=task.instruction,
        attempt=attempt,
        mode=mode,
        reflections=reflections,
        steps=[],
        producer=getattr(agent, "name", type(agent).__name__),
        metadata=dict(metadata or {}),
    )
    env_errors: list[str] = []
    blocks: list[str] = []
    try:
        while len(env_errors) <= settings.env_retries and len(blocks) <= block_retries:
            if shots.exists():
                shutil.rmtree(shots)  # a restarted attempt must not keep the failed try's screenshots
            shots.mkdir(parents=True)
            try:
                run = _play(env, task, agent, max_steps, reflections, shots, root, settings)
            except EnvironmentFailure as err:
                logger.warning("%s attempt %d: environment failure, restarting: %s", task.id, attempt, err)
                env_errors.append(str(err))
                continue
            except Blocked as block:
                logger.warning("%s attempt %d: blocked (%s)", task.id, attempt, block)
                blocks.append(str(block))
                record.steps, record.metadata["blocked"] = block.run.steps, block.kind
                record.usage, record.cost_usd = block.run.usage, block.run.cost
                continue
            _judged(record, run, env, task, judge)
            break
        else:
            _gave_up(record, blocked=len(blocks) > block_retries)
        if env_errors:
            record.metadata["env_errors"] = env_errors
        if blocks:
            record.metadata["blocks"] = blocks
        return Trajectory.model_validate(record.model_dump())
    finally:
        if temporary is not None:
            temporary.cleanup()
