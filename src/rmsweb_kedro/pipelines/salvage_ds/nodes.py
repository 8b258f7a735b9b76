"""Nodes of the ``salvage_ds`` pipeline: split the critical states, train on the shared loop, report, plot."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.contracts.schema import conform_states
from rmsweb_kedro.contracts.seeding import draw_states
from rmsweb_kedro.measures.reporting import figure_panels
from rmsweb_kedro.training.loop import LoopConfig
from rmsweb_kedro.training.salvage_ds import SalvageDSParams
from rmsweb_kedro.training.sampling import SamplerConfig
from rmsweb_kedro.trajectories.states import split_by_task as states_split_by_task

logger = logging.getLogger(__name__)


class SalvageDSNodeParams(BaseModel):
    """``params:salvage_ds`` (conf/base/parameters_salvage_ds.yml)."""

    model_config = ConfigDict(extra="forbid")

    algorithm: SalvageDSParams = Field(default_factory=SalvageDSParams)
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)
    loop: LoopConfig
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    held_out_fraction: float = Field(0.25, ge=0.0, lt=1.0)
    max_eval_states: int = Field(16, ge=0, description="critical states scored before/after, each split")
    max_val_states: int | None = Field(None, ge=0, description="val steps scored before/after; None: all")
    eval_samples: int = Field(4, ge=1)
    seed: int = 0
    #: None: train in this process. A name: ``accelerate launch --config_file <accelerate_dir>/<name>.yaml``.
    launch: str | None = None
    accelerate_dir: str = "conf/base/accelerate"
    #: launched: how the processes load the SFT policy, ``modeling.LoadConfig``'s fields but path, lora and device
    #: (``training.launch.job_checkpoint``), e.g. ``{attn_implementation: flash_attention_2, dtype: bfloat16}``
    launch_load: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _load_fields(self) -> SalvageDSNodeParams:
        from rmsweb_kedro.models.modeling import LoadConfig

        reserved = {"path", "lora", "device"} & set(self.launch_load)
        if reserved:
            raise ValueError(
                f"salvage_ds.launch_load: {sorted(reserved)} are set by the stage (the saved SFT policy, its "
                "adapter, each process's accelerator); remove them"
            )
        LoadConfig.model_validate({"path": "-", **self.launch_load})  # names a field it lacks: extra="forbid"
        return self


def split_by_task(
    states: pl.DataFrame, held_out_fraction: float, seed: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(train, held_out)`` critical states, whole tasks held out (``states.split_by_task``, as sft_data splits).
    Tables from before a STATE_SCHEMA column existed get its default (``schema.conform_states``)."""
    return states_split_by_task(conform_states(states, "critical_states"), held_out_fraction, seed)


def train_rmsweb_model(
    sft_model: Any, critical_states: pl.DataFrame, val_states: pl.DataFrame, params: dict[str, Any]
) -> tuple[Any, pl.DataFrame, dict[str, Any]]:
    """Salvage-DS from the SFT model on the critical states: ``(rmsweb_model, salvage_ds_metrics, report)``.

    Step success rate, competence and valid rate (rmsweb_kedro.measures.scoring) are measured on three splits, before training (a step-0 row of
    the metrics) and at every evaluation (the last one is "after"): ``train`` (trained critical states),
    ``held_out`` (critical states of held-out tasks) and ``val`` (the SFT val steps, ``sft_states_val``). Each
    measurement draws from the same seeded random numbers, outside the training's RNG stream."""
    from rmsweb_kedro.models.modeling import LoadedModel
    from rmsweb_kedro.training.salvage_ds import competence_eval_fn, train_job

    config = SalvageDSNodeParams.model_validate(params)
    model, processor = sft_model
    train, held_out = split_by_task(critical_states, config.held_out_fraction, config.seed)
    report: dict[str, Any] = {
        "states": {"train": train.height, "held_out": held_out.height, "val": val_states.height},
        "params": config.model_dump(mode="json"),
    }
    if train.height == 0:
        logger.warning("salvage_ds: no critical states to train on; rmsweb_model is the SFT model unchanged")
        report["skipped"] = "no critical states to train on"
        return LoadedModel(model, processor), pl.DataFrame({"step": []}, schema={"step": pl.Int64}), report

    output_dir = Path(config.loop.output_dir)
    if (
        not config.loop.resume and output_dir.exists()
    ):  # a fresh run must not mix with an older run's checkpoints
        shutil.rmtree(output_dir)
    train_rows = train.to_dicts()
    splits = {
        "train": draw_states(train, config.max_eval_states, config.seed).to_dicts(),
        "held_out": draw_states(held_out, config.max_eval_states, config.seed).to_dicts(),
        "val": draw_states(val_states, config.max_val_states, config.seed).to_dicts(),
    }
    report["states"]["scored"] = {split: len(rows) for split, rows in splits.items()}
    competence = competence_eval_fn(
        splits, config.algorithm, processor, config.prompt, config.eval_samples, config.seed
    )
    scores = competence(model)
    if config.launch:
        result = _train_launched(sft_model, train, splits, config)
    else:
        result = train_job(model, processor, train_rows, config, competence)
    history = pl.from_dicts([{"step": 0, **scores}, *result.history], infer_schema_length=None)
    report["before"] = _by_split(scores)
    report["after"] = _by_split({key: result.last(key) for key in scores})
    report.update(steps=result.step, resumed_from=result.resumed_from, stopped_early=result.stopped_early)
    report["means"] = {
        column.removeprefix("train/"): float(history[column].mean())
        for column in history.columns
        if column.startswith("train/")
    }
    logger.info("salvage_ds: before %s, after %s", report["before"], report["after"])
    return LoadedModel(result.model, processor), history, report


def _train_launched(
    policy: Any, train: pl.DataFrame, splits: dict[str, list[dict]], config: SalvageDSNodeParams
):
    """Run the Salvage-DS entry point under ``accelerate launch`` (``training.launch``) and load what it saved."""
    from rmsweb_kedro.models.modeling import save_checkpoint
    from rmsweb_kedro.training.launch import run_launched

    work = Path(config.loop.output_dir) / "launch"
    work.mkdir(parents=True, exist_ok=True)
    save_checkpoint(policy.model, policy.processor, work / "policy")  # a LoRA policy as base + adapter
    policy.model.to("cpu")  # the launched processes need the accelerators' memory
    train.write_parquet(work / "train.parquet")
    for name, rows in splits.items():  # val rows (sft_states_val) may lack the critical states' extra columns
        frame = pl.from_dicts(rows, infer_schema_length=None) if rows else pl.DataFrame()
        frame.write_parquet(work / f"{name}.parquet")
    job = launch_job(work, list(splits), config)
    return run_launched(config.launch, config.accelerate_dir, "rmsweb_kedro.training.salvage_ds", job)


def launch_job(work: Path, split_names: list[str], config: SalvageDSNodeParams) -> dict[str, Any]:
    """The job of the launched entry point (``training.salvage_ds._main``) for files under ``work``: the saved
    policy ``work/policy`` with its load config (``launch_load``), ``train.parquet``, ``<split>.parquet`` and the
    :class:`SalvageDSJob` fields of ``config``."""
    from rmsweb_kedro.training.launch import job_checkpoint
    from rmsweb_kedro.training.salvage_ds import SalvageDSJob

    policy = str(work / "policy")
    return {
        "model_dir": policy,
        "checkpoint": job_checkpoint(policy, {"path": policy, **config.launch_load}),
        "train_path": str(work / "train.parquet"),
        "splits": {name: str(work / f"{name}.parquet") for name in split_names},
        "output_dir": config.loop.output_dir,
        "config": config.model_dump(mode="json", include=set(SalvageDSJob.model_fields)),
    }


def _by_split(row: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{'eval/<split>/<metric>': v}`` -> ``{split: {metric: v}}``."""
    nested: dict[str, dict[str, float]] = {}
    for key, value in row.items():
        _, split, metric = key.split("/")
        nested.setdefault(split, {})[metric] = value
    return nested


#: The panels of the training plot: a title and the ``train/`` series drawn in it.
PANELS = {
    "groups": [
        "rounds",
        "discarded_groups",
        "acceptance_rate",
        "anchor_share",
        "rejected_no_contrast",
        "rejected_too_easy",
        "rejected_too_hard",
    ],
    "reward and competence": ["mean_reward", "competence", "valid_rate"],
    "loss terms": ["loss", "surrogate", "anchor_nll", "kl"],
    "policy": ["entropy", "clip_fraction", "approx_kl_old"],
}


#: The evaluation panels: a split and its ``eval/<split>/`` series (step 0 is before training).
EVAL_PANELS = {
    "held-out critical states": "held_out",
    "val steps": "val",
}
EVAL_SERIES = ["step_success_rate", "competence", "valid_rate"]


def plot_salvage_ds_metrics(metrics: pl.DataFrame):
    """A figure of the per-step metrics: group decisions, reward/competence, loss terms, entropy/clipping, and
    step success rate / competence on held-out critical states and on val steps from before training (step 0)."""
    panels = [(title, [f"train/{n}" for n in names]) for title, names in PANELS.items()]
    panels += [(title, [f"eval/{split}/{n}" for n in EVAL_SERIES]) for title, split in EVAL_PANELS.items()]
    fig, axes = figure_panels(len(panels), panel_size=(4.5, 3.5))
    for ax, (title, columns) in zip(axes, panels, strict=True):
        for column in columns:
            if column in metrics.columns:
                points = metrics.select("step", column).drop_nulls()
                label = column.split("/")[-1]
                ax.plot(points["step"].to_list(), points[column].to_list(), label=label, marker=".")
        ax.set_title(title + ("" if metrics.height else " (no steps)"))
        ax.set_xlabel("optimizer step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
