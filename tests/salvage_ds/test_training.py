"""Salvage-DS on the shared loop with a tiny Qwen3-VL fine-tuned briefly on the states: a short run raises
competence on them, an interrupted run resumes exactly, and the pipeline node writes its outputs."""

from __future__ import annotations

import copy

import pytest
import torch

from rmsweb_kedro.training.salvage_ds import (
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
    for row in rows:  # every group is accepted or rejected for exactly one reason
        decided = row["train/acceptance_rate"] + sum(
            row[f"train/rejected_{r}"] for r in ("no_contrast", "too_easy", "too_hard")
        )
        assert decided == pytest.approx(1.0)
        assert row["train/anchor_share"] == pytest.approx(1.0 - row["train/acceptance_rate"])
        assert row["train/sampled_actions"] == 4 * 8


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
