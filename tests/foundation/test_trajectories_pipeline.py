"""The trajectories pipeline on real files: every bad input is quarantined with a reason; shortening rules."""

import json
import os
from pathlib import Path

import polars as pl
import pytest
import yaml
from kedro.io import AbstractDataset

from rmsweb_kedro.contracts.schema import QUARANTINE_SCHEMA, STEP_SCHEMA, TRAJECTORY_SCHEMA
from rmsweb_kedro.pipelines.trajectories.nodes import (
    plot_shortening,
    report_ingest,
    report_shortening,
    shorten_trajectories,
    validate_trajectories,
)
from rmsweb_kedro.trajectories.ingest import IngestAccountingError

PROJECT = Path(__file__).resolve().parents[2]
CONF = PROJECT / "conf" / "base"


def _config(name: str) -> dict:
    return yaml.safe_load((CONF / name).read_text())


def ingest(root: Path, **overrides):
    """The catalog's raw_trajectories entry over ``root``, then the validation and accounting nodes."""
    entry = dict(_config("catalog_trajectories.yml")["raw_trajectories"], path=str(root))
    entry.pop("metadata")
    raw = AbstractDataset.from_config("raw_trajectories", entry).load()
    params = {**_config("parameters_trajectories.yml")["trajectories"], "raw_root": str(root), **overrides}
    trajectories, steps, quarantine, counts = validate_trajectories(raw, params)
    return trajectories, steps, quarantine, report_ingest(trajectories, steps, quarantine, counts)


def record(trajectory_id="t1", success=True, steps=None, **fields):
    steps = steps or [
        {
            "index": 0,
            "url": "http://shop.test/",
            "axtree": "A",
            "action": "click(3)",
            "screenshot": "shots/0.png",
        },
        {"index": 1, "url": "http://shop.test/item", "axtree": "B", "action": 'answer("12")'},
    ]
    return {
        "id": trajectory_id,
        "task_id": "task-1",
        "site": "shop",
        "success": success,
        "steps": steps,
        **fields,
    }


def write(root: Path, name: str, *lines) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines
    )
    path.write_bytes(data)
    return path


@pytest.fixture
def root(tmp_path):
    (tmp_path / "run" / "shots").mkdir(parents=True)
    (tmp_path / "run" / "shots" / "0.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return tmp_path


def only_quarantined(quarantine: pl.DataFrame) -> dict:
    assert quarantine.height == 1, quarantine.to_dicts()
    return quarantine.row(0, named=True)


def test_good_file_is_accepted_with_relative_screenshots(root):
    write(root, "run/a.jsonl", record("t1"), record("t2"))
    trajectories, steps, quarantine, report = ingest(root)
    assert trajectories["trajectory_id"].to_list() == ["t1", "t2"]
    assert trajectories["source_file"].to_list() == ["run/a.jsonl"] * 2
    assert steps["screenshot"].to_list() == ["run/shots/0.png", None] * 2
    assert quarantine.height == 0 and quarantine.schema == QUARANTINE_SCHEMA
    assert report["records_in"] == report["accepted"] == 2 and report["steps"] == 4


@pytest.mark.parametrize(
    ("bad_line", "field", "reason"),
    [
        (b'{"id": "t9", "task_id": "x", "steps": [', "", "malformed JSON"),
        (
            json.dumps({k: v for k, v in record("t9").items() if k != "task_id"}).encode(),
            "task_id",
            "is missing",
        ),
        (
            json.dumps(
                record("t9", steps=[{"index": 0, "url": "u", "action": {"type": "teleport"}}])
            ).encode(),
            "steps.0.action.type",
            "teleport",
        ),
        (
            json.dumps(record("t9", steps=[{"index": 0, "url": "u", "action": "fly(3)"}])).encode(),
            "steps.0.action",
            "unknown action 'fly'",
        ),
        (
            json.dumps(
                record("t9", steps=[{"index": 0, "url": "u", "action": {"type": "click", "element": "x"}}])
            ).encode(),
            "steps.0.action.element",
            "element",
        ),
        (
            json.dumps(
                record("t9", steps=[{"index": 0, "url": "u", "action": "scroll(down, 'lots')"}])
            ).encode(),
            "steps.0.action",
            "whole number",
        ),
        (json.dumps(record("t9", attempt="first")).encode(), "attempt", "integer"),
        (
            json.dumps(record("t9", steps=[{"index": 0, "url": "u"}, {"index": 0, "url": "u"}])).encode(),
            "steps",
            "appears twice",
        ),
        (
            json.dumps(record("t9", steps=[{"index": 1, "url": "u"}, {"index": 0, "url": "u"}])).encode(),
            "steps",
            "in order",
        ),
        (
            json.dumps(
                record("t9", steps=[{"index": 0, "url": "u", "screenshot": "../../etc/passwd"}])
            ).encode(),
            "steps.0.screenshot",
            "escapes the data folder",
        ),
        (
            json.dumps(record("t9", steps=[{"index": 0, "url": "u", "screenshot": "/etc/passwd"}])).encode(),
            "steps.0.screenshot",
            "absolute",
        ),
        (
            json.dumps(record("t9", steps=[{"index": 0, "url": "u", "screenshot": "shots/7.png"}])).encode(),
            "steps.0.screenshot",
            "does not exist",
        ),
        (b'{"id": "t9", "site": "caf\xe9"}', "", "not valid UTF-8: byte 0xe9 at column 26"),
        # ranges: a value beyond its table column used to fail the whole run in polars ("could not append")
        (
            json.dumps(
                record("t9", steps=[{"index": 0, "url": "u", "action": {"type": "click", "element": 10**30}}])
            ).encode(),
            "steps.0.action.element",
            "less than or equal to 2147483647",
        ),
        (
            json.dumps(record("t9", steps=[{"index": 0, "url": "u", "action": f"click({10**30})"}])).encode(),
            "steps.0.action",
            "less than or equal to 2147483647",
        ),
        (json.dumps(record("t9", attempt=2**40)).encode(), "attempt", "less than or equal to 2147483647"),
        (
            json.dumps(record("t9", usage={"prompt_tokens": 2**64})).encode(),
            "usage.prompt_tokens",
            "less than or equal to 9223372036854775807",
        ),
        # finite floats: json.dumps writes NaN as NaN, which JSON parsers (pydantic's too) read as a float
        (
            json.dumps(
                record(
                    "t9",
                    steps=[{"index": 0, "url": "u", "action": {"type": "click", "x": float("nan"), "y": 3}}],
                )
            ).encode(),
            "steps.0.action.x",
            "finite number",
        ),
        (
            b'{"id": "t9", "task_id": "x", "steps": [{"index": 0, "url": "u", '
            b'"action": {"type": "click", "x": 3, "y": 1e400}}]}',
            "steps.0.action.y",
            "finite number",
        ),
        (json.dumps(record("t9", cost_usd=float("inf"))).encode(), "cost_usd", "finite number"),
        # invariants across fields (schema.trajectory_fault)
        (json.dumps({**record("t9"), "steps": []}).encode(), "steps", "marked successful but has no steps"),
        (
            json.dumps({**record("t9", success=None, verdict={"success": True}), "steps": []}).encode(),
            "steps",
            "marked successful but has no steps",
        ),
        (
            json.dumps(record("t9", success=True, verdict={"success": False})).encode(),
            "success",
            "success is True but verdict.success is False",
        ),
        (
            json.dumps(record("t9", success=False, termination="env_error")).encode(),
            "termination",
            "environment outcome is never the agent's",
        ),
        (
            json.dumps(
                record("t9", success=None, verdict={"success": False}, termination="blocked")
            ).encode(),
            "termination",
            "termination blocked (the environment's end) carries a success or a verdict",
        ),
        (
            json.dumps(
                record(
                    "t9",
                    steps=[
                        {"index": 0, "url": "u", "action": 'answer("1")'},
                        {"index": 1, "url": "u", "action": "click(2)"},
                    ],
                )
            ).encode(),
            "steps.0.action",
            "answer ends an episode, but step 0 is followed by 1 more step(s)",
        ),
        (
            json.dumps(
                record("t9", termination="answer", steps=[{"index": 0, "url": "u", "action": "click(2)"}])
            ).encode(),
            "termination",
            "termination is 'answer' but the last step's action is click(2)",
        ),
        (
            json.dumps(record("t9", termination="max_steps")).encode(),
            "termination",
            "ends the episode by answer, but termination is 'max_steps'",
        ),
    ],
    ids=[
        "malformed-json",
        "missing-field",
        "unknown-action-object",
        "unknown-action-text",
        "wrong-element-type",
        "wrong-amount-type",
        "wrong-field-type",
        "duplicate-index",
        "out-of-order",
        "escaping-path",
        "absolute-path",
        "missing-screenshot",
        "non-utf8",
        "element-beyond-int32",
        "element-beyond-int32-text",
        "attempt-beyond-int32",
        "tokens-beyond-int64",
        "nan-coordinate",
        "infinite-coordinate",
        "infinite-cost",
        "success-without-steps",
        "verdict-success-without-steps",
        "success-contradicts-verdict",
        "env-error-with-outcome",
        "blocked-with-outcome",
        "steps-after-answer",
        "termination-answer-without-answer",
        "answer-with-other-termination",
    ],
)
def test_bad_line_is_quarantined_and_the_rest_accepted(root, bad_line, field, reason):
    write(root, "run/a.jsonl", record("t1"), bad_line, record("t2"))
    trajectories, _, quarantine, report = ingest(root)
    assert trajectories["trajectory_id"].to_list() == ["t1", "t2"]
    row = only_quarantined(quarantine)
    assert (row["source_file"], row["line"], row["field"]) == ("run/a.jsonl", 2, field)
    assert reason in row["reason"]
    assert row["record_id"] == ("t9" if b'"t9"' in bad_line else None)
    assert row["raw"] == bad_line.decode("utf-8", "replace")
    assert report["records_in"] == 3 and report["accepted"] == 2 and report["quarantined"] == 1


def test_environment_ends_keep_the_agents_steps(root):
    """A judge that could not judge keeps the agent's steps (ending in its answer): termination judge_error, no
    success, no verdict, is a valid record."""
    write(
        root,
        "run/a.jsonl",
        record("t1", success=None, termination="judge_error"),
        record("t2", termination="answer"),
    )
    trajectories, _, quarantine, report = ingest(root)
    assert trajectories["termination"].to_list() == ["judge_error", "answer"] and quarantine.height == 0
    assert report["accepted"] == 2


def test_byte_order_mark_and_windows_line_ends_are_accepted(root):
    (root / "run" / "a.jsonl").write_bytes(
        b"\xef\xbb\xbf"
        + json.dumps(record("t1")).encode()
        + b"\r\n"
        + json.dumps(record("t2")).encode()
        + b"\r\n"
    )
    trajectories, _, quarantine, report = ingest(root)
    assert trajectories["trajectory_id"].to_list() == ["t1", "t2"] and quarantine.height == 0
    assert report["records_in"] == 2


def test_screenshot_symlink_out_of_the_folder_is_quarantined(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "secret.png"
    outside.write_bytes(b"x")
    os.symlink(outside, root / "run" / "shots" / "link.png")
    steps = [{"index": 0, "url": "u", "screenshot": "shots/link.png"}]
    write(root, "run/a.jsonl", record("t1", steps=steps))
    row = only_quarantined(ingest(root)[2])
    assert row["field"] == "steps.0.screenshot" and "outside the raw data folder" in row["reason"]


def test_same_id_in_two_files_keeps_the_first_and_names_it(root):
    write(root, "run/a.jsonl", record("t1"))
    write(root, "run/b.jsonl", record("t2"), record("t1"))
    trajectories, _, quarantine, _ = ingest(root)
    assert trajectories.select("trajectory_id", "source_file").rows() == [
        ("t1", "run/a.jsonl"),
        ("t2", "run/b.jsonl"),
    ]
    row = only_quarantined(quarantine)
    assert (row["source_file"], row["line"], row["field"]) == ("run/b.jsonl", 2, "id")
    assert "already accepted from run/a.jsonl line 1" in row["reason"]


def test_empty_file_is_named(root):
    write(root, "run/a.jsonl", record("t1"))
    (root / "run" / "empty.jsonl").write_bytes(b"\n  \n")
    _, _, quarantine, report = ingest(root)
    row = only_quarantined(quarantine)
    assert (row["source_file"], row["line"]) == ("run/empty.jsonl", 0) and "file is empty" in row["reason"]
    assert report["records_in"] == 2 and report["blank_lines"] == 2 and report["file_faults"] == 1


def test_unreadable_file_is_named_in_the_report(root):
    write(root, "run/a.jsonl", record("t1"))
    os.symlink(root / "gone.jsonl", root / "run" / "dangling.jsonl")
    trajectories, _, quarantine, report = ingest(root)
    assert trajectories.height == 1
    assert [u["file"] for u in report["unreadable_files"]] == ["run/dangling.jsonl"]
    assert "No such file" in report["unreadable_files"][0]["reason"]
    row = only_quarantined(quarantine)
    assert (row["source_file"], row["line"]) == ("run/dangling.jsonl", 0)


def test_ten_megabyte_tree_is_quarantined_with_the_bound(root):
    huge = "\n".join(f'  link "item {i}" [{i}]' for i in range(400_000))[: 10 * 2**20]
    steps = [{"index": 0, "url": "u"}, {"index": 1, "url": "u", "axtree": huge}]
    write(root, "run/a.jsonl", record("t1", steps=steps), record("t2"))
    trajectories, _, quarantine, _ = ingest(root)
    assert trajectories["trajectory_id"].to_list() == ["t2"]
    row = only_quarantined(quarantine)
    assert (
        row["field"] == "steps.1.axtree"
        and "10,485,760 characters is over the bound of 1,000,000" in row["reason"]
    )
    assert len(row["raw"]) < 2_100 and row["raw"].endswith("characters cut]")


def test_no_files_gives_empty_tables_with_the_schemas(tmp_path):
    trajectories, steps, quarantine, report = ingest(tmp_path / "not-yet-created")
    assert (trajectories.schema, steps.schema, quarantine.schema) == (
        TRAJECTORY_SCHEMA,
        STEP_SCHEMA,
        QUARANTINE_SCHEMA,
    )
    assert report["records_in"] == 0 and report["balanced"]
    shortened_trajectories, shortened_steps = shorten_trajectories(trajectories, steps)
    assert shortened_steps.schema == STEP_SCHEMA and shortened_trajectories.schema == TRAJECTORY_SCHEMA
    assert report_shortening(trajectories, shortened_trajectories)["steps_before"].to_list() == [0]


def test_accounting_that_does_not_add_up_raises(root):
    write(root, "run/a.jsonl", record("t1"), b"{")
    raw = AbstractDataset.from_config(
        "raw",
        {
            "type": "partitions.PartitionedDataset",
            "path": str(root),
            "dataset": "text.TextDataset",
            "filename_suffix": ".jsonl",
        },
    ).load()
    params = {**_config("parameters_trajectories.yml")["trajectories"], "raw_root": str(root)}
    trajectories, steps, quarantine, counts = validate_trajectories(raw, params)
    with pytest.raises(IngestAccountingError, match="2 records read .* 1 accepted \\+ 0 quarantined"):
        report_ingest(trajectories, steps, quarantine.clear(), counts)
    with pytest.raises(IngestAccountingError, match="steps read"):
        report_ingest(trajectories, steps.head(1), quarantine, counts)


# ---------------------------------------------------------------- shortening


def step(index, page, action, axtree="tree", error=None):
    tree = None if axtree is None else f"{axtree} of {page}"
    return {
        "index": index,
        "url": f"http://shop.test/{page}",
        "axtree": tree,
        "action": action,
        "error": error,
    }


def shorten(root, *records):
    write(root, "run/a.jsonl", *records)
    trajectories, steps, _, _ = ingest(root)
    shortened_trajectories, shortened_steps = shorten_trajectories(trajectories, steps)
    assert shortened_steps.schema == STEP_SCHEMA and shortened_trajectories.schema == TRAJECTORY_SCHEMA
    actions = {
        t: shortened_steps.filter(pl.col("trajectory_id") == t).sort("index")["action"].to_list()
        for t in trajectories["trajectory_id"]
    }
    return actions, shortened_trajectories, shortened_steps


def test_loop_back_to_a_seen_page_is_removed(root):
    steps = [
        step(0, "home", "click(4)"),
        step(1, "hats", "go_back()"),
        step(2, "home", 'type(1, "scarf", submit=true)'),
        step(3, "results", "click(2)"),
        step(4, "item", 'answer("24.90")'),
    ]
    actions, trajectories, shortened = shorten(root, record("t1", steps=steps))
    assert actions["t1"] == ['type(1, "scarf", submit=true)', "click(2)", 'answer("24.90")']
    assert shortened["index"].to_list() == [0, 1, 2] and trajectories["n_steps"].to_list() == [3]
    assert shortened["url"].to_list()[-1] == "http://shop.test/item"


def test_actions_that_changed_nothing_are_removed(root):
    steps = [
        step(0, "results", 'scroll("down")'),  # the page did not change: a loop of one
        step(1, "results", "click(9)", error="no element with id 9"),
        step(2, "results", None, error="unparseable model output"),
        step(3, "results", "click(2)"),
        step(4, "item", "click(5)", error="timeout"),  # the final step stays even when it failed
    ]
    actions, _, _ = shorten(root, record("t1", steps=steps))
    assert actions["t1"] == ["click(2)", "click(5)"]


def test_unknown_states_never_match_and_failures_stay_as_they_are(root):
    same_url_no_tree = [
        step(0, "form", 'type(1, "Lyon")', axtree=None),
        step(1, "form", 'type(2, "Oslo")', axtree=None),
        step(2, "form", "click(3)", axtree=None),
    ]
    failed = [step(0, "a", "click(1)"), step(1, "b", "go_back()"), step(2, "a", 'answer("x")')]
    actions, trajectories, _ = shorten(
        root,
        record("t1", steps=same_url_no_tree),
        record("t2", success=False, steps=failed),
        record("t3", success=None, steps=failed),
    )
    assert actions["t1"] == ['type(1, "Lyon")', 'type(2, "Oslo")', "click(3)"]
    assert actions["t2"] == actions["t3"] == ["click(1)", "go_back()", 'answer("x")']
    assert trajectories["n_steps"].to_list() == [3, 3, 3]


def test_a_memorized_fact_survives_shortening(root):
    """A memorize step leaves the page as it was but is no loop of one, and a loop that memorized a fact on its way
    is no detour (the fact is carried to the later steps); loops on either side of it still go."""
    steps = [
        step(0, "home", "click(4)"),
        step(1, "hats", "go_back()"),  # a detour before the fact: removed
        step(2, "home", "click(5)"),
        step(3, "soup", 'memorize("the soup has 120 calories")'),  # the page is unchanged after it
        step(4, "soup", "go_back()"),  # back to a page seen before the fact: kept
        step(5, "home", "click(6)"),
        step(6, "stew", 'scroll("down")'),  # a loop of one after the fact: removed
        step(7, "stew", 'answer("soup")'),
    ]
    actions, _, _ = shorten(root, record("t1", steps=steps))
    assert actions["t1"] == [
        "click(5)",
        'memorize("the soup has 120 calories")',
        "go_back()",
        "click(6)",
        'answer("soup")',
    ]


def test_shortening_report_and_plot(root):
    loop = [
        step(0, "a", "click(1)"),
        step(1, "b", "go_back()"),
        step(2, "a", "click(2)"),
        step(3, "c", "stop(success)"),
    ]
    other = record("t3", steps=loop, site="flights")
    _, shortened_trajectories, _ = shorten(
        root, record("t1", steps=loop), record("t2", success=False, steps=loop), other
    )
    trajectories = ingest(root)[0]
    report = report_shortening(trajectories, shortened_trajectories)
    assert report.rows() == [
        ("flights", 1, 4, 2, 2, 0.5),
        ("shop", 1, 4, 2, 2, 0.5),
        ("(all)", 2, 8, 4, 4, 0.5),
    ]
    figure = plot_shortening(report)
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["flights", "shop"]
