"""The OpenAI-compatible teacher and reflector: the roles that act and reflect during collection, each over a
:class:`~rmsweb_kedro.models.endpoint.ChatEndpoint`. (The LLM judges are :mod:`rmsweb_kedro.judges.llm`.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.contracts.actions import (
    ActionParseError,
    describe_actions,
    format_action,
    memorized_facts,
    parse_reply,
)
from rmsweb_kedro.contracts.schema import Observation, Step, Task, Usage, Verdict
from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointError, image_part, text_part

PROMPT_VERSION = "v1"  # the reflector's
#: v2: the action list offers ``memorize`` and the user turn carries the facts memorized so far.
TEACHER_PROMPT_VERSION = "v2"

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
        self.name = f"openai-teacher/{endpoint.config.model}/{TEACHER_PROMPT_VERSION}"

    def messages(
        self, task: Task, observation: Observation, history: list[Step], reflections: list[str]
    ) -> list[dict]:
        text = [f"Task: {task.instruction}"]
        if reflections:
            text.append("Lessons from your earlier failed attempts at this task:")
            text += [f"- {r}" for r in reflections]
        facts = memorized_facts(step.action for step in history)
        if facts:  # every fact, however old: the history below shows only the last history_limit actions
            text.append("Facts you memorized:")
            text += [f"- {fact}" for fact in facts]
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
