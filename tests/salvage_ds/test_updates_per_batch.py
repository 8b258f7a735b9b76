"""mu = updates_per_batch > 1: the shared loop rolls a batch out once and takes mu optimizer steps on it with
pi_old frozen; the clipped surrogate then bites. Resume stays exact between the updates of a batch."""

from __future__ import annotations

import copy

import pytest
import torch

from rmsweb_kedro.training.loop import LoopConfig, train_loop
from rmsweb_kedro.training.salvage_ds import SalvageDSParams, train_salvage_ds
from tests.salvage_ds.conftest import loop_config


def _config(tmp_path, name: str, **changes) -> LoopConfig:
    """The toy runs: lr 0.1, no gradient clipping, 2 samples a micro-batch."""
    return loop_config(tmp_path, name, batch_size=2, learning_rate=0.1, max_grad_norm=None, **changes)


class Scalar(torch.nn.Module):
    """One weight w; the 'policy' whose value a rollout freezes as w_old."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(1.0))


def _toy_run(config: LoopConfig, rollouts: list[list[float]]):
    """Samples 0..7; the rollout records w_old; the loss pulls w up with a constant gradient (-2)."""

    def rollout(model, batch):
        rollouts.append(batch["x"].tolist())
        return batch | {"w_old": float(model.w.detach())}

    def loss_fn(model, batch):
        x = batch["x"]
        metrics = {"w_old": batch["w_old"], "w": float(model.w.detach()), "first": float(x[0])}
        return -model.w * len(x), metrics

    samples = [float(i) for i in range(8)]
    collate = lambda items: {"x": torch.tensor(items)}  # noqa: E731
    return train_loop(Scalar(), samples, collate, loss_fn, config, rollout=rollout)


def test_each_rolled_out_batch_gets_mu_updates_with_pi_old_frozen(tmp_path):
    rollouts: list[list[float]] = []
    result = _toy_run(_config(tmp_path, "toy", max_steps=6, updates_per_batch=3), rollouts)
    rows = result.history
    assert len(rows) == 6 and len(rollouts) == 2  # 6 optimizer steps, one rollout every 3
    for batch in range(2):
        first, *later = rows[3 * batch : 3 * batch + 3]
        # the same samples for the 3 updates, as rolled out once
        assert {r["train/first"] for r in (first, *later)} == {rollouts[batch][0]}
        # pi_old is the policy that sampled: equal to pi_theta at the first update, frozen while w moves after
        assert first["train/w_old"] == first["train/w"]
        assert all(r["train/w_old"] == first["train/w_old"] != r["train/w"] for r in later)
    # AdamW's first step moves w by lr (the gradient sign is constant), so by hand: w = 1 + 0.1 * step
    assert [round(r["train/w"], 4) for r in rows] == [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    assert rows[3]["train/w_old"] == pytest.approx(1.3)


def test_resume_between_updates_continues_on_the_same_rollout(tmp_path):
    straight = _toy_run(_config(tmp_path, "a", max_steps=6, updates_per_batch=2), [])
    first_rollouts: list[list[float]] = []
    _toy_run(_config(tmp_path, "b", max_steps=3, updates_per_batch=2), first_rollouts)  # stops mid-batch
    resumed_rollouts: list[list[float]] = []
    resumed = _toy_run(
        _config(tmp_path, "b", max_steps=6, updates_per_batch=2, resume=True), resumed_rollouts
    )
    assert resumed.resumed_from == 3
    assert len(first_rollouts) + len(resumed_rollouts) == 3  # the pending batch was not rolled out again
    assert _without_time(resumed.history) == _without_time(straight.history)
    # a checkpoint at step 3 of a mu = 1 run holds no rollout: mu = 2 cannot continue "its" batch, and the run's
    # identity (training.loop.run_identity) refuses it before any checkpoint is read
    _toy_run(_config(tmp_path, "c", max_steps=3), [])
    with pytest.raises(ValueError, match=r"another run: the job differs in \['updates_per_batch'\]"):
        _toy_run(_config(tmp_path, "c", max_steps=6, updates_per_batch=2, resume=True), [])


def _without_time(history: list[dict]) -> list[dict]:
    """Every column but the wall-clock one."""
    return [{k: v for k, v in row.items() if k != "train/tokens_per_s"} for row in history]


ALGORITHM = SalvageDSParams(mode="grpo", group_size=8, max_new_tokens=10)


def _salvage_loop(tmp_path, name: str, **changes) -> LoopConfig:
    """mu = 2; a large learning rate, so that one update moves some token ratios past the clip."""
    return loop_config(tmp_path, name, updates_per_batch=2, **({"learning_rate": 2e-2} | changes))


@pytest.mark.slow
def test_second_update_sees_moved_ratios_and_clips(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    result = train_salvage_ds(
        copy.deepcopy(model),
        processor,
        states,
        ALGORITHM,
        _salvage_loop(tmp_path, "mu2", max_steps=4),
        prompt,
    )
    first, second = result.history[0::2], result.history[1::2]
    for a, b in zip(first, second, strict=True):
        # the same rollout: the groups' statistics are logged with both updates
        assert a["train/mean_reward"] == b["train/mean_reward"]
        # at a batch's first update pi_theta = pi_old: rho = 1 exactly, nothing clipped
        assert a["train/clip_fraction"] == 0.0 and a["train/approx_kl_old"] == pytest.approx(0.0, abs=1e-6)
        if a["train/grad_norm"] > 0:  # the first update moved pi_theta (a group with contrast): rho != 1
            assert b["train/approx_kl_old"] > 1e-4
    assert any(a["train/grad_norm"] > 0 for a in first)
    assert max(b["train/clip_fraction"] for b in second) > 0.0


@pytest.mark.slow
def test_salvage_ds_resumes_exactly_between_updates(sft_tiny, tmp_path):
    model, processor, states, prompt = sft_tiny
    algorithm = ALGORITHM.model_copy(update={"mode": "salvage_ds", "lam": 1.0, "beta": 0.05})
    loop = lambda name, **kw: _salvage_loop(tmp_path, name, learning_rate=3e-3, **kw)  # noqa: E731
    straight = train_salvage_ds(
        copy.deepcopy(model), processor, states, algorithm, loop("a", max_steps=4), prompt
    )
    train_salvage_ds(copy.deepcopy(model), processor, states, algorithm, loop("b", max_steps=3), prompt)
    resumed = train_salvage_ds(
        copy.deepcopy(model), processor, states, algorithm, loop("b", max_steps=4, resume=True), prompt
    )
    assert resumed.resumed_from == 3 and resumed.step == 4
    for ours, theirs in zip(resumed.history, straight.history, strict=True):
        for key in ("train/mean_reward", "train/clip_fraction", "train/approx_kl_old", "train/loss"):
            assert ours[key] == pytest.approx(theirs[key], abs=1e-6), key
    for ours, theirs in zip(resumed.model.parameters(), straight.model.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs)
