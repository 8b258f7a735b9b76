"""The ``ablations`` pipeline: its pieces on hand-made tables, its wiring, and one real run at tiny sizes (real
sandbox and Chromium, a tiny checkpoint as base and SFT model) through the project's own catalog and parameters,
after the stages it reuses (mining, salvage_ds, evaluate) ran at tiny sizes too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog
from kedro.runner import SequentialRunner

from rmsweb_kedro.contracts.schema import COLLECTION_LOG_SCHEMA, STATE_SCHEMA, tasks_to_frame
from rmsweb_kedro.measures import report, reporting
from rmsweb_kedro.measures.evaluation import EPISODE_SCHEMA, EvaluateParams
from rmsweb_kedro.pipeline_registry import register_pipelines
from rmsweb_kedro.pipelines.ablations.nodes import collection_pool
from rmsweb_kedro.pipelines.ablations.pipeline import (
    COLLECTION_MODES,
    FULL_CORPUS,
    ONE_ROUND_LONG,
    REFERENCE,
    SALVAGE_MODES,
    SALVAGE_PARTS,
    SECOND_ROUND,
)
from rmsweb_kedro.pipelines.collect.nodes import select_collection_tasks
from rmsweb_kedro.settings import CONFIG_LOADER_ARGS, ProjectConfigLoader, merge_parameters
from tests.fixtures_web import chromium_available

REPO = Path(__file__).resolve().parents[2]
VARIANTS = [f"collect_{m}" for m in COLLECTION_MODES] + [REFERENCE] + [f"rl_{m}" for m in SALVAGE_MODES]
VARIANTS += [FULL_CORPUS, *SALVAGE_PARTS, SECOND_ROUND, ONE_ROUND_LONG]


def test_merge_resolver_deep_merges_in_order_without_touching_the_base():
    base = {"loop": {"max_steps": 36, "output_dir": "a", "lr": 1e-4}, "algorithm": {"mode": "salvage_ds"}}
    merged = merge_parameters(base, {"loop": {"max_steps": 24}}, {"loop": {"output_dir": "b"}},
                              {"algorithm": {"mode": "grpo"}})  # fmt: skip
    assert merged == {"loop": {"max_steps": 24, "output_dir": "b", "lr": 1e-4}, "algorithm": {"mode": "grpo"}}
    assert base["loop"] == {"max_steps": 36, "output_dir": "a", "lr": 1e-4}
    assert merge_parameters(base, {}) == base


def test_variant_parameters_are_config_the_stage_then_the_budget_then_the_change():
    """``ablations.<variant>.<stage>`` as the project's config loader resolves it, and a ``--params`` override of
    a stage or of the budget reaching every variant."""
    loader = OmegaConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS,
                               runtime_params={"salvage_ds": {"loop": {"lr": 0.5}}, "ablations": {"budget": {
                                   "sft": {"training": {"loop": {"max_steps": 7}}}}}})  # fmt: skip
    params = loader["parameters"]
    ablations = params["ablations"]
    for mode in SALVAGE_MODES:
        variant = ablations[f"rl_{mode}"]["salvage_ds"]
        budget = ablations["budget"]["salvage_ds"][
            "algorithm"
        ]  # the same sampled-action budget for every mode
        assert variant["algorithm"] == {**params["salvage_ds"]["algorithm"], **budget, "mode": mode}
        assert variant["loop"]["max_steps"] == ablations["budget"]["salvage_ds"]["loop"]["max_steps"] == 48
        assert variant["loop"]["output_dir"] == f"data/06_models/ablations/rl_{mode}/salvage_ds_run"
        assert variant["loop"]["lr"] == 0.5 and params["salvage_ds"]["loop"]["max_steps"] != 48
        assert variant["prompt"] == params["salvage_ds"]["prompt"]  # untouched keys are the stage's own
    for mode in COLLECTION_MODES:
        variant = ablations[f"collect_{mode}"]
        assert variant["collect"]["modes"] == variant["collect"]["corpus_modes"] == [mode]
        assert (
            variant["collect"]["max_tasks"] == 40
            and variant["collect"]["attempts"] == params["collect"]["attempts"]
        )
        assert variant["trajectories"]["raw_root"] == f"data/01_raw/ablations/collect_{mode}"
        assert (
            variant["collect"]["raw_root"] == variant["trajectories"]["raw_root"]
        )  # screenshots beside the files
        assert variant["sft"]["training"]["loop"]["max_steps"] == 7
    assert ablations[FULL_CORPUS]["mining"]["rl_corpus"] == "full"
    assert ablations["evaluate"]["offline"]["max_states"] == 32
    assert ablations["evaluate"]["policy"] == params["evaluate"]["policy"]


def test_reflection_steps_are_paired_on_tasks_both_modes_solved():
    attempts = [  # mode, task, attempt, success, steps
        ("single", "t1", 1, False, 9), ("single", "t2", 1, True, 6), ("single", "t3", 1, False, 5),
        ("independent_retries", "t1", 1, False, 9), ("independent_retries", "t1", 2, True, 12),
        ("independent_retries", "t2", 1, True, 6), ("independent_retries", "t3", 1, None, 0),
        ("reflection_retries", "t1", 1, False, 9), ("reflection_retries", "t1", 2, True, 8),
        ("reflection_retries", "t2", 1, True, 6), ("reflection_retries", "t3", 1, False, 5),
        ("reflection_retries", "t3", 2, True, 7),
    ]  # fmt: skip
    log = pl.DataFrame(
        [{"mode": m, "task_id": t, "attempt": a, "success": ok, "n_steps": n} for m, t, a, ok, n in attempts],
        schema={k: COLLECTION_LOG_SCHEMA[k] for k in ("mode", "task_id", "attempt", "success", "n_steps")},
    )
    steps = {r["baseline"]: r for r in reporting.reflection_steps(log).iter_rows(named=True)}
    independent = steps["independent_retries"]
    # t1 (8 vs 12) and t2 (6 vs 6); t3 was an environment error for independent_retries: not solved.
    assert (independent["tasks"], independent["solved_both"], independent["solved_reflection"]) == (3, 2, 3)
    assert independent["steps_reflection"] == 7.0 and independent["steps_baseline"] == 9.0
    assert independent["steps_saved_pct"] == pytest.approx(100 * (1 - 7 / 9))
    assert (steps["single"]["solved_both"], steps["single"]["steps_saved_pct"]) == (1, 0.0)  # t2 only
    no_episodes, config = pl.DataFrame(schema=EPISODE_SCHEMA), EvaluateParams()
    saved = report.measures(no_episodes, log, config)["reflection_steps_saved_pct"]
    assert saved.value == pytest.approx(independent["steps_saved_pct"]) and saved.n == 2
    lone = log.filter(pl.col("mode") == "reflection_retries")
    assert reporting.reflection_steps(lone).height == 0
    assert (
        "not measured in this run"
        in report.measures(no_episodes, lone, config)["reflection_steps_saved_pct"].how
    )


def test_the_collection_pool_holds_the_tasks_the_sft_model_never_saw(sandbox_task_list, tiny_states):
    """The students fine-tune the SFT model, so their tasks are those none of whose states trained it (its probe
    pool, tasks it did not collect), none the evaluation scores offline and none of the dev split Salvage-DS
    chooses its weights on."""
    tasks = tasks_to_frame(sandbox_task_list)
    ids = tasks["id"].to_list()
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA).head(2)

    def of(*task_ids: str) -> pl.DataFrame:
        return pl.concat([states.with_columns(task_id=pl.lit(t)) for t in task_ids])

    # ids[4:] have no state in any: a probe-pool task, one never collected
    pool = collection_pool(
        tasks, sft_states_train=of(ids[0], ids[1]), sft_states_val=of(ids[2]), sft_states_dev=of(ids[3])
    )
    assert pool["id"].to_list() == ids[4:]


def test_an_environment_reaches_every_variant_built_from_what_it_changes():
    """``--env experiment`` / ``--env production`` change stages and the budget in their own folders; the variants'
    ``${merge:${collect}, ...}`` live in base and still see the change (the project's loader resolves once)."""
    experiment = ProjectConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS, env="experiment")["parameters"]
    ablations = experiment["ablations"]
    assert experiment["collect"]["max_tasks"] is None and ablations["budget"]["collect"]["max_tasks"] == 100
    # no screenshots are collected where the policy's prompt shows none
    assert not experiment["collect"]["keep_screenshots"]
    assert "screenshot" not in experiment["sft"]["training"]["prompt"]["observation"]
    for mode in COLLECTION_MODES:
        variant = ablations[f"collect_{mode}"]
        assert variant["collect"]["max_tasks"] == 100 and variant["collect"]["modes"] == [mode]
        # the experiment's budget holds 10 of a student's 100 tasks out as val (its own 120 would leave none);
        # the probe pool and dev stay empty (not mined), the seed is the experiment's
        split = variant["sft_data"]
        counts = [split[key] for key in ("val_tasks", "probe_tasks", "dev_tasks", "min_train_tasks")]
        assert counts == [10, 0, 0, 50]
        assert experiment["sft_data"]["val_tasks"] == 120 and split["seed"] == experiment["sft_data"]["seed"]
        # each collection's student continues the SFT model where its schedule ended (the loop's 10 % floor)
        loop = variant["sft"]["training"]["loop"]
        assert loop["max_steps"] == 150
        assert loop["learning_rate"] == pytest.approx(
            experiment["sft"]["training"]["loop"]["learning_rate"] * 0.1
        )
    for mode in SALVAGE_MODES:
        variant = ablations[f"rl_{mode}"]["salvage_ds"]
        assert variant["loop"]["max_steps"] == experiment["salvage_ds"]["loop"]["max_steps"] == 144
        assert variant["algorithm"]["sampled_action_budget"] == 9216 and variant["algorithm"]["mode"] == mode
        assert variant["loop"]["learning_rate"] == experiment["salvage_ds"]["loop"]["learning_rate"] == 2e-5
    # of the larger world's 532 val and test tasks on the training sites: 80 a variant, all for the recipe's models
    # (and every held-out one: what 156 episodes could detect was too coarse, docs/evaluate.md "Power")
    assert ablations["evaluate"]["online"]["max_tasks"] == 80
    assert ablations["evaluate"]["online"]["max_held_out_tasks"] == 6
    online = experiment["evaluate"]["online"]
    assert (online["max_tasks"], online["max_held_out_tasks"], online["max_seeds"]) == (None, None, None)
    assert experiment["sandbox"]["instances_per_template"] == 160
    production = ProjectConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS, env="production")["parameters"]
    for mode in COLLECTION_MODES:  # the served teacher, not base's scripted one
        assert production["ablations"][f"collect_{mode}"]["collect"]["teacher"]["kind"] == "openai"


def test_ablations_reuse_the_stages_under_namespaces_and_stay_out_of_the_default_run():
    pipelines = register_pipelines()
    ablations = pipelines["ablations"]
    assert not set(ablations.nodes) & set(pipelines["__default__"].nodes)
    names = {n.name for n in ablations.nodes}
    # Each stage keeps its own namespace inside the variant's (ablations.<variant>.<stage>.<node>).
    for mode in COLLECTION_MODES:
        for stage_node in (
            "collect.collect_trajectories",
            "trajectories.validate_trajectories",
            "sft_data.split_sft_states_by_task",
            "sft.train_sft",
        ):
            assert f"ablations.collect_{mode}.{stage_node}" in names
        # every corpus fine-tunes the default run's SFT model, not a base model of its own
        assert f"ablations.collect_{mode}.sft.build_base_model" not in names
        (train_sft,) = [n for n in ablations.nodes if n.name == f"ablations.collect_{mode}.sft.train_sft"]
        assert "sft_model" in train_sft.inputs and "base_model" not in train_sft.inputs
    for variant in [f"rl_{m}" for m in SALVAGE_MODES] + [FULL_CORPUS]:
        assert f"ablations.{variant}.salvage_ds.train_salvage_ds" in names
    assert f"ablations.{FULL_CORPUS}.mining.select_critical_states" in names
    # The same node functions as the stages (reuse, not copies).
    train = {n.name: n.func for n in ablations.nodes if n.name.endswith(".train_salvage_ds")}
    (original,) = [n.func for n in pipelines["salvage_ds"].nodes if n.name == "salvage_ds.train_salvage_ds"]
    assert set(train.values()) == {original}
    # Inputs from outside: only the default run's datasets and parameters.
    outside = {i for i in ablations.inputs() if not i.startswith("params:")}
    # run_manifest and endpoint_credentials: filled by the run's hooks (runs/hooks/) for every run.
    hooked = {"run_manifest", "endpoint_credentials"}
    assert outside <= set(pipelines["__default__"].all_outputs()) | hooked


@pytest.mark.slow
def test_the_probe_pool_is_namespaced_in_the_collection_variants_and_empty_there():
    """Each collection variant's sft_data writes its own ``ablations.<variant>.sft_states_probe`` (a catalog
    pattern persists it beside its train and val), with no probe pool: the variants are not mined. The full-corpus
    variant selects from the default run's probes, which hold the default run's pool."""
    from kedro.io import DataCatalog

    pipelines = register_pipelines()
    ablations = pipelines["ablations"]
    loader = OmegaConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS)
    catalog = DataCatalog.from_config(loader["catalog"])
    for mode in COLLECTION_MODES:
        variant = f"collect_{mode}"
        (split,) = [
            n for n in ablations.nodes if n.name == f"ablations.{variant}.sft_data.split_sft_states_by_task"
        ]
        parts = [f"ablations.{variant}.sft_states_{part}" for part in ("train", "val", "probe", "dev")]
        assert split.outputs == parts
        assert split.inputs == [f"ablations.{variant}.sft_states", f"params:ablations.{variant}.sft_data"]
        for name in parts:
            filepath = str(catalog.get(name)._filepath)
            assert filepath.endswith(
                f"data/05_model_input/ablations/{variant}/{name.rsplit('.', 1)[1]}.parquet"
            )
        params = loader["parameters"]["ablations"][variant]["sft_data"]
        # 6 of the 40 collected tasks held out as val (base's 24 would leave a student too few); no pool, no dev
        assert (params["val_tasks"], params["probe_tasks"], params["dev_tasks"]) == (6, 0, 0)
        assert (
            params["min_train_tasks"] <= 40 - 6
            and params["prompt"] == loader["parameters"]["sft_data"]["prompt"]
        )
    (select,) = [
        n for n in ablations.nodes if n.name == f"ablations.{FULL_CORPUS}.mining.select_critical_states"
    ]
    assert select.inputs[:2] == ["mining_offline_probes", "mining_online_probes"]
    assert "sft_states_probe" in pipelines["mining"].inputs()


def _add_parameters(catalog: DataCatalog, params: dict, prefix: str = "") -> None:
    """``params:<dotted key>`` for every key at every depth, as a Kedro session feeds them."""
    for key, value in params.items():
        catalog[f"params:{prefix}{key}"] = value
        if isinstance(value, dict):
            _add_parameters(catalog, value, f"{prefix}{key}.")


TINY = {
    "mining": {"scoring": {"k": 2, "batch_size": 12}, "max_states_probed": 12, "online": {"rollouts": 0}},
    "salvage_ds": {"loop": {"max_steps": 1, "batch_size": 2, "max_seconds": None, "progress": False},
                   "algorithm": {"group_size": 2, "max_new_tokens": 12}, "max_eval_states": 2, "eval_samples": 1,
                   "seeds": [0], "max_dev_states": 2},
    "evaluate": {"offline": {"max_states": 4}, "policy": {"max_new_tokens": 16},
                 "online": {"max_tasks": 1, "max_held_out_tasks": 0, "runs": 1, "max_steps": 2}},
    "ablations": {"budget": {
        "collect": {"max_tasks": 2, "n_envs": 1, "max_steps": 14},
        "sft_data": {"val_tasks": 1, "min_train_tasks": 1},  # of the 2 tasks collected: one val, one to train on
        "sft": {"training": {"loop": {"max_steps": 2, "batch_size": 4, "warmup_steps": 0}}},
        "salvage_ds": {"loop": {"max_steps": 1}},
        "evaluate": {"offline": {"max_states": 4}, "online": {"max_tasks": 1, "max_held_out_tasks": 0, "runs": 1}},
    }},
}  # fmt: skip


@pytest.fixture(scope="module")
def ablation_run(tmp_path_factory, tiny_checkpoint, tiny_states, sandbox_task_list) -> Path:
    """The project's catalog and parameters with TINY overrides, run from a fresh folder (relative data paths)."""
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    folder = tmp_path_factory.mktemp("ablations_project")
    # TINY as runtime parameters (as `--params`): the variants' parameters are resolved from them.
    loader = OmegaConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS, runtime_params=TINY)
    config = loader["catalog"]
    for name in ("base_model", "sft_model"):  # the tiny checkpoint stands in for both
        config[name] = {
            "type": "rmsweb_kedro.datasets.checkpoint.CheckpointDataset",
            "filepath": str(tiny_checkpoint),
        }
    params = loader["parameters"]
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        catalog = DataCatalog.from_config(config)
        _add_parameters(catalog, params)
        sandbox_tasks = tasks_to_frame(sandbox_task_list)
        states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
        catalog["tasks"] = sandbox_tasks  # the default tasks table is the sandbox suite
        catalog["collection_tasks"] = select_collection_tasks(
            sandbox_tasks, {"split": "train", "max_tasks": 4}
        )
        catalog["sft_states_train"] = states.filter(pl.col("task_id") < "shop-022")
        catalog["sft_states_dev"] = states.filter(
            pl.col("task_id").is_between(pl.lit("shop-022"), pl.lit("shop-024"))
        )
        catalog["sft_states_probe"] = states.filter(
            pl.col("task_id").is_between(pl.lit("shop-025"), pl.lit("shop-029"))
        )
        catalog["sft_states_val"] = states.filter(pl.col("task_id") >= "shop-030")
        catalog["sft_metrics"] = {"steps": 0}
        catalog["collection_stats"] = {}
        catalog["collection_log"] = pl.DataFrame(schema=COLLECTION_LOG_SCHEMA)
        pipelines = register_pipelines()
        recipe_tail = pipelines["mining"] + pipelines["salvage_ds"] + pipelines["evaluate"]
        SequentialRunner().run(recipe_tail + pipelines["ablations"], catalog)
    finally:
        os.chdir(cwd)
    return folder


@pytest.mark.browser
@pytest.mark.slow
def test_one_table_row_per_variant_with_real_metrics(ablation_run):
    table = pl.read_csv(ablation_run / "data/08_reporting/ablations/ablation_comparison.csv")
    assert table["variant"].to_list() == VARIANTS
    assert table["n_states"].to_list() == [4] * len(VARIANTS)  # the same held-out states for every variant
    assert (
        table["step_success_rate"].is_between(0, 1).all()
        and table["invalid_format_rate"].is_between(0, 1).all()
    )
    assert table["episodes"].to_list() == [1] * len(VARIANTS)
    assert all(s in ("0/1", "1/1") for s in table["successes"])
    assert (table["success_low"] <= table["success_rate"]).all() and (
        table["success_high"] >= table["success_rate"]
    ).all()
    rows = {r["variant"]: r for r in table.iter_rows(named=True)}
    for variant in [f"rl_{m}" for m in SALVAGE_MODES] + [FULL_CORPUS, *SALVAGE_PARTS]:
        assert rows[variant]["train_steps"] == 1 and rows[variant]["seed"] == 0
    # (f) the same total updates: two rounds of one, one round of two
    assert rows[SECOND_ROUND]["train_steps"] == rows[ONE_ROUND_LONG]["train_steps"] == 2
    # Full corpus: every probed SFT state; mined: the critical ones (all of them for an untrained policy) at most.
    assert rows[FULL_CORPUS]["train_states"] >= rows["rl_salvage_ds"]["train_states"] > 0
    md = (ablation_run / "data/08_reporting/ablations/ablation_comparison.md").read_text()
    assert sum(line.startswith("| ") for line in md.splitlines()) == len(VARIANTS) + 1  # header + rows
    assert (ablation_run / "data/08_reporting/ablations/ablations.png").stat().st_size > 1000


@pytest.mark.browser
@pytest.mark.slow
def test_namespaced_outputs_and_consistent_counts(ablation_run):
    data = ablation_run / "data"
    table = {
        r["variant"]: r
        for r in pl.read_csv(data / "08_reporting/ablations/ablation_comparison.csv").iter_rows(named=True)
    }
    for mode in COLLECTION_MODES:
        variant = f"collect_{mode}"
        stats = json.loads((data / f"08_reporting/ablations/{variant}/collection_stats.json").read_text())
        assert list(stats["modes"]) == [mode] and stats["modes"][mode]["tasks"] == 2
        log = pl.read_parquet(data / f"02_intermediate/ablations/{variant}/collection_log.parquet")
        assert set(log["mode"]) == {mode} and table[variant]["attempts"] == log.height
        raw = sorted((data / f"01_raw/ablations/{variant}/{mode}").glob("*.jsonl"))
        assert len(raw) == log.height  # one raw file per attempt of the variant's own corpus
        assert (data / f"06_models/ablations/{variant}/sft_model/config.json").is_file()
        assert (
            json.loads((data / f"08_reporting/ablations/{variant}/sft_metrics.json").read_text())["steps"]
            == 2
        )
    if table["collect_single"]["collection_yield"] == 1.0:  # single never needs more than one attempt
        assert table["collect_single"]["attempts"] == 2
    for mode in SALVAGE_MODES:
        report_ = json.loads((data / f"08_reporting/ablations/rl_{mode}/salvage_ds_report.json").read_text())
        assert report_["params"]["algorithm"]["mode"] == mode
        assert report_["params"]["loop"]["output_dir"] == f"data/06_models/ablations/rl_{mode}/salvage_ds_run"
        assert (data / f"06_models/ablations/rl_{mode}/rmsweb_model/config.json").is_file()
    full = pl.read_parquet(data / f"05_model_input/ablations/{FULL_CORPUS}/critical_states.parquet")
    assert set(full["selection"]) == {"full"}
    steps = pl.read_csv(data / "08_reporting/ablations/reflection_steps.csv")
    assert steps["baseline"].to_list() == ["independent_retries", "single"] and steps["tasks"].to_list() == [
        2,
        2,
    ]
    markdown = (data / "08_reporting/report.md").read_text()
    assert "## Ablations" in markdown and "Reflection-conditioned retries shorten" in markdown
    claims = pl.read_parquet(data / "08_reporting/ablations/claims_vs_run.parquet")
    reflection = claims.filter(pl.col("claim").str.starts_with("Reflection")).row(0, named=True)
    expected = steps.filter(pl.col("steps_saved_pct").is_not_null())
    if expected.height:
        assert reflection["this_run"] == pytest.approx(expected["steps_saved_pct"][0])
    else:
        assert reflection["this_run"] is None and "not measured" in reflection["measured_as"]
    # The claims between variants (ablations.claims): each paired difference is the two variants' own episodes.
    between = pl.read_csv(data / "08_reporting/ablations/ablation_claims.csv")
    params = OmegaConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS)["parameters"]
    configured = params["ablations"]["claims"]
    assert between["claim"].to_list() == [c["claim"] for c in configured]
    won = {v: int(table[v]["successes"] == "1/1") for v in VARIANTS}  # one test task a variant
    for claim, row in zip(configured, between.iter_rows(named=True), strict=True):
        if claim["key"] == "online_success_points":
            first, second = claim["models"]
            assert row["n"] == 1 and row["this_run"] == 100 * (won[first] - won[second])
            assert row["low"] <= row["this_run"] <= row["high"]
        elif claim["key"] == "offline_step_points":  # the same 4 held-out states for every variant
            assert row["n"] == 4 and "4 held-out states scored for both" in row["measured_as"]
    assert "### Claims between variants" in markdown


def test_the_report_section_states_the_budget_it_is_given():
    from rmsweb_kedro.pipelines.ablations import nodes

    steps = reporting.reflection_steps(pl.DataFrame(schema=COLLECTION_LOG_SCHEMA))
    claims = pl.DataFrame({"claim": ["(c) salvage_ds beats grpo"], "this_run": [2.0]})
    section = nodes.ablation_section(
        pl.DataFrame({"variant": ["rl_grpo"]}), claims, steps, 40, 120, 24, online=False
    )
    assert section.startswith("## Ablations")
    assert (
        "collection on 40 tasks per mode, SFT 120 steps per corpus (each fine-tuning the recipe's SFT model), "
        "Salvage-DS 24 steps per variant" in section
    )
    assert "(online evaluation off in this run)" in section and "| rl_grpo |" in section
    assert "| (c) salvage_ds beats grpo | 2 |" in section


def has_key(params: dict, dotted: str) -> bool:
    """Whether the resolved ``params`` hold the dotted parameter name (``ablations.rl_grpo.salvage_ds``)."""
    value = params
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True


def test_every_parameter_the_ablations_read_is_in_the_config():
    params = OmegaConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS)["parameters"]

    def present(dotted: str) -> bool:
        return has_key(params, dotted)

    wanted = {
        i.removeprefix("params:")
        for i in register_pipelines()["ablations"].inputs()
        if i.startswith("params:")
    }
    assert {"ablations.budget.sft.training.loop.max_steps", "ablations.evaluate.online.enabled"} <= wanted
    assert [name for name in sorted(wanted) if not present(name)] == []
