"""The policy's prompt, one module for training and inference alike, so the two cannot drift.

A prompt is built from a state (a :data:`schema.STATE_SCHEMA` row as a dict), so ``sft_data``, mining, Salvage-DS,
offline evaluation and the live :class:`agents.hf_policy.HFPolicy` and :class:`agents.openai_policy.OpenAIPolicy`
all show the model the same thing:

- system turn: the action space (rendered from :data:`rmsweb_kedro.contracts.actions.ACTION_SPACE`; ``memorize``
  only with ``memory``) and the reply format;
- user turn: the task, reflections from earlier failed attempts (when a state carries them), the memorized facts,
  the past steps the context policy keeps, the URL, and the observation: accessibility-tree text cut to a token
  budget and/or the screenshot image (``PromptConfig.observation``);
- assistant turn (training targets only): ``actions.format_reply(reference_thought, reference_action)``.

**The context policy** (what of the episode so far the prompt keeps; the fields of :class:`PromptConfig`):
``history_k`` past steps show their action, the most recent ``history_thoughts`` of them their thought and the
most recent ``history_screenshots`` their screenshot (each a count or ``"all"``); ``show_url`` the current URL;
``memory`` offers ``memorize("fact")`` and carries the fact of every earlier ``memorize`` to each later step, however
old. ``history_max_tokens`` bounds the past steps' text: the oldest shown step (its action, thought and
screenshot together) is cut first, a whole step at a time, until the rest fit; facts, task, reflections, URL and
page are never cut; ``build_messages`` counts the cut steps (``info["history_cut"]``).

Why a state row and not a growing conversation: the past steps are text and images inside one user turn, rendered
from the row, so a chat template has nothing to re-render (Qwen3's template drops earlier turns' ``<think>``
blocks when a multi-turn conversation is rendered again, so a model trained on one rendering would sample from
another). The same row gives the same tokens in SFT (with the reference turn appended) and at sampling time (with
the generation prompt), in process and served (tests/agents/test_context_tokens.py checks it on a real episode).
With ``history_thoughts`` and ``history_screenshots`` at 0 the user turn is exactly the one before the context
policy existed ("Previous actions: a; b; c"), so checkpoints trained on it read the same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.contracts.actions import (
    ACTION_SPACE,
    ActionParseError,
    ActionType,
    format_action,
    format_reply,
    memorized_facts,
    parse_action,
)
from rmsweb_kedro.contracts.schema import Observation, Step, Task

ObservationPart = Literal["axtree", "screenshot"]
TRUNCATION_MARK = "..."
#: A number of past steps, or every one.
StepCount = Annotated[int, Field(ge=0)] | Literal["all"]


class PromptConfig(BaseModel):
    """What the policy sees. The tiny default reads text only; a real Qwen3-VL can take the screenshot too."""

    model_config = ConfigDict(extra="forbid")

    observation: list[ObservationPart] = Field(default_factory=lambda: ["axtree"], min_length=1)
    history_k: StepCount = Field(
        default=3, description="how many past steps to show, their actions ('all': all)"
    )
    history_thoughts: StepCount = Field(
        default=0, description="how many of the most recent past steps also show their thought"
    )
    history_screenshots: StepCount = Field(
        default=0, description="how many of the most recent past steps also show their screenshot"
    )
    show_url: bool = Field(default=True, description="show the current page's URL")
    memory: bool = Field(
        default=False, description="offer memorize(fact) and carry every memorized fact to each later step"
    )
    history_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="cut the past steps' text to this many tokens, oldest step first (None: no cut)",
    )
    axtree_max_tokens: int = Field(default=200, ge=1)
    include_thought: bool = Field(default=True, description="train the reply's 'Thought:' line too")
    system_turn: bool = Field(
        default=True,
        description="open with the system turn (the role, the reply format, every action form: action_space_text);"
        " a model trained from scratch on this prompt (the tiny default) learns nothing from a constant turn",
    )
    image_root: str | None = Field(default=None, description="folder relative screenshot paths start from")

    @model_validator(mode="after")
    def _history_the_policy_has_live(self) -> PromptConfig:
        # A trained prompt must be one the policy can be given live, or SFT and sampling see different things.
        if self.history_thoughts != 0 and not self.include_thought:
            raise ValueError(
                f"history_thoughts={self.history_thoughts!r} shows past thoughts, but include_thought is false: "
                "acting live the policy writes no thought, so its history would show none where its training "
                "states show the teacher's; set include_thought: true, or history_thoughts: 0"
            )
        if self.history_screenshots != 0 and "screenshot" not in self.observation:
            raise ValueError(
                f"history_screenshots={self.history_screenshots!r} shows past screenshots, but observation "
                f"{self.observation} has none: add 'screenshot' to observation, or set history_screenshots: 0"
            )
        return self

    @property
    def numbered_steps(self) -> bool:
        """Whether past steps are numbered lines (a thought or a screenshot refers to its step), not today's one
        ``Previous actions: a; b; c`` line."""
        return self.history_thoughts != 0 or self.history_screenshots != 0


def action_space_text(memory: bool = False) -> str:
    """The system turn: the agent's role, the reply format and every action form (``memorize`` with ``memory``)."""
    # A training input: the trained policy has read exactly this text (pinned in tests/foundation/test_actions.py).
    specs = [spec for spec in ACTION_SPACE.values() if memory or spec.type is not ActionType.MEMORIZE]
    usages = " ".join(spec.usage() for spec in specs)
    return f"You are a web agent. Reply with 'Thought:' and one 'Action:' line.\nActions: {usages}"


def cut_axtree(axtree: str, max_tokens: int, tokenizer=None) -> tuple[str, bool, int]:
    """``(text, truncated, tokens)``: the tree cut at a line boundary to ``max_tokens`` tokens (4 characters a
    token when no tokenizer is given)."""
    if tokenizer is None:
        if len(axtree) <= max_tokens * 4:
            return axtree, False, (len(axtree) + 3) // 4
        kept = axtree[: max_tokens * 4]
        tokens = max_tokens
    else:
        ids = tokenizer(axtree, add_special_tokens=False)["input_ids"]
        if len(ids) <= max_tokens:
            return axtree, False, len(ids)
        kept = tokenizer.decode(ids[:max_tokens])
        tokens = max_tokens
    if "\n" in kept:
        kept = kept[: kept.rindex("\n")]
    return f"{kept}\n{TRUNCATION_MARK}", True, tokens


def _image_path(path: str, config: PromptConfig) -> str:
    if config.image_root and not Path(path).is_absolute():
        return str(Path(config.image_root) / path)
    return path


def _count_tokens(text: str, tokenizer=None) -> int:
    """``text``'s tokens: the tokenizer's, or 4 characters a token without one (as :func:`cut_axtree`)."""
    if tokenizer is None:
        return (len(text) + 3) // 4
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _recent(count: StepCount, n: int) -> int:
    """The first of the ``n`` past steps inside the ``count`` most recent."""
    return 0 if count == "all" else max(0, n - count)


@dataclass(frozen=True)
class PastStep:
    """One past step as the prompt shows it: its number (1 = the episode's first step), its action text, and its
    thought and screenshot where the context policy keeps them (else None)."""

    number: int
    action: str
    thought: str | None
    screenshot: str | None

    def line(self, numbered: bool) -> str:
        """Its text: ``3. Thought: ... Action: click(4)`` in the numbered form, else the bare action."""
        if not numbered:
            return self.action
        thought = f"Thought: {' '.join(self.thought.split())} " if self.thought else ""
        return f"{self.number}. {thought}Action: {self.action}"


def past_steps(state: dict[str, Any], config: PromptConfig, tokenizer=None) -> tuple[list[PastStep], int]:
    """``(steps, cut)``: the past steps of ``state`` the context policy shows, oldest first, and how many of them
    ``history_max_tokens`` cut (oldest first, a whole step at a time). ``previous_thoughts`` and
    ``previous_screenshots`` run beside ``previous_actions``; a table from before they existed lacks them (no
    thought, no screenshot)."""
    actions = list(state.get("previous_actions") or [])
    thoughts = list(state.get("previous_thoughts") or [])
    screenshots = list(state.get("previous_screenshots") or [])
    n = len(actions)
    with_thought, with_screenshot = (
        _recent(config.history_thoughts, n),
        _recent(config.history_screenshots, n),
    )
    shown = [
        PastStep(
            number=i + 1,
            action=actions[i],
            thought=(thoughts[i] or None) if i >= with_thought and i < len(thoughts) else None,
            screenshot=screenshots[i] if i >= with_screenshot and i < len(screenshots) else None,
        )
        for i in range(_recent(config.history_k, n), n)
    ]
    if config.history_max_tokens is None:
        return shown, 0
    costs = [_count_tokens(step.line(config.numbered_steps), tokenizer) for step in shown]
    cut = 0
    while cut < len(shown) and sum(costs[cut:]) > config.history_max_tokens:
        cut += 1
    return shown[cut:], cut


def facts(state: dict[str, Any]) -> list[str]:
    """The facts memorized before ``state``: the texts of every earlier ``memorize`` action, oldest first."""
    parsed = []
    for text in state.get("previous_actions") or []:
        try:
            parsed.append(parse_action(text))
        except ActionParseError:  # a live step whose reply did not parse ("(invalid)")
            continue
    return memorized_facts(parsed)


def user_text(
    state: dict[str, Any], axtree: str | None, config: PromptConfig, steps: list[PastStep] | None = None
) -> str:
    """The user turn's text: task, reflections, memorized facts, past steps, URL and (when given) the tree;
    ``steps``: the past steps to show (:func:`past_steps` by default)."""
    lines = [f"Task: {state['instruction']}"]
    for reflection in state.get("reflections") or []:
        lines.append(f"Reflection: {reflection}")
    if config.memory:
        memorized = facts(state)
        lines.append(
            "Memory:" + "".join(f"\n- {' '.join(fact.split())}" for fact in memorized)
            if memorized
            else "Memory: none"
        )
    steps = past_steps(state, config)[0] if steps is None else steps
    if config.numbered_steps:
        shown = [step.line(numbered=True) for step in steps]
        lines.append(
            "Previous steps:" + "".join(f"\n{line}" for line in shown) if shown else "Previous steps: none"
        )
    else:
        previous = [step.action for step in steps]
        lines.append(f"Previous actions: {'; '.join(previous) if previous else 'none'}")
    if config.show_url:
        lines.append(f"URL: {state.get('url') or ''}")
    if axtree is not None:
        lines.append(f"Page:\n{axtree}")
    return "\n".join(lines)


def reference_reply(state: dict[str, Any], config: PromptConfig) -> str:
    """The assistant's target for a state: its reference thought (if configured) and action."""
    action = parse_action(state["reference_action"])
    return format_reply(state.get("reference_thought") if config.include_thought else None, action)


def build_messages(
    state: dict[str, Any], config: PromptConfig, tokenizer=None, with_reference: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Chat messages for ``state`` and ``{'truncated': bool, 'axtree_tokens': int, 'history_steps': int,
    'history_cut': int}`` (past steps shown, and cut by ``history_max_tokens``).

    ``with_reference`` adds the assistant turn (the training target). Screenshots are ``{'type': 'image',
    'image': path}`` parts; the collator or policy loads them. Past steps' screenshots come first, each after a
    ``Screenshot of step N:`` text part, then the current one (``Current screenshot:`` when past ones precede it).
    """
    info: dict[str, Any] = {"truncated": False, "axtree_tokens": 0}
    axtree = None
    if "axtree" in config.observation:
        axtree, info["truncated"], info["axtree_tokens"] = cut_axtree(
            state.get("axtree") or "", config.axtree_max_tokens, tokenizer
        )
    steps, info["history_cut"] = past_steps(state, config, tokenizer)
    info["history_steps"] = len(steps)
    content: list[dict[str, Any]] = []
    for step in steps:
        if step.screenshot:
            content.append({"type": "text", "text": f"Screenshot of step {step.number}:"})
            content.append({"type": "image", "image": _image_path(step.screenshot, config)})
    if "screenshot" in config.observation and state.get("screenshot"):
        if content:
            content.append({"type": "text", "text": "Current screenshot:"})
        content.append({"type": "image", "image": _image_path(state["screenshot"], config)})
    content.append({"type": "text", "text": user_text(state, axtree, config, steps)})
    messages = [{"role": "user", "content": content}]
    if config.system_turn:
        system = action_space_text(config.memory)
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    if with_reference:
        messages.append(
            {"role": "assistant", "content": [{"type": "text", "text": reference_reply(state, config)}]}
        )
    return messages, info


def image_paths(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The image paths of ``messages``, in order."""
    return [
        part["image"]
        for message in messages
        if not isinstance(message["content"], str)
        for part in message["content"]
        if part.get("type") == "image"
    ]


def render_prompt(messages: list[dict[str, Any]], processor) -> str:
    """The prompt text the model completes (chat template with the generation prompt)."""
    return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def state_from_live(
    task: Task, observation: Observation, history: Sequence[Step], reflections: Sequence[str] = ()
) -> dict[str, Any]:
    """A state row for acting live (no reference action): the same fields the training states have; past
    screenshots are the files the running episode observed (``Step.observed_screenshot``)."""
    return {
        "state_id": f"{task.id}:live:{len(history)}",
        "task_id": task.id,
        "trajectory_id": None,
        "step_index": len(history),
        "site": task.site,
        "instruction": task.instruction,
        "previous_actions": [format_action(s.action) if s.action else "(invalid)" for s in history],
        "previous_thoughts": [s.thought for s in history],
        "previous_screenshots": [s.observed_screenshot for s in history],
        "url": observation.url,
        "axtree": observation.axtree,
        "screenshot": observation.screenshot,
        "reference_thought": None,
        "reference_action": None,
        "equivalent_actions": [],
        "reflections": list(reflections),
    }
