"""A judge without a model: GAIA's exact-match scoring of a task's final answer against its reference answer
(``judge.kind: reference_answer``; built by ``agents.factory.build_judge``)."""

from __future__ import annotations

from rmsweb_kedro.actions import normalize_answer
from rmsweb_kedro.schema import JudgedBy, Step, Task, Usage, Verdict


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
