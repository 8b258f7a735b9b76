"""The context policy (prompts.PromptConfig): what of the episode so far a prompt keeps, the history budget, the
memorize action's facts, older tables and raw files, and the default rendering pinned to the one before it."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages, past_steps, state_from_live
from rmsweb_kedro.contracts.schema import STATE_SCHEMA, Observation, Step, Task, conform_states
from tests.foundation.test_actions import STUDENT_ACTION_SPACE_TEXT

STATE = {
    "instruction": "Add the blue scarf to the cart",
    "reflections": ['Wrong decision: click link "red scarf". Instead: click link "blue scarf".'],
    "previous_actions": [
        'type(1, "blue scarf", submit=true)',
        'memorize("the blue scarf is 12 EUR")',
        "click(5)",
        "go_back()",
        "(invalid)",
    ],
    "previous_thoughts": ["the search box is [1]", "remember the price", None, "wrong  item,\ngo back", None],
    "previous_screenshots": ["a/0.png", "a/1.png", "a/2.png", "a/3.png", "a/4.png"],
    "url": "http://shop.test/search?q=blue+scarf",
    "axtree": 'textbox "Search" [1]\nlink "blue scarf" [4]\nlink "red scarf" [5]',
    "screenshot": "a/5.png",
    "reference_thought": "open the blue scarf",
    "reference_action": "click(4)",
}
TASK_AND_REFLECTION = (
    'Task: Add the blue scarf to the cart\nReflection: Wrong decision: click link "red scarf". Instead: click link '
    '"blue scarf".\n'
)
PAGE = 'URL: http://shop.test/search?q=blue+scarf\nPage:\ntextbox "Search" [1]\nlink "blue scarf" [4]\nlink "red scarf" [5]'
#: The embedded default's prompt (conf/base/globals.yml) and production's before the context policy existed.
DEFAULT = {"observation": ["axtree"], "history_k": 3, "axtree_max_tokens": 200, "include_thought": False,
           "system_turn": False}  # fmt: skip
PRODUCTION_BEFORE = {"observation": ["screenshot", "axtree"], "history_k": 3, "axtree_max_tokens": 1024,
                     "include_thought": True, "image_root": "data/01_raw/trajectories"}  # fmt: skip
#: What main's prompts.build_messages (before the context policy) rendered for STATE under those two configs,
#: printed by that code: the new fields (thoughts, screenshots of past steps) must change nothing here.
USER_BEFORE = f"{TASK_AND_REFLECTION}Previous actions: click(5); go_back(); (invalid)\n{PAGE}"


def text(part: dict) -> str:
    return part["text"]


def test_the_default_renders_the_tokens_it_rendered_before_the_context_policy():
    """The default checkpoints were trained on these prompts: thoughts and screenshots of past steps in the row do
    not reach them unless the context policy asks (so the default run keeps its checkpoint hashes)."""
    messages, info = build_messages(STATE, PromptConfig(**DEFAULT), with_reference=True)
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": USER_BEFORE}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Action: click(4)"}]},
    ]
    assert (info["history_steps"], info["history_cut"]) == (3, 0)
    messages, _ = build_messages(STATE, PromptConfig(**PRODUCTION_BEFORE), with_reference=True)
    assert messages == [
        {"role": "system", "content": [{"type": "text", "text": STUDENT_ACTION_SPACE_TEXT}]},
        {"role": "user", "content": [{"type": "image", "image": "data/01_raw/trajectories/a/5.png"},
                                     {"type": "text", "text": USER_BEFORE}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Thought: open the blue scarf\nAction: click(4)"}]},
    ]  # fmt: skip


def test_fara_settings_keep_every_thought_and_action_three_screenshots_the_url_and_the_facts():
    config = PromptConfig(
        observation=["screenshot", "axtree"], history_k="all", history_thoughts="all", history_screenshots=3,
        memory=True, image_root="/r",
    )  # fmt: skip
    messages, info = build_messages(STATE, config)
    system, user = messages
    assert text(system["content"][0]) == STUDENT_ACTION_SPACE_TEXT + ' memorize("fact")'
    assert user["content"][:-1] == [
        {"type": "text", "text": "Screenshot of step 3:"}, {"type": "image", "image": "/r/a/2.png"},
        {"type": "text", "text": "Screenshot of step 4:"}, {"type": "image", "image": "/r/a/3.png"},
        {"type": "text", "text": "Screenshot of step 5:"}, {"type": "image", "image": "/r/a/4.png"},
        {"type": "text", "text": "Current screenshot:"}, {"type": "image", "image": "/r/a/5.png"},
    ]  # fmt: skip
    assert text(user["content"][-1]) == (
        f"{TASK_AND_REFLECTION}Memory:\n- the blue scarf is 12 EUR\nPrevious steps:\n"
        '1. Thought: the search box is [1] Action: type(1, "blue scarf", submit=true)\n'
        '2. Thought: remember the price Action: memorize("the blue scarf is 12 EUR")\n'
        "3. Action: click(5)\n"
        "4. Thought: wrong item, go back Action: go_back()\n"  # one line, whatever the thought's spacing
        f"5. Action: (invalid)\n{PAGE}"
    )
    assert (info["history_steps"], info["history_cut"]) == (5, 0)


def test_each_part_keeps_its_own_window_and_a_fact_outlives_the_history():
    config = PromptConfig(history_k=2, history_thoughts=1, show_url=False, memory=True)
    user = text(build_messages(STATE, config)[0][-1]["content"][-1])
    assert (
        user
        == (
            f"{TASK_AND_REFLECTION}Memory:\n- the blue scarf is 12 EUR\nPrevious steps:\n4. Action: go_back()\n"
            '5. Action: (invalid)\nPage:\ntextbox "Search" [1]\nlink "blue scarf" [4]\nlink "red scarf" [5]'
        )
    )  # step 5 has no thought to keep; the memorize step (2) is out of the window, its fact is not; no URL line
    nothing = dict(STATE, previous_actions=[], previous_thoughts=[], previous_screenshots=[])
    user = text(build_messages(nothing, config)[0][-1]["content"][-1])
    assert "Memory: none\nPrevious steps: none\nPage:" in user
    assert "Previous actions: none\nURL:" in text(
        build_messages(nothing, PromptConfig())[0][-1]["content"][-1]
    )
    off = text(build_messages(STATE, PromptConfig(history_k=0))[0][-1]["content"][-1])
    assert "Previous actions: none" in off and "Memory" not in off


def test_the_budget_cuts_whole_steps_oldest_first_and_counts_them():
    """Without a tokenizer a piece costs ceil(characters / 4) tokens. Numbered lines of STATE under all thoughts:
    '1. Thought: the search box is [1] Action: type(1, "blue scarf", submit=true)' is 76 characters, 19 tokens;
    '2. ...memorize(...)' 75 -> 19; '3. Action: click(5)' 19 -> 5; '4. Thought: wrong item, go back Action: go_back()'
    49 -> 13; '5. Action: (invalid)' 20 -> 5. Budget 25: 5 + 13 + 5 = 23 fits, adding step 2 (42) does not."""
    config = PromptConfig(history_k="all", history_thoughts="all", memory=True, history_max_tokens=25)
    steps, cut = past_steps(STATE, config)
    assert [s.number for s in steps] == [3, 4, 5] and cut == 2
    messages, info = build_messages(STATE, config)
    assert (info["history_steps"], info["history_cut"]) == (3, 2)
    assert "Previous steps:\n3. Action: click(5)\n4." in text(messages[-1]["content"][-1])
    assert "- the blue scarf is 12 EUR" in text(messages[-1]["content"][-1])  # facts are never cut
    # a screenshot goes with its step
    shots = config.model_copy(update={"observation": ["screenshot", "axtree"], "history_screenshots": "all"})
    parts = build_messages(STATE, PromptConfig.model_validate(shots.model_dump()))[0][-1]["content"]
    assert [p["image"] for p in parts if p["type"] == "image"] == ["a/2.png", "a/3.png", "a/4.png", "a/5.png"]
    assert past_steps(STATE, config.model_copy(update={"history_max_tokens": 4}))[1] == 5  # even the last
    # with the checkpoint's tokenizer the same rule counts its tokens (tests/context/test_context_tokens.py)


def test_a_context_the_policy_cannot_have_live_is_refused():
    with pytest.raises(
        ValueError, match="include_thought is false: acting live the policy writes no thought"
    ):
        PromptConfig(include_thought=False, history_thoughts=3)
    with pytest.raises(ValueError, match=r"observation \['axtree'\] has none: add 'screenshot'"):
        PromptConfig(history_screenshots=3)
    with pytest.raises(ValueError, match="history_k"):
        PromptConfig(history_k=-1)
    with pytest.raises(ValueError, match="history_thoughts"):
        PromptConfig(history_thoughts="every")
    assert PromptConfig(history_k="all").history_k == "all"


def test_a_table_from_before_the_context_policy_renders_without_thoughts_or_past_screenshots():
    old = pl.DataFrame([STATE | {"state_id": "s", "task_id": "t", "trajectory_id": "tr", "step_index": 5,
                                 "site": "shop", "equivalent_actions": []}], schema=STATE_SCHEMA)  # fmt: skip
    old = old.drop("previous_thoughts", "previous_screenshots")
    row = conform_states(old, "old_states").row(0, named=True)
    assert row["previous_thoughts"] == [] and row["previous_screenshots"] == []
    config = PromptConfig(
        observation=["screenshot", "axtree"], history_thoughts="all", history_screenshots="all"
    )
    parts = build_messages(row, config)[0][-1]["content"]
    assert [p["type"] for p in parts] == ["image", "text"]  # the current screenshot only
    assert "3. Action: click(5)\n4. Action: go_back()\n5. Action: (invalid)" in text(parts[-1])


def test_the_live_state_carries_the_thoughts_and_the_screenshots_the_episode_observed(tmp_path):
    task = Task(id="t", source="sandbox", site="shop", start_url="http://shop.test/", instruction="Buy a mug")
    history = [
        Step(index=0, url="http://shop.test/", thought="search", action='type(1, "mug", submit=true)',
             screenshot="a/0.png").observed(str(tmp_path / "0.png")),
        Step(index=1, url="http://shop.test/search", action=None, raw_output="hmm").observed(None),
    ]  # fmt: skip
    state = state_from_live(task, Observation(url="http://shop.test/search", axtree="x"), history)
    assert state["previous_actions"] == ['type(1, "mug", submit=true)', "(invalid)"]
    assert state["previous_thoughts"] == ["search", None]
    assert state["previous_screenshots"] == [str(tmp_path / "0.png"), None]
    assert set(STATE_SCHEMA.names()) <= set(state)
    # a record keeps its relative screenshot, never the running episode's file
    recorded = Step.model_validate(history[0].model_dump())
    assert recorded.observed_screenshot is None and "observed" not in history[0].model_dump_json()
