"""Packed SFT batches (``sft.training.batching: packed``) give the padded batches' loss and gradients, also split
into micro-batches by a token budget (``loop.micro_batch_tokens``).

The same samples go through both collations and the same model: the padded step is one batch, the packed step
the same samples re-split by the budget (``training.loop.split_by_tokens``), its micro-batches' shares of the step's
token mean summed (``step_tokens`` = the step's labelled tokens, as the loop gives them). Tolerance: relative 1e-5 on the loss
and 1e-4 on each parameter's gradient (its norm of the difference against its norm), in float32. The two paths
run the same arithmetic on different shapes (attention once per sample instead of over a padded row, the LM head on
the supervised rows only), which moves float32 results by ~1e-7 relative; a sample's attention reaching into its
neighbour moves the logits by ~1 (test_samples_attend_only_within_themselves...), and text positions that do not
restart per sample move the screenshot batch's loss by 7e-4 relative (checked by breaking ``pack_batch``).
"""

from __future__ import annotations

import pytest
import torch

from rmsweb_kedro.contracts.prompts import PromptConfig
from rmsweb_kedro.models.modeling import load_model, packed_attention, rope_index
from rmsweb_kedro.training.loop import split_by_tokens
from rmsweb_kedro.training.sft import IGNORE_INDEX, SFTCollator, pack_batch, sft_loss

LOSS_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4
SCREENSHOTS = PromptConfig(observation=["screenshot", "axtree"], history_k=1)


def _loss_and_grads(model, batches):
    """The step's loss and gradients over its micro-batches ``batches`` (the loop's accumulation)."""
    model.zero_grad(set_to_none=True)
    step_tokens = {"label": float(sum(b["loss_tokens"]["label"] for b in batches))}
    total = 0.0
    for batch in batches:
        loss, _ = sft_loss(model, dict(batch, step_tokens=step_tokens))
        loss.backward()
        total += float(loss.detach())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return total, grads


def _compare(model, processor, states, prompt, loss_on="assistant", reply_weight=1.0, budget=None):
    """The padded batch of ``states`` against the same states packed, in one row or (``budget``) in micro-batches
    of at most ``budget`` tokens; returns the padded batch and the packed micro-batches."""
    padded = SFTCollator(processor, prompt, loss_on, reply_weight)(states)
    collate = SFTCollator(processor, prompt, loss_on, reply_weight, rope_index(model))
    lengths = [collate.sample_tokens(state) for state in states]
    assert lengths == padded["attention_mask"].sum(dim=1).tolist()
    groups = split_by_tokens(lengths, budget) if budget else [list(range(len(states)))]
    packed = [collate([states[i] for i in group]) for group in groups]
    for group, batch in zip(groups, packed, strict=True):  # no padding left; within the budget
        assert batch["input_ids"].shape == (1, sum(lengths[i] for i in group))
        assert budget is None or batch["input_ids"].shape[1] <= budget
    assert sum(b["loss_tokens"]["label"] for b in packed) == padded["loss_tokens"]["label"]
    loss_padded, grads_padded = _loss_and_grads(model, [padded])
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
    padded, (packed,) = _compare(model, processor, tiny_states[:6], PromptConfig())
    lengths = padded["attention_mask"].sum(dim=1)
    assert len(set(lengths.tolist())) > 1  # rows of different lengths: the padded batch has padding
    # each sample's text positions restart at 0; the 3-D rope rows equal them (text only)
    text = packed["position_ids"][0, 0]
    assert int((text == 0).sum()) == 6 and torch.equal(packed["position_ids"][1, 0], text)


def test_budget_packed_text_step_with_all_token_loss_and_left_padding_gives_the_padded_step(
    tiny_checkpoint, tiny_states
):
    """Loss on every token, the tiny tokenizer padding on the left: a shorter row's first real token follows
    padding and is left unlabelled, as a packed sample's first token is (it follows another sample)."""
    model, processor = load_model({"path": str(tiny_checkpoint), "dtype": "float32"})
    assert processor.tokenizer.padding_side == "left"
    padded, packed = _compare(model, processor, tiny_states[:8], PromptConfig(), "all", budget=600)
    real = padded["attention_mask"].bool()
    assert not real[:, 0].all()  # left padding: some rows start later
    first = real.int().argmax(dim=1)
    assert (padded["labels"][torch.arange(len(first)), first] == IGNORE_INDEX).all()
    counts = sorted(int((b["position_ids"][0, 0] == 0).sum()) for b in packed)
    assert len(packed) > 1 and len(set(counts)) > 1  # several micro-batches of different sample counts


def test_packed_screenshot_batch_with_lora_and_weighted_loss_gives_the_padded_loss_and_gradients(
    released_checkpoint, screenshot_states
):
    """Screenshots (3-D rope positions, image_grid_thw), a LoRA policy, and the loss on every token with replies
    weighted (``label_weights`` packed with the labels)."""
    model, processor = load_model(
        {"path": str(released_checkpoint), "dtype": "float32", "lora": {"r": 4, "dropout": 0.0}}
    )
    padded, (packed,) = _compare(model, processor, screenshot_states[:4], SCREENSHOTS, "all", 4.0)
    assert torch.equal(packed["image_grid_thw"], padded["image_grid_thw"])
    # the image's rope positions are 3-D (height and width differ from time inside the image)
    rope = packed["position_ids"][1:, 0]
    assert not torch.equal(rope[0], rope[1])


def test_budget_packed_screenshot_step_with_lora_gives_the_padded_step(
    released_checkpoint, screenshot_states
):
    """Screenshot samples (253-292 tokens) with a LoRA policy, assistant-only loss, split by a 600-token budget
    into micro-batches of 2, 2 and 1 samples: each keeps its images and grids, the step its loss and gradients."""
    model, processor = load_model(
        {"path": str(released_checkpoint), "dtype": "float32", "lora": {"r": 4, "dropout": 0.0}}
    )
    padded, packed = _compare(model, processor, screenshot_states[:5], SCREENSHOTS, budget=600)
    assert sorted(len(b["image_grid_thw"]) for b in packed) == [1, 2, 2]
    assert torch.equal(
        torch.cat([b["image_grid_thw"] for b in packed]).sum(0), padded["image_grid_thw"].sum(0)
    )


def test_split_by_tokens_fills_micro_batches_to_the_budget_and_to_a_given_count():
    lengths = [300, 120, 950, 80, 400, 260, 120, 700]
    groups = split_by_tokens(lengths, 1000)
    assert sorted(i for g in groups for i in g) == list(range(8))  # every sample once, none dropped
    assert all(sum(lengths[i] for i in g) <= 1000 for g in groups)
    assert len(groups) == 3  # 2,930 tokens: three micro-batches is the least
    over = split_by_tokens([1500, 200, 300], 1000)  # a sample over the budget: a micro-batch of its own
    assert sorted(over) == [[0], [1, 2]]
    for count in range(3, 9):  # as many as another process needs, all non-empty, still within the budget
        forced = split_by_tokens(lengths, 1000, count)
        assert len(forced) == count and all(forced)
        assert sorted(i for g in forced for i in g) == list(range(8))
        assert all(sum(lengths[i] for i in g) <= 1000 for g in forced)
    with pytest.raises(ValueError, match="cannot split 8 samples into 9"):
        split_by_tokens(lengths, 1000, 9)


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


def test_a_token_budget_needs_packed_rows_and_a_trainer_that_measures_samples(tmp_path):
    from rmsweb_kedro.training.loop import LoopConfig, train_loop
    from rmsweb_kedro.training.sft import SFTConfig

    loop = {"output_dir": str(tmp_path), "micro_batch_tokens": 4096}
    with pytest.raises(ValueError, match="only packed rows hold .* set batching: packed"):
        SFTConfig(loop=loop, batching="padded")
    assert SFTConfig(loop=loop, batching="packed").loop.micro_batch_tokens == 4096
    with pytest.raises(ValueError, match="gives no sample_tokens .* set loop.micro_batch_tokens: null"):
        train_loop(
            None, [{"state_id": "s"}], lambda s: {}, sft_loss, LoopConfig(**loop)
        )  # before any model use
