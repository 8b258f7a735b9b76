"""No harm by construction: the loop returns the weights of its best evaluation on ``select_metric``, the starting
weights included, keeps them across a resume; and a real Salvage-DS run that damages the policy returns the SFT
weights, never worse than step 0 on the dev split."""

from __future__ import annotations

import copy

import pytest
import torch

from rmsweb_kedro.training.loop import LoopConfig, train_loop
from rmsweb_kedro.training.salvage_ds import (
    SalvageDSJob,
    SalvageDSParams,
    dev_eval_fn,
    evaluate_competence,
    prepare_states,
    train_salvage_ds,
)
from tests.salvage_ds.conftest import loop_config, make_states


def scripted_eval(scores: list[float], seen: list[torch.Tensor]):
    """An eval_fn that answers ``scores`` in turn and records the weights it was shown."""
    answers = iter(scores)

    def eval_fn(model) -> dict[str, float]:
        seen.append(model.weight.detach().clone())
        return {"eval/dev/score": next(answers)}

    return eval_fn


def toy_run(tmp_path, scores, seen, **changes):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    samples = [{"x": torch.tensor([1.0, 2.0]), "y": torch.tensor([3.0])}] * 4

    def loss_fn(m, batch):
        return ((m(batch["x"]) - batch["y"]) ** 2).mean(), {}

    settings = dict(output_dir=str(tmp_path / "toy"), max_steps=6, batch_size=2, learning_rate=0.1,
                    warmup_steps=0, eval_every=2, resume=False, progress=False, select_metric="eval/dev/score")  # fmt: skip
    config = LoopConfig(**(settings | changes))
    collate = lambda items: {k: torch.stack([i[k] for i in items]) for k in items[0]}  # noqa: E731
    return train_loop(model, samples, collate, loss_fn, config, eval_fn=scripted_eval(scores, seen))


def test_the_loop_returns_the_weights_of_its_best_evaluation(tmp_path):
    seen: list[torch.Tensor] = []
    # evaluations at steps 0 (before training), 2, 4 and 6: the best is step 4's
    result = toy_run(tmp_path, [0.5, 0.2, 0.9, 0.4], seen)
    assert (result.best_step, result.best_value) == (4, 0.9)
    assert torch.equal(result.model.weight, seen[2])
    assert not torch.equal(seen[2], seen[3])  # training went on after step 4: the weights were put back
    assert [row["step"] for row in result.history if "eval/dev/score" in row] == [0, 2, 4, 6]


def test_with_nothing_better_the_starting_weights_come_back(tmp_path):
    seen: list[torch.Tensor] = []
    result = toy_run(tmp_path, [0.5, 0.5, 0.1, 0.5], seen)  # ties keep the earliest: step 0
    assert result.best_step == 0 and torch.equal(result.model.weight, seen[0])


def test_the_best_weights_survive_a_resume(tmp_path):
    seen: list[torch.Tensor] = []
    toy_run(tmp_path, [0.1, 0.9], seen, max_steps=2, save_every=2)  # killed after step 2, its best saved
    resumed = toy_run(tmp_path, [0.3, 0.2], seen, resume=True)  # steps 4 and 6 score lower
    assert resumed.resumed_from == 2 and resumed.best_step == 2
    assert torch.equal(resumed.model.weight, seen[1])


def test_select_metric_needs_an_eval_fn_that_measures_it(tmp_path):
    with pytest.raises(ValueError, match="needs an eval_fn"):
        model = torch.nn.Linear(2, 1)
        config = LoopConfig(output_dir=str(tmp_path / "x"), max_steps=1, select_metric="eval/dev/score")
        train_loop(model, [0], lambda items: {}, lambda m, b: (m.weight.sum(), {}), config)
    with pytest.raises(ValueError, match=r"'eval/dev/missing' is not among eval_fn's \['eval/dev/score'\]"):
        toy_run(tmp_path, [0.5], [], select_metric="eval/dev/missing")


@pytest.mark.slow
def test_a_run_that_damages_the_policy_returns_the_sft_weights(sft_tiny, tmp_path):
    """A learning rate 500 times the default wrecks the tiny policy within a few updates; scored on dev states
    (other tasks than the trained ones) every 2 updates, the run returns step 0's weights: the SFT policy, bit
    for bit, with its dev score. A gentle run returns weights at least as good as step 0 on dev."""
    model, processor, states, prompt = sft_tiny
    dev = make_states(8, seed=5)
    algorithm = SalvageDSParams(max_new_tokens=10, lam=1.0)
    job = SalvageDSJob(algorithm=algorithm, loop=loop_config(tmp_path, "x"), prompt=prompt)
    prepared_dev = prepare_states(dev, processor, prompt)
    sft_dev, _ = evaluate_competence(model, prepared_dev, algorithm, processor, prompt, 0, 32)
    assert sft_dev["step_success_rate"] > 0  # something to lose
    for name, lr in (("wrecked", 0.05), ("gentle", 1e-4)):
        config = loop_config(tmp_path, name, max_steps=6, learning_rate=lr, eval_every=2,
                             select_metric="eval/dev/step_success_rate")  # fmt: skip
        result = train_salvage_ds(
            copy.deepcopy(model), processor, states, algorithm, config, prompt,
            eval_fn=dev_eval_fn(dev, job, processor),
        )  # fmt: skip
        scores = [
            row["eval/dev/step_success_rate"] for row in result.history if "eval/dev/step_success_rate" in row
        ]
        assert result.history[0]["step"] == 0 and scores[0] == sft_dev["step_success_rate"]
        after, _ = evaluate_competence(result.model, prepared_dev, algorithm, processor, prompt, 0, 32)
        assert after["step_success_rate"] == result.best_value >= scores[0]  # never worse than step 0
        if name == "wrecked":
            assert min(scores[1:]) < scores[0]  # training did harm dev ...
            assert result.best_step == 0  # ... so the SFT weights came back, bit for bit
            for old, new in zip(model.parameters(), result.model.parameters(), strict=True):
                assert torch.equal(old, new)
