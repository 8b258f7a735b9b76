"""Supervised fine-tuning: only what differs from the shared loop (the batches and the loss).

Batches come from the chat template's ``{% generation %}`` markers: labels are the input ids on the assistant's
tokens (its reply and ``<|im_end|>``) and -100 elsewhere (``loss_on="assistant"``), or on every non-padding token
(``loss_on="all"``: the tiny default also learns from observation text, which helps it learn to copy).

Entry point for several processes (the ``sft`` node starts it when ``launch`` is configured)::

    accelerate launch --config_file conf/base/accelerate/ddp.yaml -m rmsweb_kedro.training.sft --job JOB.json

``JOB.json``: ``{"model_dir", "train_path", "val_path", "output_dir", "config": SFTConfig}``; the trained model is
saved to ``<output_dir>/final`` and the metrics history to ``<output_dir>/history.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.prompts import PromptConfig, build_messages
from rmsweb_kedro.training.loop import LoopConfig, LoopResult, train_loop

logger = logging.getLogger(__name__)
IGNORE_INDEX = -100


class SFTConfig(BaseModel):
    """The ``sft.training`` parameters."""

    model_config = ConfigDict(extra="forbid")

    loop: LoopConfig
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    loss_on: Literal["assistant", "all"] = "assistant"
    #: None: train in this process. A name: ``accelerate launch --config_file <accelerate_dir>/<name>.yaml``.
    launch: str | None = None
    accelerate_dir: str = "conf/base/accelerate"


class SFTCollator:
    """STATE rows -> a padded batch with ``labels`` (-100 where no loss is taken)."""

    def __init__(self, processor, prompt: PromptConfig, loss_on: str = "assistant"):
        self.processor = processor
        self.prompt = prompt
        self.loss_on = loss_on

    def __call__(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        tokenizer = self.processor.tokenizer
        conversations = [build_messages(s, self.prompt, tokenizer, with_reference=True)[0] for s in states]
        batch = self.processor.apply_chat_template(
            conversations,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
            return_tensors="pt",
            processor_kwargs={"padding": True},
        )
        mask = batch.pop("assistant_masks")
        keep = mask.bool() if self.loss_on == "assistant" else batch["attention_mask"].bool()
        batch["labels"] = batch["input_ids"].masked_fill(~keep, IGNORE_INDEX)
        return dict(batch)


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    """The forward arguments of a batch (everything but labels)."""
    return {k: v for k, v in batch.items() if k != "labels"}


def sft_loss(model, batch: dict[str, Any]):
    """Mean next-token cross-entropy over labelled tokens."""
    import torch.nn.functional as F

    logits = model(**model_inputs(batch)).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
    return loss, {"label_tokens": float((labels != IGNORE_INDEX).sum())}


def run_sft(
    model, processor, train_states: list[dict], val_states: list[dict], config: SFTConfig, eval_fn=None
) -> LoopResult:
    """Train ``model`` on ``train_states`` in this process (or in each process under ``accelerate launch``)."""
    collate = SFTCollator(processor, config.prompt, config.loss_on)
    return train_loop(
        model, train_states, collate, sft_loss, config.loop, eval_samples=val_states, eval_fn=eval_fn
    )


def launch_command(config: SFTConfig, job_path: Path) -> list[str]:
    """The ``accelerate launch`` command line for ``config.launch``."""
    config_file = Path(config.accelerate_dir) / f"{config.launch}.yaml"
    if not config_file.exists():
        raise FileNotFoundError(
            f"accelerate config {config_file} (sft.training.launch={config.launch!r}) not found"
        )
    return [
        sys.executable,  # the accelerate of this environment, whatever PATH holds
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file),
        "-m",
        "rmsweb_kedro.training.sft",
        "--job",
        str(job_path),
    ]


def _main() -> None:
    import polars as pl
    from accelerate import PartialState

    from rmsweb_kedro.modeling import load_model, save_checkpoint

    parser = argparse.ArgumentParser(description="SFT under accelerate launch (see module docstring)")
    parser.add_argument("--job", required=True, help="JSON job file")
    args = parser.parse_args()
    job = json.loads(Path(args.job).read_text())
    config = SFTConfig.model_validate(job["config"])
    state = PartialState()
    model, processor = load_model({"path": job["model_dir"]})
    train_states = pl.read_parquet(job["train_path"]).to_dicts()
    val_states = pl.read_parquet(job["val_path"]).to_dicts() if job.get("val_path") else []
    result = run_sft(model, processor, train_states, val_states, config)
    state_dict = result.accelerator.get_state_dict(result.model)  # gathers FSDP / ZeRO-3 shards
    if state.is_main_process:
        save_checkpoint(result.model, processor, Path(job["output_dir"]) / "final", state_dict=state_dict)
        with open(Path(job["output_dir"]) / "history.jsonl", "w") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in result.history)
    state.wait_for_everyone()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    _main()
