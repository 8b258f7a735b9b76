"""How a Salvage-DS run ends and what it may resume, on real runs of the tiny Qwen3-VL: a spent sampling budget or
an empty pool ends the run at that update (no idle updates, no evaluation of unchanged weights), the budget is
sized by max_rounds, dropout is off so pi_old is the policy that sampled (rho = 1 at a batch's first update), and a
resume is refused when a training state changed."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import polars as pl
import pytest
import torch

from rmsweb_kedro.training.loop import complete_checkpoints
from rmsweb_kedro.training.salvage_ds import (
    SalvageDSJob,
    SalvageDSParams,
    competence_eval_fn,
    prepare_states,
    train_salvage_ds,
)
from rmsweb_kedro.training.salvage_ds.run import round_cost
from tests.salvage_ds.conftest import fine_tune, loop_config, make_states

REPO = Path(__file__).resolve().parents[2]


def fingerprint(model) -> str:
    """A hash of every weight of ``model``."""
    weights = torch.cat([p.detach().flatten().float() for p in model.parameters()])
    return hashlib.sha256(weights.numpy().tobytes()).hexdigest()


def fingerprinted(eval_fn, seen: list[str]):
    """``eval_fn``, recording the fingerprint of the weights each evaluation scored into ``seen``."""

    def wrapped(model):
        seen.append(fingerprint(model))
        return eval_fn(model)

    return wrapped


@pytest.mark.slow
def test_a_spent_budget_ends_the_run_at_that_update(sft_tiny, tmp_path):
    """64 sampled actions pay for two rounds of B = 4 states x G = 8: resampling spends them within the first two
    batches, and the batch that finds them spent ends the run there, before max_steps: the history holds no update
    after it, the run says why, its last weights are evaluated once and checkpointed, and no evaluation scored
    weights an earlier one had scored."""
    model, processor, states, prompt = sft_tiny
    algorithm = SalvageDSParams(max_new_tokens=10, lam=1.0, sampled_action_budget=64)
    loop = loop_config(tmp_path, "budget", max_steps=8, updates_per_batch=2, eval_every=3)
    # a run configured so is refused by the job: the budget cannot pay for one round of its 4 batches
    with pytest.raises(ValueError, match=r"sampled_action_budget 64 cannot pay for one round a sampled batch: "
                                         r"4 batches .* = 128 sampled actions a round; with max_rounds 4 a run may "
                                         r"take 512"):  # fmt: skip
        SalvageDSJob(algorithm=algorithm, loop=loop)
    seen: list[str] = []
    dev = competence_eval_fn({"dev": make_states(3, seed=1)}, algorithm, processor, prompt, n=0, seed=0)
    result = train_salvage_ds(
        copy.deepcopy(model), processor, states, algorithm, loop, prompt, eval_fn=fingerprinted(dev, seen)
    )
    steps = [row["step"] for row in result.history]
    assert result.step in (2, 4) and steps == list(range(1, result.step + 1))  # no update after the stop
    assert result.stopped_early
    assert (
        result.stop_reason
        == f"sampled_action_budget spent (64 of 64 sampled actions) at update {result.step}"
    )
    groups = pl.read_ndjson(tmp_path / "budget" / "groups.jsonl")
    # every round counted; the batch that found the budget spent sampled nothing
    assert groups.height == 8 and result.history[-1]["train/sampled_actions_total"] == 64
    assert groups["batch"].max() == result.step // 2 - 1
    # evaluations: at update 3 when reached, and the last weights once (into the last update's row)
    assert len(seen) == len(set(seen)) and seen[-1] == fingerprint(result.model)
    assert "eval/dev/step_success_rate" in result.history[-1]
    assert complete_checkpoints(tmp_path / "budget")[-1].name == f"step_{result.step:07d}"


@pytest.mark.slow
def test_an_empty_pool_ends_the_run_and_unchanged_weights_are_not_scored_again(sft_tiny, tmp_path):
    """States the policy always gets right leave the pool after one all-right draw (saturation_draws 1): the next
    batch has nothing to draw and ends the run. Their groups are all right (rejected, nothing to learn), so no
    optimizer step changed the weights: neither the due evaluation nor the final one scores them again."""
    from rmsweb_kedro.agents.hf_policy import sample_replies

    model, processor, states, prompt = sft_tiny
    easy = states[:4]
    greedy = sample_replies(model, processor, easy, prompt, 1, greedy=True, max_new_tokens=10, logprobs=False)
    solved = [{**s, "reference_action": str(g[0].action)} for s, g in zip(easy, greedy, strict=True)]
    algorithm = SalvageDSParams(max_new_tokens=10, temperature=0.01, saturation_draws=1, max_rounds=1)
    loop = loop_config(
        tmp_path, "empty", max_steps=6, eval_every=1, select_metric="eval/dev/step_success_rate"
    )
    seen: list[str] = []
    dev = competence_eval_fn({"dev": make_states(3, seed=1)}, algorithm, processor, prompt, n=0, seed=0)
    result = train_salvage_ds(
        copy.deepcopy(model), processor, solved, algorithm, loop, prompt, eval_fn=fingerprinted(dev, seen)
    )
    assert result.stop_reason == "pool empty (4 of 4 states saturated) at update 1"
    assert [row["step"] for row in result.history] == [0, 1]  # step 0: the starting weights' evaluation
    assert (
        result.history[1]["train/optimizer_step"] == 0.0
        and result.history[1]["train/rejected_all_right"] == 1
    )
    assert len(seen) == 1 and "eval/dev/step_success_rate" not in result.history[1]
    assert result.best_step == 0


@pytest.mark.slow
def test_two_processes_with_sharded_weights_stop_at_the_same_update(
    tmp_path, released_checkpoint, screenshot_states
):
    """FSDP2 on two CPU processes (generate a collective): every batch samples 3 rounds of 1 state x G = 2 on each
    process, so the first batch spends each process's budget of 6 (one round of the run's 3 batches); the next
    batch is stopped on both before either generates (a process left generating alone would hang the other), and
    the launched run says so."""
    from tests.production.test_distributed import SALVAGE_DS, _launched_salvage_ds

    algorithm = SALVAGE_DS.model_copy(update={"max_rounds": 3, "sampled_action_budget": 6})
    pool = screenshot_states[:8]
    launched = _launched_salvage_ds(tmp_path, "cpu_2proc_fsdp2", released_checkpoint, pool, algorithm)
    assert [row["step"] for row in launched.history] == [1] and launched.history[0]["train/rounds"] == 3
    assert (
        launched.stop_reason == "process 0: sampled_action_budget spent (6 of 6 sampled actions) at update 1"
    )


@pytest.mark.slow
def test_dropout_is_off_so_the_first_update_of_a_batch_has_rho_one(sft_tiny, tmp_path):
    """A LoRA policy with lora_dropout 0.05, its adapter trained a little (peft starts B at 0, where dropout would
    change nothing): with ``disable_dropout`` (the default) the frozen log pi_old and the first update's forward
    are the same policy, so rho is exactly 1 and nothing clips; with the checkpoint's dropout kept they differ."""
    from rmsweb_kedro.models.modeling import LoraSettings, add_lora

    model, processor, states, prompt = sft_tiny
    torch.manual_seed(0)
    policy = add_lora(copy.deepcopy(model), LoraSettings(r=8, alpha=16, dropout=0.05))
    fine_tune(policy, prepare_states(states, processor, prompt), processor.tokenizer.pad_token_id, steps=5)
    dropouts = [m for m in policy.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(m.p == 0.05 for m in dropouts)
    first = {}
    for disable in (True, False):
        algorithm = SalvageDSParams(mode="grpo", max_new_tokens=10, disable_dropout=disable)
        loop = loop_config(tmp_path, f"dropout_{disable}", max_steps=2, updates_per_batch=2)
        result = train_salvage_ds(copy.deepcopy(policy), processor, states, algorithm, loop, prompt)
        first[disable] = result.history[0]
        if disable:
            assert all(m.p == 0.0 for m in result.model.modules() if isinstance(m, torch.nn.Dropout))
    assert first[True]["train/ratio_mean"] == 1.0 and first[True]["train/approx_kl_old"] == 0.0
    assert first[True]["train/clip_fraction"] == 0.0
    assert first[False]["train/ratio_mean"] != 1.0 and first[False]["train/approx_kl_old"] > 0.0


@pytest.mark.slow
def test_resume_is_refused_when_a_training_state_changed(sft_tiny, tmp_path):
    """The run's identity hashes each prepared state's content: one changed reference action is refused by name,
    the unchanged states resume."""
    model, processor, states, prompt = sft_tiny
    algorithm = SalvageDSParams(mode="grpo", max_new_tokens=10)
    train_salvage_ds(copy.deepcopy(model), processor, states, algorithm, loop_config(tmp_path, "r", max_steps=1),
                     prompt)  # fmt: skip
    changed = [dict(s) for s in states]
    changed[3]["reference_action"] = "click(99)"
    resume = loop_config(tmp_path, "r", max_steps=2, resume=True)
    with pytest.raises(ValueError, match=r"the training data differ \(hash \w+ there, \w+ now; changed: "
                                         r"'shop-0:3' in \['references', 'reply_action_mask', 'reply_ids', 'row'\]\)"):  # fmt: skip
        train_salvage_ds(copy.deepcopy(model), processor, changed, algorithm, resume, prompt)
    resumed = train_salvage_ds(copy.deepcopy(model), processor, states, algorithm, resume, prompt)
    assert resumed.resumed_from == 1 and resumed.step == 2


def test_the_configured_budgets_pay_for_max_rounds_rounds_a_batch():
    """The experiment's Salvage-DS run and every ablation variant, base and experiment: the budget is one round of
    every batch times max_rounds (equal across the modes), and each validates as a job."""
    from rmsweb_kedro.pipelines.ablations.pipeline import SALVAGE_MODES
    from rmsweb_kedro.pipelines.salvage_ds.nodes import SalvageDSNodeParams
    from rmsweb_kedro.settings import CONFIG_LOADER_ARGS, ProjectConfigLoader

    budgets = {}
    for env in ("local", "experiment"):  # local: base alone (conf/local is empty)
        params = ProjectConfigLoader(str(REPO / "conf"), **CONFIG_LOADER_ARGS, env=env)["parameters"]
        runs = {f"rl_{m}": params["ablations"][f"rl_{m}"]["salvage_ds"] for m in SALVAGE_MODES}
        if env == "experiment":
            runs["salvage_ds"] = params["salvage_ds"]
        for name, run in runs.items():
            config = SalvageDSNodeParams.model_validate(run)
            budgets[env, name] = config.algorithm.sampled_action_budget
            assert (
                budgets[env, name] == round_cost(config.algorithm, config.loop) * config.algorithm.max_rounds
            )
    assert budgets["experiment", "salvage_ds"] == 9216 == budgets["experiment", "rl_grpo"]
    assert {budgets["local", f"rl_{m}"] for m in SALVAGE_MODES} == {3072}
