"""Supervised fine-tuning: only what differs from the shared loop (the batches and the loss).

Labels are the input ids on the assistant's tokens (its reply and the end-of-turn token) and -100 elsewhere
(``loss_on="assistant"``), or on every non-padding token (``loss_on="all"``: the tiny default also learns from
observation text, which helps it learn to copy; ``reply_weight`` then weighs the reply's tokens against the rest).
The assistant's tokens are found by rendering, not by ``{% generation %}`` markers (the released Qwen3-VL templates
have none): :func:`assistant_char_spans`. Screenshots in the prompt go through the processor with the text, so the
batch carries ``pixel_values``, ``image_grid_thw`` and ``mm_token_type_ids`` and the loss is the policy's with the
image. The loss follows the shared loop's normalisation contract (``training/loop.py``): a token mean over the whole
optimizer step.

Two batchings of the same micro-batch (``batching``), the same samples, labels and loss normalisation:

- ``padded``: rows padded to the longest (the tokenizer's side); the model computes the padding too and the loss
  takes fp32 logits at every position (masked by ``labels``);
- ``packed``: the micro-batch's samples concatenated into one row without padding. Each sample keeps its own
  positions: the text position restarts at 0 per sample and the 3-D multimodal rope positions are Qwen3-VL's own
  (``get_rope_index`` on the padded batch, padding dropped), the images stay in sample order with their
  ``image_grid_thw``; attention stays within a sample (``flash_attention_2``: varlen from the positions; ``sdpa``:
  ``modeling.packed_attention``, the samples as rows of one causal call; ``eager``: transformers' block-diagonal
  mask). The LM head runs
  only at positions whose next token is supervised (``logits_to_keep``), so no logits are built for prompts or
  padding. With ``loop.micro_batch_tokens`` the loop re-splits each step's samples into packed micro-batches of at
  most that many tokens (``training.loop.split_by_tokens``), each sample measured by
  :meth:`SFTCollator.sample_tokens`.

Entry point for several processes (the ``sft`` node starts it when ``launch`` is configured)::

    accelerate launch --config_file conf/base/accelerate/ddp.yaml -m rmsweb_kedro.training.sft --job JOB.json

``JOB.json``: ``{"model_dir", "checkpoint", "train_path", "val_path", "output_dir", "config": SFTConfig}``
(``checkpoint``: the node's ``base_checkpoint`` load config for ``model_dir``, ``training.launch.job_checkpoint``;
optional); the trained model is
saved to ``<output_dir>/final`` and the metrics history to ``<output_dir>/history.jsonl`` (``training.launch``,
the design Salvage-DS shares).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages, image_paths
from rmsweb_kedro.training.loop import LoopConfig, LoopResult, train_loop

logger = logging.getLogger(__name__)
IGNORE_INDEX = -100


class SFTConfig(BaseModel):
    """The ``sft.training`` parameters."""

    model_config = ConfigDict(extra="forbid")

    loop: LoopConfig
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    loss_on: Literal["assistant", "all"] = "assistant"
    #: With ``loss_on="all"``: each reply token's weight in the loss, an observation token's being 1 (the loss is
    #: the weighted token mean, so the reply's share of the gradient grows without changing what is learned from).
    reply_weight: float = Field(1.0, gt=0)
    #: ``padded`` or ``packed`` micro-batches (module docstring); the loss and its normalisation are the same.
    #: ``packed`` with ``loop.micro_batch_tokens``: micro-batches filled to a token budget (``training.loop``).
    batching: Literal["padded", "packed"] = "padded"
    #: None: train in this process. A name: ``accelerate launch --config_file <accelerate_dir>/<name>.yaml``.
    launch: str | None = None
    accelerate_dir: str = "conf/base/accelerate"

    @model_validator(mode="after")
    def _weight_needs_all(self) -> SFTConfig:
        if self.reply_weight != 1.0 and self.loss_on != "all":
            raise ValueError(
                f"reply_weight {self.reply_weight} weighs replies against observation tokens, which only "
                f"loss_on='all' trains on (loss_on={self.loss_on!r}): set reply_weight: 1"
            )
        return self

    @model_validator(mode="after")
    def _budget_needs_packed(self) -> SFTConfig:
        if self.loop.micro_batch_tokens is not None and self.batching != "packed":
            raise ValueError(
                f"loop.micro_batch_tokens {self.loop.micro_batch_tokens} fills micro-batches to a token budget, "
                f"which only packed rows hold (batching={self.batching!r}: padded rows would cost the longest "
                "row times the samples): set batching: packed, or loop.micro_batch_tokens: null"
            )
        return self


def assistant_char_spans(processor, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
    """``(text, spans)``: the rendered conversation and the [start, end) characters of each assistant turn's reply,
    from its first character to the end of its end-of-turn token (what ``{% generation %}`` would mark).

    Works for any template that renders earlier turns the same whether or not later turns follow (Qwen's do): turn
    i starts where ``messages[:i]`` rendered with the generation prompt ends, and ends where ``messages[:i + 1]``
    ends (trailing whitespace, the newline between turns, excluded)."""
    render = processor.apply_chat_template
    text = render(messages, tokenize=False)
    spans = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(messages[:index], tokenize=False, add_generation_prompt=True)
        through = render(messages[: index + 1], tokenize=False)
        if not (text.startswith(through) and through.startswith(before)):
            raise ValueError(
                f"the chat template renders the conversation before assistant turn {index} differently when later "
                "turns follow, so its reply cannot be located; use a template whose turns render independently"
            )
        spans.append((len(before), len(through.rstrip())))
    return text, spans


def assistant_token_mask(processor, messages: list[dict[str, Any]], input_ids: list[int]) -> list[int]:
    """1 on the tokens of ``input_ids`` (the processor's ids of ``messages``, unpadded, image pads expanded) that
    belong to an assistant reply (:func:`assistant_char_spans`), 0 elsewhere."""
    text, spans = assistant_char_spans(processor, messages)
    tokenizer = processor.tokenizer
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    inside = [any(a < hi and lo < b for lo, hi in spans) for a, b in encoded["offset_mapping"]]
    image_pad = tokenizer.convert_tokens_to_ids(processor.image_token)
    mask: list[int] = []
    for token, keep in zip(encoded["input_ids"], inside, strict=True):
        position = len(mask)
        if token == image_pad:  # the processor repeats it once per visual token of the image
            while len(mask) < len(input_ids) and input_ids[len(mask)] == image_pad:
                mask.append(0)
        elif position < len(input_ids) and input_ids[position] == token:
            mask.append(int(keep))
        else:
            break
    if len(mask) != len(input_ids):
        raise ValueError(
            f"the processor's tokens of the conversation differ from the tokenizer's at position {len(mask)}: "
            "cannot map the assistant spans onto the input ids"
        )
    return mask


class SFTCollator:
    """STATE rows -> a padded batch with ``labels`` (-100 where no loss is taken), the image inputs when the prompt
    shows screenshots, and ``loss_tokens`` (the loop's normalisation contract); with ``rope_index`` (the model's
    ``modeling.rope_index``) the same samples packed into one row instead (:func:`pack_batch`)."""

    def __init__(
        self,
        processor,
        prompt: PromptConfig,
        loss_on: str = "assistant",
        reply_weight: float = 1.0,
        rope_index=None,
    ):
        self.processor = processor
        self.prompt = prompt
        self.loss_on = loss_on
        self.reply_weight = reply_weight
        self.rope_index = rope_index

    def _encode(self, states: list[dict[str, Any]]) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
        """``(conversations, the processor's padded batch of them)``, screenshots included."""
        from PIL import Image

        processor = self.processor
        conversations = [
            build_messages(s, self.prompt, processor.tokenizer, with_reference=True)[0] for s in states
        ]
        texts = [processor.apply_chat_template(messages, tokenize=False) for messages in conversations]
        images = [
            Image.open(path).convert("RGB") for messages in conversations for path in image_paths(messages)
        ]
        return conversations, dict(
            processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        )

    def sample_tokens(self, state: dict[str, Any]) -> int:
        """The tokens ``state`` holds in a batch (image pads expanded, no padding): the loop's ``sample_tokens``."""
        return int(self._encode([state])[1]["input_ids"].shape[1])

    def __call__(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        processor = self.processor
        conversations, batch = self._encode(states)
        labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)
        weighted = self.loss_on == "all" and self.reply_weight != 1.0
        weights = torch.zeros(labels.shape) if weighted else None  # 0 on padding
        for row, (state, messages) in enumerate(zip(states, conversations, strict=True)):
            real = batch["attention_mask"][row].bool()
            ids = batch["input_ids"][row][real]
            reply = None
            if self.loss_on == "assistant" or weighted:
                try:
                    reply = torch.tensor(
                        assistant_token_mask(processor, messages, ids.tolist()), dtype=torch.bool
                    )
                except ValueError as err:
                    raise ValueError(f"state {state.get('state_id')!r}: {err}") from None
            keep = reply if self.loss_on == "assistant" else torch.ones_like(ids, dtype=torch.bool)
            if weighted:
                weights[row, real] = torch.where(reply, self.reply_weight, 1.0)
            if not keep[1:].any():  # the first token is never predicted
                raise ValueError(
                    f"state {state.get('state_id')!r}: no token to supervise (loss_on={self.loss_on!r}): its "
                    "rendered conversation holds no assistant reply"
                )
            labels[row, real] = ids.masked_fill(~keep, IGNORE_INDEX)
        # A row's first token is never predicted from its own sample: left padding would otherwise supervise it
        # from the padding (under loss_on="all"), which the packed row, where it follows another sample, cannot.
        first = batch["attention_mask"].cumsum(dim=1) == 1
        batch["labels"] = labels.masked_fill(first, IGNORE_INDEX)
        if weighted:
            batch["label_weights"] = weights.masked_fill(first, 0.0)
        if self.rope_index is not None:
            return pack_batch(batch, self.rope_index)
        if weighted:
            batch["loss_tokens"] = {"label": float(batch["label_weights"][:, 1:].sum())}
        else:
            batch["loss_tokens"] = {"label": int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())}
        return batch


def pack_batch(batch: dict[str, Any], rope_index) -> dict[str, Any]:
    """A padded SFT batch as one packed row: its real tokens concatenated in sample order, ``position_ids`` of
    shape (4, 1, tokens) (row 0 the text position, restarting at 0 per sample, which also marks where samples start;
    rows 1-3 the multimodal rope positions ``rope_index`` gives the padded batch), the image inputs as they are (in
    sample order already), ``logits_to_keep`` (1, tokens): True where the next token of the same sample is
    supervised, and ``labels`` (and ``label_weights``) flat, one per kept position. ``loss_tokens`` counts the
    supervised tokens but each sample's first (never predicted: :class:`SFTCollator` leaves it unlabelled whatever
    the padding side), so it equals the padded batch's count and the two give the same loss."""
    import torch

    real = batch["attention_mask"].bool()
    ids = batch["input_ids"]
    modality = batch.get("mm_token_type_ids")
    if modality is None:  # a text-only batch: every token is text
        modality = torch.zeros_like(ids)
    rope, _ = rope_index(
        input_ids=ids,
        mm_token_type_ids=modality,
        image_grid_thw=batch.get("image_grid_thw"),
        attention_mask=batch["attention_mask"],
    )
    lengths = real.sum(dim=1).tolist()
    text = torch.cat([torch.arange(n) for n in lengths])
    # each sample's first token is unlabelled (the collator), so no position targets the next sample's token
    labels = batch["labels"][real]
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:-1] = labels[1:] != IGNORE_INDEX
    packed = {
        "input_ids": ids[real][None],
        "position_ids": torch.cat([text[None], rope[:, real]])[:, None],
        "mm_token_type_ids": modality[real][None],
        "logits_to_keep": keep[None],
        "labels": labels[1:][keep[:-1]],
        "use_cache": False,  # a cache would hide the samples' boundaries from transformers' packed masks
    }
    packed |= {k: batch[k] for k in ("pixel_values", "image_grid_thw") if k in batch}
    if "label_weights" in batch:
        weights = batch["label_weights"][real][1:][keep[:-1]]
        packed["label_weights"] = weights
        packed["loss_tokens"] = {"label": float(weights.sum())}
    else:
        packed["loss_tokens"] = {"label": int(keep.sum())}
    return packed


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    """The forward arguments of a batch: its tensors but the labels and their weights (ids, masks, image inputs)."""
    import torch

    inputs = {
        k: v for k, v in batch.items() if k not in ("labels", "label_weights") and isinstance(v, torch.Tensor)
    }
    return inputs | ({"use_cache": batch["use_cache"]} if "use_cache" in batch else {})


def sft_loss(model, batch: dict[str, Any]):
    """This micro-batch's share of the step's next-token cross-entropy: the sum over its labelled tokens (each
    times its ``label_weights`` entry where the batch has them) divided by the step's labelled tokens (their weights'
    sum), ``batch["step_tokens"]["label"]``, the loop's contract. A packed batch (:func:`pack_batch`) has logits
    only at its supervised positions, one per label."""
    import torch.nn.functional as F

    logits = model(**model_inputs(batch)).logits
    labels, weights = batch["labels"], batch.get("label_weights")
    if "logits_to_keep" not in batch:  # padded: position t predicts token t + 1
        logits, labels = logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten()
        weights = None if weights is None else weights[:, 1:].flatten()
    per_token = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="none")
    if weights is not None:
        per_token = per_token * weights
    return per_token.sum() / batch["step_tokens"]["label"], {}


def run_sft(
    model, processor, train_states: list[dict], val_states: list[dict], config: SFTConfig, eval_fn=None
) -> LoopResult:
    """Train ``model`` on ``train_states`` in this process (or in each process under ``accelerate launch``)."""
    from rmsweb_kedro.models.modeling import packed_attention, rope_index

    packed = config.batching == "packed"
    collate = SFTCollator(
        processor, config.prompt, config.loss_on, config.reply_weight, rope_index(model) if packed else None
    )
    with packed_attention(model) if packed else nullcontext():
        return train_loop(
            model,
            train_states,
            collate,
            sft_loss,
            config.loop,
            eval_samples=val_states,
            eval_fn=eval_fn,
            sample_tokens=collate.sample_tokens,
        )


def _main() -> None:
    import polars as pl

    from rmsweb_kedro.training.launch import load_job_model, read_job, save_launched

    job = read_job("SFT under accelerate launch (see module docstring)")
    config = SFTConfig.model_validate(job["config"])
    model, processor = load_job_model(job)
    train_states = pl.read_parquet(job["train_path"]).to_dicts()
    val_states = pl.read_parquet(job["val_path"]).to_dicts() if job.get("val_path") else []
    save_launched(run_sft(model, processor, train_states, val_states, config), processor, job["output_dir"])


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    _main()
