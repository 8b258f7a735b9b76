"""Live mode against sandbox sites standing in for live ones: a perfect scripted teacher acts in real Chromium,
each task is judged by the judge its kind asks for, the LLM judges talking to a real local OpenAI-compatible
server; results land in the raw-trajectory format and Online-Mind2Web's submission format."""

from __future__ import annotations

import pytest

from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.contracts.schema import JudgeSpec, Trajectory
from rmsweb_kedro.episodes.live import run_live
from rmsweb_kedro.episodes.rollouts import Roles
from rmsweb_kedro.episodes.submission import factual_actions, read_submission
from rmsweb_kedro.judges.answer import ExactAnswerJudge
from rmsweb_kedro.judges.choice import judge_factory
from tests.evaluate.conftest import RUBRIC, judge_model, request_text
from tests.fixtures_web import chromium_available

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_live_run_judges_each_benchmark_kind_and_writes_a_submission(
    chat_server, sandbox_task_list, browser_config, tmp_path
):
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    chat_server.respond = judge_model
    answer_task = next(
        t for t in sandbox_task_list if t.split == "test" and t.judge.config.get("checker") == "answer"
    )
    state_task = next(
        t for t in sandbox_task_list if t.split == "test" and t.judge.config.get("checker") == "record"
    )
    expected = answer_task.judge.config["expected"]
    tasks = [
        answer_task.model_copy(
            update={"id": "wv--1", "source": "webvoyager", "judge": JudgeSpec(kind="webvoyager")}
        ),
        state_task.model_copy(
            update={"id": "om2w-1", "source": "online_mind2web", "judge": JudgeSpec(kind="webjudge")}
        ),
        state_task.model_copy(
            update={
                "id": "wtb-1",
                "source": "webtailbench",
                "judge": JudgeSpec(kind="rubric", config={"rubric": RUBRIC}),
            }
        ),
        answer_task.model_copy(
            update={
                "id": "gaia-ok",
                "judge": JudgeSpec(kind="reference_answer", config={"reference_answer": expected}),
            }
        ),
        answer_task.model_copy(
            update={
                "id": "gaia-no",
                "judge": JudgeSpec(kind="reference_answer", config={"reference_answer": "zzz"}),
            }
        ),
    ]
    endpoint = {"base_url": chat_server.base_url, "model": "judge-test", "max_retries": 0}
    teacher = ScriptedTeacher(seed=0, imperfections=TeacherImperfections(mistake_probs={}))
    judges = judge_factory({"kind": "webjudge", "endpoint": endpoint, "official_prompts": None})
    roles = Roles(agent=lambda _seed: teacher, judge=judges)
    trajectories = run_live(tasks, roles, tmp_path / "live", max_steps=14, browser=browser_config)

    judges = [t.verdict.judge for t in trajectories]
    assert [j.rsplit("-", 1)[0] for j in judges[:3]] == [
        "webvoyager/judge-test/project", "webjudge/judge-test/project", "rubric/judge-test/project",
    ]  # fmt: skip
    assert judges[3:] == [ExactAnswerJudge.name, ExactAnswerJudge.name]
    assert all(t.verdict.judged_by is not None for t in trajectories)
    assert [t.success for t in trajectories] == [True, True, True, True, False]
    assert trajectories[2].verdict.details["score"] == 1.0
    n_image_scores = sum("**Score**" in request_text(b) for b in chat_server.requests)
    # WebJudge scored every page: the start page and one after each step but the final stop().
    assert n_image_scores == len(trajectories[1].steps)

    # The raw-trajectory file reloads, its screenshots relative to it.
    out = tmp_path / "live"
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    reloaded = [Trajectory.model_validate_json(line) for line in lines]
    assert [t.task_id for t in reloaded] == [t.id for t in tasks]
    assert all((out / s.screenshot).is_file() for t in reloaded for s in t.steps if s.screenshot)

    # Online-Mind2Web's submission holds its own task only, as its reader reads it (contract: test_submission.py).
    submission = out / "online_mind2web"
    assert [p.name for p in submission.iterdir()] == ["om2w-1"]
    read = read_submission(submission / "om2w-1")
    om2w = trajectories[1]
    assert read["action_history"] == factual_actions(om2w.steps)
    assert len(read["action_history"]) == len(om2w.steps) - 1  # every step but the final stop()
    # One image per observed page, in order, the final state included (a page an action left unchanged still
    # counts as the page after that action).
    pages = sorted((out / "screenshots" / "om2w-1").glob("*.png"))
    assert [p.read_bytes() for p in read["screenshots"]] == [p.read_bytes() for p in pages]
    assert len(pages) == len(read["action_history"]) + 1
