"""Task files in each published shape (WebGym JSONL, OpenWebRL parquet, PAE JSONL), a custom CSV, with bad rows;
the ``tasks`` table of the configured sources; the default (sandbox alone) unchanged."""

import json

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import tasks_from_frame
from rmsweb_kedro.judges.choice import judge_kind
from rmsweb_kedro.tasks.files import TaskFile, load_task_file
from rmsweb_kedro.tasks.sources import SplitParams, TasksParams, assemble, assign_split
from rmsweb_kedro.web.sandbox.tasks import SandboxParams, generate_tasks
from tests.tasks.conftest import write_benchmark_rows


def _jsonl(path, rows):
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8"
    )
    return path


#: Rows in WebGym's published shape, as microsoft/webgym's two readers take them (no sample file is published):
#: webgym/environment/async_webgym.py ``_prepare_tasks`` reads ``task_name, website, domain, subdomain, difficulty
#: (an integer), evaluator_reference, definite_answer, task_id``, with ``evaluator_reference`` a list of
#: ``{description, difficulty}``, fact groups ``{id, description, facts}``, texts, or one text (legacy);
#: areal/dataset/webgym.py ``get_webgym_rl_dataset`` reads ``task_name`` (else ``task``) and ``reference_answer``.
WEBGYM_ROWS = [
    {"task_name": "Find the price of the cheapest red kettle on the site", "website": "kettles.example",
     "domain": "Lifestyle & Leisure", "subdomain": "Shopping", "difficulty": 2,
     "evaluator_reference": [{"description": "The kettle shown is red", "difficulty": 1},
                             {"description": "It is the cheapest red kettle listed", "difficulty": 2}],
     "definite_answer": "$12.99", "task_id": 0},
    {"task_name": "Which two Lisbon hotels near the river have a pool?", "website": "https://www.hotels.example/",
     "domain": "Travel & Transportation", "subdomain": "Travel & Accommodation", "difficulty": 5,
     "evaluator_reference": [{"id": "g1", "description": "river hotels", "facts": ["names two hotels in Lisbon",
                                                                                  "both have a pool"]}],
     "definite_answer": "", "task_id": 1},
    # AReaL's reader: `task` for the text, `reference_answer` for the answer, a legacy one-text rubric
    {"task": "Open the opening-hours page of the city library", "website": "https://library.example/hours",
     "domain": "Misc.", "subdomain": "General Info.", "difficulty": 8,
     "evaluator_reference": "The page shown lists the opening hours", "reference_answer": "9-17", "task_id": 2},
    {"task_name": "", "website": "x.example", "difficulty": 1, "evaluator_reference": [], "task_id": 3},  # no text
    {"task_name": "Open the site", "website": "ftp://files.example", "difficulty": 1, "task_id": 4},  # not http(s)
    "{not json",
    {"task_name": "again", "website": "a.example", "difficulty": 1, "task_id": 0},  # duplicate id
]  # fmt: skip


def test_webgym_rows_as_published_keep_answer_and_rubric(tmp_path):
    path = _jsonl(tmp_path / "train.jsonl", WEBGYM_ROWS)
    result = load_task_file({"path": str(path), "shape": "webgym"})
    assert result.counts() == {"rows_in": 7, "accepted": 3, "quarantined": 4}
    kettle, hotels, library = result.tasks
    assert (kettle.id, kettle.start_url, kettle.site, kettle.level) == (
        "0", "https://kettles.example", "kettles.example", "easy"
    )  # fmt: skip
    # the answer is kept beside the rubric; the row records what it carries, not a judge
    assert kettle.judge.kind == "none" and kettle.judge.config["reference_answer"] == "$12.99"
    assert [c["criterion"] for c in kettle.judge.config["rubric"]] == [
        "The kettle shown is red",
        "It is the cheapest red kettle listed",
    ]
    assert kettle.judge.config["rubric_rule"] == "every_fact" and kettle.judge.config["total_points"] == 2.0
    # fact groups flatten as WebGym's _prepare_tasks flattens them; an empty definite_answer is no answer
    assert (hotels.site, hotels.level) == ("hotels.example", "medium")
    assert [c["criterion"] for c in hotels.judge.config["rubric"]] == [
        "[Group g1: river hotels] names two hotels in Lisbon",
        "[Group g1: river hotels] both have a pool",
    ]
    assert "reference_answer" not in hotels.judge.config
    assert library.instruction.startswith("Open the opening-hours") and library.level == "hard"
    assert library.judge.config["reference_answer"] == "9-17"
    assert [c["criterion"] for c in library.judge.config["rubric"]] == [
        "The page shown lists the opening hours"
    ]
    # judged as WebGym's evaluator judges, whatever the stage's configured LLM judge
    assert {judge_kind(t, "webvoyager") for t in result.tasks} == {"webgym"}
    reasons = {(q["line"], q["field"]): q["reason"] for q in result.quarantine}
    assert set(reasons) == {(4, "task_name | task"), (5, "website"), (6, "<json>"), (7, "task_id")}
    assert "http(s)" in reasons[(5, "website")] and "duplicate id" in reasons[(7, "task_id")]
    assert all(q["source_file"] == str(path) for q in result.quarantine)


def test_webgym_rows_as_areal_writes_them_back(tmp_path):
    """AReaL's dataset stores ``evaluator_reference`` as JSON text and an absent answer as "": read back the same."""
    path = _jsonl(
        tmp_path / "areal.jsonl",
        [{"task_name": "Find the cheapest kettle", "website": "kettles.example", "domain": "", "subdomain": "",
          "difficulty": "3", "evaluator_reference": json.dumps([{"description": "shows a kettle", "difficulty": 1}]),
          "reference_answer": "", "task_id": "7"}],
    )  # fmt: skip
    (task,) = load_task_file({"path": str(path), "shape": "webgym"}).tasks
    assert task.level == "easy" and "reference_answer" not in task.judge.config
    assert task.judge.config["rubric"] == [
        {"criterion": "shows a kettle", "description": "", "max_points": 1.0}
    ]


def test_openwebrl_parquet_reads_nested_metadata(tmp_path):
    """Rows as OpenWebRL's openwebrl/data/convert_benchmark_jsonl_to_parquet.py ``record_to_row`` writes them:
    ``prompt`` the chat messages, ``metadata`` a struct of task_id (prefixed), start_url and task."""
    path = tmp_path / "openwebrl.parquet"

    def row(task_id, url, task):
        return {"prompt": [{"role": "user", "content": task or ""}],
                "metadata": {"task_id": task_id, "start_url": url, "task": task}}  # fmt: skip

    rows = [row("webgym/ow-1", "https://library.example/", "Find the opening hours"),
            row("webgym/ow-2", "https://museum.example/", None), row("webgym/ow-3", "not a url", "Read the news")]  # fmt: skip
    pl.DataFrame(rows).write_parquet(path)
    result = load_task_file({"path": str(path), "shape": "openwebrl"})
    assert result.counts() == {"rows_in": 3, "accepted": 1, "quarantined": 2}
    (task,) = result.tasks
    assert (task.id, task.instruction, task.site, task.judge.kind) == (
        "webgym/ow-1", "Find the opening hours", "library.example", "none"
    )  # fmt: skip
    assert judge_kind(task, "webvoyager") == "webvoyager", "nothing carried: the stage's judge, honoured"
    assert {(q["line"], q["field"]) for q in result.quarantine} == {
        (2, "metadata.task"),
        (3, "metadata.start_url"),
    }


def test_pae_jsonl_site_is_the_registrable_domain_and_web_name_a_label(tmp_path):
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
    assert result.tasks[0].site == "allrecipes.com" and result.quarantine[0]["field"] == "ques"
    assert result.tasks[0].metadata["site_label"] == "Allrecipes"


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
    assert result.tasks[0].judge.config == {}  # an empty answer cell is no answer
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
    by_site = [
        assign_split(t, SplitParams(by="site", held_out_sites=["https://www.site0.example/"])) for t in tasks
    ]
    splits_of_site = {
        site: {t.split for t in by_site if t.site == site} for site in {t.site for t in by_site}
    }
    assert all(len(splits) == 1 for splits in splits_of_site.values())
    assert splits_of_site["site0.example"] == {"test"}


def test_split_by_site_keys_on_the_registrable_domain(tmp_path):
    """PAE's ``Allrecipes`` on https://www.allrecipes.com/ and a custom row on allrecipes.com are one site; so are
    en. and de.wikipedia.org: each pair lands in one split, whatever the seed."""
    pae = _jsonl(tmp_path / "pae.jsonl", [
        {"web_name": "Allrecipes", "id": "p-1", "ques": "Find a lasagna recipe", "web": "https://www.allrecipes.com/"},
        {"web_name": "Wikipedia", "id": "p-2", "ques": "Who wrote Faust?", "web": "https://en.wikipedia.org/"},
    ])  # fmt: skip
    mine = tmp_path / "mine.csv"
    mine.write_text(
        "goal,url\nFind a soup recipe,allrecipes.com\nWer schrieb Faust?,https://de.wikipedia.org/wiki/\n"
    )
    files = [
        {"path": str(pae), "shape": "pae"},
        {"path": str(mine), "columns": {"instruction": "goal", "start_url": "url"}},
    ]
    seen = set()
    for seed in range(8):
        split = {"by": "site", "seed": seed, "val_fraction": 0.45, "test_fraction": 0.45}
        params = TasksParams(sources=["file"], files=files, split=split,
                             decontamination={"benchmarks": []})  # fmt: skip
        rows = tasks_from_frame(assemble(pl.DataFrame(), params)[0])
        assert [t.site for t in rows] == [
            "allrecipes.com",
            "wikipedia.org",
            "allrecipes.com",
            "wikipedia.org",
        ]
        assert rows[0].split == rows[2].split and rows[1].split == rows[3].split
        seen |= {(t.site, t.split) for t in rows}
    assert len(seen) > 2, (
        "the seeds move the sites between splits: the pairs agree by their key, not by chance"
    )


def test_default_tasks_are_the_sandbox_suite_row_for_row():
    sandbox = generate_tasks(SandboxParams(instances_per_template=2))
    from rmsweb_kedro.contracts.schema import tasks_to_frame

    frame = tasks_to_frame(sandbox)
    tasks, quarantine, report = assemble(frame, TasksParams())
    assert tasks.equals(frame) and quarantine.height == 0
    assert report.to_dicts()[0]["rows_in"] == len(sandbox)


def test_sources_in_order_with_quarantine_and_counts(tmp_path):
    sandbox = generate_tasks(SandboxParams(instances_per_template=1))
    from rmsweb_kedro.contracts.schema import tasks_to_frame

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


def test_task_files_are_decontaminated_and_the_report_counts_per_benchmark(tmp_path):
    """A task-file row copying a benchmark task on its site (reworded, another subdomain) is dropped into the
    quarantine naming the task it matches; the same text on another site, and other tasks on the site, are kept."""
    write_benchmark_rows(tmp_path / "benchmarks")
    path = _jsonl(tmp_path / "pae.jsonl", [
        # WebVoyager's Recipes--0, reworded and shuffled, on another host of its site
        {"web_name": "Recipes", "id": "r-1", "ques": "With the most reviews: find a vegetarian lasagna recipe",
         "web": "https://www.recipes.sandbox.test/"},
        {"web_name": "Recipes", "id": "r-2", "ques": "Find a quick tomato soup recipe", "web": "http://recipes.sandbox.test/"},
        {"web_name": "Other", "id": "r-3", "ques": "Find a vegetarian lasagna recipe with the most reviews.",
         "web": "https://lasagna.example/"},  # the same text, another site
        # WebTailBench's task has no start page: matched on intent alone, wherever the row starts
        {"web_name": "Air", "id": "r-4", "ques": "compare the prices of three airlines for a weekend flight to Paris",
         "web": "https://air.example/"},
    ])  # fmt: skip
    params = TasksParams(sources=["file"], files=[{"path": str(path), "shape": "pae"}],
                         decontamination={"folders": [str(tmp_path / "benchmarks")]})  # fmt: skip
    tasks, quarantine, report = assemble(pl.DataFrame(), params)
    assert [t.id for t in tasks_from_frame(tasks)] == ["r-2", "r-3"]
    assert quarantine.select("record_id", "field").rows() == [("r-1", "instruction"), ("r-4", "instruction")]
    assert quarantine["reason"][0].startswith("contaminated: matches webvoyager:Recipes--0 (on sandbox.test")
    assert "webtailbench:flights_1 (intent alone" in quarantine["reason"][1]
    row = report.to_dicts()[0]
    assert (row["rows_in"], row["accepted"], row["quarantined"], row["contaminated"]) == (4, 2, 2, 2)
    assert (row["contaminated_webvoyager"], row["contaminated_online_mind2web"], row["contaminated_webtailbench"]) == (
        1, 0, 1
    )  # fmt: skip


def test_a_task_file_copying_a_webvoyager_task_is_dropped_on_the_real_files(tmp_path, shared_benchmarks):
    """The issue's case: a row copying WebVoyager's Allrecipes task on allrecipes.com; beside it, an Allrecipes task
    of the benchmark's own kind that is not in it, kept."""
    path = _jsonl(tmp_path / "mine.jsonl", [
        {"goal": "Find a vegetarian lasagna recipe that uses zucchini and has a rating of at least four stars.",
         "url": "allrecipes.com"},
        {"goal": "Find a recipe for a gluten-free chocolate cake with at least 50 reviews.", "url": "allrecipes.com"},
    ])  # fmt: skip
    params = TasksParams(sources=["file"], files=[{"path": str(path), "columns": {"instruction": "goal", "start_url": "url"}}],
                         decontamination={"folders": [str(shared_benchmarks)]})  # fmt: skip
    tasks, quarantine, report = assemble(pl.DataFrame(), params)
    assert [t.instruction[:28] for t in tasks_from_frame(tasks)] == ["Find a recipe for a gluten-f"]
    assert "webvoyager:Allrecipes--1 (on allrecipes.com" in quarantine["reason"][0]
    assert report["contaminated_webvoyager"].to_list() == [1]


def test_a_site_is_the_registrable_domain_of_a_url_or_bare_host():
    from rmsweb_kedro.contracts.sites import site_of

    assert site_of("https://www.gamestop.com/x") == "gamestop.com" == site_of("gamestop.com")
    assert site_of("https://en.wikipedia.org/wiki/Faust") == "wikipedia.org" == site_of("de.wikipedia.org")
    assert site_of("https://a.github.io/") != site_of("https://b.github.io/")  # private suffixes counted
    assert (
        site_of("http://127.0.0.1:8080/") == "127.0.0.1" and site_of("https://www.bbc.co.uk/") == "bbc.co.uk"
    )
