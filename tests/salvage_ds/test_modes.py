"""The modes and dynamic sampling on the tiny Qwen3-VL: the four modes are four different runs on one seed, the
gate's band acts at the defaults once competence pools the mining probe's samples, dynamic sampling samples
further rounds up to its cap, and a step with nothing to learn leaves the weights alone (the sampled-action budget:
test_run_end.py)."""

from __future__ import annotations

import copy
from typing import get_args

import pytest
import torch

from rmsweb_kedro.training.salvage_ds import (
    Mode,
    SalvageDSParams,
    train_salvage_ds,
)
from tests.salvage_ds.conftest import loop_config, make_states

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
    hopeless = unreachable(states + make_states(4, seed=7))  # 12 states: 3 rounds of 4 without a repeat
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
        assert row["train/rounds"] == 3  # every group all wrong: none accepted, so up to the cap
        assert row["train/groups"] == row["train/discarded_groups"] == 3 * 4
        assert row["train/rejected_all_wrong"] == 1.0
        assert row["train/sampled_actions"] == 3 * 4 * 8
        assert row["train/optimizer_step"] == 0.0
    for old, new in zip(before.parameters(), result.model.parameters(), strict=True):
        assert torch.equal(old, new)  # nothing to learn: AdamW never stepped
    # salvage_ds anchors the same groups beside the accepted ones (none here): they do not fill the batch, so it
    # samples up to the cap all the same, and the step learns from the anchors
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
        row["train/rounds"] == 3 and row["train/anchored_groups"] == 12 and row["train/accepted_groups"] == 0
    )
    assert row["train/anchor_share"] == 1.0 and row["train/optimizer_step"] == 1.0


def test_a_batch_resamples_until_b_groups_are_accepted(sft_tiny, tmp_path):
    """A real run whose pool mixes hopeless states with learnable ones: batches whose first round holds too few
    accepted groups sample further rounds, and every batch that stops before the cap holds exactly B accepted
    groups, with the rejected ones anchored beside them (the group log says so, batch by batch)."""
    import polars as pl

    model, processor, states, prompt = sft_tiny
    pool = with_probes(states) + unreachable(make_states(8, seed=3))
    algorithm = SalvageDSParams(max_new_tokens=10, competence="group", c_low=0.0, c_high=1.0, max_rounds=4,
                                anchor="failing", saturation_draws=None)  # fmt: skip
    config = loop_config(tmp_path, "fill", max_steps=6)
    result = train_salvage_ds(copy.deepcopy(model), processor, pool, algorithm, config, prompt)
    groups = pl.read_ndjson(tmp_path / "fill" / "groups.jsonl")
    per_batch = groups.group_by("batch").agg(
        pl.col("round").max().alias("rounds"),
        (pl.col("decision") == "accepted").sum().alias("accepted"),
        (pl.col("decision") == "anchored").sum().alias("anchored"),
        (pl.col("reason") == "all_wrong").sum().alias("all_wrong"),
    )
    assert per_batch.height == 6 and per_batch["rounds"].max() > 1  # some batch had to sample again
    for row in per_batch.iter_rows(named=True):
        if row["rounds"] < algorithm.max_rounds:
            assert row["accepted"] == 4, row  # it stopped because B = 4 groups were accepted
        assert row["anchored"] == row["all_wrong"]  # the failing groups ride along, never in place of one
    logged = [row["train/rounds"] for row in result.history]
    assert logged == per_batch.sort("batch")["rounds"].to_list()


def test_a_saturated_state_leaves_the_pool(sft_tiny, tmp_path):
    """States the policy always gets right (the reference is its own near-greedy reply) leave the pool after
    ``saturation_draws`` all-right draws: they are never drawn again, and the pool shrinks by them."""
    import polars as pl

    from rmsweb_kedro.agents.hf_policy import sample_replies

    model, processor, states, prompt = sft_tiny
    easy = states[:4]
    greedy = sample_replies(model, processor, easy, prompt, 1, greedy=True, max_new_tokens=10, logprobs=False)
    solved = [{**s, "reference_action": str(g[0].action), "state_id": f"easy:{i}"}
              for i, (s, g) in enumerate(zip(easy, greedy, strict=True))]  # fmt: skip
    assert all(g[0].action is not None for g in greedy)
    pool = solved + unreachable(states[4:])
    # a near-zero temperature samples the greedy reply every time, and a vanishing learning rate keeps the policy
    # where it is (3e-3 moves it off an easy state within a few updates): each easy group is all right
    algorithm = SalvageDSParams(max_new_tokens=10, temperature=0.01, saturation_draws=2, max_rounds=1)
    config = loop_config(tmp_path, "sat", max_steps=8, learning_rate=1e-12)
    result = train_salvage_ds(copy.deepcopy(model), processor, pool, algorithm, config, prompt)
    groups = pl.read_ndjson(tmp_path / "sat" / "groups.jsonl").with_row_index("order")
    for state in (s["state_id"] for s in solved):
        draws = groups.filter(pl.col("state_id") == state)
        assert draws.height <= 2 and draws["n_right"].to_list() == [8] * draws.height, draws
    left = [row["train/pool_states"] for row in result.history]
    assert left[-1] == 4 and result.history[-1]["train/saturated_states"] == 4  # only the hopeless remain
    assert left == sorted(left, reverse=True)  # a state never comes back
    hopeless = {s["state_id"] for s in pool[4:]}
    last_batches = groups.filter(pl.col("batch") >= groups["batch"].max() - 1)
    assert set(last_batches["state_id"]) <= hopeless
