"""Task files in each published shape (WebGym JSONL, OpenWebRL parquet, PAE JSONL), a custom CSV, with bad rows;
the ``tasks`` table of the configured sources; the default (sandbox alone) unchanged."""

import json

import polars as pl
import pytest

from rmsweb_kedro.schema import tasks_from_frame
from rmsweb_kedro.tasks.files import TaskFile, load_task_file
from rmsweb_kedro.tasks.sources import SplitParams, TasksParams, assemble, assign_split
from rmsweb_kedro.web.sandbox.tasks import SandboxParams, generate_tasks
from tests.tasks.conftest import write_benchmark_rows


def _jsonl(path, rows):
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8"
    )
    return path


def test_webgym_rows_with_answers_rubrics_and_bad_rows(tmp_path):
    path = _jsonl(
        tmp_path / "webgym_train.jsonl",
        [
            {"task_id": "wg-1", "task_name": "Find the price of the cheapest red kettle", "website": "kettles.example",
             "domain": "shopping", "subdomain": "kitchen", "difficulty": 1, "definite_answer": "$12.99",
             "evaluator_reference": []},
            {"task_id": "wg-2", "task_name": "Compare two hotels in Lisbon", "website": "https://www.hotels.example/",
             "difficulty": 3, "definite_answer": None,
             "evaluator_reference": [{"description": "names two Lisbon hotels", "max_points": 2}, "gives prices"]},
            {"task_id": "wg-3", "task_name": "", "website": "x.example"},  # empty task text
            {"task_id": "wg-4", "task_name": "Open the site", "website": "ftp://files.example"},  # not http(s)
            "{not json",
            {"task_id": "wg-1", "task_name": "again", "website": "a.example"},  # duplicate id
        ],
    )  # fmt: skip
    result = load_task_file({"path": str(path), "shape": "webgym"})
    assert result.counts() == {"rows_in": 6, "accepted": 2, "quarantined": 4}
    by_id = {t.id: t for t in result.tasks}
    kettle, hotels = by_id["wg-1"], by_id["wg-2"]
    assert kettle.start_url == "https://kettles.example" and kettle.site == "kettles.example"
    assert kettle.judge.kind == "reference_answer" and kettle.judge.config["reference_answer"] == "$12.99"
    assert kettle.level == "easy" and kettle.source == "file"
    assert hotels.site == "hotels.example" and hotels.level == "hard"
    assert hotels.judge.kind == "rubric" and hotels.judge.config["total_points"] == 3.0
    assert [item["criterion"] for item in hotels.judge.config["rubric"]] == [
        "names two Lisbon hotels",
        "gives prices",
    ]
    reasons = {(q["line"], q["field"]): q["reason"] for q in result.quarantine}
    assert set(reasons) == {(3, "task_name"), (4, "website"), (5, "<json>"), (6, "task_id")}
    assert "http(s)" in reasons[(4, "website")] and "duplicate id" in reasons[(6, "task_id")]
    assert all(q["source_file"] == str(path) for q in result.quarantine)


def test_openwebrl_parquet_reads_nested_metadata(tmp_path):
    path = tmp_path / "openwebrl.parquet"
    pl.DataFrame(
        {
            "prompt": ["<task>Find the opening hours</task>", "<task>?</task>", "<task>Read the news</task>"],
            "metadata": [
                {
                    "task_id": "ow-1",
                    "start_url": "https://library.example/",
                    "task": "Find the opening hours",
                },
                {"task_id": "ow-2", "start_url": "https://museum.example/", "task": None},
                {"task_id": "ow-3", "start_url": "not a url", "task": "Read the news"},
            ],
        }
    ).write_parquet(path)
    result = load_task_file({"path": str(path), "shape": "openwebrl"})
    assert result.counts() == {"rows_in": 3, "accepted": 1, "quarantined": 2}
    (task,) = result.tasks
    assert (task.id, task.instruction, task.site, task.judge.kind) == (
        "ow-1", "Find the opening hours", "library.example", "webjudge"
    )  # fmt: skip
    assert {(q["line"], q["field"]) for q in result.quarantine} == {
        (2, "metadata.task"),
        (3, "metadata.start_url"),
    }


def test_pae_jsonl_keeps_its_site_names(tmp_path):
    path = _jsonl(
        tmp_path / "pae.jsonl",
        [
            {"web_name": "Allrecipes", "id": "Allrecipes--0", "ques": "Find a vegan lasagna recipe",
             "web": "https://www.allrecipes.com/"},
            {"web_name": "Allrecipes", "id": "Allrecipes--1", "web": "https://www.allrecipes.com/"},  # no ques
        ],
    )  # fmt: skip
    result = load_task_file({"path": str(path), "shape": "pae"})
    assert result.counts() == {"rows_in": 2, "accepted": 1, "quarantined": 1}
    assert result.tasks[0].site == "Allrecipes" and result.quarantine[0]["field"] == "ques"


def test_custom_csv_columns_and_lines(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(
        "key,goal,url,level,answer\n"
        "007,Find the cheapest flight to Oslo,https://flights.example/,medium,\n"
        "008,Find a hotel,https://hotels.example/,impossible,\n",
        encoding="utf-8",
    )
    spec = {"path": str(path), "columns": {"id": "key", "instruction": "goal", "start_url": "url",
                                           "difficulty": "level", "reference_answer": "answer"}}  # fmt: skip
    result = load_task_file(spec)
    assert [t.id for t in result.tasks] == ["007"] and result.tasks[0].level == "medium"
    assert result.tasks[0].judge.kind == "webjudge"  # an empty answer cell is no answer
    (bad,) = result.quarantine
    assert (bad["line"], bad["field"], bad["record_id"]) == (3, "level", "008")
    # without an id column, a task's id is its text's: the same row twice is a duplicate, an edited row a new task
    path.write_text(
        "goal,url\nFind a hotel,https://h.example/\nFind a hotel,https://h.example/\nFind a flat,https://h.example/\n"
    )
    unnamed = load_task_file({"path": str(path), "columns": {"instruction": "goal", "start_url": "url"}})
    assert unnamed.counts() == {"rows_in": 3, "accepted": 2, "quarantined": 1}
    assert [t.id[:5] for t in unnamed.tasks] == ["mine-", "mine-"] and len({t.id for t in unnamed.tasks}) == 2
    assert "duplicate id" in unnamed.quarantine[0]["reason"]


def test_a_custom_shape_without_columns_says_how_to_fix():
    with pytest.raises(ValueError, match="shape 'custom' needs 'columns'"):
        TaskFile(path="tasks.jsonl").mapping()


def test_splits_are_seeded_per_task_or_per_site_and_held_out_sites_go_to_test(tmp_path):
    rows = [
        {
            "web_name": f"site{i % 5}",
            "id": f"t{i}",
            "ques": f"task {i}",
            "web": f"https://site{i % 5}.example/",
        }
        for i in range(60)
    ]
    path = _jsonl(tmp_path / "many.jsonl", rows)
    tasks = load_task_file({"path": str(path), "shape": "pae"}).tasks
    by_task = [assign_split(t, SplitParams(seed=1)) for t in tasks]
    assert {t.split for t in by_task} == {"train", "val", "test"}
    assert [t.split for t in by_task] == [assign_split(t, SplitParams(seed=1)).split for t in tasks]
    by_site = [assign_split(t, SplitParams(by="site", held_out_sites=["site0"])) for t in tasks]
    splits_of_site = {
        site: {t.split for t in by_site if t.site == site} for site in {t.site for t in by_site}
    }
    assert all(len(splits) == 1 for splits in splits_of_site.values()) and splits_of_site["site0"] == {"test"}


def test_default_tasks_are_the_sandbox_suite_row_for_row():
    sandbox = generate_tasks(SandboxParams(instances_per_template=2))
    from rmsweb_kedro.schema import tasks_to_frame

    frame = tasks_to_frame(sandbox)
    tasks, quarantine, report = assemble(frame, TasksParams())
    assert tasks.equals(frame) and quarantine.height == 0
    assert report.to_dicts()[0]["rows_in"] == len(sandbox)


def test_sources_in_order_with_quarantine_and_counts(tmp_path):
    sandbox = generate_tasks(SandboxParams(instances_per_template=1))
    from rmsweb_kedro.schema import tasks_to_frame

    path = _jsonl(
        tmp_path / "pae.jsonl",
        [{"web_name": "A", "id": "a-1", "ques": "q", "web": "https://a.example/"}, {"id": "a-2"}],
    )
    params = TasksParams(sources=["file", "sandbox"], files=[{"path": str(path), "shape": "pae"}])
    tasks, quarantine, report = assemble(tasks_to_frame(sandbox), params)
    ids = [t.id for t in tasks_from_frame(tasks)]
    assert ids[0] == "a-1" and ids[1:] == [t.id for t in sandbox]
    assert quarantine.height == 1 and quarantine["line"].to_list() == [2]
    assert report.select("source", "rows_in", "accepted", "quarantined").rows() == [
        ("file", 2, 1, 1), ("sandbox", len(sandbox), len(sandbox), 0)
    ]  # fmt: skip
    clash = TasksParams(sources=["file", "file"], files=[{"path": str(path), "shape": "pae"}])
    with pytest.raises(ValueError, match="task id 'a-1' is given by"):
        assemble(tasks_to_frame(sandbox), clash)


def test_the_benchmark_source_is_for_evaluation_only(tmp_path):
    write_benchmark_rows(tmp_path / "benchmarks")
    params = TasksParams(sources=["benchmark"], benchmark={"folder": str(tmp_path / "benchmarks")})
    tasks, quarantine, report = assemble(pl.DataFrame(), params)
    rows = tasks_from_frame(tasks)
    assert [t.source for t in rows] == ["webvoyager", "online_mind2web", "webtailbench"]
    assert {t.split for t in rows} == {"test"}, "never in collect's train split"
    assert report["test"].to_list() == [1, 1, 1] and quarantine.height == 0
    (tmp_path / "benchmarks" / "WebVoyager_data.jsonl").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"no \['webvoyager'\] file under .*tasks.benchmarks download"
    ):
        assemble(pl.DataFrame(), params)
