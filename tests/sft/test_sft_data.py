"""sft_data: successful trajectories only, one state per step with its history, a split by task, stats."""

import polars as pl
import pytest

from rmsweb_kedro.actions import parse_action
from rmsweb_kedro.pipelines.sft_data.nodes import build_states, describe_states, split_by_task
from rmsweb_kedro.schema import (
    STATE_SCHEMA,
    STEP_SCHEMA,
    TRAJECTORY_SCHEMA,
    Step,
    Trajectory,
    step_row,
    trajectory_row,
)


def _trajectory(task: str, attempt: int, success: bool, actions: list[str]) -> Trajectory:
    steps = [
        Step(
            index=i,
            url=f"http://shop.test/{i}",
            axtree=f'button "b{i}" [{i}]',
            thought=f"step {i}",
            action=parse_action(a),
            screenshot=f"{task}/{i}.png",
        )
        for i, a in enumerate(actions)
    ]
    return Trajectory(
        id=f"{task}-a{attempt}",
        task_id=task,
        site="shop",
        instruction=f"do {task}",
        attempt=attempt,
        success=success,
        steps=steps,
    )


def _frames(trajectories):
    rows = pl.DataFrame([trajectory_row(t, "f.jsonl") for t in trajectories], schema=TRAJECTORY_SCHEMA)
    steps = pl.DataFrame([step_row(t, s, "raw/") for t in trajectories for s in t.steps], schema=STEP_SCHEMA)
    return rows, steps


def test_states_come_from_successful_steps_with_their_history():
    trajectories = [
        _trajectory("t1", 1, False, ["click(1)", "click(9)"]),
        _trajectory("t1", 2, True, ["click(1)", 'type(2, "blue mug", submit=true)', 'answer("4.50")']),
        _trajectory("t2", 1, True, ['scroll("down")']),
    ]
    states = build_states(*_frames(trajectories))
    assert states.schema == STATE_SCHEMA
    assert states["state_id"].to_list() == ["t1-a2:0", "t1-a2:1", "t1-a2:2", "t2-a1:0"]
    assert states["previous_actions"].to_list() == [
        [],
        ["click(1)"],
        ["click(1)", 'type(2, "blue mug", submit=true)'],
        [],
    ]
    assert states["reference_action"][2] == 'answer("4.50")' and states["reference_thought"][1] == "step 1"
    assert states["screenshot"][0] == "raw/t1/0.png" and states["instruction"][3] == "do t2"


def test_unparsed_step_in_a_successful_trajectory_is_named():
    rows, steps = _frames([_trajectory("t1", 1, True, ["click(1)", "click(2)"])])
    steps = steps.with_columns(
        pl.when(pl.col("index") == 1).then(None).otherwise(pl.col("action")).alias("action")
    )
    with pytest.raises(ValueError, match=r"'t1-a1' step 1 \(field 'action'\)"):
        build_states(rows, steps)


def test_split_is_by_task_and_stats_count_samples(tiny_states):
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    train, val = split_by_task(states, {"val_fraction": 0.25, "seed": 3})
    assert not set(train["task_id"]) & set(val["task_id"])
    assert train.height + val.height == states.height and val["task_id"].n_unique() == 10
    again = split_by_task(states, {"val_fraction": 0.25, "seed": 3})[1]
    assert again["state_id"].to_list() == val["state_id"].to_list()
    # 56 characters (14 tokens at 4 a token): the search page fits, results and item pages are cut
    stats = describe_states(train, val, {"prompt": {"axtree_max_tokens": 14}})
    assert stats["train"]["samples"] == train.height and stats["val"]["tasks"] == 10
    assert stats["train"]["truncation_rate"] == pytest.approx(2 / 3)
    assert stats["train"]["action_types"]["click"] == 2 * train["task_id"].n_unique()
