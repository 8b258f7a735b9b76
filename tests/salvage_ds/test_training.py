"""Salvage-DS on the shared loop with a tiny Qwen3-VL fine-tuned briefly on the states: a short run raises
competence on them, an interrupted run resumes exactly, and the pipeline node writes its outputs."""

from __future__ import annotations

import copy

import pytest
import torch

from rmsweb_kedro.training.salvage_ds import (
    REJECT_REASONS,
    SalvageDSParams,
    evaluate_competence,
    prepare_states,
    train_salvage_ds,
)
from tests.salvage_ds.conftest import loop_config

pytestmark = pytest.mark.slow

ALGORITHM = SalvageDSParams(
    mode="salvage_ds", group_size=8, max_new_tokens=10, c_low=0.1, c_high=0.9, lam=1.0
)


def test_short_run_raises_competence_on_the_states(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    model = copy.deepcopy(model)
    prepared = prepare_states(states, processor, prompt)
    torch.manual_seed(1)
    before, _ = evaluate_competence(model, prepared, ALGORITHM, processor, prompt, n=16)
    result = train_salvage_ds(model, processor, states, ALGORITHM, loop_config(tmp_path, "run"), prompt)
    torch.manual_seed(1)
    after, _ = evaluate_competence(result.model, prepared, ALGORITHM, processor, prompt, n=16)
    assert after["competence"] > before["competence"] + 0.05, (before, after)
    assert after["valid_rate"] > before["valid_rate"], (before, after)
    rows = result.history
    assert len(rows) == 12
    for row in rows:  # every group is accepted or rejected for exactly one reason, then trained or discarded
        decided = row["train/acceptance_rate"] + sum(row[f"train/rejected_{r}"] for r in REJECT_REASONS)
        assert decided == pytest.approx(1.0)
        kept = row["train/accepted_groups"] + row["train/anchored_groups"] + row["train/discarded_groups"]
        assert kept == row["train/groups"] and row["train/accepted_groups"] <= 4
        assert row["train/sampled_actions"] == 8 * row["train/groups"]


def test_interrupted_run_resumes_where_it_stopped(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    algorithm = ALGORITHM.model_copy(update={"beta": 0.05})  # the KL path too: a frozen reference model
    straight = train_salvage_ds(
        copy.deepcopy(model), processor, states, algorithm, loop_config(tmp_path, "a", max_steps=4), prompt
    )
    # The same run, interrupted after 2 steps (its checkpoint is saved), then started again with resume on.
    train_salvage_ds(
        copy.deepcopy(model), processor, states, algorithm, loop_config(tmp_path, "b", max_steps=2), prompt
    )
    resumed = train_salvage_ds(
        copy.deepcopy(model),
        processor,
        states,
        algorithm,
        loop_config(tmp_path, "b", max_steps=4, resume=True),
        prompt,
    )
    assert resumed.resumed_from == 2 and resumed.step == 4
    assert [row["step"] for row in resumed.history] == [1, 2, 3, 4]
    for ours, theirs in zip(resumed.history, straight.history, strict=True):
        assert ours["train/mean_reward"] == theirs["train/mean_reward"]  # the same samples were drawn
    # pi_theta = pi_ref before the first update; after it, any accepted group sees a positive k3 KL
    assert straight.history[0]["train/kl"] == pytest.approx(0.0, abs=1e-5)
    assert all(row["train/kl"] > 0 for row in straight.history[1:] if row["train/acceptance_rate"] > 0)
    for ours, theirs in zip(resumed.model.parameters(), straight.model.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs)


def test_sampling_between_updates_samples_the_policy_itself(sft_tiny):
    """Salvage-DS samples from a policy in training mode (production: LoRA with dropout, gradient checkpointing).
    The sampler decodes in eval mode: a LoRA policy's greedy replies are the same as in eval mode (dropout off), one
    new token a forward (transformers 5.17 dropped the KV cache of checkpointed layers in training mode), and the
    model is left training."""
    from rmsweb_kedro.agents.hf_policy import sample_replies
    from rmsweb_kedro.models.modeling import LoraSettings, add_lora

    model, processor, states, prompt = sft_tiny
    torch.manual_seed(0)
    policy = add_lora(copy.deepcopy(model), LoraSettings(r=8, dropout=0.5))
    for name, weight in policy.named_parameters():
        if "lora_B" in name:  # peft starts B at 0: give the adapter an effect for dropout to perturb
            torch.nn.init.normal_(weight, std=0.5)
    policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def greedy(training: bool) -> list[list[int]]:
        policy.train(training)
        groups = sample_replies(
            policy, processor, states, prompt, 1, greedy=True, max_new_tokens=8, logprobs=False
        )
        assert policy.training == training
        return [group[0].completion_ids for group in groups]

    lengths: list[int] = []
    hook = policy.get_input_embeddings().register_forward_hook(
        lambda module, args, out: lengths.append(args[0].shape[1])
    )
    try:
        in_training = [greedy(True) for _ in range(3)]
    finally:
        hook.remove()
    assert in_training == [greedy(False)] * 3
    steps = len(lengths) // 3
    assert lengths[0] > 1 and lengths[1:steps] == [1] * (steps - 1), (
        lengths
    )  # the prompt once, then one token
