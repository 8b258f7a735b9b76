"""OpenAI-compatible teacher, reflector and judges (WebVoyager's and Online-Mind2Web's WebJudge).

Each role takes a :class:`~rmsweb_kedro.agents.endpoint.ChatEndpoint`; a judge's verdict records the protocol,
model, prompt version and thresholds that produced it, so every reported number can be reproduced.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rmsweb_kedro.actions import ActionParseError, describe_actions, format_action, parse_reply
from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.agents.endpoint import ChatEndpoint, EndpointError, image_part, text_part
from rmsweb_kedro.schema import JudgedBy, Observation, Step, Task, Usage, Verdict

PROMPT_VERSION = "v1"

TEACHER_SYSTEM = f"""You are a web agent. You see a web page (its accessibility tree, where interactive elements carry
ids in square brackets, and a screenshot) and act on it, one action per reply, until the task is done.

Actions (one per reply; id is an element id; arguments marked optional may be left out):
{describe_actions()}

Reply exactly as:
Thought: <one short sentence>
Action: <one action>"""


def action_history(steps: list[Step], limit: int | None = None) -> str:
    """Numbered canonical actions of ``steps`` (unparsed outputs and errors included), the facts a judge or a
    reflector may rely on."""
    lines = []
    for step in steps[-limit:] if limit else steps:
        did = format_action(step.action) if step.action else f"<unparsed: {(step.raw_output or '')[:80]!r}>"
        note = f"  -> error: {step.error}" if step.error else ""
        lines.append(f"{step.index + 1}. [{step.url}] {did}{note}")
    return "\n".join(lines) or "(no actions)"


class OpenAITeacher:
    """Acts through an OpenAI-compatible chat endpoint: the task, reflections, recent actions, the page's
    accessibility tree and (optionally) its screenshot as an image part."""

    def __init__(self, endpoint: ChatEndpoint, send_screenshot: bool = True, history_limit: int = 8):
        self.endpoint = endpoint
        self.send_screenshot = send_screenshot
        self.history_limit = history_limit
        self.name = f"openai-teacher/{endpoint.config.model}/{PROMPT_VERSION}"

    def messages(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> list[dict]:
        text = [f"Task: {task.instruction}"]
        if reflections:
            text.append("Lessons from your earlier failed attempts at this task:")
            text += [f"- {r}" for r in reflections]
        text += [
            f"Previous actions:\n{action_history(history, self.history_limit)}",
            f"URL: {observation.url}",
            f"Title: {observation.title}",
        ]
        if observation.error:
            text.append(f"Last action error: {observation.error}")
        text.append(f"Accessibility tree:\n{observation.axtree}")
        content: list[dict[str, Any]] = [text_part("\n".join(text))]
        if self.send_screenshot and observation.screenshot and Path(observation.screenshot).is_file():
            content.append(image_part(observation.screenshot))
        return [{"role": "system", "content": TEACHER_SYSTEM}, {"role": "user", "content": content}]

    def act(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> Decision:
        try:
            completion = self.endpoint.complete(self.messages(task, observation, history, reflections))
        except EndpointError as err:
            return Decision(action=None, error=f"endpoint error: {err}", fatal=True)
        try:
            thought, action = parse_reply(completion.text)
        except ActionParseError as err:
            return Decision(
                action=None,
                raw_output=completion.text,
                error=f"unparseable output: {err.reason}",
                usage=completion.usage,
                cost_usd=completion.cost_usd,
            )
        return Decision(
            action=action,
            thought=thought,
            raw_output=completion.text,
            usage=completion.usage,
            cost_usd=completion.cost_usd,
        )


REFLECTOR_PROMPT = """A web agent failed this task. Find its first wrong decision and say, in one or two sentences,
what it should do instead next time. Name the page element, option or value concretely.

Task: {task}
Actions taken:
{history}
Final answer: {answer}
Judge's verdict: {verdict}

Reflection:"""


class OpenAIReflector:
    """Writes a reflection on a failed attempt through an OpenAI-compatible endpoint."""

    def __init__(self, endpoint: ChatEndpoint):
        self.endpoint = endpoint
        self.name = f"openai-reflector/{endpoint.config.model}/{PROMPT_VERSION}"

    def cost_of(self, usage: Usage) -> float:
        return self.endpoint.cost(usage)

    def reflect(
        self, task: Task, steps: list[Step], verdict: Verdict, final_answer: str | None
    ) -> tuple[str, Usage]:
        prompt = REFLECTOR_PROMPT.format(
            task=task.instruction,
            history=action_history(steps),
            answer=final_answer or "(none)",
            verdict=verdict.reason,
        )
        try:
            completion = self.endpoint.complete([{"role": "user", "content": prompt}])
        except EndpointError:
            return "", Usage()  # no reflection: the next attempt runs unconditioned rather than not at all
        return completion.text.strip(), completion.usage


# ---------------------------------------------------------------- judges

WEBVOYAGER_SYSTEM = """As an evaluator, you will be presented with three primary components to assist you in your role:

1. Web Task Instruction: This is a clear and specific directive provided in natural language, detailing the online activity to be carried out.
2. Result Screenshots: This is a visual representation of the screen showing the result or intermediate state of performing a web task. It serves as visual proof of the actions taken in response to the instruction.
3. Result Response: This is a textual response obtained after the execution of the web task. It serves as textual result in response to the instruction.

-- You DO NOT NEED to interact with web pages or perform actions such as booking flights or conducting searches on websites.
-- You SHOULD NOT make assumptions based on information not presented in the screenshot when comparing it to the instructions.
-- Your primary responsibility is to conduct a thorough assessment of the web task instruction against the outcome depicted in the screenshot and in the response, evaluating whether the actions taken align with the given instructions.
-- NOTE that the instruction may involve more than one task, for example, locating the garage and summarizing the review. Failing to complete either task, such as not providing a summary, should be considered unsuccessful.
-- NOTE that the screenshot is authentic, but the response provided by LLM is generated at the end of web browsing, and there may be discrepancies between the text and the screenshots.
-- Note the difference: 1) Result response may contradict the screenshot, then the content of the screenshot prevails, 2) The content in the Result response is not mentioned on the screenshot, choose to believe the content.

You should elaborate on how you arrived at your final evaluation and then provide a definitive verdict on whether the task has been successfully accomplished, either as 'SUCCESS' or 'NOT SUCCESS'."""


def _screenshots(context: dict) -> list[str]:
    return [p for p in context.get("screenshots", []) if p and Path(p).is_file()]


class EndpointJudge:
    """What both public judges share: their endpoint, cost account and the identity every verdict records."""

    protocol = ""
    kind = ""
    slug = ""
    prompt_version = PROMPT_VERSION

    def __init__(self, endpoint: ChatEndpoint, thresholds: dict[str, Any]):
        self.endpoint = endpoint
        self.thresholds = thresholds
        self.name = f"{self.slug}/{endpoint.config.model}/{self.prompt_version}"

    def cost_of(self, usage: Usage) -> float:
        return self.endpoint.cost(usage)

    def prompt_texts(self) -> tuple[str, ...]:
        return ()

    def judged_by(self) -> JudgedBy:
        import hashlib

        digest = hashlib.sha256("\x00".join(self.prompt_texts()).encode()).hexdigest()
        return JudgedBy(
            kind=self.kind,
            protocol=self.protocol,
            model=self.endpoint.config.model,
            prompt_source="project",
            prompt_ref=f"rmsweb_kedro/{self.prompt_version}",
            prompt_sha256=digest,
            thresholds=self.thresholds,
        )

    def verdict(self, success: bool, reason: str, details: dict) -> Verdict:
        """A verdict named and specified as this judge's."""
        return Verdict(
            success=success, reason=reason, judge=self.name, judged_by=self.judged_by(), details=details
        )

    def _details(self, **extra: Any) -> dict:
        return {
            "protocol": self.protocol,
            "model": self.endpoint.config.model,
            "prompt_version": self.prompt_version,
            "thresholds": self.thresholds,
            **extra,
        }


class WebVoyagerJudge(EndpointJudge):
    """WebVoyager's auto-evaluation: task + final answer + the last ``last_k`` screenshots -> SUCCESS or NOT
    SUCCESS (the verdict is the last of those words in the reply). ``context["screenshots"]``: PNG paths in order."""

    protocol, kind, slug = "webvoyager", "webvoyager", "webvoyager"

    def __init__(self, endpoint: ChatEndpoint, last_k: int = 3):
        super().__init__(endpoint, {"last_k_screenshots": last_k})
        self.last_k = last_k

    def prompt_texts(self) -> tuple[str, ...]:
        return (WEBVOYAGER_SYSTEM,)

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        shots = _screenshots(context)[-self.last_k :]
        content = [
            text_part(
                f"TASK: {task.instruction}\nResult Response: {final_answer or ''}\n{len(shots)} screenshots at the end: "
            )
        ] + [image_part(p) for p in shots]
        messages = [{"role": "system", "content": WEBVOYAGER_SYSTEM}, {"role": "user", "content": content}]
        try:
            completion = self.endpoint.complete(messages)
        except EndpointError as err:
            return self.verdict(False, f"judge endpoint error: {err}", self._details(error=str(err))), Usage()
        verdicts = re.findall(r"NOT SUCCESS|SUCCESS", completion.text.upper())
        details = self._details(raw_output=completion.text, screenshots=len(shots))
        if not verdicts:
            details["error"] = "no SUCCESS / NOT SUCCESS in the judge's reply"
            return self.verdict(False, "judge reply unparseable", details), completion.usage
        success = verdicts[-1] == "SUCCESS"
        return self.verdict(success, completion.text.strip()[-500:], details), completion.usage


WEBJUDGE_KEY_POINTS = """You are an expert tasked with analyzing a given task to identify the key points explicitly stated in the task description.

**Objective**: Carefully analyze the task description and extract the critical elements explicitly mentioned in the task for achieving its goal.

**Instructions**:
1. Read the task description carefully.
2. Identify and extract **key points** directly stated in the task description (filters, values, constraints, the item to act on).
3. Do not add requirements the task does not state.

**Respond with**:
- **Key Points**: A numbered list of the explicit key points for completing this task, one per line.

Task: {task}"""

WEBJUDGE_IMAGE = """You are an expert evaluator tasked with determining whether an image contains information about the necessary steps to complete a task.

**Objective**: Analyze the provided image and decide if it shows essential steps or evidence required for completing the task.

Task: {task}
Key Points for Task Completion: {key_points}

**Respond with**:
1. **Reasoning**: Explain whether the image contains the necessary steps or evidence.
2. **Score**: A number from 1 (no relevant information) to 5 (clearly shows a necessary step or the final result), written as "Score: N"."""

WEBJUDGE_OUTCOME = """You are an expert in evaluating the performance of a web navigation agent. The agent is designed to help a human user navigate a website to complete a task. Given the user's task, the agent's action history, key points for task completion, some potentially important web pages in the agent's trajectory and their reasons, your goal is to determine whether the agent has completed the task and achieved all requirements.

Your response must strictly follow the following evaluation criteria!
*Important Evaluation Criteria*:
1: The filtered results must be displayed correctly. If filters were not properly applied (i.e., missing selection, missing confirmation, or no visible effect in results), the task is not considered successful.
2: You must carefully check whether these snapshots and action history meet these key points. Ensure that specific filter conditions, such as "best," "highest," "cheapest," "latest," "most recent," "lowest," "closest," "highest-rated," "largest," and "newest" are correctly applied using the filter function (e.g., sort function).
3: Certain key points or requirements should be applied by the filter. Otherwise, a search with all requirements as input will be deemed a failure since it cannot guarantee that all results meet the requirements!
4: If the task requires filtering by a specific range of money, years, or the number of beds and bathrooms, the applied filter must exactly match the given requirement.
5: Some tasks require a submission action or a display of results to be considered successful.
6: If the retrieved information is invalid or empty (e.g., No match was found), but the agent has correctly performed the required action, it should still be considered successful.
7: If the current page already displays all available items, then applying a filter is not necessary.

*IMPORTANT*
Format your response into two lines as shown below:

Thoughts: <your thoughts and reasoning process based on double-checking each key points and the evaluation criteria>
Status: "success" or "failure"

User Task: {task}

Key Points: {key_points}

Action History:
{history}

Final answer: {answer}

The potentially important snapshots of the webpage in the agent's trajectory and their reasons:
{reasons}"""


class WebJudge(EndpointJudge):
    """Online-Mind2Web's WebJudge: (1) key points from the task; (2) each screenshot scored 1-5 for evidence of
    them, keeping those scoring >= ``score_threshold`` (at most ``max_images``); (3) the outcome from the task,
    key points, the factual action history and the kept screenshots. ``context["screenshots"]``: PNG paths."""

    protocol, kind, slug = "online-mind2web-webjudge", "webjudge", "webjudge"

    def __init__(self, endpoint: ChatEndpoint, score_threshold: int = 3, max_images: int = 50):
        super().__init__(endpoint, {"score_threshold": score_threshold, "max_images": max_images})
        self.score_threshold = score_threshold
        self.max_images = max_images

    def prompt_texts(self) -> tuple[str, ...]:
        return (WEBJUDGE_KEY_POINTS, WEBJUDGE_IMAGE, WEBJUDGE_OUTCOME)

    @staticmethod
    def parse_score(text: str) -> int | None:
        """The 1-5 score of an image reply ("Score: 4"), or None."""
        found = re.findall(r"score\W*([1-5])\b", text, flags=re.IGNORECASE)
        return int(found[-1]) if found else None

    def judge(
        self, task: Task, steps: list[Step], final_answer: str | None, context: dict
    ) -> tuple[Verdict, Usage]:
        usage = Usage()
        try:
            reply = self.endpoint.complete(
                [{"role": "user", "content": WEBJUDGE_KEY_POINTS.format(task=task.instruction)}]
            )
            usage += reply.usage
            key_points = reply.text.split("Key Points", 1)[-1].lstrip("*: \n").strip() or reply.text.strip()
            scored: list[dict[str, Any]] = []
            for path in _screenshots(context):
                prompt = WEBJUDGE_IMAGE.format(task=task.instruction, key_points=key_points)
                image_reply = self.endpoint.complete(
                    [{"role": "user", "content": [text_part(prompt), image_part(path)]}]
                )
                usage += image_reply.usage
                scored.append(
                    {
                        "screenshot": Path(path).name,
                        "score": self.parse_score(image_reply.text),
                        "reason": image_reply.text.strip()[:400],
                        "path": path,
                    }
                )
            kept = [s for s in scored if (s["score"] or 0) >= self.score_threshold][-self.max_images :]
            reasons = "\n".join(f"{i + 1}. {s['reason']}" for i, s in enumerate(kept)) or "(none)"
            prompt = WEBJUDGE_OUTCOME.format(
                task=task.instruction,
                key_points=key_points,
                history=action_history(steps),
                answer=final_answer or "(none)",
                reasons=reasons,
            )
            outcome = self.endpoint.complete(
                [{"role": "user", "content": [text_part(prompt)] + [image_part(s["path"]) for s in kept]}]
            )
            usage += outcome.usage
        except EndpointError as err:
            return self.verdict(False, f"judge endpoint error: {err}", self._details(error=str(err))), usage
        status = re.findall(r"status\W*(success|failure)", outcome.text, flags=re.IGNORECASE)
        details = self._details(
            key_points=key_points,
            scores=[{k: s[k] for k in ("screenshot", "score")} for s in scored],
            kept=[s["screenshot"] for s in kept],
            raw_output=outcome.text,
        )
        if not status:
            details["error"] = 'no Status: "success" / "failure" in the judge\'s reply'
            return self.verdict(False, "judge reply unparseable", details), usage
        success = status[-1].lower() == "success"
        return self.verdict(success, outcome.text.strip()[-500:], details), usage
