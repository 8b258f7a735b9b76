"""Nodes of the ``salvage_ds`` pipeline: split the critical states, train on the shared loop, report, plot."""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.prompts import PromptConfig
from rmsweb_kedro.schema import STATE_SCHEMA
from rmsweb_kedro.training.loop import LoopConfig
from rmsweb_kedro.training.salvage_ds import SalvageDSParams

logger = logging.getLogger(__name__)


class SalvageDSNodeParams(BaseModel):
    """``params:salvage_ds`` (conf/base/parameters_salvage_ds.yml)."""

    model_config = ConfigDict(extra="forbid")

    algorithm: SalvageDSParams = Field(default_factory=SalvageDSParams)
    loop: LoopConfig
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    held_out_fraction: float = Field(0.25, ge=0.0, lt=1.0)
    max_eval_states: int = Field(16, ge=0)
    eval_samples: int = Field(4, ge=1)
    seed: int = 0


def split_by_task(
    states: pl.DataFrame, held_out_fraction: float, seed: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(train, held_out)``: whole tasks are held out, so no held-out state shares a task with a trained one."""
    missing = [name for name in STATE_SCHEMA if name not in states.columns]
    if missing:
        raise ValueError(f"critical_states: missing STATE_SCHEMA columns {missing}")
    tasks = sorted(states["task_id"].unique().to_list())
    random.Random(seed).shuffle(tasks)
    n_held = int(len(tasks) * held_out_fraction) if len(tasks) > 1 else 0
    held = set(tasks[:n_held])
    is_held = pl.col("task_id").is_in(list(held))
    return states.filter(~is_held), states.filter(is_held)


def _sample(rows: list[dict], limit: int, seed: int) -> list[dict]:
    return rows if len(rows) <= limit else random.Random(seed).sample(rows, limit)


def train_rmsweb_model(
    sft_model: Any, critical_states: pl.DataFrame, params: dict[str, Any]
) -> tuple[Any, pl.DataFrame, dict[str, Any]]:
    """Salvage-DS from the SFT model on the critical states: ``(rmsweb_model, salvage_ds_metrics, report)``.

    The report holds greedy accuracy and competence before and after on the trained and the held-out states."""
    from rmsweb_kedro.modeling import LoadedModel
    from rmsweb_kedro.training.salvage_ds import evaluate_competence, prepare_states, train_salvage_ds

    config = SalvageDSNodeParams.model_validate(params)
    model, processor = sft_model
    train, held_out = split_by_task(critical_states, config.held_out_fraction, config.seed)
    report: dict[str, Any] = {
        "states": {"train": train.height, "held_out": held_out.height},
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
    train_rows, held_rows = train.to_dicts(), held_out.to_dicts()
    scored = {
        "train": prepare_states(
            _sample(train_rows, config.max_eval_states, config.seed), processor, config.prompt
        ),
        "held_out": prepare_states(
            _sample(held_rows, config.max_eval_states, config.seed), processor, config.prompt
        ),
    }
    tokenizer = processor.tokenizer

    def competence(policy) -> dict[str, dict[str, float]]:
        return {
            split: evaluate_competence(policy, states, config.algorithm, tokenizer, config.eval_samples)[0]
            for split, states in scored.items()
            if states
        }

    report["before"] = competence(model)
    result = train_salvage_ds(
        model,
        processor,
        train_rows,
        config.algorithm,
        config.loop,
        config.prompt,
        eval_states=_sample(held_rows, config.max_eval_states, config.seed),
        eval_samples=config.eval_samples,
    )
    report["after"] = competence(result.model)
    report.update(steps=result.step, resumed_from=result.resumed_from, stopped_early=result.stopped_early)
    history = pl.from_dicts(result.history, infer_schema_length=None) if result.history else pl.DataFrame()
    if history.height:
        report["means"] = {
            column.removeprefix("train/"): float(history[column].mean())
            for column in history.columns
            if column.startswith("train/")
        }
    logger.info("salvage_ds: competence before %s, after %s", report["before"], report["after"])
    return LoadedModel(result.model, processor), history, report


#: The panels of the training plot: a title and the ``train/`` series drawn in it.
PANELS = {
    "groups": [
        "acceptance_rate",
        "anchor_share",
        "rejected_no_contrast",
        "rejected_too_easy",
        "rejected_too_hard",
    ],
    "reward and competence": ["mean_reward", "competence", "valid_rate"],
    "loss terms": ["loss", "surrogate", "anchor_nll", "kl"],
    "policy": ["entropy", "clip_fraction"],
}


def plot_salvage_ds_metrics(metrics: pl.DataFrame):
    """A figure of the per-step metrics: group decisions, reward/competence, loss terms, entropy/clipping."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.5 * len(PANELS), 3.5))
    for ax, (title, names) in zip(axes, PANELS.items(), strict=True):
        for name in names:
            column = f"train/{name}"
            if column in metrics.columns:
                ax.plot(metrics["step"].to_list(), metrics[column].to_list(), label=name, marker=".")
        ax.set_title(title + ("" if metrics.height else " (no steps)"))
        ax.set_xlabel("optimizer step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
