"""RL rounds: the ablations' (f) variants (``rl_second_round`` against ``rl_one_round_long``) and the
``second_round`` pipeline, checked through the registered pipelines' graphs and the project's own config (base and
experiment), and one real run of ``second_round`` at tiny sizes (a tiny checkpoint as the default run's
``rmsweb_model``, offline evaluation)."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline
from kedro.runner import SequentialRunner

from rmsweb_kedro.contracts.schema import COLLECTION_LOG_SCHEMA, STATE_SCHEMA, tasks_to_frame
from rmsweb_kedro.pipeline_registry import register_pipelines
from rmsweb_kedro.pipelines.ablations.pipeline import FIRST_ROUND, ONE_ROUND_LONG, SECOND_ROUND
from rmsweb_kedro.settings import CONFIG_LOADER_ARGS, ProjectConfigLoader, scale_parameter
from tests.ablations.test_ablations import _add_parameters, has_key

REPO = Path(__file__).resolve().parents[2]
ENVS = (None, "experiment")  # base alone, and base + conf/experiment


def _parameters(env: str | None = None, runtime: dict | None = None) -> dict:
    return ProjectConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS, env=env, runtime_params=runtime)[
        "parameters"
    ]


def _node(pipe: Pipeline, name: str):
    (node,) = [n for n in pipe.nodes if n.name == name]
    return node


def test_scaled_keeps_counts_whole_and_no_cap_as_none():
    assert scale_parameter(48, 2) == 96 and isinstance(scale_parameter(48, 2), int)
    assert scale_parameter(48, 0.5) == 24 and isinstance(scale_parameter(48, 0.5), int)
    assert scale_parameter(1e-4, 2) == pytest.approx(2e-4)
    assert scale_parameter(None, 2) is None  # no sampled-action cap stays no cap
    with pytest.raises(ValueError, match="not a whole number"):
        scale_parameter(7, 0.5)


@pytest.mark.parametrize("env", ENVS)
def test_two_rounds_and_one_round_have_the_same_total_updates_and_sampled_actions(env):
    """Round 1 is rl_salvage_ds, round 2 has its settings, and the one round has both rounds' updates and sampled
    actions, everything else as theirs; in base and in an environment that changes the budget."""
    ablations = _parameters(env)["ablations"]
    first, second, long = (ablations[v]["salvage_ds"] for v in (FIRST_ROUND, SECOND_ROUND, ONE_ROUND_LONG))
    steps = [run["loop"]["max_steps"] for run in (first, second, long)]
    budgets = [run["algorithm"]["sampled_action_budget"] for run in (first, second, long)]
    assert steps[0] + steps[1] == steps[2] and steps[0] == steps[1] > 0
    assert budgets[0] + budgets[1] == budgets[2] and budgets[0] == budgets[1] > 0
    for run in (second, long):  # the same algorithm, loop and seeds but for the budget and the folder
        loop = {k: v for k, v in run["loop"].items() if k not in ("max_steps", "output_dir")}
        assert loop == {k: v for k, v in first["loop"].items() if k not in ("max_steps", "output_dir")}
        algorithm = {k: v for k, v in run["algorithm"].items() if k != "sampled_action_budget"}
        assert algorithm == {k: v for k, v in first["algorithm"].items() if k != "sampled_action_budget"}
        assert run["seeds"] == first["seeds"] and run["algorithm"]["mode"] == "salvage_ds"
    folders = {run["loop"]["output_dir"] for run in (first, second, long)}
    variants = (FIRST_ROUND, SECOND_ROUND, ONE_ROUND_LONG)
    assert folders == {f"data/06_models/ablations/{v}/salvage_ds_run" for v in variants}


def test_a_budget_override_reaches_both_sides_of_the_rounds_claim():
    budget = {"salvage_ds": {"loop": {"max_steps": 5}, "algorithm": {"sampled_action_budget": 40}}}
    ablations = _parameters(runtime={"ablations": {"budget": budget}})["ablations"]
    runs = [ablations[v]["salvage_ds"] for v in (FIRST_ROUND, SECOND_ROUND, ONE_ROUND_LONG)]
    assert [r["loop"]["max_steps"] for r in runs] == [5, 5, 10]
    assert [r["algorithm"]["sampled_action_budget"] for r in runs] == [40, 40, 80]


@pytest.mark.parametrize("env", ENVS)
def test_each_second_mining_is_the_stages_own_writing_its_files_apart(env):
    """The second rounds' mining is the environment's mining stage, its screenshots and server logs in folders of
    their own (a second mining into the default run's folder would replace the screenshots its critical states
    point at)."""
    params = _parameters(env)
    for mining in (params["ablations"][SECOND_ROUND]["mining"], params["second_round"]["mining"]):
        assert {k: v for k, v in mining.items() if k not in ("online", "server_logs")} == {
            k: v for k, v in params["mining"].items() if k not in ("online", "server_logs")
        }
        assert mining["online"]["rollouts"] == params["mining"]["online"]["rollouts"]
        assert mining["online"]["screenshot_root"] != params["mining"]["online"]["screenshot_root"]
        assert mining["server_logs"] != params["mining"]["server_logs"]
    second = params["second_round"]
    assert second["salvage_ds"]["loop"]["output_dir"] == "data/06_models/second_round/salvage_ds_run"
    assert {k: v for k, v in second["salvage_ds"]["loop"].items() if k != "output_dir"} == {
        k: v for k, v in params["salvage_ds"]["loop"].items() if k != "output_dir"
    }
    evaluate = second["evaluate"]
    assert evaluate["offline"] == params["evaluate"]["offline"]
    assert evaluate["online"]["max_tasks"] == params["evaluate"]["online"]["max_tasks"]
    assert evaluate["online"]["episodes_root"] != params["evaluate"]["online"]["episodes_root"]
    assert [c["models"] for c in evaluate["claims"]] == [["second_round", "rmsweb"]] * 2


def test_the_second_round_mines_the_first_rounds_model_and_trains_from_it():
    ablations = register_pipelines()["ablations"]
    round_1 = f"ablations.{FIRST_ROUND}.rmsweb_model"
    mining = [n for n in ablations.nodes if n.name.startswith(f"ablations.{SECOND_ROUND}.mining.")]
    probes = [n for n in mining if n.name.split(".")[-1] in ("probe_offline", "probe_online")]
    assert len(probes) == 2 and all(round_1 in n.inputs and "sft_model" not in n.inputs for n in probes)
    train = _node(ablations, f"ablations.{SECOND_ROUND}.salvage_ds.train_salvage_ds")
    assert train.inputs[:2] == [round_1, f"ablations.{SECOND_ROUND}.critical_states"]
    # what the second round's models need: round 1 (trained from the SFT model) and the mining of its model
    upstream = {n.name for n in ablations.to_outputs(f"ablations.{SECOND_ROUND}.rmsweb_models").nodes}
    first = _node(ablations, f"ablations.{FIRST_ROUND}.salvage_ds.train_salvage_ds")
    assert first.inputs[:2] == ["sft_model", "critical_states"]
    assert {
        first.name,
        f"ablations.{FIRST_ROUND}.salvage_ds.choose_rmsweb_model",
        f"ablations.{SECOND_ROUND}.mining.select_critical_states",
    } <= upstream
    # the one round: from the SFT model on the default run's mined states, nothing of the rounds upstream
    long = _node(ablations, f"ablations.{ONE_ROUND_LONG}.salvage_ds.train_salvage_ds")
    assert long.inputs[:2] == ["sft_model", "critical_states"]
    assert {n.name for n in ablations.to_outputs(f"ablations.{ONE_ROUND_LONG}.rmsweb_models").nodes} == {
        long.name
    }
    # both rounds' reports describe the variant (steps and states summed over rounds), and both are evaluated
    facts = _node(ablations, f"ablations.{SECOND_ROUND}.describe_variant")
    assert facts.inputs == [f"ablations.{v}.salvage_ds_report" for v in (FIRST_ROUND, SECOND_ROUND)]
    for variant in (SECOND_ROUND, ONE_ROUND_LONG):
        offline = _node(ablations, f"ablations.predict_offline_{variant}")
        assert offline.inputs[:2] == ["sft_states_val", f"ablations.{variant}.rmsweb_models"]


def test_the_rounds_reuse_the_stages_nodes_under_their_namespace():
    pipelines = register_pipelines()
    stages = {n.name: n.func for n in (pipelines["mining"] + pipelines["salvage_ds"]).nodes}
    for name, namespace in (("ablations", f"ablations.{SECOND_ROUND}"), ("second_round", "second_round")):
        reused = {
            n.name.removeprefix(f"{namespace}."): n.func
            for n in pipelines[name].nodes
            if n.name.startswith((f"{namespace}.mining.", f"{namespace}.salvage_ds."))
        }
        assert reused == stages  # every node of the two stages, the same functions: no copies


def test_the_second_round_pipeline_starts_from_the_default_runs_model_and_writes_apart():
    pipelines = register_pipelines()
    second = pipelines["second_round"]
    default = pipelines["__default__"]
    assert not {n.name for n in second.nodes} & {n.name for n in default.nodes}
    # everything it writes is its own: the default run's datasets stay as they are
    assert {o.split(".")[0] for o in second.all_outputs()} == {"second_round"}
    outside = {i for i in second.inputs() if not i.startswith("params:")}
    assert "rmsweb_model" in outside and outside <= set(default.all_outputs())
    for name in ("second_round.mining.probe_offline", "second_round.mining.probe_online"):
        assert "rmsweb_model" in _node(second, name).inputs
    train = _node(second, "second_round.salvage_ds.train_salvage_ds")
    assert train.inputs[:2] == ["rmsweb_model", "second_round.critical_states"]
    # evaluated against the model it starts from, with the evaluate stage's nodes
    assert _node(second, "second_round.predict_offline_rmsweb").inputs[1] == "rmsweb_model"
    evaluated = _node(second, "second_round.predict_offline_second_round")
    assert evaluated.inputs[1] == "second_round.rmsweb_models"
    claims = _node(second, "second_round.claims_vs_run")
    assert claims.outputs == ["second_round.claims_vs_run"]
    assert "params:second_round.evaluate" in claims.inputs


@pytest.mark.parametrize("env", ENVS)
def test_every_name_the_rounds_read_resolves_from_the_config(env):
    """Every parameter the two pipelines read is in the resolved config; every dataset ``second_round`` keeps is
    in the catalog, in folders of its own; the claims name models the pipelines evaluate."""
    loader = ProjectConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS, env=env)
    params = loader["parameters"]
    pipelines = register_pipelines()

    def present(dotted: str) -> bool:
        return has_key(params, dotted)

    for name in ("ablations", "second_round"):
        wanted = {i.removeprefix("params:") for i in pipelines[name].inputs() if i.startswith("params:")}
        assert {"second_round.mining", "ablations.rl_second_round.mining"} & wanted
        assert [p for p in sorted(wanted) if not present(p)] == []
    catalog = DataCatalog.from_config(loader["catalog"])
    kept = ("critical_states", "rmsweb_models", "rmsweb_model", "salvage_ds_report", "mining_report",
            "salvage_ds_plot", "model_comparison", "offline_predictions", "claims_vs_run")  # fmt: skip
    for name in kept:
        path = str(catalog.get(f"second_round.{name}")._filepath)
        assert "/second_round/" in path, path
    for name in ("critical_states", "mining_report", "rmsweb_model"):
        path = str(catalog.get(f"ablations.{SECOND_ROUND}.{name}")._filepath)
        assert f"/ablations/{SECOND_ROUND}/" in path
    labels = {n.name.removeprefix("ablations.predict_offline_") for n in pipelines["ablations"].nodes
              if n.name.startswith("ablations.predict_offline_")}  # fmt: skip
    rounds = [c for c in params["ablations"]["claims"] if c.get("models") == [SECOND_ROUND, ONE_ROUND_LONG]]
    assert [c["key"] for c in rounds] == ["online_success_points", "offline_step_points"]
    assert all(set(c.get("models", [])) <= labels for c in params["ablations"]["claims"])


TINY = {
    "mining": {"scoring": {"k": 2, "batch_size": 12}, "max_states_probed": 12, "online": {"rollouts": 0}},
    "salvage_ds": {"loop": {"max_steps": 1, "batch_size": 2, "progress": False},
                   "algorithm": {"group_size": 2, "max_new_tokens": 12}, "max_eval_states": 2, "eval_samples": 1,
                   "seeds": [0], "max_dev_states": 2},
    "evaluate": {"offline": {"max_states": 4}, "policy": {"max_new_tokens": 16}},
    "second_round": {"evaluation": {"online": {"enabled": False}}},
}  # fmt: skip


@pytest.mark.slow
def test_a_tiny_second_round_writes_only_its_own_files(
    tmp_path, tiny_checkpoint, tiny_states, sandbox_task_list
):
    """``second_round`` at tiny sizes from the project's catalog and parameters (TINY as ``--params``), a tiny
    checkpoint as the default run's ``rmsweb_model``: its models, mining and evaluation land under its own
    folders, and its offline claim is second_round's paired step success minus rmsweb_model's."""
    loader = ProjectConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS, runtime_params=TINY)
    config = loader["catalog"]
    checkpoint = "rmsweb_kedro.datasets.checkpoint.CheckpointDataset"
    config["rmsweb_model"] = {"type": checkpoint, "filepath": str(tiny_checkpoint)}
    states = pl.DataFrame(tiny_states, schema=STATE_SCHEMA)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        catalog = DataCatalog.from_config(config)
        _add_parameters(catalog, loader["parameters"])
        catalog["tasks"] = tasks_to_frame(sandbox_task_list)
        task = pl.col("task_id")  # the splits by task, as the ablations' tiny run has them
        catalog["sft_states_train"] = states.filter(task < "shop-022")
        catalog["sft_states_dev"] = states.filter((task >= "shop-022") & (task <= "shop-024"))
        catalog["sft_states_probe"] = states.filter((task >= "shop-025") & (task <= "shop-029"))
        catalog["sft_states_val"] = states.filter(task >= "shop-030")
        catalog["collection_log"] = pl.DataFrame(schema=COLLECTION_LOG_SCHEMA)
        SequentialRunner().run(register_pipelines()["second_round"], catalog)
    finally:
        os.chdir(cwd)
    written = [p.relative_to(tmp_path) for p in (tmp_path / "data").rglob("*") if p.is_file()]
    assert written and all("second_round" in p.parts for p in written)
    data = tmp_path / "data"
    assert (data / "06_models/second_round/rmsweb_models/seed_0/config.json").is_file()
    assert (data / "06_models/second_round/rmsweb_model/config.json").is_file()
    critical = pl.read_parquet(data / "05_model_input/second_round/critical_states.parquet")
    probes = pl.read_parquet(data / "07_model_output/second_round/mining/offline_probes.parquet")
    assert critical.height > 0 and set(critical["state_id"]) <= set(probes["state_id"])
    comparison = pl.read_parquet(data / "08_reporting/second_round/model_comparison.parquet")
    assert comparison["model"].to_list() == ["rmsweb", "second_round_s0"]
    predictions = pl.read_parquet(data / "07_model_output/second_round/offline_predictions.parquet")
    rates = {m: predictions.filter(pl.col("model") == m)["step_success"].mean() for m in comparison["model"]}
    claims = pl.read_csv(data / "08_reporting/second_round/claims_vs_run.csv")
    offline = claims.filter(pl.col("claim").str.contains("held-out states")).row(0, named=True)
    assert offline["n"] == 4
    assert offline["this_run"] == pytest.approx(100 * (rates["second_round_s0"] - rates["rmsweb"]))
