"""Packed SFT batches (``sft.training.batching: packed``) give the padded batches' loss and gradients.

The same samples go through both collations and the same model; the loss is the micro-batch's share of the step's
token mean (``step_tokens`` = its own labelled tokens, as ``evaluate`` does). Tolerance: relative 1e-5 on the loss
and 1e-4 on each parameter's gradient (its norm of the difference against its norm), in float32. The two paths
run the same arithmetic on different shapes (attention once per sample instead of over a padded row, the LM head on
the supervised rows only), which moves float32 results by ~1e-7 relative; a sample's attention reaching into its
neighbour moves the logits by ~1 (test_samples_attend_only_within_themselves...), and text positions that do not
restart per sample move the screenshot batch's loss by 7e-4 relative (checked by breaking ``pack_batch``).
"""

from __future__ import annotations

import pytest
import torch

from rmsweb_kedro.modeling import load_model, packed_attention, rope_index
from rmsweb_kedro.prompts import PromptConfig
from rmsweb_kedro.training.sft import SFTCollator, pack_batch, sft_loss

LOSS_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4
SCREENSHOTS = PromptConfig(observation=["screenshot", "axtree"], history_k=1)


def _loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    batch = dict(batch, step_tokens={k: float(v) for k, v in batch["loss_tokens"].items()})
    loss, _ = sft_loss(model, batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss), grads


def _compare(model, processor, states, prompt, loss_on="assistant", reply_weight=1.0):
    padded = SFTCollator(processor, prompt, loss_on, reply_weight)(states)
    packed = SFTCollator(processor, prompt, loss_on, reply_weight, rope_index(model))(states)
    assert packed["input_ids"].shape == (1, int(padded["attention_mask"].sum()))  # no padding left
    assert packed["loss_tokens"] == padded["loss_tokens"]
    loss_padded, grads_padded = _loss_and_grads(model, padded)
    with packed_attention(model):
        loss_packed, grads_packed = _loss_and_grads(model, packed)
    assert loss_packed == pytest.approx(loss_padded, rel=LOSS_TOLERANCE)
    assert grads_packed.keys() == grads_padded.keys() and grads_padded
    for name, grad in grads_padded.items():
        error = (grads_packed[name] - grad).norm() / grad.norm().clamp_min(1e-12)
        assert error < GRAD_TOLERANCE, (name, float(error))
    return padded, packed


def test_packed_text_batch_gives_the_padded_loss_and_gradients(tiny_checkpoint, tiny_states):
    model, processor = load_model({"path": str(tiny_checkpoint), "dtype": "float32"})
    padded, packed = _compare(model, processor, tiny_states[:6], PromptConfig())
    lengths = padded["attention_mask"].sum(dim=1)
    assert len(set(lengths.tolist())) > 1  # rows of different lengths: the padded batch has padding
    # each sample's text positions restart at 0; the 3-D rope rows equal them (text only)
    text = packed["position_ids"][0, 0]
    assert int((text == 0).sum()) == 6 and torch.equal(packed["position_ids"][1, 0], text)


def test_packed_screenshot_batch_with_lora_and_weighted_loss_gives_the_padded_loss_and_gradients(
    released_checkpoint, screenshot_states
):
    """Screenshots (3-D rope positions, image_grid_thw), a LoRA policy, and the loss on every token with replies
    weighted (``label_weights`` packed with the labels)."""
    model, processor = load_model(
        {"path": str(released_checkpoint), "dtype": "float32", "lora": {"r": 4, "dropout": 0.0}}
    )
    padded, packed = _compare(model, processor, screenshot_states[:4], SCREENSHOTS, "all", 4.0)
    assert torch.equal(packed["image_grid_thw"], padded["image_grid_thw"])
    # the image's rope positions are 3-D (height and width differ from time inside the image)
    rope = packed["position_ids"][1:, 0]
    assert not torch.equal(rope[0], rope[1])


def test_samples_attend_only_within_themselves_under_every_attention(tiny_checkpoint, tiny_states):
    """A packed row's logits at a sample's positions are that sample's alone, with sdpa (per sample), eager and sdpa
    outside ``packed_attention`` (transformers' block-diagonal mask from the restarting positions)."""
    model, processor = load_model({"path": str(tiny_checkpoint), "dtype": "float32"})
    collate = SFTCollator(processor, PromptConfig(), "all", 1.0, rope_index(model))
    states = tiny_states[:2]
    packed = pack_batch(SFTCollator(processor, PromptConfig(), "all")(states), rope_index(model))
    alone = [collate([state]) for state in states]
    for implementation in ("sdpa", "eager", "sdpa_outside"):
        model.set_attn_implementation("eager" if implementation == "eager" else "sdpa")
        context = packed_attention(model) if implementation == "sdpa" else torch.no_grad()
        with torch.no_grad(), context:
            whole = model(input_ids=packed["input_ids"], position_ids=packed["position_ids"], use_cache=False)
            parts = [
                model(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False).logits[0]
                for b in alone
            ]
        assert torch.allclose(whole.logits[0], torch.cat(parts), atol=1e-4), implementation
