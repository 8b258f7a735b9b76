"""The salvage_ds node on real data: split by task, train, report, plot; and the pipeline's wiring."""

from __future__ import annotations

import copy
from pathlib import Path

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import STATE_SCHEMA, reference_set
from rmsweb_kedro.measures.report import salvage_ds_table
from rmsweb_kedro.pipelines.salvage_ds.nodes import (
    GROUPS_SCHEMA,
    choose_rmsweb_model,
    gather_groups,
    plot_salvage_ds_metrics,
    plot_state_competence,
    split_by_task,
    train_rmsweb_models,
)
from rmsweb_kedro.pipelines.salvage_ds.pipeline import create_pipeline
from tests.salvage_ds.conftest import make_states


def test_split_holds_out_whole_tasks():
    states = pl.DataFrame(make_states(8), schema=STATE_SCHEMA)
    train, held = split_by_task(states, 0.25, seed=0)
    assert (train.height, held.height) == (6, 2)
    assert not set(train["task_id"]) & set(held["task_id"])
    with pytest.raises(ValueError, match=r"critical_states: missing STATE_SCHEMA columns \['axtree'\]"):
        split_by_task(states.drop("axtree"), 0.25, seed=0)


def test_a_table_from_before_reference_sets_still_loads_and_a_bad_equivalent_is_named():
    old = pl.DataFrame(make_states(4), schema=STATE_SCHEMA).drop("equivalent_actions")
    train, held = split_by_task(old.with_columns(pl.lit(0.5).alias("competence")), 0.0, seed=0)
    assert train.columns == [*STATE_SCHEMA.names(), "competence"] and held.height == 0
    assert train["equivalent_actions"].to_list() == [[]] * 4
    row = {**train.row(0, named=True), "equivalent_actions": ['press("Enter")']}
    assert [str(a) for a in reference_set(row)] == [row["reference_action"], 'press("Enter")']
    with pytest.raises(
        ValueError, match=r"state 'shop-0:0': field equivalent_actions 'clack\(2\)' does not parse"
    ):
        reference_set({**row, "equivalent_actions": ["clack(2)"]})


def test_pipeline_wiring_reads_no_evaluation_split():
    """Salvage-DS chooses its checkpoint on sft_states_dev and replays sft_states_train; it never reads
    sft_states_val, the split evaluate reports, and neither does mining (the defaults of both stages are chosen on
    what they read: docs/salvage_ds.md, "Choosing the defaults")."""
    from rmsweb_kedro.pipelines.mining.pipeline import create_pipeline as mining_pipeline

    pipeline = create_pipeline()
    assert pipeline.inputs() == {
        "sft_model", "critical_states", "sft_states_dev", "sft_states_train", "params:salvage_ds"
    }  # fmt: skip
    assert "sft_states_val" not in pipeline.inputs() | mining_pipeline().inputs()
    outputs = {"rmsweb_models", "rmsweb_model", "salvage_ds_metrics", "salvage_ds_report", "salvage_ds_groups",
               "salvage_ds_plot", "salvage_ds_states_plot"}  # fmt: skip
    assert outputs <= set(pipeline.all_outputs())


def test_the_defaults_benchmark_selects_on_dev_alone():
    """benchmarks/salvage_ds_defaults.py, which chose the stage's defaults, scores its candidates on the dev split
    and loads no evaluation split at all."""
    from benchmarks import salvage_ds_defaults

    assert salvage_ds_defaults.SELECTED_ON == "sft_states_dev"
    source = Path(salvage_ds_defaults.__file__).read_text()
    assert "sft_states_val" not in source and "offline_predictions" not in source


@pytest.mark.slow
def test_node_trains_each_seed_and_reports(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    params = {
        "algorithm": {"group_size": 4, "max_new_tokens": 10},
        "loop": {"output_dir": str(tmp_path / "run"), "max_steps": 4, "batch_size": 2, "progress": False,
                 "eval_every": 2, "select_metric": "eval/dev/step_success_rate"},
        "prompt": prompt.model_dump(),
        "seeds": [0, 1],
        "held_out_fraction": 0.25,
        "max_eval_states": 2,
        "eval_samples": 2,
    }  # fmt: skip
    # mining's origin column where it says why it chose a state (null: a table from before it; counted "unknown")
    origins = ["greedy_wrong", "ballast", None, "samples_spread"] * 2
    critical = pl.DataFrame(states, schema=STATE_SCHEMA).with_columns(pl.Series("origin", origins, pl.String))
    dev = pl.DataFrame(make_states(3, seed=1), schema=STATE_SCHEMA)  # other tasks: the dev split
    models, metrics, report = train_rmsweb_models(
        (copy.deepcopy(model), processor), critical, dev, critical, params
    )
    assert sorted(models) == [0, 1] and all(m.processor is processor for m in models.values())
    assert metrics.columns[:2] == ["seed", "step"]
    assert metrics.filter(pl.col("seed") == 0)["step"].to_list() == [0, 1, 2, 3, 4]  # step 0: before training
    assert metrics.filter(pl.col("step") == 0)["train/loss"].to_list() == [None, None]
    assert metrics.filter(pl.col("step") == 1)["eval/dev/step_success_rate"].to_list() == [None, None]
    assert {"train/accepted_groups", "train/anchored_groups", "train/pool_states", "train/kl"} <= set(
        metrics.columns
    )
    assert report["states"] == {
        "train": 6,
        "held_out": 2,
        "dev": 3,
        "scored": {"train": 2, "held_out": 2, "dev": 3},
    }
    assert set(report["before"]) == {"train", "held_out", "dev"} and set(report["runs"]) == {"0", "1"}
    for seed, run in report["runs"].items():
        dev_scores = metrics.filter(pl.col("seed") == int(seed))["eval/dev/step_success_rate"].drop_nulls()
        assert run["best_dev"] == dev_scores.max() >= dev_scores[0]  # the returned weights: dev's best
        assert run["after"]["dev"]["step_success_rate"] == run["best_dev"]
        assert (tmp_path / "run" / f"seed_{seed}" / "checkpoints").is_dir()
    groups = gather_groups(report, params)
    assert groups.schema == GROUPS_SCHEMA and set(groups["seed"]) == {0, 1}
    origin_of = dict(zip(critical["state_id"], critical["origin"], strict=True))
    assert [origin_of[s] for s in groups["state_id"]] == groups["origin"].to_list()  # each group its state's
    for seed, run in report["runs"].items():
        assert run["stop_reason"] is None and run["steps"] == 4  # no budget: the run reached max_steps
        trained = groups.filter(
            (pl.col("seed") == int(seed)) & pl.col("decision").is_in(["accepted", "anchored"])
        )
        by_origin = trained["origin"].fill_null("unknown").value_counts()
        assert run["trained_groups_by_origin"] == dict(by_origin.iter_rows()) and trained.height > 0
    # the report's table says each seed's updates, why it stopped and what it trained by origin
    table = salvage_ds_table(report)
    assert table["updates"].to_list() == [4, 4] and table["stop"].to_list() == ["max_steps", "max_steps"]
    for row in table.iter_rows(named=True):
        counted = report["runs"][str(row["seed"])]["trained_groups_by_origin"]
        assert row["trained_by_origin"] == ", ".join(f"{k} {v}" for k, v in counted.items())
    chosen = choose_rmsweb_model(models, report)
    best = max(report["seeds"], key=lambda s: report["runs"][str(s)]["best_dev"])
    assert chosen is models[best]
    figure = plot_salvage_ds_metrics(metrics, report)
    assert figure.axes[0].get_title() == "dev split: step_success_rate"
    assert plot_state_competence(groups, params).axes[0].get_title().endswith("seed 0")


def test_node_refuses_an_empty_corpus_or_dev_split(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    params = {"loop": {"output_dir": str(tmp_path / "run")}, "prompt": prompt.model_dump()}
    empty, some = pl.DataFrame(schema=STATE_SCHEMA), pl.DataFrame(states, schema=STATE_SCHEMA)
    with pytest.raises(ValueError, match="critical_states holds no state to train on"):
        train_rmsweb_models((model, processor), empty, some, some, params)
    with pytest.raises(ValueError, match="sft_states_dev is empty"):
        train_rmsweb_models((model, processor), some, empty, some, params)


def test_the_launched_job_loads_the_policy_with_every_launch_load_field(tmp_path, tiny_checkpoint):
    """``salvage_ds.launch_load`` reaches the launched processes: the job the node writes (``launch_job``) loads
    (``training.launch.load_job_model``, what the entry point calls) with its attention and dtype, the LoRA adapter
    the node saved with the base still trainable; the fields the stage sets itself are refused by name."""
    import torch

    from rmsweb_kedro.models.modeling import load_model, save_checkpoint
    from rmsweb_kedro.pipelines.salvage_ds.nodes import SalvageDSNodeParams, launch_job
    from rmsweb_kedro.training.launch import load_job_model

    model, processor = load_model({"path": str(tiny_checkpoint), "lora": {"r": 4}})
    save_checkpoint(model, processor, tmp_path / "policy")  # as the node does before launching
    loop = {"output_dir": str(tmp_path / "run")}
    load = {"attn_implementation": "eager", "dtype": "bfloat16"}
    job = launch_job(tmp_path, SalvageDSNodeParams(loop=loop, launch="cpu_2proc", launch_load=load))
    launched, _ = load_job_model(job)
    assert launched.config._attn_implementation == "eager"
    assert launched.get_base_model().model.language_model.embed_tokens.weight.dtype == torch.bfloat16
    assert launched.peft_config["default"].r == 4
    assert any(p.requires_grad for n, p in launched.named_parameters() if "lora_" in n)
    plain, _ = load_job_model(launch_job(tmp_path, SalvageDSNodeParams(loop=loop)))
    assert plain.config._attn_implementation == "sdpa"  # LoadConfig's default, as in one process
    with pytest.raises(ValueError, match=r"launch_load: \['path'\] are set by the stage"):
        SalvageDSNodeParams(loop=loop, launch_load={"path": "/elsewhere"})
    with pytest.raises(ValueError, match="attn_impl"):
        SalvageDSNodeParams(loop=loop, launch_load={"attn_impl": "eager"})
