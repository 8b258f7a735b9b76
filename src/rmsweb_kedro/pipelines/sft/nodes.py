"""Nodes of ``sft``: the base model (tiny default or a configured checkpoint) and supervised fine-tuning."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.seeding import draw_states
from rmsweb_kedro.measures.reporting import figure_panels
from rmsweb_kedro.models.modeling import LoadConfig, LoadedModel, ModelSizeConfig
from rmsweb_kedro.training.sft import SFTConfig

logger = logging.getLogger(__name__)


class AugmentationParams(BaseModel):
    """Argument-swap copies of the training states (rmsweb_kedro.trajectories.augmentation); 0 copies: off."""

    model_config = ConfigDict(extra="forbid")

    copies: int = Field(default=0, ge=0, description="swapped copies of each state whose argument is copied")
    pool_share: float = Field(
        default=0.5, ge=0, le=1, description="replacements from other states' arguments"
    )
    seed: int = 0


class SFTParams(BaseModel):
    """The ``sft`` parameters: the base model, the training run, and how many val states to decode."""

    model_config = ConfigDict(extra="forbid")

    #: None: build the tiny default from ``tiny``; else load this checkpoint (e.g. Qwen3-VL-8B-Instruct).
    base_checkpoint: LoadConfig | None = None
    tiny: ModelSizeConfig = Field(default_factory=ModelSizeConfig)
    training: SFTConfig
    augmentation: AugmentationParams = Field(default_factory=AugmentationParams)
    accuracy_states: int | None = Field(
        default=None,
        ge=0,
        description="val states scored before and after (step metrics; drawn with the loop seed); None: all",
    )
    #: the reply budget of those greedy decodes: a reply with a thought (``include_thought``) needs more
    accuracy_max_new_tokens: int = Field(default=48, gt=0)


def _corpus(states: pl.DataFrame, config: SFTConfig) -> list[str]:
    """Every text the tiny tokenizer should know: the prompts' user turns and the reference replies."""
    from rmsweb_kedro.contracts.prompts import build_messages

    texts = []
    for row in states.to_dicts():
        messages, _ = build_messages(row, config.prompt, with_reference=True)
        texts += [
            part["text"] for message in messages for part in message["content"] if part["type"] == "text"
        ]
    return texts


def build_base_model(sft_states_train: pl.DataFrame, params: dict[str, Any]) -> LoadedModel:
    """The untrained base: a configured checkpoint, or the tiny Qwen3-VL with a tokenizer trained on the
    training states' prompt texts (the action space is always in its corpus)."""
    from rmsweb_kedro.models.modeling import build_tiny_model, load_model

    config = SFTParams.model_validate(params)
    if config.base_checkpoint is not None:
        return LoadedModel(*load_model(config.base_checkpoint))
    if sft_states_train.height == 0:
        raise ValueError(
            "sft_states_train is empty: no successful trajectory to train the tokenizer and model on"
        )
    return LoadedModel(*build_tiny_model(_corpus(sft_states_train, config.training), config.tiny))


def augment_train_states(sft_states_train: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """The training states plus their argument-swap copies (none when ``augmentation.copies`` is 0)."""
    from rmsweb_kedro.trajectories.augmentation import augment_states

    config = SFTParams.model_validate(params)
    augmentation = config.augmentation
    if augmentation.copies and "screenshot" in config.training.prompt.observation:
        raise ValueError(
            "sft.augmentation.copies > 0 with screenshots in the prompt: a swapped argument would still show in "
            "the screenshot; set sft.augmentation.copies: 0 (or drop screenshot from the observation)"
        )
    copies = augment_states(
        sft_states_train.to_dicts(), augmentation.copies, augmentation.pool_share, augmentation.seed
    )
    logger.info("%d argument-swap copies of %d training states", len(copies), sft_states_train.height)
    return pl.concat([sft_states_train, pl.DataFrame(copies, schema=sft_states_train.schema)])


def val_step_metrics(
    model, processor, states: list[dict[str, Any]], config: SFTConfig, max_new_tokens: int = 48
) -> dict[str, Any]:
    """The step metrics (``scoring.step_rates``: ``step_success_rate``, ``invalid_format_rate``, ...) of the
    model's greedy replies on ``states``, scored by :func:`rmsweb_kedro.measures.scoring.score_states`."""
    from rmsweb_kedro.agents.hf_policy import HFPolicy
    from rmsweb_kedro.measures.scoring import ScoringConfig, score_states, step_rates

    policy = HFPolicy(model, processor, prompt=config.prompt, greedy=True)
    return step_rates(score_states(states, policy, ScoringConfig(max_new_tokens=max_new_tokens)))


def _token_stats(processor, states: list[dict[str, Any]], config: SFTConfig) -> dict[str, float]:
    from rmsweb_kedro.contracts.prompts import build_messages

    tokens, truncated = 0, 0
    for row in states:
        messages, info = build_messages(row, config.prompt, processor.tokenizer, with_reference=True)
        text = processor.apply_chat_template(messages, tokenize=False)
        tokens += len(processor.tokenizer(text, add_special_tokens=False)["input_ids"])
        truncated += info["truncated"]
    return {"samples": len(states), "tokens": tokens, "truncation_rate": truncated / max(1, len(states))}


def _train_launched(
    base: LoadedModel,
    train: pl.DataFrame,
    val: pl.DataFrame,
    config: SFTConfig,
    checkpoint: LoadConfig | None,
):
    """Run the SFT entry point under ``accelerate launch`` (several processes) and load what it saved; the launched
    processes load the saved base with every field of ``checkpoint`` (``base_checkpoint``) but its path."""
    from rmsweb_kedro.models.modeling import save_checkpoint
    from rmsweb_kedro.training.launch import job_checkpoint, run_launched

    work = Path(config.loop.output_dir) / "launch"
    work.mkdir(parents=True, exist_ok=True)
    save_checkpoint(base.model, base.processor, work / "base")
    base.model.to("cpu")  # the launched processes need the accelerators' memory
    train.write_parquet(work / "train.parquet")
    val.write_parquet(work / "val.parquet")
    job = {
        "model_dir": str(work / "base"),
        "checkpoint": job_checkpoint(work / "base", checkpoint),
        "train_path": str(work / "train.parquet"),
        "val_path": str(work / "val.parquet"),
        "output_dir": config.loop.output_dir,
        "config": config.model_dump(mode="json"),
    }
    return run_launched(config.launch, config.accelerate_dir, "rmsweb_kedro.training.sft", job)


def train_sft(
    base_model: LoadedModel,
    sft_states_train: pl.DataFrame,
    sft_states_val: pl.DataFrame,
    params: dict[str, Any],
) -> tuple[LoadedModel, dict[str, Any], Any]:
    """Fine-tune the base model: in this process, or under ``accelerate launch`` when ``training.launch`` names a
    config. Returns the model, the metrics (history, val step metrics before and after, token stats) and the loss
    curve figure."""
    from rmsweb_kedro.training.sft import run_sft

    config = SFTParams.model_validate(params)
    training = config.training
    model, processor = base_model
    train, val = sft_states_train.to_dicts(), sft_states_val.to_dicts()
    probe = draw_states(sft_states_val, config.accuracy_states, training.loop.seed).to_dicts()
    before = val_step_metrics(model, processor, probe, training, config.accuracy_max_new_tokens)
    if training.launch:
        result = _train_launched(
            base_model, sft_states_train, sft_states_val, training, config.base_checkpoint
        )
    else:
        result = run_sft(model, processor, train, val, training)
    model, history, steps, stopped_early = result.model, result.history, result.step, result.stopped_early
    after = val_step_metrics(model, processor, probe, training, config.accuracy_max_new_tokens)
    logger.info(
        "val step_success_rate: base %s -> sft %s", before["step_success_rate"], after["step_success_rate"]
    )
    metrics = {
        "steps": steps,
        "stopped_early": stopped_early,
        "parameters": sum(p.numel() for p in model.parameters()),
        "base": before,
        "sft": after,
        "data": {
            "train": _token_stats(processor, train, training),
            "val": _token_stats(processor, val, training),
        },
        "final": dict(history[-1]) if history else {},
        "history": history,
        "config": training.model_dump(mode="json"),
    }
    return LoadedModel(model, processor), metrics, plot_loss_curve(history)


def plot_loss_curve(history: list[dict[str, float]]):
    """Train and eval loss against optimizer steps."""
    figure, (axis,) = figure_panels()
    for key, style in (("train/loss", "-"), ("eval/loss", "o-")):
        points = [(row["step"], row[key]) for row in history if key in row]
        if points:
            axis.plot(*zip(*points, strict=True), style, label=key)
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("cross-entropy")
    axis.set_title("SFT loss")
    axis.legend()
    figure.tight_layout()
    return figure
