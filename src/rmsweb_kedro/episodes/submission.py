"""Online-Mind2Web's submission folder, written as the benchmark's official evaluator reads it.

The contract, from the benchmark's documentation and its reader (``src/run.py`` of OSU-NLP-Group/Online-Mind2Web,
vendored in microsoft/fara under ``webeval/src/webeval/benchmarks/om2w/impl``; the README's example folder
``data/example/<task_id>``):

- One folder per task, named by its Online-Mind2Web ``task_id``; the evaluator scores *every* sub-folder of the
  submission, so only Online-Mind2Web tasks are written there (other benchmarks' tasks are skipped).
- ``<task_id>/trajectory/<n>_full_screenshot.png``: the episode's pages in order, ``n`` = 0, 1, 2, ...: the start
  page, then the page after every action, the final state last (the reader orders files by the first number in
  their names). One file per observed page: a step whose output did not parse observed no new page and adds none.
- ``<task_id>/result.json``, schema ``v1`` (the default; the reader's "flat string arrays"), keys in this order:
  ``task_id`` (str), ``task`` (str, the task text), ``final_result_response`` (str, the agent's answer, "" when it
  gave none), ``action_history`` (list of str: *factual* actions only, in order; the README asks that the final
  response and other agent outputs stay out, as they cause false positives), ``thoughts`` (list of str, one per
  action of ``action_history``).
- Schema ``v2`` (``schema_version: "online-mind2web-v2"``): ``task_id``, ``task``, ``schema_version``,
  ``agent_final_answer`` (str or null), ``action_history``: one object per step, ``{"action", "thought",
  "screenshot"}``; step n's screenshot is the page its action was taken on, and the last step is the terminal one
  (the agent's answer or stop, or ``"END"`` when the step limit or an error ended the episode) carrying the final
  page. The reader drops the last step's action because it is the agent's output, not a fact.

An action is written as its canonical text (``actions.format_action``) followed by the element it targeted as the
page's accessibility tree named it (``click(31) on link "Blue scarf"``), since an element id alone means nothing to
a judge: the factual action history WebJudge reads (:func:`rmsweb_kedro.judges.llm.factual_actions`).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from rmsweb_kedro.contracts.actions import format_action
from rmsweb_kedro.contracts.schema import Task, Trajectory
from rmsweb_kedro.episodes.episode import final_answer
from rmsweb_kedro.judges.llm import describe_action, factual_actions, is_factual

logger = logging.getLogger(__name__)

SubmissionSchema = Literal["v1", "v2"]
V2_SCHEMA_VERSION = "online-mind2web-v2"
#: The step limit or an error ended the episode: v2's terminal step then has no action of the agent's.
END_ACTION = "END"


def screenshot_name(number: int) -> str:
    """The evaluator's image name for the ``number``-th page of an episode."""
    return f"{number}_full_screenshot.png"


def _v2_steps(trajectory: Trajectory, n_pages: int) -> list[dict[str, Any]]:
    factual = [s for s in trajectory.steps if is_factual(s)]
    steps = [
        {"action": describe_action(s), "thought": s.thought, "screenshot": screenshot_name(i)}
        for i, s in enumerate(factual)
    ]
    last = trajectory.steps[-1] if trajectory.steps else None
    ended_by_agent = last is not None and last.action is not None and not is_factual(last)
    steps.append(
        {
            "action": format_action(last.action) if ended_by_agent else END_ACTION,
            "thought": last.thought if ended_by_agent else None,
            "screenshot": screenshot_name(n_pages - 1),
        }
    )
    return steps


def write_submission(
    trajectory: Trajectory,
    task: Task,
    pages: Sequence[str | Path],
    out_dir: str | Path,
    schema: SubmissionSchema = "v1",
) -> Path | None:
    """Write one episode's folder under ``out_dir``; returns it, or None when the task is not an Online-Mind2Web
    task or the environment failed (an environment error or a site that blocked the browser is neither the agent's
    success nor its failure; a judge error is the project's judge's, so the folder is written).

    ``pages``: the episode's observed pages in order (start page, then the page after every action), as PNG files.
    """
    if task.source != "online_mind2web":
        return None
    if trajectory.termination in ("env_error", "blocked"):  # the agent never had its chance
        logger.warning("submission: %s ended %s; not written", task.id, trajectory.termination)
        return None
    factual = [s for s in trajectory.steps if is_factual(s)]
    if len(pages) != len(factual) + 1:
        raise ValueError(
            f"submission {task.id}: {len(pages)} page screenshots for {len(factual)} factual actions; "
            f"expected the start page plus one after each action ({len(factual) + 1})"
        )
    folder = Path(out_dir) / task.id
    images = folder / "trajectory"
    if images.exists():
        shutil.rmtree(images)
    images.mkdir(parents=True)
    for number, page in enumerate(pages):
        shutil.copyfile(page, images / screenshot_name(number))
    answer = final_answer(trajectory.steps)
    if schema == "v1":
        result: dict[str, Any] = {
            "task_id": task.id,
            "task": task.instruction,
            "final_result_response": answer or "",
            "action_history": factual_actions(trajectory.steps),
            "thoughts": [s.thought or "" for s in factual],
        }
    else:
        result = {
            "task_id": task.id,
            "task": task.instruction,
            "schema_version": V2_SCHEMA_VERSION,
            "agent_final_answer": answer,
            "action_history": _v2_steps(trajectory, len(pages)),
        }
    (folder / "result.json").write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    return folder


_NUMBER = re.compile(r"\d+")


def read_submission(folder: str | Path) -> dict[str, Any]:
    """A task folder read the way the official evaluator reads it: ``task``, ``action_history`` (the strings
    its judge is shown), ``final_result_response`` and ``screenshots`` (paths in the order it scores them).
    Raises ``ValueError`` naming the file and field when the folder breaks the contract."""
    folder = Path(folder)
    path = folder / "result.json"
    result = json.loads(path.read_text(encoding="utf-8"))
    for key in ("task_id", "task", "action_history"):
        if key not in result:
            raise ValueError(f"{path}: no {key!r}")
    if result["task_id"] != folder.name:
        raise ValueError(f"{path}: task_id {result['task_id']!r} differs from the folder's name")
    images = folder / "trajectory"
    if result.get("schema_version") == V2_SCHEMA_VERSION:
        steps = result["action_history"]
        actions = [step["action"] for step in steps[:-1]]  # the reader drops the terminal step's action
        screenshots = [images / step["screenshot"] for step in steps]
        answer = result.get("agent_final_answer")
    else:
        actions = result["action_history"]
        names = sorted((p.name for p in images.iterdir()), key=lambda n: int(_NUMBER.findall(n)[0]))
        screenshots = [images / n for n in names]
        answer = result.get("final_result_response")
        if len(result.get("thoughts", [])) != len(actions):
            raise ValueError(f"{path}: thoughts and action_history differ in length")
    if not all(isinstance(a, str) for a in actions):
        raise ValueError(f"{path}: action_history holds a non-string action")
    missing = [str(p) for p in screenshots if not p.is_file()]
    if missing:
        raise ValueError(f"{path}: screenshots missing: {missing}")
    return {"task": result["task"], "action_history": actions, "final_result_response": answer,
            "screenshots": screenshots}  # fmt: skip
