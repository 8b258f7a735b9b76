"""The Online-Mind2Web submission folder against its contract (``episodes/submission.py``, written down from
the benchmark's README, example folder and reader): only Online-Mind2Web tasks, factual actions only, the start page
and the page after every action with the final state, no copies, keys and types in the reader's order; v1 and v2."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.contracts.schema import Step, Task, Trajectory
from rmsweb_kedro.episodes.submission import END_ACTION, V2_SCHEMA_VERSION, read_submission, write_submission

TASK = Task(
    id="fb7b4f784cfde003e2548fdf4e8d6b4f", source="online_mind2web", site="discogs",
    start_url="https://www.discogs.com/", instruction="Open the overview of release submission",
)  # fmt: skip


def trajectory(last: str | None, termination: str) -> Trajectory:
    steps = [
        Step(index=0, url="u0", axtree='button "Help" [3]', thought="open help", action=parse_action("click(3)")),
        Step(index=1, url="u1", raw_output="I am not sure", error="unparseable output: no action"),
        Step(index=2, url="u1", axtree='textbox "Search" [5]', thought="search",
             action=parse_action('type(5, "submission", submit=true)')),
    ]  # fmt: skip
    if last:
        steps.append(Step(index=3, url="u2", thought="done", action=parse_action(last)))
    return Trajectory(id="a", task_id=TASK.id, steps=steps, termination=termination)


@pytest.fixture
def pages(tmp_path):
    """Three observed pages: the start page, after click(3), after type(...) (the unparsed step observed none)."""
    paths = []
    for i, colour in enumerate(["red", "green", "blue"]):
        paths.append(tmp_path / "shots" / f"step_{i:03d}.png")
        paths[-1].parent.mkdir(exist_ok=True)
        Image.new("RGB", (20, 10), colour).save(paths[-1])
    return paths


@pytest.mark.parametrize(
    ("last", "termination"),
    [
        ('answer("Overview of Submission Guidelines")', "answer"),
        ('stop("success")', "stop"),
        (None, "max_steps"),
    ],
)
def test_v1_folder_is_what_the_reader_expects(pages, tmp_path, last, termination):
    out = tmp_path / "online_mind2web"
    folder = write_submission(trajectory(last, termination), TASK, pages, out)
    assert folder == out / TASK.id and sorted(p.name for p in out.iterdir()) == [TASK.id]
    result = json.loads((folder / "result.json").read_text())
    assert list(result) == ["task_id", "task", "final_result_response", "action_history", "thoughts"]
    assert result["task_id"] == TASK.id and result["task"] == TASK.instruction
    # Factual actions only, named by their element; no answer, no stop, no unparsed output.
    assert result["action_history"] == [
        'click(3) on button "Help"',
        'type(5, "submission", submit=true) on textbox "Search"',
    ]
    assert result["thoughts"] == ["open help", "search"]
    answer = "Overview of Submission Guidelines" if termination == "answer" else ""
    assert result["final_result_response"] == answer
    # The start page, then one page after each action, the final state last; copied byte for byte, no repeats.
    images = sorted((folder / "trajectory").iterdir())
    assert [p.name for p in images] == [f"{n}_full_screenshot.png" for n in range(3)]
    assert [p.read_bytes() for p in images] == [p.read_bytes() for p in pages]
    read = read_submission(folder)
    assert read["action_history"] == result["action_history"] and read["screenshots"] == images


def test_v2_schema_drops_the_terminal_step_on_reading(pages, tmp_path):
    out = tmp_path / "v2"
    for last, termination, terminal in [
        ('answer("x")', "answer", 'answer("x")'),
        (None, "max_steps", END_ACTION),
    ]:
        folder = write_submission(trajectory(last, termination), TASK, pages, out, schema="v2")
        result = json.loads((folder / "result.json").read_text())
        assert list(result) == ["task_id", "task", "schema_version", "agent_final_answer", "action_history"]
        assert result["schema_version"] == V2_SCHEMA_VERSION
        steps = result["action_history"]
        assert [s["action"] for s in steps] == [
            'click(3) on button "Help"', 'type(5, "submission", submit=true) on textbox "Search"', terminal,
        ]  # fmt: skip
        assert [s["screenshot"] for s in steps] == [f"{n}_full_screenshot.png" for n in range(3)]
        assert result["agent_final_answer"] == ("x" if termination == "answer" else None)
        read = read_submission(folder)
        assert len(read["action_history"]) == 2 and len(read["screenshots"]) == 3


def test_other_benchmarks_and_environment_errors_are_not_written(pages, tmp_path):
    out = tmp_path / "online_mind2web"
    for source in ("webvoyager", "webtailbench", "sandbox"):
        other = TASK.model_copy(update={"id": f"{source}-1", "source": source})
        assert write_submission(trajectory(None, "max_steps"), other, pages, out) is None
    failed = Trajectory(id="e", task_id=TASK.id, steps=[], termination="env_error")
    assert write_submission(failed, TASK, pages[:1], out) is None
    assert not out.exists()


def test_a_missing_page_is_a_clear_error(pages, tmp_path):
    with pytest.raises(ValueError, match=r"2 page screenshots for 2 factual actions; expected .* \(3\)"):
        write_submission(trajectory(None, "max_steps"), TASK, pages[:2], tmp_path / "out")


def test_the_reader_rejects_a_folder_breaking_the_contract(pages, tmp_path):
    folder = write_submission(trajectory(None, "max_steps"), TASK, pages, tmp_path / "out")
    result = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**result, "thoughts": ["one"]}))
    with pytest.raises(ValueError, match="thoughts and action_history differ"):
        read_submission(folder)
