"""Judge agreement: the statistics on known cases, and the ``judge_agreement`` pipeline end to end on sandbox
episodes a real collect run made (real server, real Chromium, the checker's verdicts), judged by WebJudge through
the project's local OpenAI-compatible server around the tiny Qwen3-VL checkpoint (an untrained judge: its replies
do not parse, so it fails every episode, and the report must say exactly that)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner

from rmsweb_kedro.contracts.schema import tasks_to_frame
from rmsweb_kedro.measures.agreement import agreement, cohen_kappa, stratified_sample
from rmsweb_kedro.pipeline_registry import register_pipelines
from rmsweb_kedro.settings import CONFIG_LOADER_ARGS
from tests.collect.local_openai_server import LocalChatServer

REPO = Path(__file__).resolve().parents[2]


def test_agreement_statistics_on_known_cases():
    truth = [True] * 6 + [False] * 4
    judged = [True] * 5 + [False] + [True] + [False] * 3
    row = agreement(truth, judged, confidence=0.95, n_boot=500, seed=1)
    assert (row["tp"], row["fn"], row["fp"], row["tn"]) == (5, 1, 1, 3)
    assert row["accuracy"] == 0.8 and row["precision"] == 5 / 6 and row["recall"] == 5 / 6
    # kappa = (po - pe) / (1 - pe) with po 0.8, pe 0.6*0.6 + 0.4*0.4 = 0.52.
    assert row["kappa"] == pytest.approx((0.8 - 0.52) / 0.48)
    assert (
        row["accuracy_low"] < 0.8 < row["accuracy_high"]
        and row["kappa_low"] < row["kappa"] < row["kappa_high"]
    )
    # A judge that always says failure: no precision, kappa 0; one class only: kappa undefined, never NaN.
    lazy = agreement(truth, [False] * 10, n_boot=200)
    assert lazy["precision"] is None and lazy["recall"] == 0.0 and lazy["kappa"] == 0.0
    assert cohen_kappa([False] * 3, [False] * 3) is None


def test_stratified_sample_caps_each_stratum():
    frame = pl.DataFrame(
        {"policy": ["a"] * 8 + ["b"] * 2, "ok": [True] * 7 + [False] * 3, "i": list(range(10))}
    )
    sample = stratified_sample(frame, ["policy", "ok"], 3, seed=0)
    counts = dict(sample.group_by("policy", "ok").len().select(pl.concat_str("policy", "ok"), "len").rows())
    assert counts == {"atrue": 3, "afalse": 1, "bfalse": 2}
    assert stratified_sample(frame, ["policy", "ok"], 3, seed=0).equals(sample)  # seeded


@pytest.mark.browser
@pytest.mark.slow
def test_judge_agreement_pipeline_end_to_end(sandbox_task_list, tiny_checkpoint, tmp_path):
    from rmsweb_kedro.pipelines.collect.nodes import collect_trajectories, select_collection_tasks

    # Real sandbox episodes with known outcomes, two policies: a teacher that always picks wrong (single attempt),
    # and the same teacher retrying on its reflection (fails, then succeeds).
    tasks = [t for t in sandbox_task_list if t.id == "sandbox-shop_cart-001"]
    collect = {
        "max_tasks": 1, "modes": ["single", "reflection_retries"], "corpus_modes": ["single", "reflection_retries"],
        "attempts": 2, "n_envs": 1, "progress": False, "journal_path": str(tmp_path / "journal.jsonl"),
        "raw_root": str(tmp_path / "raw"),
        "browser": {"viewport": [320, 200]},  # small pages: few image tokens for the CPU judge
        "teacher": {"imperfections": {"mistake_probs": {"choose_option": 1.0, "pick_item": 1.0},
                                      "self_correct_prob": 0.0}},
    }  # fmt: skip
    log = collect_trajectories(select_collection_tasks(tasks_to_frame(tasks), collect), collect)
    assert sorted(log["success"].to_list()) == [False, False, True]

    # conf/base's catalog entries and parameters, paths and the judge endpoint pointed at the test's.
    config = yaml.safe_load((REPO / "conf" / "base" / "catalog_judge_agreement.yml").read_text())
    for entry in config.values():
        entry["filepath"] = str(tmp_path / entry["filepath"])
    catalog = DataCatalog.from_config(config)
    catalog["collection_log"] = MemoryDataset(log)
    catalog["sandbox_tasks"] = MemoryDataset(tasks_to_frame(sandbox_task_list))
    params = OmegaConfigLoader(
        str(REPO / "conf"), base_env="base", default_run_env="base",
        custom_resolvers=CONFIG_LOADER_ARGS["custom_resolvers"],  # the project's ${merge:...}
    )["parameters"]  # fmt: skip
    with LocalChatServer(tiny_checkpoint) as server:
        params["judge_agreement"]["judge"] |= {
            "endpoint": {"base_url": server.base_url, "model": server.model_name, "max_retries": 0},
            "official_prompts": None,
            "max_tokens": 4,
        }
        params["judge_agreement"]["raw_root"] = collect["raw_root"]
        catalog["params:judge_agreement"] = MemoryDataset(params["judge_agreement"])
        catalog["endpoint_credentials"] = MemoryDataset({})  # the endpoint above needs no key
        SequentialRunner().run(register_pipelines()["judge_agreement"], catalog)
        requests = list(server.requests)

    verdicts = catalog.load("judge_agreement_verdicts")
    assert verdicts.height == 3 and sorted(verdicts["policy"].unique()) == ["reflection_retries", "single"]
    assert set(verdicts["failure_mode"]) <= {"success", "wrong_answer", "wrong_state", "step_limit"}
    # WebJudge saw every page of every episode: key points, one call per page, the outcome.
    assert len(requests) == sum(2 + n for n in verdicts["pages"]) and (verdicts["pages"] > 1).all()
    # The untrained judge's replies never parse: it fails every episode, each flagged as a judge error.
    assert not verdicts["judged"].any() and verdicts["judge_error"].is_not_null().all()
    assert verdicts["judge"].str.starts_with("webjudge/").all()

    table = catalog.load("judge_agreement_table")
    overall = table.filter(pl.col("group") == "all").row(0, named=True)
    assert (overall["tp"], overall["fn"], overall["fp"], overall["tn"]) == (0, 1, 0, 2)
    assert overall["accuracy"] == pytest.approx(2 / 3) and overall["recall"] == 0.0
    assert overall["precision"] is None and overall["kappa"] == 0.0 and overall["judge_errors"] == 3
    assert set(table["group"]) == {"all", "site", "failure_mode", "policy"}
    summary = catalog.load("judge_agreement_summary")
    assert summary["official_protocol"] is False and summary["judged_by"][0]["prompt_source"] == "project"
    assert (tmp_path / "data/08_reporting/judge_agreement/agreement.png").stat().st_size > 0
    assert pl.read_csv(tmp_path / "data/08_reporting/judge_agreement/agreement.csv").height == table.height
