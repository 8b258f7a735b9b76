"""Live mode against sandbox sites standing in for live ones: a perfect scripted teacher acts in real Chromium,
each task is judged by the judge its kind asks for, the LLM judges talking to a real local OpenAI-compatible
server; results land in the raw-trajectory format and Online-Mind2Web's submission format."""

from __future__ import annotations

import json

import pytest

from rmsweb_kedro.agents.endpoint import ChatEndpoint, EndpointConfig
from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.pipelines.live.nodes import ExactAnswerJudge, JudgeByKind, run_live
from rmsweb_kedro.rollouts import Roles
from rmsweb_kedro.schema import JudgeSpec, Trajectory
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
    endpoint = ChatEndpoint(EndpointConfig(base_url=chat_server.base_url, model="judge-test", max_retries=0))
    teacher = ScriptedTeacher(seed=0, imperfections=TeacherImperfections(mistake_probs={}))
    roles = Roles(agent=lambda _seed: teacher, judge=lambda _server: JudgeByKind(endpoint))
    trajectories = run_live(tasks, roles, tmp_path / "live", max_steps=14, browser=browser_config)

    judges = [t.verdict.judge for t in trajectories]
    assert judges == ["webvoyager/judge-test/v1", "webjudge/judge-test/v1", "rubric/judge-test/rubric-v1",
                      ExactAnswerJudge.name, ExactAnswerJudge.name]  # fmt: skip
    assert [t.success for t in trajectories] == [True, True, True, True, False]
    assert trajectories[2].verdict.details["score"] == 1.0
    n_image_scores = sum("whether an image contains" in request_text(b) for b in chat_server.requests)
    # WebJudge scored every screenshot: the first page and one after each step but the final stop().
    assert n_image_scores == len(trajectories[1].steps)

    # The raw-trajectory file reloads, its screenshots relative to it.
    out = tmp_path / "live"
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    reloaded = [Trajectory.model_validate_json(line) for line in lines]
    assert [t.task_id for t in reloaded] == [t.id for t in tasks]
    assert all((out / s.screenshot).is_file() for t in reloaded for s in t.steps if s.screenshot)

    # Online-Mind2Web's submission format.
    folder = out / "online_mind2web" / "wv--1"
    result = json.loads((folder / "result.json").read_text())
    assert set(result) == {"task_id", "task", "final_result_response", "action_history", "thoughts"}
    assert result["task_id"] == "wv--1" and result["task"] == answer_task.instruction
    assert result["final_result_response"] == trajectories[0].steps[-1].action.text
    assert result["action_history"][-1].startswith("answer(") and len(result["thoughts"]) == len(
        result["action_history"]
    )
    shots = sorted((folder / "trajectory").iterdir())
    assert [p.name for p in shots][:2] == ["0_full_screenshot.png", "1_full_screenshot.png"]
    assert len(shots) == sum(1 for s in trajectories[0].steps if s.screenshot)
