"""Every judge of the project fills the verdict's judge spec (``Verdict.judged_by``): the sandbox's programmatic
checker, GAIA's exact match and the three LLM judges, the latter against a real local HTTP server."""

from __future__ import annotations

import pytest

from rmsweb_kedro.contracts.schema import JudgedBy, JudgeSpec, Task, Verdict
from rmsweb_kedro.judges.answer import ExactAnswerJudge
from rmsweb_kedro.judges.llm import WebJudge, WebVoyagerJudge
from rmsweb_kedro.judges.rubric import RubricJudge
from rmsweb_kedro.judges.sandbox import SandboxJudge
from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointConfig
from rmsweb_kedro.web.sandbox import check
from tests.evaluate.conftest import RUBRIC, judge_model


def test_the_sandbox_checker_and_exact_match_are_programmatic(sandbox_task_list):
    task = next(t for t in sandbox_task_list if t.judge.config.get("checker") == "answer")
    expected = task.judge.config["expected"]
    verdicts = [
        check(task, {}, expected),
        check(task, {}, None),
        SandboxJudge(lambda _session: {}).judge(task, [], expected, {})[0],  # no session: still specified
    ]
    assert [v.success for v in verdicts] == [True, False, False]
    for verdict in verdicts:
        spec = verdict.judged_by
        assert spec.kind == "sandbox_checker" and spec.prompt_source == "none" and spec.model is None
        assert spec.official  # a programmatic checker is its own protocol
    gaia = task.model_copy(
        update={"judge": JudgeSpec(kind="reference_answer", config={"reference_answer": "x"})}
    )
    verdict, _ = ExactAnswerJudge().judge(gaia, [], "X", {})
    assert verdict.success and verdict.judged_by.protocol == "gaia/exact-match"


def test_llm_judges_record_kind_model_prompt_and_thresholds(chat_server, tmp_path):
    chat_server.respond = judge_model
    endpoint = ChatEndpoint(EndpointConfig(base_url=chat_server.base_url, model="judge-test", max_retries=0))
    task = Task(
        id="t",
        source="user",
        site="shop",
        start_url="http://shop.sandbox.test/",
        instruction="Buy a blue scarf",
        judge=JudgeSpec(kind="rubric", config={"rubric": RUBRIC}),
    )
    judges = [WebVoyagerJudge(endpoint), WebJudge(endpoint), RubricJudge(endpoint)]
    for judge in judges:
        verdict, _ = judge.judge(task, [], "done", {"screenshots": []})
        spec = verdict.judged_by
        assert isinstance(spec, JudgedBy) and spec.kind == judge.kind and spec.model == "judge-test"
        assert spec.thresholds == judge.thresholds and spec.prompt_source in ("official", "project")
        assert spec.prompt_sha256 and len(spec.prompt_sha256) == 64
        # The spec survives the trajectory file's JSON round trip.
        assert Verdict.model_validate_json(verdict.model_dump_json()).judged_by == spec


def test_one_factory_builds_every_judge_kind_and_each_task_gets_its_own(sandbox_task_list):
    """``build_judge`` is the one judge factory, and ``JudgeByKind`` (collect, mining, evaluate, live) picks each
    task's judge: its benchmark's, the sandbox checker for sandbox tasks, an LLM judge for tasks without one."""
    from typing import get_args

    from rmsweb_kedro.judges.choice import TASK_JUDGE_KINDS, JudgeByKind, JudgeSpecConfig, build_judge

    endpoint = ChatEndpoint(
        EndpointConfig(base_url="http://127.0.0.1:9/v1", model="judge-test")
    )  # never called
    built = {
        kind: build_judge({"kind": kind, "rubric_threshold": 0.5}, lambda _session: {}, endpoint=endpoint)
        for kind in get_args(JudgeSpecConfig.model_fields["kind"].annotation)
    }
    assert {kind: type(judge) for kind, judge in built.items()} == {
        "sandbox_checker": SandboxJudge, "webvoyager": WebVoyagerJudge, "webjudge": WebJudge,
        "rubric": RubricJudge, "reference_answer": ExactAnswerJudge,
    }  # fmt: skip
    assert built["rubric"].threshold == 0.5 and built["webjudge"].endpoint is endpoint
    judges = JudgeByKind(
        {"kind": "sandbox_checker", "rubric_threshold": 0.7}, lambda _s: {}, endpoint=endpoint
    )
    task = sandbox_task_list[0]
    for kind in TASK_JUDGE_KINDS:
        judge = judges.for_task(task.model_copy(update={"judge": JudgeSpec(kind=kind)}))
        assert type(judge) is type(built[kind])
    assert judges.for_task(task.model_copy(update={"judge": JudgeSpec(kind="rubric")})).threshold == 0.7
    assert type(judges.for_task(task)) is SandboxJudge
    # A task without a checker: its rubric, its definite answer, else the stage's LLM judge (judges.choice.judge_kind);
    # a stage whose judge is the sandbox checker cannot judge it and says so.
    unknown = task.model_copy(update={"source": "user", "judge": JudgeSpec(kind="none")})
    with pytest.raises(ValueError, match="carries no rubric or reference answer"):
        judges.for_task(unknown)
    assert type(JudgeByKind({"kind": "webjudge"}, endpoint=endpoint).for_task(unknown)) is WebJudge
    with_answer = JudgeSpec(kind="none", config={"reference_answer": "42"})
    assert type(judges.for_task(unknown.model_copy(update={"judge": with_answer}))) is ExactAnswerJudge
    with_rubric = JudgeSpec(kind="none", config={"rubric": [{"criterion": "c", "max_points": 1}]})
    assert type(judges.for_task(unknown.model_copy(update={"judge": with_rubric}))) is RubricJudge
    # A configured LLM judge judges sandbox tasks too (judge agreement, production); the checker never judges others.
    voyager = JudgeByKind({"kind": "webvoyager"}, None, endpoint=endpoint)
    assert (
        type(voyager.for_task(task)) is WebVoyagerJudge and type(voyager.for_task(unknown)) is WebVoyagerJudge
    )
    with pytest.raises(ValueError, match="no sandbox server runs for it"):
        JudgeByKind({"kind": "sandbox_checker"}).for_task(task)
    with pytest.raises(ValueError, match="has no endpoint: set judge.endpoint"):
        JudgeByKind({"kind": "webjudge"}, lambda _s: {}).for_task(unknown)

    # The stages' factory pickles (Ray actors build their judges) and gives a kind its own model when asked.
    import pickle

    from rmsweb_kedro.judges.choice import judge_factory

    config = {"base_url": "http://127.0.0.1:9/v1", "model": "judge-test"}
    made = pickle.loads(pickle.dumps(judge_factory({"kind": "webjudge", "endpoint": config},
                                                   endpoints={"rubric": config | {"model": "rubric-model"}})))(None)  # fmt: skip
    rubric_task = unknown.model_copy(update={"judge": JudgeSpec(kind="rubric")})
    assert made.for_task(rubric_task).endpoint.config.model == "rubric-model"
    assert made.for_task(unknown).endpoint.config.model == "judge-test"


def test_a_definite_answer_read_by_a_model_and_its_judge_errors(chat_server, sandbox_task_list):
    """``reference_answer: llm``: the endpoint's model reads the final answer against the reference (over HTTP to
    the local server); a reply without a verdict or a failing endpoint is a judge error, never the agent's failure."""
    from rmsweb_kedro.judges.answer import LLMAnswerJudge
    from rmsweb_kedro.judges.choice import JudgeByKind

    endpoint = {"base_url": chat_server.base_url, "model": "judge-test", "max_retries": 1, "backoff_s": 0}
    judges = JudgeByKind({"kind": "webjudge", "reference_answer": "llm", "endpoint": endpoint})
    task = sandbox_task_list[0].model_copy(
        update={
            "source": "user",
            "judge": JudgeSpec(kind="reference_answer", config={"reference_answer": "$42"}),
        }
    )
    assert type(judges.for_task(task)) is LLMAnswerJudge
    chat_server.replies = [
        "Verdict: CORRECT. 42 dollars is $42.",
        "Verdict: INCORRECT. It says 24.",
        "Yes.",
        500,
        500,
    ]
    verdicts = [judges.judge(task, [], answer, {})[0] for answer in ("42 dollars", "24", "42", "42")]
    assert [v.success for v in verdicts[:2]] == [True, False]
    assert verdicts[0].judged_by.kind == "reference_answer" and verdicts[0].judged_by.model == "judge-test"
    assert "Reference answer: $42" in str(chat_server.requests[0]["messages"][1]["content"])
    assert not any(v.details.get("judge_error") for v in verdicts[:2])
    assert all(v.details.get("judge_error") for v in verdicts[2:])  # no verdict in the reply; HTTP 500 twice
    assert judges.judge(task, [], None, {})[0].success is False and len(chat_server.requests) == 5  # no call
