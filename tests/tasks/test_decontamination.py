"""The decontamination benchmark (benchmarks/decontamination.py) in small, on fixture rows in the benchmarks'
published formats, and on the real benchmark files when they are there: the matcher finds reworded, shuffled and
edited copies of a benchmark task on its site and keeps the benchmark's other tasks, better than the word-set
Jaccard matcher it replaced."""

import importlib.util
import json
from pathlib import Path

import pytest

from rmsweb_kedro.tasks.decontamination import BenchmarkIndex, intent, similarity

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "decontamination.py"


def _script():
    spec = importlib.util.spec_from_file_location("decontamination_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: Five Allrecipes-like tasks on one site: alike in words, distinct in intent (the hard negatives of a site).
RECIPES = [
    "Provide a recipe for vegetarian lasagna with more than 100 reviews and a rating of at least 4.5 stars.",
    "Find a recipe for a vegetarian lasagna that has at least a four-star rating and uses zucchini.",
    "Find a gluten-free chocolate cake recipe with over 50 reviews and list its ingredients.",
    "Search for a beef stew recipe that takes under two hours and report the number of servings.",
    "Locate the most popular banana bread recipe and give its total preparation time.",
]


def test_intent_and_similarity_by_hand():
    assert intent("Searching the RECIPES, find two cakes in cities!") == "searching recipes two cakes cities"
    # token_set_ratio: the words both share, then the rest of each, compared as characters (order ignored)
    assert similarity("cake recipe", "recipe cake") == 1.0
    assert similarity("cheap flight oslo", "cheap flight oslo rome") == 1.0  # one set inside the other
    assert similarity("beef stew recipe", "banana bread recipe") < 0.6


def test_the_benchmark_on_fixture_rows(tmp_path):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    rows = [{"web_name": "Allrecipes", "id": f"Allrecipes--{i}", "ques": q, "web": "https://www.allrecipes.com/"}
            for i, q in enumerate(RECIPES)]  # fmt: skip
    (folder / "WebVoyager_data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = _script().run(folder, sample=5, seed=0)
    assert result["index"] == {"webvoyager": 5} and (result["positives"], result["negatives"]) == (20, 5)
    new, old = result["token_set (new)"]["configured"], result["jaccard (peer)"]["configured"]
    # shuffled words and clauses keep every content word: both matchers find them all
    for figures in (new, old):
        assert figures["recall_by_kind"]["words"] == 1.0 and figures["recall_by_kind"]["clauses"] == 1.0
    assert new["dropped_distinct"] == 0, "the site's other tasks are kept"
    assert new["recall"] >= old["recall"]


@pytest.mark.slow
def test_the_benchmark_on_the_real_files(shared_benchmarks):
    result = _script().run(shared_benchmarks, sample=60, seed=0)
    assert result["index"] == {"webvoyager": 643, "online_mind2web": 300, "webtailbench": 609}
    new, old = result["token_set (new)"]["configured"], result["jaccard (peer)"]["configured"]
    assert new["recall_by_kind"]["fara"] >= 0.9, "Fara's human edits of WebVoyager tasks are found"
    assert new["dropped_distinct"] < old["dropped_distinct"] and new["f1"] > old["f1"]
    assert (
        new["dropped_distinct"] / new["negatives"] < 0.03 and new["recall"] > 0.9
    )  # precision depends on the mix


def test_an_index_matches_on_the_site_and_a_task_without_start_page_on_intent(tmp_path):
    from rmsweb_kedro.contracts.schema import Task

    def task(i, url, given=True):
        return Task(id=f"t{i}", source="webvoyager", site="x", start_url=url, instruction=RECIPES[i],
                    metadata={"start_url_given": given})  # fmt: skip

    index = BenchmarkIndex({"webvoyager": [task(0, "https://www.allrecipes.com/")],
                            "webtailbench": [task(3, "https://www.bing.com/", given=False)]})  # fmt: skip
    assert index.match(RECIPES[0], "https://de.allrecipes.com/x", 0.9).task_id == "t0"
    assert index.match(RECIPES[0], "https://recipes.example/", 0.9) is None
    assert index.match(RECIPES[3], "https://anywhere.example/", 0.9).site is None
    assert index.match(RECIPES[1], "https://www.allrecipes.com/", 0.9) is None  # a distinct task on the site
