"""The salvage_ds node on real data: split by task, train, report, plot; and the pipeline's wiring."""

from __future__ import annotations

import copy

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import STATE_SCHEMA, reference_set
from rmsweb_kedro.pipelines.salvage_ds.nodes import plot_salvage_ds_metrics, split_by_task, train_rmsweb_model
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


def test_pipeline_wiring():
    pipeline = create_pipeline()
    assert pipeline.inputs() == {"sft_model", "critical_states", "sft_states_val", "params:salvage_ds"}
    assert {"rmsweb_model", "salvage_ds_metrics", "salvage_ds_report", "salvage_ds_plot"} <= set(
        pipeline.all_outputs()
    )


@pytest.mark.slow
def test_node_trains_and_reports(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    params = {
        "algorithm": {"group_size": 4, "max_new_tokens": 10},
        "loop": {"output_dir": str(tmp_path / "run"), "max_steps": 2, "batch_size": 2, "progress": False},
        "prompt": prompt.model_dump(),
        "held_out_fraction": 0.25,
        "max_eval_states": 2,
        "eval_samples": 2,
    }
    critical = pl.DataFrame(states, schema=STATE_SCHEMA)
    val = pl.DataFrame(make_states(3, seed=1), schema=STATE_SCHEMA)  # other tasks: the SFT val steps
    rmsweb_model, metrics, report = train_rmsweb_model(
        (copy.deepcopy(model), processor), critical, val, params
    )
    assert rmsweb_model.processor is processor
    assert metrics["step"].to_list() == [0, 1, 2]  # step 0: before training
    splits, measures = ("train", "held_out", "val"), ("step_success_rate", "competence", "valid_rate")
    scored = {f"eval/{split}/{m}" for split in splits for m in measures}
    assert {"train/acceptance_rate", "train/anchor_share", "train/kl", *scored} <= set(metrics.columns)
    assert metrics.filter(pl.col("step") == 0)["train/loss"].to_list() == [None]
    assert metrics.filter(pl.col("step") == 1)["eval/val/competence"].to_list() == [None]  # eval_every: 0
    assert report["states"] == {
        "train": 6,
        "held_out": 2,
        "val": 3,
        "scored": {"train": 2, "held_out": 2, "val": 3},
    }
    assert set(report["before"]) == set(report["after"]) == {"train", "held_out", "val"}
    before, after = metrics.row(0, named=True), metrics.row(-1, named=True)
    assert report["before"]["val"]["competence"] == before["eval/val/competence"]
    assert report["after"]["held_out"]["step_success_rate"] == after["eval/held_out/step_success_rate"]
    assert (tmp_path / "run" / "checkpoints").is_dir()
    figure = plot_salvage_ds_metrics(metrics)
    assert [ax.get_title() for ax in figure.axes][-2:] == ["held-out critical states", "val steps"]


def test_node_passes_the_sft_model_through_without_states(sft_tiny, tmp_path):
    model, processor, _, prompt = sft_tiny
    params = {"loop": {"output_dir": str(tmp_path / "run")}, "prompt": prompt.model_dump()}
    empty = pl.DataFrame(schema=STATE_SCHEMA)
    rmsweb_model, metrics, report = train_rmsweb_model((model, processor), empty, empty, params)
    assert rmsweb_model.model is model and metrics.height == 0 and "skipped" in report


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
    job = launch_job(tmp_path, ["val"], SalvageDSNodeParams(loop=loop, launch="cpu_2proc", launch_load=load))
    launched, _ = load_job_model(job)
    assert launched.config._attn_implementation == "eager"
    assert launched.get_base_model().model.language_model.embed_tokens.weight.dtype == torch.bfloat16
    assert launched.peft_config["default"].r == 4
    assert any(p.requires_grad for n, p in launched.named_parameters() if "lora_" in n)
    plain, _ = load_job_model(launch_job(tmp_path, [], SalvageDSNodeParams(loop=loop)))
    assert plain.config._attn_implementation == "sdpa"  # LoadConfig's default, as in one process
    with pytest.raises(ValueError, match=r"launch_load: \['path'\] are set by the stage"):
        SalvageDSNodeParams(loop=loop, launch_load={"path": "/elsewhere"})
    with pytest.raises(ValueError, match="attn_impl"):
        SalvageDSNodeParams(loop=loop, launch_load={"attn_impl": "eager"})
