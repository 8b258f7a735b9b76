"""Online evaluation in the real sandbox with real Chromium: ``run_online`` drives agents through
``episodes.run_episode`` and the sandbox checker; a perfect scripted teacher must solve what a quitter cannot."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.actions import Action, ActionType
from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.evaluation import EPISODE_SCHEMA
from rmsweb_kedro.pipelines.evaluate import nodes
from rmsweb_kedro.schema import tasks_to_frame
from tests.fixtures_web import chromium_available

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PARAMS = {"online": {"max_tasks": 2, "max_held_out_tasks": 1, "runs": 1, "max_steps": 14}}


class Quitter:
    """Gives up at once: a floor every policy should beat."""

    name = "quitter"

    def act(self, task, observation, history, reflections) -> Decision:
        return Decision(
            action=Action(type=ActionType.STOP, status="infeasible"), raw_output='stop("infeasible")'
        )


@pytest.fixture(scope="module")
def sandbox_tasks(sandbox_task_list) -> pl.DataFrame:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    return tasks_to_frame(sandbox_task_list)


def test_perfect_teacher_solves_and_quitter_fails(sandbox_tasks):
    perfect = ScriptedTeacher(seed=0, imperfections=TeacherImperfections(mistake_probs={}))
    solved = nodes.run_online(sandbox_tasks, perfect, PARAMS, model_name="teacher")
    assert solved.schema == EPISODE_SCHEMA
    assert solved.height == 3 and solved["held_out"].to_list() == [False, False, True]
    assert set(solved["split"]) == {"test"} and solved["site"][2] == "hotels"
    assert solved["success"].to_list() == [True, True, True], solved.select(
        "task_id", "termination", "judge_reason"
    )
    assert (solved["n_steps"] > 1).all() and (solved["wall_s"] > 0).all()
    assert set(solved["judge"]) == {"sandbox-checker/v1"}

    failed = nodes.run_online(sandbox_tasks, Quitter(), PARAMS, model_name="quitter")
    assert failed["task_id"].to_list() == solved["task_id"].to_list()  # the same tasks for every model
    assert failed["success"].to_list() == [False, False, False] and set(failed["n_steps"]) == {1}

    table = nodes.compare_models(
        pl.DataFrame(schema={"model": pl.String}), pl.concat([solved, failed]), {"online": {"runs": 1}}
    )
    assert dict(zip(table["model"], table["success_rate"], strict=True)) == {"teacher": 1.0, "quitter": 0.0}
