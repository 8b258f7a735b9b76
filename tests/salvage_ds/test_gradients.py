"""Gradient checks on a tiny real model: what one step of each term of L does to the policy."""

from __future__ import annotations

import copy

import pytest
import torch

from rmsweb_kedro.training.salvage_ds.inputs import continuation_logits
from rmsweb_kedro.training.salvage_ds.objective import (
    Rows,
    SalvageDSParams,
    SampledRows,
    StepCounts,
    action_token_mask,
    group_advantages,
    salvage_ds_loss,
    token_logprobs,
)

PROMPT = "State: page with a search box and a cart\n"
GROUP = [
    'Thought: the search box is [5]\nAction: type(5, "Paris")',  # the right one
    "Thought: open the cart\nAction: click(12)",
    'Thought: pick the class\nAction: select_option(7, "Economy")',
    'Action: scroll("down")',
]


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _sequence_logprobs(model, tokenizer, prompt: list[int], continuations: list[list[int]]) -> torch.Tensor:
    logits, targets, mask = continuation_logits(
        model, [prompt] * len(continuations), continuations, tokenizer.pad_token_id
    )
    return (token_logprobs(logits, targets) * mask).sum(-1)


def _sgd_step(model, loss: torch.Tensor, lr: float) -> None:
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                param -= lr * param.grad


def test_padded_batch_matches_one_sequence_at_a_time(tiny_lm):
    model, tokenizer = tiny_lm
    prompts = [_encode(tokenizer, PROMPT), _encode(tokenizer, "State: cart")]
    continuations = [_encode(tokenizer, GROUP[1]), _encode(tokenizer, GROUP[0])]
    with torch.no_grad():
        logits, targets, mask = continuation_logits(model, prompts, continuations, tokenizer.pad_token_id)
        batched = token_logprobs(logits, targets)
        for row, (prompt, continuation) in enumerate(zip(prompts, continuations, strict=True)):
            alone = model(input_ids=torch.tensor([prompt + continuation])).logits[0, len(prompt) - 1 : -1]
            expected = (
                torch.log_softmax(alone, -1).gather(-1, torch.tensor(continuation)[:, None]).squeeze(-1)
            )
            assert mask[row].sum() == len(continuation)
            assert targets[row, : len(continuation)].tolist() == continuation
            torch.testing.assert_close(batched[row, : len(continuation)], expected, atol=1e-4, rtol=1e-4)


def test_accepted_group_raises_the_rewarded_sample(tiny_lm):
    base, tokenizer = tiny_lm
    model = copy.deepcopy(base)
    p = SalvageDSParams(mode="salvage_ds")
    prompt = _encode(tokenizer, PROMPT)
    completions = [_encode(tokenizer, reply) for reply in GROUP]
    advantages = group_advantages(torch.tensor([[1.0, -1.0, -1.0, -1.0]]), p)[0]
    with torch.no_grad():
        before = _sequence_logprobs(model, tokenizer, prompt, completions)

    logits, targets, mask = continuation_logits(model, [prompt] * 4, completions, tokenizer.pad_token_id)
    logp = token_logprobs(logits, targets)
    parts = salvage_ds_loss(
        p,
        StepCounts(completion=int(mask.sum()), accepted_group=1),
        sampled=SampledRows(logp, mask, old_logp=logp.detach(), advantages=advantages),
    )
    _sgd_step(model, parts.loss, lr=0.5)
    with torch.no_grad():
        after = _sequence_logprobs(model, tokenizer, prompt, completions)
    change = (after - before).tolist()
    assert change[0] > 0, change  # the rewarded sample becomes more likely
    assert all(c < 0 for c in change[1:]), change  # the penalised ones less


def test_anchor_raises_action_tokens_and_leaves_the_thought_alone(tiny_lm):
    base, tokenizer = tiny_lm
    model = copy.deepcopy(base)
    p = SalvageDSParams(mode="salvage_ds", lam=1.0)
    prompt = _encode(tokenizer, PROMPT)
    reply = GROUP[0]
    encoded = tokenizer(reply, add_special_tokens=False, return_offsets_mapping=True)
    reply_ids = encoded["input_ids"]
    action_mask = torch.tensor([action_token_mask(encoded["offset_mapping"], reply)])
    assert 0 < int(action_mask.sum()) < len(reply_ids)

    logits, targets, _ = continuation_logits(model, [prompt], [reply_ids], tokenizer.pad_token_id)
    logits.retain_grad()
    logp = token_logprobs(logits, targets)
    parts = salvage_ds_loss(
        p, StepCounts(anchor=int(action_mask.sum()), anchored_group=1), anchored=Rows(logp, action_mask)
    )
    before = logp.detach()
    _sgd_step(model, parts.loss, lr=0.5)

    thought = action_mask[0] == 0
    per_position = logits.grad[0].abs().sum(-1)
    # exactly zero, not small: the thought's likelihood is untouched
    assert torch.all(per_position[thought] == 0.0)
    assert torch.all(per_position[~thought] > 0.0)
    with torch.no_grad():
        after_logits, _, _ = continuation_logits(model, [prompt], [reply_ids], tokenizer.pad_token_id)
        after = token_logprobs(after_logits, targets)
    assert float((after - before)[action_mask.bool()].sum()) > 0  # the reference action becomes more likely
    assert float(parts.anchor.detach()) == pytest.approx(-float(before[action_mask.bool()].mean()), rel=1e-5)
