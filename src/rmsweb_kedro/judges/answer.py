"""The reference-answer judges (``judge.kind: reference_answer``; built by ``judges.choice.build_judge``): GAIA's
exact-match scoring of a task's final answer (no model, the default), or a model's reading of it against the
reference (``judge.reference_answer: llm``)."""

from __future__ import annotations

import re

from rmsweb_kedro.contracts.actions import normalize_answer
from rmsweb_kedro.contracts.schema import JudgedBy, Step, Task, Usage, Verdict
from rmsweb_kedro.judges.llm import EndpointJudge
from rmsweb_kedro.judges.prompts import PromptSet
from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointError


class ExactAnswerJudge:
    """GAIA's scoring: the final answer equals the reference answer after ``actions.normalize_answer``."""

    name = "reference-answer/exact/v1"
    judged_by = JudgedBy(
        kind="reference_answer", protocol="gaia/exact-match", prompt_source="none", prompt_ref=name
    )

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        expected = str(task.judge.config.get("reference_answer", ""))
        success = final_answer is not None and normalize_answer(final_answer) == normalize_answer(expected)
        reason = (
            f"final answer {final_answer!r} {'equals' if success else 'differs from'} reference {expected!r}"
        )
        details = {"protocol": "exact-match", "reference_answer": expected}
        return Verdict(
            success=success, reason=reason, judge=self.name, judged_by=self.judged_by, details=details
        ), Usage()


ANSWER_PROMPT_VERSION = "reference-answer-v1"
ANSWER_SYSTEM = """You check a web agent's final answer against the reference answer of its task.
The answer is correct when it gives the information of the reference answer: wording, order, units and formatting
may differ, and extra detail that does not contradict it is fine. It is incorrect when that information is missing,
different or contradicted.
Reply with one line, "Verdict: CORRECT" or "Verdict: INCORRECT", then one sentence saying why."""
_VERDICT = re.compile(r"verdict\s*:\s*\**\s*(correct|incorrect)", re.IGNORECASE)


class LLMAnswerJudge(EndpointJudge):
    """A task's definite answer judged by a model (``judge.reference_answer: llm``): open-web task files and the
    proposer give answers a person would accept in other words (WebGym's ``definite_answer``), which exact match
    would fail. No final answer fails without a call; a reply without a verdict, like an endpoint that still fails
    after its retries, is a judge error (``judges.choice``), never the agent's failure."""

    kind = slug = "reference_answer"

    def __init__(self, endpoint: ChatEndpoint, max_tokens: int = 256):
        prompts = PromptSet(
            "project/reference-answer",
            {"system": ANSWER_SYSTEM},
            "project",
            f"rmsweb_kedro/{ANSWER_PROMPT_VERSION}",
        )
        super().__init__(endpoint, prompts, {})
        self.max_tokens = max_tokens

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        expected = str(task.judge.config.get("reference_answer", ""))
        if final_answer is None:
            return self.verdict(False, "no final answer", self._details(reference_answer=expected)), Usage()
        user = f"Task: {task.instruction}\nReference answer: {expected}\nAgent's final answer: {final_answer}"
        messages = [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}]
        try:
            completion = self.endpoint.complete(messages, max_tokens=self.max_tokens)
        except EndpointError as err:
            return self.unavailable(f"judge endpoint error: {err}", Usage())
        found = _VERDICT.search(completion.text)
        if found is None:
            error = 'no "Verdict: CORRECT" or "Verdict: INCORRECT" in the judge\'s reply'
            return self.unavailable(
                error, completion.usage, "judge reply unparseable", raw_output=completion.text
            )
        details = self._details(reference_answer=expected, raw_output=completion.text)
        success = found.group(1).lower() == "correct"
        return self.verdict(success, completion.text.strip()[-500:], details), completion.usage
