"""The judge of a task file's or the proposer's task, chosen in one place (``judges.choice.judge_kind``) from what the
row carries, and WebGym's rows judged as WebGym's evaluator judges (microsoft/webgym ``webgym/models/evaluator.py``):
the answer supported by the screenshots, every fact verified, the reference answer matched. The judge model is the
project's local OpenAI-compatible test server with scripted replies: real HTTP, real parsing."""

import json

import pytest

from rmsweb_kedro.contracts.schema import JudgeSpec, Task
from rmsweb_kedro.judges.choice import JudgeByKind, judge_kind
from rmsweb_kedro.judges.llm import WebVoyagerJudge
from rmsweb_kedro.judges.rubric import RubricJudge, WebGymJudge
from rmsweb_kedro.tasks.files import load_task_file
from tests.collect.local_openai_server import LocalChatServer
from tests.tasks.test_files import WEBGYM_ROWS, _jsonl


def _rubric_reply(*points: float) -> str:
    """The judge model's rubric reply: criterion i earns points[i]."""
    items = [
        {"index": i, "applicable": True, "earned_points": p, "justification": "seen"}
        for i, p in enumerate(points)
    ]
    return "```json\n" + json.dumps({"items": items}) + "\n```"


@pytest.fixture
def webgym_tasks(tmp_path):
    return load_task_file(
        {"path": str(_jsonl(tmp_path / "train.jsonl", WEBGYM_ROWS)), "shape": "webgym"}
    ).tasks


def _judges(server: LocalChatServer, **spec) -> JudgeByKind:
    endpoint = {"base_url": server.base_url, "model": "judge-test", "api_key_env": None, "max_retries": 0}
    return JudgeByKind({"kind": "webjudge", "endpoint": endpoint, **spec})


def test_webgym_rows_pass_only_when_answer_supported_every_fact_verified_and_the_answer_matches(webgym_tasks):
    kettle = webgym_tasks[0]  # two facts, definite answer "$12.99"
    with LocalChatServer() as server:
        judges = _judges(server)
        assert isinstance(judges.for_task(kettle), WebGymJudge)
        server.replies = [
            _rubric_reply(1, 1, 1),  # supported, both facts: then the answer, matched exactly (no call)
            _rubric_reply(0, 1, 1),  # the answer is not supported by the screenshots: nothing else asked
            _rubric_reply(1, 1, 0.5),  # the second fact not fully verified
            _rubric_reply(1, 1, 1),  # all facts, but the answer differs from the reference
        ]
        verdicts = [
            judges.judge(kettle, [], answer, {})[0] for answer in ("$12.99", "$12.99", "$12.99", "$15")
        ]
        requests = list(server.requests)
    assert [v.success for v in verdicts] == [True, False, False, False]
    parts = [v.details["parts"] for v in verdicts]
    assert parts[0] == {"answer_supported": True, "facts": 2, "facts_failed": [], "reference_answer": True}
    assert parts[1] == {"answer_supported": False, "facts": 2, "facts_failed": [], "reference_answer": None}
    assert (
        parts[2]["facts_failed"] == ["It is the cheapest red kettle listed"]
        and parts[2]["reference_answer"] is None
    )
    assert (
        parts[3]["reference_answer"] is False and "does not match the reference answer" in verdicts[3].reason
    )
    assert len(requests) == 4, "one rubric call per attempt; exact match needs no model"
    rubric_text = requests[0]["messages"][1]["content"][0]["text"]
    assert "[0] (1 points) The final answer is supported by the screenshots" in rubric_text
    assert "[2] (1 points) It is the cheapest red kettle listed" in rubric_text
    spec = verdicts[0].judged_by
    assert (spec.kind, spec.protocol, spec.model) == ("webgym", "webgym/evaluator", "judge-test")
    assert spec.thresholds["every_fact"] is True and spec.thresholds["reference_answer"] == "gaia/exact-match"


def test_webgym_answer_read_by_a_model_and_a_failing_judge_is_a_judge_error(webgym_tasks):
    kettle = webgym_tasks[0]
    with LocalChatServer() as server:
        judges = _judges(server, reference_answer="llm")
        server.replies = [_rubric_reply(1, 1, 1), "Verdict: CORRECT. 12.99 dollars is $12.99.", 500]
        matched, _ = judges.judge(kettle, [], "12.99 dollars", {})
        failed, _ = judges.judge(kettle, [], "12.99 dollars", {})
        asked = [r["messages"][-1]["content"] for r in server.requests]
    assert matched.success and matched.details["parts"]["reference_answer"] is True
    assert "Reference answer: $12.99" in str(asked[1])
    assert failed.details.get("judge_error") and not failed.success  # the environment's, never the agent's


def test_every_fact_must_hold_for_webgym_while_a_points_rubric_passes_at_its_threshold(webgym_tasks):
    hotels = webgym_tasks[1]  # WebGym fact groups, no answer: judged by WebGym's rule all the same
    five = [{"criterion": f"criterion {i}", "description": "", "max_points": 1.0} for i in range(5)]
    points = hotels.model_copy(update={"judge": JudgeSpec(kind="none", config={"rubric": five})})
    facts = hotels.model_copy(update={"judge": JudgeSpec(kind="none", config={"rubric": five,
                                                                            "rubric_rule": "every_fact"})})  # fmt: skip
    with LocalChatServer() as server:
        judges = _judges(server)
        assert judge_kind(hotels, "webjudge") == "webgym" and isinstance(judges.for_task(points), RubricJudge)
        server.replies = [_rubric_reply(2, 2, 2, 2, 0), _rubric_reply(1, 1, 1, 1, 1, 0)]
        by_points, _ = judges.judge(points, [], "done", {})
        by_facts, _ = judges.judge(facts, [], "done", {})
    assert (
        by_points.success and by_points.judged_by.kind == "rubric"
    )  # 4 of 5 points: 80 %, WebTailBench's bar
    assert not by_facts.success and by_facts.details["parts"]["facts_failed"] == ["criterion 4"]


def test_a_task_carrying_nothing_gets_the_stage_judge_honoured():
    task = Task(id="f-1", source="file", site="example.org", start_url="https://example.org/",
                instruction="Find the opening hours")  # fmt: skip
    endpoint = {"base_url": "http://127.0.0.1:9/v1", "model": "judge-test"}  # never called
    assert isinstance(
        JudgeByKind({"kind": "webvoyager", "endpoint": endpoint}).for_task(task), WebVoyagerJudge
    )
    assert judge_kind(task, "webjudge") == "webjudge"
    # answer alone, rubric alone, both
    answer = {"reference_answer": "9-17"}
    rubric = {"rubric": [{"criterion": "shows the hours", "max_points": 1.0}]}
    carried = [JudgeSpec(kind="none", config=c) for c in (answer, rubric, answer | rubric)]
    kinds = [judge_kind(task.model_copy(update={"judge": j}), "webvoyager") for j in carried]
    assert kinds == ["reference_answer", "rubric", "webgym"]
    # a benchmark task keeps its benchmark's protocol whatever the stage configures
    om2w = task.model_copy(update={"source": "online_mind2web", "judge": JudgeSpec(kind="webjudge")})
    assert judge_kind(om2w, "webvoyager") == "webjudge"
    with pytest.raises(
        ValueError, match="task 'f-1' carries no rubric or reference answer.*'sandbox_checker'"
    ):
        judge_kind(task, "sandbox_checker")
