"""The modes and dynamic sampling on the tiny Qwen3-VL: the four modes are four different runs on one seed, the
gate's band acts at the defaults once competence pools the mining probe's samples, dynamic sampling samples
further rounds up to its cap, a step with nothing to learn leaves the weights alone, and the sampled-action budget
holds."""

from __future__ import annotations

import copy
from typing import get_args

import pytest
import torch

from rmsweb_kedro.training.salvage_ds import (
    Mode,
    SalvageDSParams,
    SalvageDSStep,
    prepare_states,
    train_salvage_ds,
)
from tests.salvage_ds.conftest import loop_config

pytestmark = pytest.mark.slow


def with_probes(states: list[dict]) -> list[dict]:
    """The states as mining leaves them: half probed 4/4 right (routine ballast), half 0/4 (critical)."""
    probed = []
    for index, state in enumerate(states):
        right = index % 2 == 0
        samples = [state["reference_action"] if right else "click(99)"] * 4
        probed.append({**state, "sampled_actions": samples, "n_samples": 4})
    return probed


def unreachable(states: list[dict]) -> list[dict]:
    """States whose only right action the policy never writes: every group is all wrong (no contrast)."""
    return [{**s, "reference_action": 'goto("http://nowhere.example/never")'} for s in states]


def test_the_four_modes_are_four_different_runs_on_the_same_seed(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    states = with_probes(states)
    finals, histories = {}, {}
    for mode in get_args(Mode):
        algorithm = SalvageDSParams(mode=mode, max_new_tokens=10, lam=1.0)  # the default gate and band
        result = train_salvage_ds(
            copy.deepcopy(model),
            processor,
            states,
            algorithm,
            loop_config(tmp_path, mode, max_steps=4),
            prompt,
        )
        finals[mode] = torch.cat([p.detach().flatten() for p in result.model.parameters()])
        histories[mode] = result.history
    modes = list(finals)
    for i, a in enumerate(modes):
        for b in modes[i + 1 :]:
            assert not torch.equal(finals[a], finals[b]), (a, b)
    # grpo has no gate and one round; the others filter, and the band rejects groups the contrast test passes
    assert all(row["train/rounds"] == 1 and row["train/acceptance_rate"] == 1 for row in histories["grpo"])
    band = sum(
        row["train/rejected_too_hard"] + row["train/rejected_too_easy"]
        for mode in ("salvage_ds", "salvage_ds_no_anchor")
        for row in histories[mode]
    )
    assert band > 0
    assert all(
        row["train/rejected_too_hard"] == row["train/rejected_too_easy"] == 0 for row in histories["dapo"]
    )
    assert all(row["train/anchor_share"] == 0 for row in histories["salvage_ds_no_anchor"])


def test_dynamic_sampling_samples_further_rounds_up_to_its_cap_and_then_does_not_step(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    hopeless = unreachable(states)
    algorithm = SalvageDSParams(mode="dapo", max_new_tokens=10, max_rounds=3)
    before = copy.deepcopy(model)
    result = train_salvage_ds(
        model := copy.deepcopy(model),
        processor,
        hopeless,
        algorithm,
        loop_config(tmp_path, "d", max_steps=2),
        prompt,
    )
    for row in result.history:
        assert row["train/rounds"] == 3  # every group all wrong: no usable group, so up to the cap
        assert row["train/groups"] == row["train/discarded_groups"] == 3 * 4
        assert row["train/rejected_no_contrast"] == 1.0
        assert row["train/sampled_actions"] == 3 * 4 * 8
        assert row["train/optimizer_step"] == 0.0
    for old, new in zip(before.parameters(), result.model.parameters(), strict=True):
        assert torch.equal(old, new)  # nothing to learn: AdamW never stepped
    # salvage_ds anchors the same groups: every group is usable, one round fills the batch, the step learns
    anchored = train_salvage_ds(
        copy.deepcopy(before),
        processor,
        hopeless,
        algorithm.model_copy(update={"mode": "salvage_ds"}),
        loop_config(tmp_path, "s", max_steps=1),
        prompt,
    )
    (row,) = anchored.history
    assert (
        row["train/rounds"] == 1 and row["train/anchor_share"] == 1.0 and row["train/optimizer_step"] == 1.0
    )


def test_a_round_stops_once_the_batch_holds_b_usable_groups(sft_tiny):
    """A batch of hopeless states with a pool of ordinary ones: the second round fills the batch, and groups past
    B in that round are counted as discarded, not trained."""
    model, processor, states, prompt = sft_tiny
    pool = prepare_states(states, processor, prompt)
    hopeless = prepare_states(unreachable(states[:4]), processor, prompt)
    step = SalvageDSStep(
        SalvageDSParams(mode="grpo", max_new_tokens=10), processor, prompt, pool=pool
    )  # grpo: every group is usable, so one round and no discards
    torch.manual_seed(0)
    out = step.rollout(model, {"states": hopeless})
    assert out["rollout_metrics"]["rounds"] == 1 and out["rollout_metrics"]["discarded_groups"] == 0
    assert (
        out["loss_tokens"]["accepted_group"] == 4 and not out["learnable"]
    )  # all-wrong groups: zero advantages
    step = SalvageDSStep(SalvageDSParams(mode="salvage_ds_no_anchor", max_new_tokens=10, competence="group",
                                         c_low=0.0, c_high=1.0, max_rounds=50), processor, prompt, pool=pool)  # fmt: skip
    torch.manual_seed(0)
    out = step.rollout(model, {"states": hopeless})
    metrics = out["rollout_metrics"]
    assert metrics["rounds"] >= 2  # the first round (hopeless) has no usable group
    assert out["loss_tokens"]["accepted_group"] == 4 and out["loss_tokens"]["anchored_group"] == 0
    assert metrics["groups"] == 4 * metrics["rounds"]
    assert metrics["discarded_groups"] == metrics["groups"] - 4
    assert out["learnable"]


def test_the_sampled_action_budget_ends_sampling(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    algorithm = SalvageDSParams(mode="salvage_ds", max_new_tokens=10, sampled_action_budget=2 * 4 * 8)
    result = train_salvage_ds(
        copy.deepcopy(model), processor, states, algorithm, loop_config(tmp_path, "b", max_steps=4), prompt
    )
    spent = [row["train/sampled_actions"] for row in result.history]
    assert spent == [32, 32, 0, 0]
    assert [row["train/optimizer_step"] for row in result.history] == [1.0, 1.0, 0.0, 0.0]
    assert result.history[-1]["train/sampled_actions_total"] == 64
