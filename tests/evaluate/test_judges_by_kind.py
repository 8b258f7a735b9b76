"""Evaluate's online episodes on tasks without a programmatic checker: the sandbox pages reached by URL as if they
were unknown websites (source ``user``, judge kind ``none``), judged by the configured LLM judge (WebJudge) through
the project's local OpenAI-compatible server; the sandbox checker judges nothing. A judge endpoint that answers
HTTP 500 gives ``judge_error``: no verdict, counted apart, never the agent's failure."""

from __future__ import annotations

import pytest

from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.contracts.schema import JudgeSpec, tasks_to_frame
from rmsweb_kedro.measures.evaluation import success_summary
from rmsweb_kedro.pipelines.evaluate import nodes
from tests.evaluate.conftest import judge_model, request_text
from tests.fixtures_web import chromium_available

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_unknown_sites_are_judged_by_the_llm_judge_and_a_failing_judge_is_a_judge_error(
    chat_server, sandbox_task_list
):
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    picked = [t for t in sandbox_task_list if t.split == "test" and t.site != "hotels"][:2]
    unknown = [t.model_copy(update={"source": "user", "judge": JudgeSpec(kind="none")}) for t in picked]
    failing = unknown[1].instruction

    def judge_or_fail(body: dict) -> str | int:
        # The judge endpoint fails (HTTP 500, every retry) on the second task only.
        return 500 if failing in request_text(body) else judge_model(body)

    chat_server.respond = judge_or_fail
    endpoint = {"base_url": chat_server.base_url, "model": "judge-test", "max_retries": 1, "backoff_s": 0}
    params = {
        "online": {
            "max_tasks": 2,
            "max_held_out_tasks": 0,
            "runs": 1,
            "max_steps": 14,
            "n_envs": 1,
            "keep_screenshots": False,
            "judge": {"kind": "webjudge", "endpoint": endpoint, "official_prompts": None},
        }
    }
    perfect = ScriptedTeacher(seed=0, imperfections=TeacherImperfections(mistake_probs={}))
    rows, _steps = nodes.run_online(tasks_to_frame(unknown), perfect, params, model_name="teacher")

    by_task = {row["task_id"]: row for row in rows.iter_rows(named=True)}
    judged, errored = by_task[unknown[0].id], by_task[unknown[1].id]
    assert judged["judge"].startswith("webjudge/judge-test/") and judged["success"] is True
    assert '"kind":"webjudge"' in judged["judged_by"]
    assert errored["termination"] == "judge_error" and errored["success"] is None and errored["judge"] is None
    assert not any((row["judge"] or "").startswith("sandbox-checker") for row in rows.iter_rows(named=True))
    summary = success_summary(rows, 0.95)
    assert (summary["judge_errors"], summary["env_errors"], summary["success_rate"]) == (1, 1, 1.0)
    # The failing endpoint was asked once and retried once, then the episode ended: one key-points request x 2.
    failed_calls = [b for b in chat_server.requests if failing in request_text(b)]
    assert len(failed_calls) == 2
    assert rows["termination"].to_list().count("judge_error") == 1
