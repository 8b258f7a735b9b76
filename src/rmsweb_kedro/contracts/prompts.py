"""The policy's prompt, one module for training and inference alike, so the two cannot drift.

A prompt is built from a state (a :data:`schema.STATE_SCHEMA` row as a dict), so ``sft_data``, mining, Salvage-DS,
offline evaluation and the live :class:`agents.hf_policy.HFPolicy` all show the model the same thing:

- system turn: the action space (rendered from :data:`rmsweb_kedro.contracts.actions.ACTION_SPACE`) and the reply format;
- user turn: the task, reflections from earlier failed attempts (when a state carries them), the last ``k``
  previous actions, the URL, and the observation: accessibility-tree text cut to a token budget and/or the
  screenshot image (``PromptConfig.observation``);
- assistant turn (training targets only): ``actions.format_reply(reference_thought, reference_action)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.actions import ACTION_SPACE, format_action, format_reply, parse_action
from rmsweb_kedro.contracts.schema import Observation, Step, Task

ObservationPart = Literal["axtree", "screenshot"]
TRUNCATION_MARK = "..."


class PromptConfig(BaseModel):
    """What the policy sees. The tiny default reads text only; a real Qwen3-VL can take the screenshot too."""

    model_config = ConfigDict(extra="forbid")

    observation: list[ObservationPart] = Field(default_factory=lambda: ["axtree"], min_length=1)
    history_k: int = Field(default=3, ge=0, description="how many previous actions to show")
    axtree_max_tokens: int = Field(default=200, ge=1)
    include_thought: bool = Field(default=True, description="train the reply's 'Thought:' line too")
    system_turn: bool = Field(
        default=True,
        description="open with the system turn (the role, the reply format, every action form: action_space_text);"
        " a model trained from scratch on this prompt (the tiny default) learns nothing from a constant turn",
    )
    image_root: str | None = Field(default=None, description="folder relative screenshot paths start from")


def action_space_text() -> str:
    """The system turn: the agent's role, the reply format and every action form."""
    # A training input: the trained policy has read exactly this text (pinned in tests/foundation/test_actions.py).
    usages = " ".join(spec.usage() for spec in ACTION_SPACE.values())
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


def user_text(state: dict[str, Any], axtree: str | None, config: PromptConfig) -> str:
    """The user turn's text: task, reflections, last k actions, URL and (when given) the tree."""
    lines = [f"Task: {state['instruction']}"]
    for reflection in state.get("reflections") or []:
        lines.append(f"Reflection: {reflection}")
    previous = list(state.get("previous_actions") or [])[-config.history_k :] if config.history_k else []
    lines.append(f"Previous actions: {'; '.join(previous) if previous else 'none'}")
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
    """Chat messages for ``state`` and ``{'truncated': bool, 'axtree_tokens': int}``.

    ``with_reference`` adds the assistant turn (the training target). Screenshots are ``{'type': 'image',
    'image': path}`` parts; the collator or policy loads them.
    """
    info: dict[str, Any] = {"truncated": False, "axtree_tokens": 0}
    axtree = None
    if "axtree" in config.observation:
        axtree, info["truncated"], info["axtree_tokens"] = cut_axtree(
            state.get("axtree") or "", config.axtree_max_tokens, tokenizer
        )
    content: list[dict[str, Any]] = []
    if "screenshot" in config.observation and state.get("screenshot"):
        content.append({"type": "image", "image": _image_path(state["screenshot"], config)})
    content.append({"type": "text", "text": user_text(state, axtree, config)})
    messages = [{"role": "user", "content": content}]
    if config.system_turn:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": action_space_text()}]})
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
    """A state row for acting live (no reference action): the same fields the training states have."""
    return {
        "state_id": f"{task.id}:live:{len(history)}",
        "task_id": task.id,
        "trajectory_id": None,
        "step_index": len(history),
        "site": task.site,
        "instruction": task.instruction,
        "previous_actions": [format_action(s.action) if s.action else "(invalid)" for s in history],
        "url": observation.url,
        "axtree": observation.axtree,
        "screenshot": observation.screenshot,
        "reference_thought": None,
        "reference_action": None,
        "equivalent_actions": [],
        "reflections": list(reflections),
    }
