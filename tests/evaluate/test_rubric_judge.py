"""The WebTailBench rubric verifier: its scoring rule, and real HTTP exchanges with a local OpenAI-compatible
server (the openai client, the shared ChatEndpoint and its retries all run)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.contracts.schema import Step
from rmsweb_kedro.judges.rubric import (
    PROMPT_VERSION,
    RubricJudge,
    RubricReplyError,
    parse_rubric_reply,
    score_rubric,
)
from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointConfig
from rmsweb_kedro.tasks.benchmarks.loaders import load_webtailbench
from tests.evaluate.conftest import FIXTURES

RUBRIC = [
    {"criterion": "Constraints", "description": "", "max_points": 4},
    {"criterion": "Prices", "description": "", "max_points": 2},
    {"criterion": "Unavailable", "description": "", "max_points": 2, "condition": "only if no flights"},
]


def reply(*points: float, applicable_last: bool = True) -> str:
    items = [
        {"index": i, "applicable": True, "earned_points": p, "justification": f"j{i}"}
        for i, p in enumerate(points)
    ]
    items[-1]["applicable"] = applicable_last
    return "Here is my grading:\n```json\n" + json.dumps({"items": items}) + "\n```"


def test_scoring_excludes_only_conditional_criteria_that_do_not_apply():
    # The conditional criterion does not apply: 4 + 1 of 6 = 83%.
    result = score_rubric(RUBRIC, parse_rubric_reply(reply(4, 1, 0, applicable_last=False), 3))
    assert (result["earned"], result["total"]) == (5.0, 6.0)
    # Applicable: 5 of 8.
    assert score_rubric(RUBRIC, parse_rubric_reply(reply(4, 1, 0), 3))["total"] == 8.0
    # An unconditional criterion cannot be dropped; points are clamped to 0..max; missing criteria earn 0.
    judged = [{"earned_points": 9, "applicable": False}, {"earned_points": -3}, {}]
    result = score_rubric(RUBRIC, judged)
    assert (result["earned"], result["total"]) == (4.0, 8.0)
    assert result["items"][2]["justification"] == "not scored by the judge"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SUCCESS", "no JSON object"),
        ("{items: [}", "does not parse"),
        ('{"scores": []}', 'no "items" list'),
        ('{"items": [{"index": 5, "earned_points": 1}]}', "outside 0..2"),
        ('{"items": [{"index": 0, "earned_points": "four"}]}', "not a number"),
    ],
)
def test_unusable_replies_are_named(text, message):
    with pytest.raises(RubricReplyError, match=message):
        parse_rubric_reply(text, 3)


@pytest.fixture()
def flights_task():
    return load_webtailbench(FIXTURES / "webtailbench.jsonl").tasks[0]  # the 4 + 2 + 2 (conditional) rubric


def steps() -> list[Step]:
    return [
        Step(
            index=0,
            url="https://www.bing.com/",
            action=parse_action('type(3, "United ORD GRU", submit=true)'),
        ),
        Step(
            index=1,
            url="https://www.united.com/",
            action=None,
            raw_output="I think",
            error="unparseable output",
        ),
        Step(
            index=2,
            url="https://www.united.com/",
            action=parse_action('answer("economy $800, business $3,100")'),
        ),
    ]


def judge_for(server, **kwargs) -> RubricJudge:
    endpoint = ChatEndpoint(
        EndpointConfig(base_url=server.base_url, model="judge-test", max_retries=1, backoff_s=0),
        sleep=lambda s: None,
    )
    return RubricJudge(endpoint, **kwargs)


def test_verdict_over_http_records_the_judge(chat_server, flights_task, tmp_path):
    shots = []
    for n in range(4):
        shots.append(tmp_path / f"{n}.png")
        Image.new("RGB", (8, 8), (n * 60, 0, 0)).save(shots[-1])
    chat_server.replies = [reply(4, 1, 0, applicable_last=False)]
    verdict, usage = judge_for(chat_server).judge(
        flights_task, steps(), "economy $800, business $3,100", {"screenshots": shots}
    )

    assert verdict.success is True  # 5 of 6 = 83% >= 80%
    spec = verdict.judged_by  # WebTailBench publishes no verifier prompt: always the project's wording
    assert verdict.judge == f"rubric/judge-test/project-{spec.prompt_sha256[:8]}"
    assert spec.model == "judge-test" and spec.prompt_ref == f"rmsweb_kedro/{PROMPT_VERSION}"
    assert spec.prompt_source == "project" and spec.thresholds["success_score"] == 0.8
    assert (verdict.details["earned"], verdict.details["total"]) == (5.0, 6.0)
    assert usage.prompt_tokens == 100 and usage.completion_tokens == 20
    # What the judge model was sent: the rubric with its condition, the actions, the answer, the last 3 screenshots.
    (request,) = chat_server.requests
    text = request["messages"][1]["content"][0]["text"]
    assert "[2] (2 points) Document unavailability" in text and "Condition: Only applies" in text
    assert 'type(3, "United ORD GRU", submit=true)' in text and "<unparsed: 'I think'>" in text
    assert "Final answer: economy $800, business $3,100" in text
    images = [part for part in request["messages"][1]["content"] if part["type"] == "image_url"]
    assert len(images) == 3


def test_below_threshold_fails(chat_server, flights_task):
    chat_server.replies = [reply(4, 1, 1)]  # 6 of 8 = 75%
    verdict, _ = judge_for(chat_server).judge(flights_task, steps(), "economy $800", {})
    assert verdict.success is False and "earned 6 of 8 points (75%" in verdict.reason
    chat_server.replies = [reply(4, 1, 1)]
    verdict, _ = judge_for(chat_server, threshold=0.75).judge(flights_task, steps(), "economy $800", {})
    assert verdict.success is True and verdict.judged_by.thresholds["success_score"] == 0.75


def test_unusable_reply_is_retried_then_flagged_as_a_judge_error(chat_server, flights_task):
    chat_server.replies = ["SUCCESS", reply(4, 2, 0, applicable_last=False)]
    verdict, usage = judge_for(chat_server).judge(flights_task, steps(), None, {})
    assert verdict.success is True and usage.prompt_tokens == 200  # both tries are paid for
    chat_server.replies = ["SUCCESS", "still not JSON"]
    verdict, _ = judge_for(chat_server).judge(flights_task, steps(), None, {})
    assert verdict.success is False and verdict.reason == "judge reply unparseable"
    assert "no JSON object" in verdict.details["error"] and verdict.details["raw_output"] == "still not JSON"


def test_endpoint_failure_is_a_judge_error_not_an_agent_failure(chat_server, flights_task):
    chat_server.replies = [503, 503]  # the endpoint retries once, then gives up
    verdict, _ = judge_for(chat_server).judge(flights_task, steps(), None, {})
    assert verdict.success is False and "judge endpoint error" in verdict.details["error"]
    assert len(chat_server.requests) == 2


def test_a_task_without_rubric_is_refused(chat_server):
    from rmsweb_kedro.tasks.benchmarks.loaders import load_online_mind2web

    task = load_online_mind2web(FIXTURES / "online_mind2web.json").tasks[0]
    with pytest.raises(ValueError, match="has no rubric"):
        judge_for(chat_server).judge(task, steps(), None, {})
