"""The mining pipeline run for real (offline path): the tiny checkpoint, the project's catalog entries written to a
temporary folder, and the SequentialRunner."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from rmsweb_kedro.contracts.schema import STATE_SCHEMA
from rmsweb_kedro.measures.mining import CRITICAL_STATE_SCHEMA, FailureMode

CATALOG = Path(__file__).parents[2] / "conf" / "base" / "catalog_mining.yml"
K = 2
PROBED = (
    28  # of the 109 distinct corpus states (24 of the pool): the whole pool first, then 4 training states
)
POOL_FROM = "shop-030"


@pytest.fixture(scope="module")
def mining_run(tmp_path_factory, tiny_states, tiny_checkpoint):
    from kedro.io import DataCatalog, MemoryDataset
    from kedro.runner import SequentialRunner

    from rmsweb_kedro.models.modeling import load_model
    from rmsweb_kedro.pipelines.mining.pipeline import create_pipeline

    root = tmp_path_factory.mktemp("mining_run")
    config = yaml.safe_load(CATALOG.read_text())
    for entry in config.values():
        entry["filepath"] = str(root / entry["filepath"])
    catalog = DataCatalog.from_config(config)
    params = {
        "scoring": {"k": K, "max_new_tokens": 8, "batch_size": 4}, "max_states_probed": PROBED,
        "competence_threshold": 0.5, "ballast_share": 0.25, "online": {"rollouts": 0},
        "policy": {"prompt": {"observation": ["axtree"], "history_k": 3}},
    }  # fmt: skip
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    inputs = {  # the last 10 of the 40 tasks held out of SFT: the probe pool
        "sft_states_train": states.filter(pl.col("task_id") < POOL_FROM),
        "sft_states_probe": states.filter(pl.col("task_id") >= POOL_FROM),
        "sft_model": load_model({"path": str(tiny_checkpoint)}),
        "tasks": pl.DataFrame(),
        "params:mining": params,
        "params:rollouts": {},
    }
    for name, data in inputs.items():
        catalog[name] = MemoryDataset(data, copy_mode="assign")
    SequentialRunner().run(create_pipeline(), catalog)
    return catalog, params, root


def test_offline_probes(mining_run, tiny_states):
    catalog, params, _ = mining_run
    probes = catalog.load("mining_offline_probes")
    distinct = {
        (s["instruction"], tuple(s["previous_actions"]), s["axtree"], s["reference_action"])
        for s in tiny_states
    }
    assert probes.height == len(distinct) < len(tiny_states)
    assert probes["n_copies"].sum() == len(tiny_states)
    probed = probes.filter(pl.col("competence").is_not_null())
    assert probed.height == params["max_states_probed"]
    assert probed["n_samples"].to_list() == [K] * probed.height
    assert probed["sampled_actions"].list.len().to_list() == [K] * probed.height
    assert set(probed["competence"].to_list()) <= {0.0, 0.5, 1.0}
    assert set(probed["failure_mode"].drop_nulls().to_list()) <= {m.value for m in FailureMode}
    # an untrained tiny model: mostly wrong, so failure modes are assigned
    assert probed["failure_mode"].null_count() < probed.height
    assert (probes["source"] == "offline").all()
    # the corpus is the training states and the probe pool; the pool is probed first, whole, then training states
    assert probes["in_sft"].to_list() == (probes["task_id"] < POOL_FROM).to_list()
    pool = probes.filter(~pl.col("in_sft"))
    assert pool.height == 24 and pool["competence"].null_count() == 0
    assert probed["in_sft"].sum() == PROBED - 24


def test_outputs(mining_run):
    catalog, params, root = mining_run
    critical = catalog.load("critical_states")
    assert critical.schema == CRITICAL_STATE_SCHEMA
    # critical: the greedy action is wrong, or the samples are (spread); ballast: both right
    chosen = critical.filter(pl.col("selection") == "critical")
    assert ((chosen["competence"] < 0.5) | ~chosen["step_success"]).all()
    ballast = critical.filter(pl.col("selection") == "ballast")
    assert (ballast["competence"] >= 0.5).all() and ballast["step_success"].all()
    modes = catalog.load("failure_modes")
    assert modes.height == 2 * len(FailureMode)
    offline = modes.filter(pl.col("source") == "offline")
    assert offline["n_states"].sum() == (critical["selection"] == "critical").sum()
    assert (root / "data/08_reporting/mining/failure_modes.png").stat().st_size > 0
    report = catalog.load("mining_report")
    assert report["offline_probed"] == params["max_states_probed"]
    assert report["online_rollouts"] == {"rollouts": 0}
    assert report["concentration"]["mined"]["states"] == critical.height
    # why each probed state is critical: its greedy action wrong first, else its samples below the threshold
    probes = catalog.load("mining_offline_probes")
    probed = probes.filter(pl.col("competence").is_not_null())
    expected = [
        "greedy_wrong" if not greedy else "samples_spread" if competence < 0.5 else None
        for greedy, competence in probed.select("step_success", "competence").iter_rows()
    ]
    assert (
        probed["origin"].to_list() == expected
        and probes.filter(pl.col("competence").is_null())["origin"].is_null().all()
    )
    assert critical.filter(pl.col("selection") == "ballast")["origin"].eq("ballast").all()
    chosen = critical.filter(pl.col("selection") == "critical")
    assert chosen["origin"].is_in(["greedy_wrong", "samples_spread"]).all()
    by_origin = report["by_origin"]
    assert (
        by_origin["greedy_wrong"]["states"] > 0
    )  # an untrained tiny model: its greedy action is mostly wrong
    for origin in ("greedy_wrong", "samples_spread"):
        assert by_origin[origin]["states"] == expected.count(origin)
        assert by_origin[origin]["selected"] == (critical["origin"] == origin).sum()
    assert by_origin["online_divergence"] == {
        "states": 0, "selected": 0, "in_sft": {"states": 0, "selected": 0}, "not_in_sft": {"states": 0, "selected": 0},
    }  # fmt: skip
    assert sum(c["selected"] for c in by_origin.values()) == critical.height == report["mined_states"]
    # critical states by in_sft, as measured on the probes
    for group, flag in (("in_sft", True), ("not_in_sft", False)):
        mine = probed.filter(pl.col("in_sft") == flag)
        counts = report["by_in_sft"][group]["offline"]
        assert counts["probed"] == mine.height
        assert counts["critical"] == mine["origin"].is_not_null().sum()
        assert sum(report["by_in_sft"][group]["selected"].values()) == (critical["in_sft"] == flag).sum()
        assert sum(by_origin[o][group]["selected"] for o in by_origin) == (critical["in_sft"] == flag).sum()
    assert report["by_in_sft"]["not_in_sft"]["offline"]["probed"] > 0
    assert offline["n_in_sft"].sum() + offline["n_not_in_sft"].sum() == offline["n_states"].sum()


def test_full_corpus_switch(mining_run):
    from rmsweb_kedro.pipelines.mining.nodes import select_critical_states

    catalog, params, _ = mining_run
    offline, online = catalog.load("mining_offline_probes"), catalog.load("mining_online_probes")
    full = select_critical_states(offline, online, {**params, "rl_corpus": "full"})
    assert full.height == offline.height and (full["selection"] == "full").all()
    assert full.schema == CRITICAL_STATE_SCHEMA


def test_parameters_carry_the_shared_values_and_compose_the_scoring_config():
    """conf/base's ``mining`` validates; the prompt and the sandbox seed are globals.yml's (as SFT and collect read
    them), the scoring block is scoring.ScoringConfig seeded by the stage unless it names a seed, and k >= 1."""
    from kedro.config import OmegaConfigLoader

    from rmsweb_kedro.measures.probing import MiningParams
    from rmsweb_kedro.settings import CONFIG_LOADER_ARGS

    conf = Path(__file__).parents[2] / "conf"
    loader = OmegaConfigLoader(str(conf), **{**CONFIG_LOADER_ARGS, "default_run_env": "base"})
    parameters = loader["parameters"]
    config = MiningParams.model_validate(parameters["mining"])
    assert config.policy.prompt == parameters["sft"]["training"]["prompt"]
    assert config.online.sandbox_seed == parameters["sandbox"]["seed"]
    assert (config.scoring.k, config.scoring.seed) == (4, config.seed)
    assert MiningParams.model_validate({"seed": 3, "scoring": {"k": 2, "seed": 5}}).scoring.seed == 5
    with pytest.raises(ValueError, match="mining.scoring.k is 0: .* k >= 1"):
        MiningParams.model_validate({"scoring": {"k": 0}})
