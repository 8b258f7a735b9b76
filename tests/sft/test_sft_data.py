"""sft_data: successful trajectories only, one state per step with its history, a split by task into train, val, the
probe pool and dev (task counts), stats."""

from pathlib import Path

import polars as pl
import pytest

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.contracts.schema import (
    STATE_SCHEMA,
    STEP_SCHEMA,
    TRAJECTORY_SCHEMA,
    Step,
    Trajectory,
    step_row,
    trajectory_row,
)
from rmsweb_kedro.pipelines.sft_data.nodes import build_states, describe_states, split_by_task
from rmsweb_kedro.trajectories.states import split_by_task as states_split_by_task


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
    # the earlier steps' thoughts and screenshots beside their actions, for the context policy
    assert states["previous_thoughts"][2].to_list() == ["step 0", "step 1"]
    assert states["previous_screenshots"][2].to_list() == ["raw/t1/0.png", "raw/t1/1.png"]
    assert states["previous_thoughts"][3].to_list() == []


def test_a_raw_file_without_thoughts_or_screenshots_still_gives_states(tmp_path):
    """Older raw files (and hand-written ones) carry no thought and no screenshot: they load, and their states'
    past steps have neither (null beside each action)."""
    from rmsweb_kedro.datasets.raw_trajectories import RawTrajectoriesDataset
    from rmsweb_kedro.pipelines.trajectories.nodes import validate_trajectories

    steps = [{"index": 0, "url": "http://shop.test/", "axtree": "A", "action": "click(3)"},
             {"index": 1, "url": "http://shop.test/item", "axtree": "B", "action": 'answer("12")'}]  # fmt: skip
    record = {"id": "old-1", "task_id": "t", "site": "shop", "success": True, "steps": steps}
    (tmp_path / "old.jsonl").write_text(__import__("json").dumps(record) + "\n")
    raw = RawTrajectoriesDataset(
        path=str(tmp_path), dataset="text.TextDataset", filename_suffix=".jsonl"
    ).load()
    trajectories, step_table, quarantine, _ = validate_trajectories(raw, {"raw_root": str(tmp_path)})
    assert quarantine.height == 0
    states = build_states(trajectories, step_table)
    assert states["previous_actions"].to_list() == [[], ["click(3)"]]
    assert states["previous_thoughts"].to_list() == [[], [None]]
    assert states["previous_screenshots"].to_list() == [[], [None]]


def test_unparsed_step_in_a_successful_trajectory_is_named():
    rows, steps = _frames([_trajectory("t1", 1, True, ["click(1)", "click(2)"])])
    steps = steps.with_columns(
        pl.when(pl.col("index") == 1).then(None).otherwise(pl.col("action")).alias("action")
    )
    with pytest.raises(ValueError, match=r"'t1-a1' step 1 \(field 'action'\)"):
        build_states(rows, steps)


#: ``split_by_task`` holding out 10 of tiny_states' 40 tasks as val with seed 3, before the probe pool existed
#: (computed with the two-way split of commit 34ca745): a probe pool must not move a task in or out of val.
VAL_TASKS_BEFORE_THE_POOL = ["shop-001", "shop-003", "shop-005", "shop-011", "shop-020", "shop-025", "shop-032",
                             "shop-034", "shop-036", "shop-039"]  # fmt: skip

#: Val alone: 10 of tiny_states' 40 tasks, the rest train.
VAL_ONLY = {"val_tasks": 10, "probe_tasks": 0, "dev_tasks": 0, "min_train_tasks": 1, "seed": 3}


def test_split_is_by_task_and_stats_count_samples(tiny_states):
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    train, val, probe, dev = split_by_task(states, VAL_ONLY)
    assert not set(train["task_id"]) & set(val["task_id"])
    assert train.height + val.height == states.height and val["task_id"].n_unique() == 10
    again = split_by_task(states, VAL_ONLY)[1]
    assert again["state_id"].to_list() == val["state_id"].to_list()
    # 56 characters (14 tokens at 4 a token): the search page fits, results and item pages are cut
    stats = describe_states(train, val, probe, dev, {"prompt": {"axtree_max_tokens": 14}})
    assert stats["train"]["samples"] == train.height and stats["val"]["tasks"] == 10
    assert stats["train"]["truncation_rate"] == pytest.approx(2 / 3)
    assert stats["train"]["action_types"]["click"] == 2 * train["task_id"].n_unique()
    assert stats["train"]["history_steps_cut"] == stats["train"]["history_cut_states"] == 0
    # a history budget of 4 tokens: 'click(k)' (2 tokens) fits, 'type(1, "<item>", submit=true)' (8+) does not,
    # so the second and third state of each task lose their first past step
    stats = describe_states(train, val, probe, dev, {"prompt": {"history_max_tokens": 4}})
    tasks = train["task_id"].n_unique()
    assert stats["train"]["history_steps_cut"] == stats["train"]["history_cut_states"] == 2 * tasks


def test_no_probe_tasks_is_the_two_way_split_with_an_empty_probe_pool(tiny_states):
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    train, val, probe, dev = split_by_task(states, VAL_ONLY)
    assert sorted(set(val["task_id"])) == VAL_TASKS_BEFORE_THE_POOL
    assert sorted(set(train["task_id"])) == sorted(set(states["task_id"]) - set(VAL_TASKS_BEFORE_THE_POOL))
    assert probe.height == 0 and probe.schema == STATE_SCHEMA
    # the same rows, in the same order, as the two-way split Salvage-DS uses (one fraction: round(40 * 0.25) = 10)
    two_way = states_split_by_task(states, 0.25, 3)
    assert train.equals(two_way[0]) and val.equals(two_way[1])
    named = states_split_by_task(states, {"held_out": 10}, 3)  # one count: one part of that name
    assert len(named) == 2 and named[0].equals(train) and named[1].equals(val)
    with pytest.raises(ValueError, match=r"held-out fraction 1 must be in \[0, 1\)"):
        states_split_by_task(states, 1.0, 3)
    stats = describe_states(train, val, probe, dev, VAL_ONLY)
    assert stats["probe"]["samples"] == 0 and stats["split"]["probe_tasks"] == 0


def test_probe_pool_takes_its_tasks_and_each_task_is_in_one_part(tiny_states):
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    counts = VAL_ONLY | {"probe_tasks": 8}
    train, val, probe, dev = split_by_task(states, counts)
    parts = {"train": train, "val": val, "probe": probe}
    tasks = {name: set(frame["task_id"]) for name, frame in parts.items()}
    # 40 tasks: 10 val, 8 probe, 22 train; every state in exactly one part
    assert {name: len(t) for name, t in tasks.items()} == {"train": 22, "val": 10, "probe": 8}
    assert tasks["train"] | tasks["val"] | tasks["probe"] == set(states["task_id"])
    assert not (
        tasks["train"] & tasks["val"] or tasks["train"] & tasks["probe"] or tasks["val"] & tasks["probe"]
    )
    assert sorted(pl.concat(parts.values())["state_id"]) == sorted(states["state_id"])
    assert sorted(tasks["val"]) == VAL_TASKS_BEFORE_THE_POOL  # the pool is taken from train, never from val
    assert probe.height == 3 * 8 and probe.schema == STATE_SCHEMA
    stats = describe_states(train, val, probe, dev, counts)
    assert (stats["probe"]["tasks"], stats["probe"]["samples"]) == (8, 24)
    assert stats["split"] == {
        "val_tasks": 10,
        "probe_tasks": 8,
        "dev_tasks": 0,
        "min_train_tasks": 1,
        "seed": 3,
    }
    assert describe_states(train, val, probe, dev, {})["split"] == {
        "val_tasks": 24, "probe_tasks": 32, "dev_tasks": 16, "min_train_tasks": 136, "seed": 0}  # fmt: skip
    moved = sorted(tasks["train"])[0]  # a train task's states also in the probe pool
    with pytest.raises(ValueError, match=f"tasks in both train and probe: \\['{moved}'\\]"):
        describe_states(train, val, pl.concat([probe, train.filter(pl.col("task_id") == moved)]), dev, {})


def test_the_dev_split_comes_after_val_and_the_probe_pool_and_moves_neither(tiny_states):
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    counts = VAL_ONLY | {"probe_tasks": 8}
    _, val0, probe0, dev0 = split_by_task(states, counts)
    train, val, probe, dev = split_by_task(states, counts | {"dev_tasks": 4})
    # 40 tasks: 10 val, 8 probe, 4 dev, 18 train; val and the pool are the same as without dev
    assert (val["state_id"].to_list(), probe["state_id"].to_list()) == (
        val0["state_id"].to_list(),
        probe0["state_id"].to_list(),
    )
    assert dev0.height == 0 and dev["task_id"].n_unique() == 4 and train["task_id"].n_unique() == 18
    assert not set(dev["task_id"]) & (set(train["task_id"]) | set(val["task_id"]) | set(probe["task_id"]))
    stats = describe_states(train, val, probe, dev, counts | {"dev_tasks": 4})
    assert stats["dev"]["tasks"] == 4 and stats["split"]["dev_tasks"] == 4


def test_the_parts_keep_their_counts_as_the_collection_grows(tiny_states):
    """Counts, not shares: more collected tasks all go to train; val, probe and dev keep their sizes (shares of 160
    tasks left SFT 87)."""
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    counts = {"val_tasks": 4, "probe_tasks": 3, "dev_tasks": 2, "min_train_tasks": 1, "seed": 3}
    ids = sorted(set(states["task_id"]))
    sizes = []
    for n in (20, 40):
        parts = split_by_task(states.filter(pl.col("task_id").is_in(ids[:n])), counts)
        sizes.append([frame["task_id"].n_unique() for frame in parts])
    assert sizes == [[11, 4, 3, 2], [31, 4, 3, 2]]


def test_too_few_tasks_for_sft_is_an_error_naming_the_counts(tiny_states):
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    # 40 tasks: 10 + 8 + 4 held out leave 18, exactly the minimum
    counts = {"val_tasks": 10, "probe_tasks": 8, "dev_tasks": 4, "min_train_tasks": 18}
    assert split_by_task(states, counts)[0]["task_id"].n_unique() == 18
    with pytest.raises(
        ValueError,
        match=r"40 tasks to split: val 10 \+ probe 8 \+ dev 4 held out leave 18 to train, min_train_tasks is 19",
    ):
        split_by_task(states, counts | {"min_train_tasks": 19})
    # the defaults need 24 + 32 + 16 + 136 = 208 tasks
    with pytest.raises(ValueError, match=r"val 24 \+ probe 32 \+ dev 16 held out leave -32 to train"):
        split_by_task(states, {})
    with pytest.raises(ValueError, match="val_tasks"):
        split_by_task(states, {"val_tasks": -1})


def test_wiring_and_catalog_of_the_probe_pool(tmp_path, tiny_states):
    """sft_data writes sft_states_probe, a catalog entry beside train and val that round-trips an empty pool with
    the STATE schema (polars datasets predate polars 2: checked, not assumed); the parameters validate."""
    import yaml
    from kedro.io import DataCatalog

    from rmsweb_kedro.pipelines.sft_data.nodes import SFTDataParams
    from rmsweb_kedro.pipelines.sft_data.pipeline import create_pipeline

    pipeline = create_pipeline()
    assert pipeline.all_outputs() >= {
        "sft_states_train",
        "sft_states_val",
        "sft_states_probe",
        "sft_states_dev",
        "sft_data_stats",
    }
    conf = Path(__file__).parents[2] / "conf"
    entries = yaml.safe_load((conf / "base" / "catalog_sft_data.yml").read_text())
    assert pipeline.all_outputs() <= set(entries)
    probe = entries["sft_states_probe"]
    assert {k: v for k, v in probe.items() if k != "filepath"} == {
        k: v for k, v in entries["sft_states_train"].items() if k != "filepath"
    }
    assert probe["filepath"] == "data/05_model_input/sft/sft_states_probe.parquet"
    catalog = DataCatalog.from_config(
        {"sft_states_probe": {**probe, "filepath": str(tmp_path / "p.parquet")}}
    )
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    empty = split_by_task(states, VAL_ONLY)[2]
    catalog.save("sft_states_probe", empty)
    assert catalog.load("sft_states_probe").schema == STATE_SCHEMA
    assert SFTDataParams.model_validate({"probe_tasks": 20}).probe_tasks == 20


@pytest.mark.parametrize(
    ("env", "min_train_tasks"), [(None, 136), pytest.param("experiment", 955, marks=pytest.mark.slow)]
)
def test_collection_is_planned_large_enough_for_the_split(env, min_train_tasks):
    """The environment's collection can give sft_data every held-out part and min_train_tasks beside them: its
    cap is at least their sum (null: every train task), and the sandbox suite has that many train tasks."""
    from rmsweb_kedro.pipelines.sft_data.nodes import SFTDataParams
    from rmsweb_kedro.settings import CONFIG_LOADER_ARGS, CONFIG_LOADER_CLASS
    from rmsweb_kedro.web.sandbox.tasks import SandboxParams, generate_tasks

    conf = Path(__file__).parents[2] / "conf"
    params = CONFIG_LOADER_CLASS(conf_source=str(conf), env=env, **CONFIG_LOADER_ARGS)["parameters"]
    split = SFTDataParams.model_validate(params["sft_data"])
    needed = split.val_tasks + split.probe_tasks + split.dev_tasks + split.min_train_tasks
    assert split.min_train_tasks == min_train_tasks
    cap = params["collect"]["max_tasks"]
    train = [t for t in generate_tasks(SandboxParams.model_validate(params["sandbox"])) if t.split == "train"]
    assert (cap if cap is not None else len(train)) >= needed and len(train) >= needed
