"""The benchmark loaders on hand-written rows in each format (good and bad), then on the full public files."""

from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import QUARANTINE_SCHEMA, TASK_SCHEMA, tasks_from_frame, tasks_to_frame
from rmsweb_kedro.tasks.benchmarks.loaders import (
    DEFAULT_WEBTAILBENCH_START_URL,
    BenchmarkFileError,
    load_folder,
    load_gaia_web,
    load_online_mind2web,
    load_webtailbench,
    load_webvoyager,
    load_webvoyager_reference_answers,
)
from tests.evaluate.conftest import FIXTURES


def quarantined(result) -> dict[int | str | None, tuple[str, str]]:
    """line (or record id when the file has no lines) -> (field, reason)."""
    return {q["line"] or q["record_id"]: (q["field"], q["reason"]) for q in result.quarantine}


def test_webvoyager_rows_with_reference_answers():
    reference = load_webvoyager_reference_answers(FIXTURES / "webvoyager_reference.json")
    result = load_webvoyager(FIXTURES / "webvoyager.jsonl", reference)

    assert result.counts() == {"rows_in": 10, "accepted": 4, "quarantined": 6}
    assert [t.id for t in result.tasks] == ["Allrecipes--0", "Allrecipes--1", "GitHub--2", "GitHub--3"]
    bad = quarantined(result)
    assert bad[5][0] == "<json>" and "not valid JSON" in bad[5][1]
    assert bad[7] == ("ques", "ques: Field required")
    assert bad[8][0] == "id" and "web_name 'GitHub'" in bad[8][1]
    assert bad[9] == ("id", "duplicate id; first seen on line 2")
    assert bad[10][0] == "web" and "not an http(s) URL" in bad[10][1]
    assert bad[11] == ("<row>", "expected a JSON object, got list")
    assert all(q["source_file"].endswith("webvoyager.jsonl") for q in result.quarantine)

    first = result.tasks[0]
    assert (first.source, first.site, first.start_url, first.metadata["web_name"]) == (
        "webvoyager",
        "allrecipes.com",  # a site is the registrable domain; WebVoyager's own name stays in metadata
        "https://www.allrecipes.com/",
        "Allrecipes",
    )
    assert first.judge.kind == "webvoyager"
    assert first.judge.config == {
        "reference_answer": "'Vegetarian Four Cheese Lasagna', 4.6-star, 181 reviews",
        "reference_answer_type": "possible",
        "reference_notice": "note that review information is real-time",
    }
    assert result.tasks[1].judge.config["reference_answer_type"] == "golden"
    # GitHub--3's answer was quarantined (type "maybe"): the task stays, without a reference answer.
    assert result.tasks[3].judge.config == {}
    assert reference.result.counts() == {"rows_in": 4, "accepted": 3, "quarantined": 1}
    assert reference.result.quarantine[0]["record_id"] == "GitHub--3"
    assert reference.result.quarantine[0]["field"] == "GitHub.answers[1].type"


def test_fara_cleaned_copy_marks_reworded_tasks_and_stale_answers():
    reference = load_webvoyager_reference_answers(FIXTURES / "webvoyager_reference.json")
    original = {t.id: t.instruction for t in load_webvoyager(FIXTURES / "webvoyager.jsonl").tasks}
    result = load_webvoyager(
        FIXTURES / "fara_webvoyager.jsonl", reference, original, benchmark="WebVoyager (Fara)"
    )

    reworded = {t.id: t.metadata["reworded"] for t in result.tasks}
    assert reworded == {"Allrecipes--0": False, "Allrecipes--1": True, "GitHub--3": False}
    assert result.tasks[1].judge.config["reference_answer_stale"] is True
    assert "reference_answer_stale" not in result.tasks[0].judge.config


def test_gaia_web_subset_is_judged_on_its_final_answer():
    result = load_gaia_web(FIXTURES / "gaia_web.jsonl")
    assert result.counts() == {"rows_in": 3, "accepted": 2, "quarantined": 1}
    assert quarantined(result)[3][0] == "Level"
    task = result.tasks[0]
    assert task.judge.kind == "reference_answer" and task.judge.config == {"reference_answer": "17"}
    assert task.metadata["gaia_level"] == 1 and task.level is None


def test_online_mind2web_rows_keep_level_and_reference_length_with_their_lines():
    result = load_online_mind2web(FIXTURES / "online_mind2web.json")
    assert result.counts() == {"rows_in": 5, "accepted": 3, "quarantined": 2}
    assert [(t.site, t.level, t.reference_length) for t in result.tasks] == [
        ("gamestop.com", "medium", 8),
        ("flightaware.com", "easy", 4),
        ("united.com", "hard", 14),
    ]
    assert all(t.judge.kind == "webjudge" and t.source == "online_mind2web" for t in result.tasks)
    bad = quarantined(result)
    assert bad[23][0] == "level" and "reference_length 3" in bad[23][1]  # the 4th object starts on line 23
    assert bad[30] == ("website", "website: Field required")


def test_webtailbench_rows_carry_their_rubric():
    result = load_webtailbench(FIXTURES / "webtailbench.jsonl")
    assert result.counts() == {"rows_in": 4, "accepted": 2, "quarantined": 2}
    flights, jobs = result.tasks
    assert flights.instruction.endswith("Sao Paulo?")  # the trailing "\r" is stripped
    assert (
        flights.start_url == DEFAULT_WEBTAILBENCH_START_URL and flights.metadata["start_url_given"] is False
    )
    assert jobs.start_url == "https://www.indeed.com/"
    assert flights.judge.kind == "rubric"
    rubric = flights.judge.config["rubric"]
    assert [item["max_points"] for item in rubric] == [4, 2, 2]
    assert flights.judge.config["total_points"] == 8
    assert "condition" not in rubric[0] and rubric[2]["condition"].startswith("Only applies")
    assert set(rubric[0]) == {
        "criterion",
        "description",
        "max_points",
    }  # the empty grading fields are dropped
    bad = quarantined(result)
    assert bad[3][0] == "precomputed_rubric.items"
    assert bad[4][0] == "precomputed_rubric.items.0.max_points"


def test_quarantine_and_tasks_fit_the_shared_schemas():
    result = load_webvoyager(FIXTURES / "webvoyager.jsonl")
    frame = result.quarantine_frame()
    assert frame.schema == QUARANTINE_SCHEMA and frame.height == 6
    tasks = tasks_to_frame(result.tasks)
    assert tasks.schema == TASK_SCHEMA
    assert tasks_from_frame(tasks) == result.tasks


def test_strict_mode_names_file_line_record_and_field():
    with pytest.raises(
        BenchmarkFileError, match=r"gaia_web\.jsonl: 1 bad row.*line 3, record 'level7-0', field 'Level'"
    ):
        load_gaia_web(FIXTURES / "gaia_web.jsonl").raise_if_quarantined()


def test_unreadable_files_raise_naming_the_file(tmp_path):
    with pytest.raises(BenchmarkFileError, match="missing.jsonl: no such benchmark file"):
        load_webvoyager(tmp_path / "missing.jsonl")
    not_array = tmp_path / "om2w.json"
    not_array.write_text('{"task_id": "x"}')
    with pytest.raises(BenchmarkFileError, match=r"om2w\.json: line 1: expected a JSON array"):
        load_online_mind2web(not_array)
    broken = tmp_path / "broken.json"
    broken.write_text('[\n  {"task_id": "a",\n   "level": }\n]')
    with pytest.raises(BenchmarkFileError, match=r"broken\.json: line 3: not valid JSON"):
        load_online_mind2web(broken)
    with pytest.raises(BenchmarkFileError, match="expected a JSON object keyed by site"):
        (tmp_path / "ref.json").write_text("[]")
        load_webvoyager_reference_answers(tmp_path / "ref.json")


# ---------------------------------------------------------------- the full public files


def test_full_files_load_every_row(shared_benchmarks):
    results = load_folder(shared_benchmarks)
    counts = {name: (r.rows_in, len(r.quarantine)) for name, r in results.items()}
    assert counts == {
        "webvoyager_reference_answers": (643, 0),
        "webvoyager": (643, 0),
        "webvoyager_fara": (595, 0),
        "gaia_web": (90, 0),
        "online_mind2web": (300, 0),
        "webtailbench": (609, 0),
    }
    webvoyager = results["webvoyager"].tasks
    assert len({t.metadata["web_name"] for t in webvoyager}) == 15
    # one site per registrable domain: Google Flights, Google Map and Google Search are all google.com
    assert len({t.site for t in webvoyager}) == 13
    answers = Counter(t.judge.config.get("reference_answer_type") for t in webvoyager)
    assert answers == {"possible": 500, "golden": 143}  # every task found its reference answer
    assert sum(t.metadata["reworded"] for t in results["webvoyager_fara"].tasks) == 86  # as Fara documents
    om2w = results["online_mind2web"].tasks
    assert Counter(t.level for t in om2w) == {"easy": 83, "medium": 143, "hard": 74}
    webtail = results["webtailbench"].tasks
    assert len({t.metadata["category"] for t in webtail}) == 11
    assert sum(len(t.judge.config["rubric"]) for t in webtail) == sum(
        len(json.loads(line)["precomputed_rubric"]["items"])
        for line in (shared_benchmarks / "WebTailBench_v1_rubrics.stagehand.jsonl").read_text().splitlines()
    )
    frame = tasks_to_frame([t for r in results.values() for t in r.tasks])
    assert frame.height == 643 + 595 + 90 + 300 + 609
    assert frame.filter(pl.col("source") == "webtailbench").height == 609
