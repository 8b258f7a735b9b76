"""The ``live`` pipeline as `kedro run --env production --pipelines live` wires it: conf/production's catalog (the
benchmark task files, paths pointed at fixture rows whose start pages are sandbox sites standing in for live ones)
and its parameters, a tiny checkpoint as the policy in real Chromium, and the LLM judges talking to a real local
OpenAI-compatible HTTP server."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog
from kedro.runner import SequentialRunner

from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.contracts.schema import Trajectory
from rmsweb_kedro.models.endpoint import endpoint_credentials
from rmsweb_kedro.pipeline_registry import register_pipelines
from rmsweb_kedro.settings import CONFIG_LOADER_ARGS
from tests.evaluate.conftest import judge_model
from tests.fixtures_web import chromium_available

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def write_fixture_files(folder: Path, tasks: list) -> dict[str, str]:
    """One file per benchmark in its public format, rows pointing at sandbox pages (benchmark name -> path)."""
    shop, other = tasks
    folder.mkdir()
    webvoyager = [
        {"web_name": "Shop", "id": f"Shop--{n}", "ques": t.instruction, "web": t.start_url}
        for n, t in enumerate((shop, other))
    ]
    (folder / "wv.jsonl").write_text("".join(json.dumps(r) + "\n" for r in webvoyager))
    answers = {"Shop": {"notice": "", "answers": [{"id": 0, "type": "golden", "ans": "x"}]}}
    (folder / "wv_reference.json").write_text(json.dumps(answers))
    om2w = [{"task_id": "om2w-1", "confirmed_task": shop.instruction, "website": shop.start_url,
             "reference_length": 4, "level": "easy"}]  # fmt: skip
    (folder / "om2w.json").write_text(json.dumps(om2w))
    rubric = {"items": [{"criterion": "Did the task", "description": "", "max_points": 2}]}
    wtb = [{"id": "shopping_1", "category": "shopping", "ques": other.instruction, "web": other.start_url,
            "precomputed_rubric": rubric}]  # fmt: skip
    (folder / "wtb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in wtb))
    return {
        "webvoyager_tasks": str(folder / "wv.jsonl"),
        "webvoyager_reference": str(folder / "wv_reference.json"),
        "online_mind2web_tasks": str(folder / "om2w.json"),
        "webtailbench_tasks": str(folder / "wtb.jsonl"),
    }


def test_live_pipeline_from_the_production_catalog(
    chat_server, sandbox_server, sandbox_task_list, tiny_checkpoint, tmp_path
):
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    chat_server.respond = judge_model
    tests = [t for t in sandbox_task_list if t.split == "test"][:2]
    files = write_fixture_files(tmp_path / "benchmarks", tests)

    # conf/production's catalog entries, paths overridden.
    config = yaml.safe_load((REPO / "conf" / "production" / "catalog_live.yml").read_text())
    for name, entry in config.items():
        if name in files:
            entry["filepath"] = files[name]
        else:
            entry["filepath"] = str(tmp_path / entry["filepath"])
    config["webvoyager_tasks"]["reference_filepath"] = files["webvoyager_reference"]
    config["rmsweb_model"] = {"type": "rmsweb_kedro.datasets.checkpoint.CheckpointDataset",
                              "filepath": str(tiny_checkpoint)}  # fmt: skip
    catalog = DataCatalog.from_config(config)

    # base + production parameters, the judge and browser pointed at the stand-ins.
    loader = OmegaConfigLoader(
        str(REPO / "conf"), base_env="base", default_run_env="production",
        merge_strategy={"parameters": "soft"}, custom_resolvers=CONFIG_LOADER_ARGS["custom_resolvers"],
    )  # fmt: skip
    parameters = loader["parameters"]
    live = parameters["live"]
    assert live["judge"]["credentials"] == "judge_endpoint"  # production names an endpoint
    # production replaces the base prompt whole: a real model reads the action space in the system turn
    assert PromptConfig.model_validate(parameters["evaluate"]["policy"]["prompt"]).system_turn
    live |= {
        "judge": {"base_url": chat_server.base_url, "model": "judge-test", "max_retries": 0},
        "browser": {"host_resolver_rules": sandbox_server.host_resolver_rules},
        "output_dir": str(tmp_path / "live"),
        "max_steps": 3,
        "max_steps_by_benchmark": {},
        "runs": 1,
        "official_prompts": None,
    }
    catalog["params:live"] = live
    catalog["params:evaluate.policy"] = parameters["evaluate"]["policy"]
    catalog["params:rollouts"] = parameters["rollouts"]
    # What the credentials hook (runs.hooks.CredentialsHooks) hands the nodes: conf/production/credentials.yml through the config loader.
    catalog["endpoint_credentials"] = endpoint_credentials(loader["credentials"])

    SequentialRunner().run(register_pipelines()["live"], catalog)

    load_report = catalog.load("live_task_load_report")
    assert {k: (v["rows_in"], v["quarantined"], v["selected"]) for k, v in load_report.items()} == {
        "webvoyager": (2, 0, 2), "online_mind2web": (1, 0, 1), "webtailbench": (1, 0, 1)
    }  # fmt: skip
    results = catalog.load("live_results")
    assert results["task_id"].to_list() == ["Shop--0", "Shop--1", "om2w-1", "shopping_1"]
    assert results["benchmark"].to_list() == ["webvoyager", "webvoyager", "online_mind2web", "webtailbench"]
    # The judge models production names per judge (on the stand-in endpoint), the project's wording.
    assert [j.rsplit("/", 1)[0] for j in results["judge"]] == ["webvoyager/gpt-4o"] * 2 + [
        "webjudge/o4-mini", "rubric/o4-mini"
    ]  # fmt: skip
    assert set(results["judge_prompt_source"]) == {"project"}
    # The tiny policy never answers: WebVoyager's protocol scores that 0 without asking its judge. The stand-in
    # judge model approves the rest; the rubric verifier scored 2 of 2.
    assert results["success"].to_list() == [False, False, True, True] and results["score"][3] == 1.0
    assert (results["n_steps"] <= 3).all() and (results["completion_tokens"] > 0).all()

    summary = catalog.load("live_summary")
    rows = {r["benchmark"]: r for r in summary.iter_rows(named=True)}
    assert rows["webvoyager"]["successes"] == "0/2" and rows["webtailbench"]["successes"] == "1/1"
    assert all(r["protocol"].startswith("project wording, not the official protocol") for r in rows.values())
    assert (
        rows["webvoyager"]["success_low"] == 0.0 < rows["webvoyager"]["success_high"]
    )  # n=2: a wide interval

    # The raw-trajectory file and Online-Mind2Web's submission format.
    out = tmp_path / "live"
    reloaded = [
        Trajectory.model_validate_json(x) for x in (out / "trajectories.jsonl").read_text().splitlines()
    ]
    assert [t.task_id for t in reloaded] == results["task_id"].to_list()
    submission = out / "online_mind2web"
    assert [p.name for p in submission.iterdir()] == ["om2w-1"]  # Online-Mind2Web's task only
    result = json.loads((submission / "om2w-1" / "result.json").read_text())
    assert list(result) == ["task_id", "task", "final_result_response", "action_history", "thoughts"]
    assert result["task_id"] == "om2w-1" and len(result["thoughts"]) == len(result["action_history"])
    assert (submission / "om2w-1" / "trajectory" / "0_full_screenshot.png").is_file()
    assert pl.read_parquet(tmp_path / "data/07_model_output/live/live_results.parquet").height == 4
