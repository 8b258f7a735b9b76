"""Data contracts: record validation errors, table rows, and the polars parquet dataset round trip."""

import json

import polars as pl
import pytest
from kedro_datasets.polars import EagerPolarsDataset
from pydantic import ValidationError

from rmsweb_kedro.contracts.actions import Action
from rmsweb_kedro.contracts.schema import (
    QUARANTINE_SCHEMA,
    STATE_SCHEMA,
    STEP_SCHEMA,
    TASK_SCHEMA,
    TRAJECTORY_SCHEMA,
    JudgeSpec,
    Observation,
    Step,
    Task,
    Trajectory,
    Usage,
    Verdict,
    level_for_length,
    step_row,
    tasks_from_frame,
    tasks_to_frame,
    trajectory_row,
)


def _trajectory(**overrides):
    record = {
        "id": "t1",
        "task_id": "shop-1",
        "site": "shop",
        "steps": [
            {"index": 0, "url": "http://a/", "action": "click(3)", "screenshot": "shots/0.png"},
            {"index": 1, "url": "http://a/b", "action": {"type": "answer", "text": "12"}},
        ],
    }
    record.update(overrides)
    return record


def _errors(record) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        Trajectory.model_validate_json(json.dumps(record))
    return {".".join(map(str, e["loc"])): e["msg"] for e in caught.value.errors()}


def test_action_in_text_or_object_form():
    trajectory = Trajectory.model_validate_json(json.dumps(_trajectory()))
    assert trajectory.steps[0].action == Action(type="click", element=3)
    assert trajectory.steps[1].action == Action(type="answer", text="12")
    again = Trajectory.model_validate_json(trajectory.model_dump_json())
    assert again == trajectory


def test_missing_required_field_names_it():
    record = _trajectory()
    del record["task_id"]
    assert list(_errors(record)) == ["task_id"]


def test_unknown_action_type_names_the_step():
    record = _trajectory()
    record["steps"][1]["action"] = {"type": "teleport"}
    record["steps"][0]["action"] = "clack(3)"
    errors = _errors(record)
    assert "unknown action 'clack'" in errors["steps.0.action"]
    assert any(key.startswith("steps.1.action") for key in errors)


def test_wrong_argument_type():
    record = _trajectory()
    record["steps"][0]["action"] = {"type": "click", "element": "three"}
    record["steps"][1]["index"] = "one"
    errors = _errors(record)
    assert "steps.0.action.element" in errors and "steps.1.index" in errors


@pytest.mark.parametrize(
    ("indices", "message"),
    [((0, 0), "appears twice"), ((1, 0), "in order"), ((0, 2), "position 1 has index 2")],
)
def test_step_indices(indices, message):
    record = _trajectory()
    for step, index in zip(record["steps"], indices, strict=True):
        step["index"] = index
    assert message in _errors(record)["steps"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../../etc/passwd", "escapes the data folder"),
        ("shots/../../x.png", "escapes the data folder"),
        ("/etc/passwd", "is absolute"),
        ("C:\\shots\\0.png", "is absolute"),
        ("  ", "empty"),
    ],
)
def test_screenshot_paths_stay_inside(path, message):
    with pytest.raises(ValidationError, match=message):
        Step(index=0, url="http://a/", screenshot=path)


def test_extra_fields_and_bad_enums_are_rejected():
    assert "colour" in _errors(_trajectory(colour="red"))
    assert "mode" in _errors(_trajectory(mode="sometimes"))
    assert "attempt" in _errors(_trajectory(attempt=0))


def test_rows_fit_the_schemas():
    trajectory = Trajectory.model_validate(
        _trajectory(
            verdict={"success": True, "reason": "ok", "judge": "sandbox-checker/v1"}, reflections=["r"]
        )
    )
    row = trajectory_row(trajectory, "a/b.jsonl")
    assert row["success"] is True and row["judge"] == "sandbox-checker/v1" and row["n_steps"] == 2
    frame = pl.DataFrame([row], schema=TRAJECTORY_SCHEMA)
    assert frame.schema == TRAJECTORY_SCHEMA
    steps = pl.DataFrame([step_row(trajectory, s, "a/") for s in trajectory.steps], schema=STEP_SCHEMA)
    assert steps["screenshot"].to_list() == ["a/shots/0.png", None]
    assert steps["action"].to_list() == ["click(3)", 'answer("12")']
    assert steps["action_type"].to_list() == ["click", "answer"]


def test_tasks_round_trip_through_their_table():
    tasks = [
        Task(
            id="shop-1",
            source="sandbox",
            site="shop",
            start_url="http://a/",
            instruction="Buy it",
            level=level_for_length(7),
            reference_length=7,
            split="train",
            judge=JudgeSpec(kind="sandbox_checker", config={"item": 17}),
            reference_solution=[{"action": "click(3)"}],
            metadata={"seed": 1},
        ),
        Task(id="wv-1", source="webvoyager", site="allrecipes", start_url="https://x/", instruction="Find"),
    ]
    frame = tasks_to_frame(tasks)
    assert frame.schema == TASK_SCHEMA
    assert tasks_from_frame(frame) == tasks
    assert tasks[0].level == "medium" and level_for_length(5) == "easy" and level_for_length(11) == "hard"


def test_other_records_validate():
    with pytest.raises(ValidationError):
        Task(id="", source="sandbox", site="s", start_url="u", instruction="i")
    with pytest.raises(ValidationError):
        Task(id="x", source="the web", site="s", start_url="u", instruction="i")
    assert Observation(url="u").env_error is False
    assert Verdict(success=False).reason == ""


SAMPLE = {
    "trajectories": (TRAJECTORY_SCHEMA, {"reflections": [["a", "b"], []], "success": [True, None]}),
    "steps": (STEP_SCHEMA, {"element": [3, None], "axtree": ["é\n[3]", None]}),
    "quarantine": (QUARANTINE_SCHEMA, {"line": [0, 12], "raw": ["", "x" * 5000]}),
    "states": (STATE_SCHEMA, {"previous_actions": [["click(3)"], []]}),
}


@pytest.mark.parametrize("name", list(SAMPLE))
@pytest.mark.parametrize("rows", [0, 2])
def test_polars_parquet_dataset_round_trips(tmp_path, name, rows):
    """kedro-datasets 9.6 predates polars 2: the dataset the catalog uses must keep schema and values."""
    schema, columns = SAMPLE[name]
    data = {column: (columns.get(column) or [None, None])[:rows] for column in schema.names()}
    frame = pl.DataFrame(data, schema=schema)
    dataset = EagerPolarsDataset(filepath=str(tmp_path / f"{name}.parquet"), file_format="parquet")
    dataset.save(frame)
    loaded = dataset.load()
    assert loaded.schema == schema
    assert loaded.equals(frame)


def test_usages_add_up():
    total = Usage()
    for prompt, completion in ((120, 7), (80, 3)):
        total += Usage(prompt_tokens=prompt, completion_tokens=completion)
    assert total == Usage(prompt_tokens=200, completion_tokens=10)
    assert Usage() + Usage() == Usage()
