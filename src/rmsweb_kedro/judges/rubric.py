"""WebTailBench's rubric verifier over any OpenAI-compatible chat endpoint.

The judge model scores every criterion of the task's precomputed rubric (``task.judge.config["rubric"]``: criterion,
description, max_points, optional condition) from the task, the agent's actions, its final answer and the last
screenshots. The score is earned / total over the applicable criteria; the attempt succeeds when the score reaches
the threshold (0.8, WebTailBench's outcome mode). :class:`WebGymJudge` composes it with a reference-answer judge into
WebGym's evaluator: every fact must hold. A criterion with a condition the judge says does not hold leaves
the total; an unconditional one always counts. The verdict records its judge spec (protocol, model, prompt source
and hash, threshold); WebTailBench publishes no verifier prompt, so the prompt source is always the project's.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from rmsweb_kedro.agents.base import Judge
from rmsweb_kedro.agents.openai_roles import action_history
from rmsweb_kedro.contracts.schema import JudgedBy, JudgeSpec, Step, Task, Usage, Verdict
from rmsweb_kedro.judges.llm import EndpointJudge
from rmsweb_kedro.judges.prompts import PromptSet
from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointError, image_part, text_part

logger = logging.getLogger(__name__)

PROMPT_VERSION = "rubric-v1"
PROTOCOL = "webtailbench/rubric"
DEFAULT_THRESHOLD = 0.8

SYSTEM_PROMPT = """You verify the work of a web agent against a grading rubric.
You receive the task, the rubric (numbered criteria with maximum points, some with a condition under which they
apply), the agent's actions, its final answer and the last screenshots it saw.
Score every criterion by what the actions and screenshots show. Give no points for claims the evidence does not
support. A criterion with a condition applies only when its condition holds; say so with "applicable".
Reply with JSON only, one entry per criterion, in rubric order:
{"items": [{"index": 0, "applicable": true, "earned_points": 2, "justification": "..."}]}"""


class RubricReplyError(ValueError):
    """The judge's reply is not the JSON the prompt asks for."""


def rubric_items(task: Task) -> list[dict[str, Any]]:
    """The task's rubric criteria (a WebTailBench task's, or what a task file or the proposer carried); a task
    without one cannot be judged by this verifier."""
    items = task.judge.config.get("rubric")
    if not items:
        raise ValueError(f"task {task.id!r} has no rubric (judge kind {task.judge.kind!r})")
    return items


def render_rubric(items: list[dict[str, Any]]) -> str:
    lines = []
    for index, item in enumerate(items):
        line = f"[{index}] ({item['max_points']:g} points) {item['criterion']}: {item.get('description', '')}"
        if item.get("condition"):
            line += f"\n    Condition: {item['condition']}"
        lines.append(line)
    return "\n".join(lines)


def parse_rubric_reply(text: str, n_items: int) -> list[dict[str, Any]]:
    """The judged items of a reply, by rubric index (tolerates a ```json fence and text around the object)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise RubricReplyError("no JSON object in the reply")
    try:
        document = json.loads(text[start : end + 1])
    except json.JSONDecodeError as err:
        raise RubricReplyError(f"the JSON does not parse: {err.msg}") from None
    items = document.get("items") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise RubricReplyError('the reply has no "items" list')
    judged: list[dict[str, Any]] = [{} for _ in range(n_items)]
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise RubricReplyError(f"items[{position}] is not an object")
        index = item.get("index", position)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_items:
            raise RubricReplyError(f"items[{position}] has index {index!r}, outside 0..{n_items - 1}")
        points = item.get("earned_points")
        if isinstance(points, bool) or not isinstance(points, (int, float)):
            raise RubricReplyError(f"items[{position}].earned_points is not a number: {points!r}")
        judged[index] = item
    return judged


def score_rubric(items: list[dict[str, Any]], judged: list[dict[str, Any]]) -> dict[str, Any]:
    """Earned and total points over the applicable criteria (points clamped to 0..max; unscored criteria earn 0)."""
    earned = total = 0.0
    scored = []
    for item, verdict in zip(items, judged, strict=True):
        # Only a conditional criterion may drop out; an unconditional one always counts.
        applicable = not (item.get("condition") and verdict.get("applicable") is False)
        points = min(max(float(verdict.get("earned_points", 0.0)), 0.0), float(item["max_points"]))
        if applicable:
            earned += points
            total += float(item["max_points"])
        scored.append(
            {
                "criterion": item["criterion"],
                "max_points": item["max_points"],
                "applicable": applicable,
                "earned_points": points if applicable else 0.0,
                "justification": str(verdict.get("justification", ""))
                if verdict
                else "not scored by the judge",
            }
        )
    return {"earned": earned, "total": total, "score": earned / total if total else 0.0, "items": scored}


class RubricJudge(EndpointJudge):
    """The :class:`~rmsweb_kedro.agents.base.Judge` for rubric tasks (WebTailBench), through a
    :class:`~rmsweb_kedro.models.endpoint.ChatEndpoint` (its retries and cost account).
    ``context["screenshots"]``: the attempt's PNG paths, oldest first (optional)."""

    kind = "rubric"
    slug = "rubric"

    def __init__(
        self,
        endpoint: ChatEndpoint,
        threshold: float = DEFAULT_THRESHOLD,
        last_k: int = 3,
        reply_attempts: int = 2,
    ):
        # WebTailBench publishes no verifier prompt: this judge always uses the project's wording.
        prompts = PromptSet(PROTOCOL, {"system": SYSTEM_PROMPT}, "project", f"rmsweb_kedro/{PROMPT_VERSION}")
        super().__init__(endpoint, prompts, {"success_score": threshold, "last_k_screenshots": last_k})
        self.threshold = threshold
        self.last_k = last_k
        self.reply_attempts = reply_attempts

    def messages(
        self, task: Task, steps: list[Step], final_answer: str | None, screenshots: list[str]
    ) -> list:
        text = (
            f"Task: {task.instruction}\n\nRubric:\n{render_rubric(rubric_items(task))}\n\n"
            f"Agent actions:\n{action_history(steps)}\n\nFinal answer: {final_answer or '(none)'}"
        )
        shots = screenshots[-self.last_k :] if self.last_k else []
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": [text_part(text)] + [image_part(p) for p in shots]},
        ]

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        items = rubric_items(task)
        screenshots = [str(p) for p in context.get("screenshots", []) if p and Path(p).is_file()]
        messages = self.messages(task, steps, final_answer, screenshots)
        usage, reply, error = Usage(), "", ""
        for attempt in range(1, self.reply_attempts + 1):
            try:
                completion = self.endpoint.complete(messages, max_tokens=1024)
            except EndpointError as err:
                return self.unavailable(f"judge endpoint error: {err}", usage)
            usage += completion.usage
            reply = completion.text
            try:
                judged = parse_rubric_reply(reply, len(items))
            except RubricReplyError as err:
                error = err.args[0]
                logger.warning("rubric judge reply for %s unusable (try %d): %s", task.id, attempt, error)
                continue
            result = score_rubric(items, judged)
            success = result["total"] > 0 and result["score"] >= self.threshold
            reason = (
                f"earned {result['earned']:g} of {result['total']:g} points "
                f"({result['score']:.0%}; success from {self.threshold:.0%})"
            )
            return self.verdict(success, reason, self._details(**result)), usage
        # An unusable reply is the judge's failure, not the agent's: a judge error, as an endpoint that fails.
        error = f"judge reply unusable after {self.reply_attempts} tries: {error}"
        return self.unavailable(error, usage, "judge reply unparseable", raw_output=reply[:2000])


#: WebGym's criterion B (anti-hallucination), asked as the first criterion of the composite's rubric call.
ANSWER_SUPPORTED = {
    "criterion": "The final answer is supported by the screenshots",
    "description": "Everything the agent's final answer states is shown by the screenshots or its actions; an "
    "answer that claims what the evidence does not show earns 0.",
    "max_points": 1.0,
}


class WebGymJudge:
    """WebGym's evaluator (microsoft/webgym: ``webgym/models/evaluator.py``, ``Evaluator.get_verifiable_reward``),
    composed of the project's judges: an attempt succeeds only when its final answer is supported by the
    screenshots (WebGym's criterion B), every fact of the task's rubric is verified (criterion A, each fact at full
    points, not a share of them) and, when the task carries a reference answer, the final answer matches it (the
    reference-answer judge: exact, or a model's reading with ``judge.reference_answer: llm``). Criterion B and the
    facts are one call of ``rubric`` (the answer's support as its first criterion); the answer is judged only when
    they pass, as WebGym skips it. ``details["parts"]`` records which parts failed. The wording is the project's
    (``prompt_source: project``): WebGym's prompts are not fetched."""

    kind = "webgym"
    protocol = "webgym/evaluator"

    def __init__(self, rubric: RubricJudge, answer: Judge):
        self.rubric, self.answer = rubric, answer
        self.name = f"webgym/{rubric.name}+{answer.name}"

    def cost_of(self, usage: Usage) -> float:
        return self.rubric.cost_of(usage)

    def judged_by(self) -> JudgedBy:
        spec = self.rubric.judged_by()
        answer = getattr(self.answer, "judged_by", None)
        answer_protocol = (answer() if callable(answer) else answer).protocol  # exact match: an attribute
        return spec.model_copy(
            update={
                "kind": self.kind,
                "protocol": self.protocol,
                "thresholds": {
                    "every_fact": True,
                    "answer_supported": True,
                    "reference_answer": answer_protocol,
                },
            }
        )

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        facts = rubric_items(task)
        expected = task.judge.config.get("reference_answer")
        asked = task.model_copy(
            update={"judge": JudgeSpec(kind="rubric", config={"rubric": [ANSWER_SUPPORTED, *facts]})}
        )
        checked, usage = self.rubric.judge(asked, steps, final_answer, context)
        if checked.details.get("judge_error"):
            return self._verdict(False, checked.reason, {**checked.details, "parts": None}), usage
        supported, *scored = checked.details["items"]
        failed = [
            item["criterion"]
            for item in scored
            if item["applicable"] and item["earned_points"] < item["max_points"]
        ]
        parts: dict[str, Any] = {
            "answer_supported": supported["earned_points"] >= supported["max_points"],
            "facts": len(facts),
            "facts_failed": failed,
            "reference_answer": None,  # not asked: no reference answer, or an earlier part failed
        }
        reasons = (
            [] if parts["answer_supported"] else ["the final answer is not supported by the screenshots"]
        )
        reasons += [f"fact not verified: {criterion}" for criterion in failed]
        details = {"rubric": checked.details, "parts": parts}
        if expected not in (None, "") and not reasons:
            matched, answer_usage = self.answer.judge(task, steps, final_answer, context)
            usage += answer_usage
            details["answer"] = matched.details
            if matched.details.get("judge_error"):
                return self._verdict(False, matched.reason, {**details, "judge_error": True}), usage
            parts["reference_answer"] = matched.success
            if not matched.success:
                reasons.append(f"the final answer does not match the reference answer: {matched.reason}")
        success = not reasons
        reason = "; ".join(reasons) or (
            f"answer supported, {len(facts)} of {len(facts)} facts verified"
            + (", reference answer matched" if parts["reference_answer"] else "")
        )
        return self._verdict(success, reason, details), usage

    def _verdict(self, success: bool, reason: str, details: dict[str, Any]) -> Verdict:
        return Verdict(
            success=success, reason=reason, judge=self.name, judged_by=self.judged_by(), details=details
        )
