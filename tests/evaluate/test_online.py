"""Online evaluation in the real sandbox with real Chromium: ``run_online`` drives agents through
``episodes.run_episode`` and the sandbox checker; a perfect scripted teacher must solve what a quitter cannot."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.agents.reference import ReferenceAgent
from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.contracts.actions import Action, ActionType
from rmsweb_kedro.contracts.schema import tasks_to_frame
from rmsweb_kedro.measures.evaluation import EPISODE_SCHEMA
from rmsweb_kedro.pipelines.evaluate import nodes
from tests.fixtures_web import chromium_available

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PARAMS = {
    "online": {"max_tasks": 2, "max_held_out_tasks": 1, "runs": 1, "max_steps": 14, "keep_screenshots": False}
}


class Misremembers(ReferenceAgent):
    """Plays the reference solution but types a string of its own: one word for a one-word text (a city from
    memory), the first word and another for a longer one ("Lopel kettle" for "Lopel jacket")."""

    name = "misremembers"

    def act(self, task, observation, history, reflections) -> Decision:
        decision = super().act(task, observation, history, reflections)
        action = decision.action
        if action is None or action.type is not ActionType.TYPE:
            return decision
        words = action.text.split()
        text = f"{words[0]} Qorvel" if len(words) > 1 else "Qorvel"
        return Decision(action=action.model_copy(update={"text": text}), raw_output=f"typed {text}")


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
    solved, _ = nodes.run_online(sandbox_tasks, perfect, PARAMS, model_name="teacher")
    assert solved.schema == EPISODE_SCHEMA
    assert solved.height == 3 and solved["held_out"].to_list() == [False, False, True]
    assert set(solved["split"]) == {"test"} and solved["site"][2] == "hotels"
    assert solved["success"].to_list() == [True, True, True], solved.select(
        "task_id", "termination", "judge_reason"
    )
    assert (solved["n_steps"] > 1).all() and (solved["wall_s"] > 0).all()
    assert set(solved["judge"]) == {"sandbox-checker/v1"}

    assert solved["diverged_at"].null_count() == 3  # a success never left its reference

    failed, _ = nodes.run_online(sandbox_tasks, Quitter(), PARAMS, model_name="quitter")
    assert failed["task_id"].to_list() == solved["task_id"].to_list()  # the same tasks for every model
    assert failed["success"].to_list() == [False, False, False] and set(failed["n_steps"]) == {1}
    # it left the reference at its first step, by ending the episode
    assert failed["diverged_at"].to_list() == [0, 0, 0]
    assert set(failed["divergence_mode"]) == {"premature_end"}
    assert set(failed["divergence_action"]) == {'stop("infeasible")'}
    assert (
        failed["divergence_reference"].null_count() == 0 and failed["divergence_argument"].null_count() == 3
    )

    table = nodes.compare_models(
        pl.DataFrame(schema={"model": pl.String}), pl.concat([solved, failed]), {"online": {"runs": 1}}
    )
    assert dict(zip(table["model"], table["success_rate"], strict=True)) == {"teacher": 1.0, "quitter": 0.0}


def test_episodes_record_where_they_first_left_the_reference(sandbox_tasks, sandbox_task_list):
    by_id = {task.id: task for task in sandbox_task_list}
    episodes, _ = nodes.run_online(
        sandbox_tasks, Misremembers(), {**PARAMS, "seed": 3}, model_name="misremembers"
    )
    typed = 0
    for row in episodes.iter_rows(named=True):
        plan = by_id[row["task_id"]].reference_solution
        first_type = next((i for i, step in enumerate(plan) if step["action"] == "type"), None)
        if row["success"]:  # nothing typed, or a site that lists the item whatever was searched for
            assert row["diverged_at"] is None, row
            continue
        typed += 1
        expected = plan[first_type]["text"]
        assert row["diverged_at"] == first_type, row
        assert row["divergence_mode"] == "wrong_argument" and f'"{expected}"' in row["divergence_reference"]
        assert "Qorvel" in row["divergence_action"]
        origin = "first_word_only" if " " in expected else "elsewhere"
        assert row["divergence_argument"] == origin, row
    assert typed >= 1, episodes.select("task_id", "success")  # a failure to look at


def test_a_longer_way_is_followed_to_the_step_that_leaves_the_reference(sandbox_tasks, sandbox_task_list):
    """A teacher that takes every longer way the reference offers (typing, then clicking Search; an unnecessary
    filter first) and then works from a wrong item it opened: the episode leaves the reference at that wrong item,
    not at the longer way, which reaches the same page as the step it stands for."""
    teacher = ScriptedTeacher(
        seed=0,
        imperfections=TeacherImperfections(
            mistake_probs={"longer_route": 1.0, "unnecessary_filter": 1.0, "pick_item": 1.0},
            self_correct_prob=0.0,
        ),
    )
    wrong_pick = {}
    for template in ("dine_opening", "job_salary"):
        for task in (t for t in sandbox_task_list if t.split == "test" and f"-{template}-" in t.id):
            mistakes = [step.get("mistake") for step in teacher.plan(task, [])]
            if "pick_item" in mistakes and {"longer_route", "unnecessary_filter"} & set(
                mistakes[: mistakes.index("pick_item")]
            ):
                wrong_pick[task.id] = mistakes.index("pick_item")
                break
    assert len(wrong_pick) == 2, wrong_pick
    episodes, _ = nodes.run_online(
        sandbox_tasks.filter(pl.col("id").is_in(list(wrong_pick))), teacher, PARAMS, model_name="teacher"
    )
    assert episodes.height == 2 and not episodes["success"].any()
    for row in episodes.iter_rows(named=True):
        assert row["diverged_at"] == wrong_pick[row["task_id"]], row
        assert row["divergence_mode"] == "wrong_element" and row["divergence_action"].startswith("click("), (
            row
        )
