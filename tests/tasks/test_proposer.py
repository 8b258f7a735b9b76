"""The task proposer end to end: three sandbox sites reached by URL as if they were unknown websites (no checker)
and a local login page, real Chromium, the proposer's LLM served by the project's OpenAI-compatible test server,
scripted to propose good, malformed, infeasible, unsafe, duplicate and contaminated tasks; each filter's count, the
decontamination against benchmark rows in their published formats (plus the real files when the folder is
there), and the tasks stage reading the kept tasks back."""

import json
import re

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import Observation, tasks_from_frame
from rmsweb_kedro.judges.choice import judge_kind
from rmsweb_kedro.tasks.decontamination import BenchmarkIndex, DecontaminationParams, normalise
from rmsweb_kedro.tasks.proposer import (
    ProposerParams,
    parse_reply,
    propose,
    read_sites,
    to_jsonl,
    why_infeasible,
)
from rmsweb_kedro.tasks.sources import BENCHMARK_NAMES, TasksParams, assemble
from tests.collect.local_openai_server import LocalChatServer
from tests.fixtures_web import chromium_available
from tests.tasks.conftest import write_benchmark_rows

pytestmark = pytest.mark.browser


#: What the scripted proposer answers for each site (the site is read from the URL in the prompt).
REPLIES = {
    "shop": [
        {"instruction": "What is the price of the cheapest item in the Kitchen category?", "difficulty": "easy",
         "answer": "12.99"},
        {"instruction": "List the product categories shown on the front page", "difficulty": "easy",
         "rubric": ["names every category", "nothing else"]},
        {"instruction": "Buy the cheapest kettle and pay by credit card", "difficulty": "medium"},  # unsafe
        {"instruction": "what is the PRICE of the cheapest item in the kitchen category", "difficulty": "easy"},
        {"instruction": "Track the order placed yesterday", "feasible": False},  # infeasible
        {"difficulty": "hard"},  # malformed: no instruction
    ],
    "recipes": [
        {"instruction": "Find a recipe that takes under 20 minutes and report its name", "difficulty": "medium"},
        {"instruction": "Find a recipe that takes under 20 minutes and report the name"},  # near-duplicate
        {"instruction": "Find the vegetarian lasagna recipe with the most reviews"},  # WebVoyager's, same site
        {"instruction": "Send a message to the author of the top recipe"},  # unsafe
    ],
    "flights": [
        {"instruction": "Which airline has the earliest flight from Oslo to Rome?", "difficulty": "medium"},
        {"instruction": "Show the cheapest one-way flight from Oslo to Rome"},  # Online-Mind2Web's, same site
        {"instruction": "Compare prices of three airlines for a weekend flight to Paris"},  # WebTailBench's intent
    ],
}  # fmt: skip
EXPECTED = {"proposed": 13, "kept": 4, "malformed": 1, "infeasible": 1, "unsafe": 2, "duplicate": 2,
            "contaminated": 3}  # fmt: skip


def scripted_proposer(body: dict) -> str:
    prompt = next(p["text"] for p in body["messages"][0]["content"] if p["type"] == "text")
    site = re.search(r"URL: http://(\w+)\.sandbox\.test", prompt).group(1)
    return "Here are the tasks:\n```json\n" + json.dumps({"tasks": REPLIES[site]}) + "\n```"


def test_the_proposer_filters_and_counts_each_kind(tmp_path, sandbox_server, login_site):
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    folders = [tmp_path / "benchmarks"]
    write_benchmark_rows(folders[0])
    sites = tmp_path / "sites.txt"
    sites.write_text(
        "# three sandbox sites as unknown websites, and a login wall\nhttp://shop.sandbox.test/\n\n"
        f"http://recipes.sandbox.test/\nhttp://flights.sandbox.test/   # flights\n{login_site}\n"
    )
    with LocalChatServer() as server:
        server.respond = scripted_proposer
        params = ProposerParams(
            sites_file=str(sites),
            tasks_per_site=6,
            endpoint={
                "base_url": server.base_url,
                "model": "proposer-model",
                "api_key_env": None,
                "max_retries": 0,
            },  # fmt: skip
            screenshot_root=str(tmp_path / "pages"),
            browser={"host_resolver_rules": sandbox_server.host_resolver_rules},
            decontamination={"folders": [str(f) for f in folders]},
        )
        kept, report = propose(params)
        requests = list(server.requests)
    assert {key: report[key] for key in EXPECTED} == EXPECTED
    assert report["sites"] == 4 and report["sites_infeasible"] == 1
    assert report["per_site"][login_site]["site_problem"] == "blocked: login_wall"
    assert len(requests) == 3, "the login wall's site is never sent to the model"
    assert all(any(p["type"] == "image_url" for p in r["messages"][0]["content"]) for r in requests)
    shop_prompt = next(p["text"] for p in requests[0]["messages"][0]["content"] if p["type"] == "text")
    assert "Shopwell" in shop_prompt.split("Accessibility tree:")[1], "the page tree is in the prompt"
    reasons = {(d["filter"], d["reason"]) for d in report["dropped"]}
    contaminated = sorted(r for f, r in reasons if f == "contaminated")
    assert contaminated == [
        "matches online_mind2web:om-1 (on sandbox.test, intent similarity 1.00)",
        "matches webtailbench:flights_1 (intent alone: the benchmark task has no start page, intent similarity 1.00)",
        "matches webvoyager:Recipes--0 (on sandbox.test, intent similarity 1.00)",
    ]
    assert any(f == "unsafe" and "credit card" in r for f, r in reasons)
    assert report["benchmark_tasks_compared"] == 3
    assert [t.instruction for t in kept][:2] == [
        REPLIES["shop"][0]["instruction"],
        REPLIES["shop"][1]["instruction"],
    ]
    # the sandbox's hosts are subdomains of one registrable domain: one site, as the browser sees it
    assert {t.site for t in kept} == {"sandbox.test"}
    # each task records what it carries; the judge is chosen from it (and the stage's configured judge)
    assert [t.judge.kind for t in kept] == ["none"] * 4
    assert kept[0].judge.config == {"reference_answer": "12.99"}
    assert [c["criterion"] for c in kept[1].judge.config["rubric"]] == [
        "names every category",
        "nothing else",
    ]
    assert [judge_kind(t, "webvoyager") for t in kept] == [
        "reference_answer",
        "rubric",
        "webvoyager",
        "webvoyager",
    ]
    assert all(t.source == "proposed" and t.metadata["proposer_model"] == "proposer-model" for t in kept)
    assert len({t.metadata["prompt_hash"] for t in kept}) == 1 and len({t.id for t in kept}) == len(kept)
    # the tasks stage reads them back, each with a split
    proposed = tmp_path / "proposed_tasks.jsonl"
    proposed.write_text(to_jsonl(kept))
    tasks, quarantine, _ = assemble(pl.DataFrame(), TasksParams(sources=["proposer"], proposed=str(proposed)))
    back = tasks_from_frame(tasks)
    assert [t.id for t in back] == [t.id for t in kept] and quarantine.height == 0
    assert all(t.split in ("train", "val", "test") for t in back)


def test_decontamination_against_the_real_benchmark_files(shared_benchmarks):
    params = DecontaminationParams(folders=[str(shared_benchmarks)])
    index = BenchmarkIndex.load(params)
    assert index.size == 643 + 300 + 609 and set(params.benchmarks) == set(BENCHMARK_NAMES)
    # a WebVoyager task reworded on its own site (any subdomain) is caught; on another site, or a sandbox task, not
    reworded = "Uses zucchini: find a vegetarian lasagna recipe with a rating of at least four stars"
    for url in ("https://www.allrecipes.com/", "https://allrecipes.com/recipes", "http://m.allrecipes.com/"):
        found = index.match(reworded, url, params.intent_similarity)
        assert (found.benchmark, found.task_id, found.site) == (
            "webvoyager",
            "Allrecipes--1",
            "allrecipes.com",
        )
    assert index.match(reworded, "https://www.example-recipes.org/", params.intent_similarity) is None
    sandbox = "What is the price of the cheapest item in the Kitchen category?"
    assert index.match(sandbox, "http://shop.sandbox.test/", params.intent_similarity) is None
    # another Allrecipes task on allrecipes.com is a distinct task: kept
    other = "Find a recipe for a gluten-free chocolate cake with at least 50 reviews"
    assert index.match(other, "https://www.allrecipes.com/", params.intent_similarity) is None


def test_a_page_not_seen_or_empty_is_infeasible():
    # what BrowserEnv.reset returns for a start page that would not load twice (tests/web: env_error), or a blank one
    unreachable = Observation(url="http://127.0.0.1:9/", error="could not open it: net::ERR_CONNECTION_REFUSED",
                              env_error=True)  # fmt: skip
    assert why_infeasible(unreachable).startswith("page not seen: could not open")
    assert why_infeasible(Observation(url="http://a.example/")) == "page not seen: empty page"


def test_reply_parsing_and_text_normalisation():
    assert parse_reply('sure: [{"instruction": "a"}, 3]') == [{"instruction": "a"}]
    assert parse_reply("no JSON here") == [] and parse_reply("{broken") == []
    assert normalise("  Find the PRICE!  of X ") == "find the price of x"


def test_a_sites_file_line_that_is_not_a_url_names_its_line(tmp_path):
    sites = tmp_path / "sites.txt"
    sites.write_text("https://a.example/\nb.example\n")
    with pytest.raises(ValueError, match=r"sites.txt: line 2: not an http\(s\) URL"):
        read_sites(sites)
